"""A fault campaign: one stateful standalone job of two processors (ZooKeeper-coordinated
``samzamp-container`` processes, two worker processes each, a word count in a changelogged store),
fed input all along, takes a seeded random sequence of faults, and must come out exact.

The faults (``PLAN``): SIGKILL of a processor, then a restart as a supervisor would; SIGKILL of one
of a processor's workers (the processor exits 1; restarted); SIGSTOP of a processor and its workers
(a frozen machine) until the other one took its tasks over, then SIGCONT (it must abandon them and
rejoin); a 10 s SIGSTOP of the broker (the test's own); a value's bytes flipped in a store's
data.mdb, while its task runs (its worker frozen for the flip: the read must fail the processor)
or while the processor is stopped (its next start must find it). After each, the test waits for
the job to recover (both processors applied one job model, and every task processed input again),
never for a time.

At the end, with both processors stopped cleanly: every input was processed; no task ran in two
processors at once (from the tasks' own timestamped records); each task's store holds exactly the
counts of its partition's input; the changelog alone gives that state back (the last value of each
key); every checkpoint ever written is a state the changelog gives back exactly (the changelog up
to its marker holds the counts of exactly the inputs it covers); and each damaged store was
restored in full from its changelog when it was next opened (one not opened again still fails
the checks its next open makes).

``SAMZAMP_CAMPAIGN_SEED`` replays a campaign (the order of the faults and every random choice; the
timing is the machine's): every failure names the seed and the faults so far.
"""

from __future__ import annotations

import os
import random
import re
import signal
import struct
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
from confluent_kafka import Producer
from kafka_util import counts_store, create_topic, read_all, read_checkpoint_records
from standalone_util import Processor, Record, ZkView, check_ownership, missing_offsets, standalone_config

from samzamp.storage.checksum import seal
from samzamp.storage.dirs import task_dir_name
from samzamp.storage.lmdb import LmdbEngine, check_env
from samzamp.systems.kafka.embedded import EmbeddedBroker

pytestmark = pytest.mark.integration

PARTITIONS = 4  # two tasks a processor, one a worker
WORDS = 37  # message "m<i>" counts for word "w<i % 37>" (recording_tasks.CampaignTask)
SESSION_MS = 3000
BROKER_PAUSE_S = 10
POOL = 2
# How many of each fault, in a seeded random order; the long ones (a frozen processor waits out its
# session, the broker pause its 10 s) fewer, so that the campaign stays within its time.
PLAN = {
    "kill_processor": 5,
    "kill_worker": 5,
    "freeze_processor": 3,
    "pause_broker": 1,
    "damage_running": 3,
    "damage_stopped": 3,
}
RECOVERY_S = 90  # what one recovery may take at most; a hang shows as a failure, not a stuck run
REJOINED = re.compile(r"WARNING samzamp\.processor\.stream_processor: processor p\d: its ZooKeeper session expired")
RESTORED = r"store 'counts' of task '{task}': (full restore|local store at offset -?\d+ \(host affinity\))"


def word(partition: int, offset: int) -> str:
    """The word of the message at ``offset`` of ``partition`` (``InputFlow``: message i at partition
    i % PARTITIONS, offset i // PARTITIONS)."""
    return f"w{(offset * PARTITIONS + partition) % WORDS}"


def truths_at(partition: int, offsets: set[int]) -> dict[int, dict[str, int]]:
    """Offset -> the word counts of ``partition``'s messages up to it, for each of ``offsets``."""
    out, counts, o = {}, Counter[str](), 0
    for last in sorted(offsets):
        while o <= last:
            counts[word(partition, o)] += 1
            o += 1
        out[last] = dict(counts)
    return out


def states_at(changelog: list[tuple[int, str, int | None]], markers: set[int]) -> dict[int, dict[str, int]]:
    """Marker -> the store a restore up to it gives: the last value of each key in the changelog's
    records at or before it (``changelog``: (offset, key, value or None for a tombstone), in order)."""
    out, state, i = {}, dict[str, int | None](), 0
    for marker in sorted(markers):
        while i < len(changelog) and changelog[i][0] <= marker:
            state[changelog[i][1]] = changelog[i][2]
            i += 1
        out[marker] = {k: v for k, v in state.items() if v is not None}
    return out


class InputFlow:
    """Message "m<i>" (key "<i>") to partition i % PARTITIONS, ``batch`` at a time, each batch
    acknowledged before the next, until ``stop``: an idempotent producer, so that the topic holds
    each message once and in order whatever the broker does (a pause included)."""

    def __init__(self, bootstrap: str, topic: str, batch: int = 8, pause_s: float = 0.05) -> None:
        self.count = 0
        self.error: str | None = None
        self._stop = threading.Event()
        self._args = (bootstrap, topic, batch, pause_s)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        bootstrap, topic, batch, pause_s = self._args
        # Local to the thread: destroyed when the flow stops, never left retrying a broker that is gone.
        producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 2})
        while not self._stop.is_set():
            for i in range(self.count, self.count + batch):
                producer.produce(topic, f"m{i}".encode(), str(i).encode(), partition=i % PARTITIONS)
            left = producer.flush(60)
            if left:
                self.error = f"{left} input messages not acknowledged within 60 s"
                return
            self.count += batch
            self._stop.wait(pause_s)

    def halt(self) -> None:
        self._stop.set()
        self._thread.join(timeout=90)

    def stop(self) -> int:
        """Stop producing; how many messages the topic holds."""
        self.halt()
        assert self.error is None, self.error
        return self.count


@dataclass
class Freeze:
    """A processor frozen (SIGSTOP of all its processes) from ``frozen_ns`` to ``continued_ns``;
    ``tenures``: the task instances it ran before."""

    processor: str
    frozen_ns: int
    continued_ns: int
    tenures: set[str]


@dataclass
class Damage:
    """A value flipped in the store of ``task`` at ``location``; ``why``: how the next open of the
    directory must say it found it; ``run``: the first run of the location's processor after it."""

    location: str
    task: str
    why: str
    run: int
    what: str


class Evidence:
    """What the tasks wrote (``CampaignTask``), read incrementally: the ``O`` records of every
    ``<task>.<pid>.log`` and the commit lines of every ``<task>.<pid>.commits``."""

    def __init__(self, rec: Path) -> None:
        self.rec = rec
        self.records: list[Record] = []
        self.by_file: dict[str, list[Record]] = defaultdict(list)
        self.commits: dict[str, list[tuple[str, int, int, int]]] = defaultdict(list)
        self.last_start: dict[int, int] = {}  # partition -> the newest start_ns of a message of it
        self.last_offset: dict[tuple[str, int], int] = {}  # (processor, partition) -> highest offset processed
        self.checkpointed: dict[tuple[str, int], int] = {}  # (processor, partition) -> highest offset checkpointed
        self._pos: dict[Path, int] = {}

    def _new_lines(self, f: Path) -> list[str]:
        with open(f, "rb") as fh:
            fh.seek(self._pos.get(f, 0))
            data = fh.read()
        end = data.rfind(b"\n") + 1  # a line still being written waits for the next refresh
        self._pos[f] = self._pos.get(f, 0) + end
        return data[:end].decode().splitlines()

    def refresh(self) -> None:
        for f in self.rec.glob("*.log"):
            for line in self._new_lines(f):
                kind, proc, partition, offset, start, end, instance = line.split()
                assert kind == "O", line
                r = Record(proc, int(partition), int(offset), int(start), int(end), f.name, instance)
                self.records.append(r)
                self.by_file[f.name].append(r)
                self.last_start[r.partition] = max(self.last_start.get(r.partition, 0), r.start_ns)
                mine = (r.processor, r.partition)
                self.last_offset[mine] = max(self.last_offset.get(mine, -1), r.offset)
        for f in self.rec.glob("*.commits"):
            for line in self._new_lines(f):
                kind, proc, partition, offset, ns = line.split()
                self.commits[f.name.removesuffix(".commits")].append((kind, int(partition), int(offset), int(ns)))
                if kind == "K":
                    at = (proc, int(partition))
                    self.checkpointed[at] = max(self.checkpointed.get(at, -1), int(offset))


def flip_values(data_mdb: Path, key: str) -> int:
    """Flip the last byte of every sealed value of ``key`` that ``data_mdb`` holds (LMDB's leaf node:
    the key's size, the key bytes, then the value as samzamp seals it: CRC32C, then a long), as a bad
    sector would, whatever the value is; how many copies it changed (the live one among them, and
    copies left in pages LMDB freed)."""
    k = key.encode()
    data = data_mdb.read_bytes()
    n, at = 0, data.find(k)
    fd = os.open(data_mdb, os.O_RDWR)
    try:
        while at >= 0:
            sealed = data[at + len(k) : at + len(k) + 12]
            node = data[at - 2 : at] == len(k).to_bytes(2, "little")
            if node and len(sealed) == 12 and seal(k, sealed[4:]) == sealed:
                os.pwrite(fd, bytes([sealed[-1] ^ 0x01]), at + len(k) + 11)
                n += 1
            at = data.find(k, at + 1)
    finally:
        os.close(fd)
    return n


def store_counts(path: Path) -> dict[str, int]:
    engine = LmdbEngine(path)
    try:
        return {k.decode(): struct.unpack(">q", v)[0] for k, v in engine.items()}
    finally:
        engine.close()


def wait_stopped(pids: list[int]) -> None:
    """Until each process is stopped (a signal is delivered asynchronously)."""
    for pid in pids:
        p = psutil.Process(pid)
        deadline = time.monotonic() + 10
        while p.status() != psutil.STATUS_STOPPED:
            assert time.monotonic() < deadline, f"process {pid} did not stop"
            time.sleep(0.001)


class Campaign:
    def __init__(self, tmp: Path, broker: EmbeddedBroker, zk_connect: str, unique: str, seed: int) -> None:
        self.tmp = tmp
        self.broker = broker
        self.bootstrap = broker.bootstrap_servers
        self.seed = seed
        self.rng = random.Random(seed)
        self.story: list[str] = []
        self.topic = f"in-{unique}"
        self.changelog = f"counts-log-{unique}"
        self.job = f"campaign-{unique}"
        create_topic(self.bootstrap, self.topic, PARTITIONS)
        self.cfg, self.rec = standalone_config(
            tmp,
            self.job,
            self.topic,
            zk_connect,
            session_ms=SESSION_MS,
            consensus_ms=10000,
            task_class="recording_tasks:CampaignTask",
            extra=counts_store(f"kafka.{self.changelog}"),
            top=f'"job.container.thread.pool.size" = {POOL}\n"job.host-affinity.enabled" = true',
        )
        self.view = ZkView(zk_connect, self.job)
        self.evidence = Evidence(self.rec)
        self.location = {"p1": "A", "p2": "B"}
        self.runs = {"p1": 0, "p2": 0}
        self.procs: dict[str, Processor] = {}
        self.owners: dict[str, set[str]] = {}
        self.freezes: list[Freeze] = []
        self.damages: list[Damage] = []
        self.verified: list[Damage] = []
        self.flow: InputFlow | None = None

    # -- what a failure says --------------------------------------------------------------------
    def say(self, what: str) -> str:
        faults = "; ".join(self.story) or "none yet"
        return f"{what}\n[fault campaign SAMZAMP_CAMPAIGN_SEED={self.seed}; faults so far: {faults}]"

    # -- processors -------------------------------------------------------------------------------
    def state(self, location: str) -> Path:
        return self.tmp / f"state-{location}"

    def store_dir(self, location: str, task: str) -> Path:
        return self.state(location) / "counts" / task_dir_name(task)

    def start(self, pid: str) -> Processor:
        loc = self.location[pid]
        p = Processor(
            self.cfg, self.bootstrap, pid, loc, f"job.logged.store.base.dir={self.state(loc)}", run=self.runs[pid]
        )
        self.runs[pid] += 1
        self.procs[pid] = p
        return p

    def other(self, pid: str) -> str:
        return "p2" if pid == "p1" else "p1"

    def workers(self, pid: str) -> list[psutil.Process]:
        kids = [c for c in psutil.Process(self.procs[pid].proc.pid).children() if c.status() != psutil.STATUS_ZOMBIE]
        assert len(kids) == POOL, f"{pid} has {len(kids)} worker processes: {[c.cmdline() for c in kids]}"
        return sorted(kids, key=lambda c: c.pid)

    def wait(
        self, cond: Callable[[], bool], what: str, timeout: float = RECOVERY_S, alive: tuple[str, ...] = ()
    ) -> None:
        """Poll ``cond`` until it holds; the processors named in ``alive`` must not exit meanwhile."""
        deadline = time.monotonic() + timeout
        while not cond():
            for pid in alive:
                p = self.procs[pid]
                assert p.alive(), (
                    f"{pid} exited ({p.proc.returncode}) while waiting for {what}:\n{p.log_text()[-3000:]}"
                )
            assert time.monotonic() < deadline, f"timed out after {timeout} s waiting for {what}"
            time.sleep(0.05)

    def exited(self, pid: str, timeout: float = 60) -> tuple[int, str]:
        p = self.procs[pid]
        code = p.proc.wait(timeout=timeout)
        return code, p.log_text()

    def progressed(self, since_ns: int) -> Callable[[], bool]:
        """Whether every partition has a message processed that started after ``since_ns``."""

        def done() -> bool:
            self.evidence.refresh()
            return all(self.evidence.last_start.get(p, 0) > since_ns for p in range(PARTITIONS))

        return done

    def checkpointed(self, stem: str, seen: int) -> Callable[[], bool]:
        """Whether the task instance of record files ``stem`` wrote a checkpoint after its first
        ``seen`` commit lines."""

        def done() -> bool:
            self.evidence.refresh()
            return any(c[0] == "K" for c in self.evidence.commits[stem][seen:])

        return done

    def settle(self) -> None:
        """Until both processors applied one job model and every task processed input after that."""
        _, self.owners = self.view.wait_stable(list(self.procs.values()), timeout=RECOVERY_S)
        listed = sorted(t for ts in self.owners.values() for t in ts)
        assert listed == sorted(f"Partition {p}" for p in range(PARTITIONS)), f"tasks not owned once: {self.owners}"
        self.check_damages()
        since = time.monotonic_ns()
        self.wait(self.progressed(since), "every task to process input", alive=("p1", "p2"))

    # -- damaged stores ---------------------------------------------------------------------------
    def check_damages(self) -> None:
        """Each damaged store directory that was opened since its damage: its first open said why it
        cannot be used and restored the store in full from the changelog."""
        for d in list(self.damages):
            pid = next(p for p, loc in self.location.items() if loc == d.location)
            for run in range(d.run, self.runs[pid]):
                log = (self.tmp / f"{pid}-{run}.log").read_text() if (self.tmp / f"{pid}-{run}.log").exists() else ""
                opened = re.search(RESTORED.format(task=d.task), log)
                if opened is None:
                    continue
                where = re.escape(str(self.store_dir(d.location, d.task)))
                warning = re.search(
                    rf"WARNING .*store 'counts' of task '{d.task}': the LMDB files in {where} cannot be used "
                    rf"\({d.why}: the value of key b'w\d+' in {where}/data\.mdb fails its checksum",
                    log,
                )
                said = f"the first open of {d.what}: {opened.group(0)!r}"
                assert warning is not None, f"{said}, with no warning that it was damaged ({d.why})"
                assert warning.start() < opened.start(), f"{said}, before the warning that it was damaged"
                assert opened.group(1) == "full restore", f"{said}, not restored in full from the changelog"
                self.damages.remove(d)
                self.verified.append(d)
                break

    # -- the faults -------------------------------------------------------------------------------
    def kill_processor(self, pid: str) -> str:
        self.procs[pid].kill()
        self.start(pid)
        self.settle()
        return f"SIGKILL {pid}, restarted"

    def kill_worker(self, pid: str) -> str:
        victim = self.rng.choice(self.workers(pid))
        victim.send_signal(signal.SIGKILL)
        code, log = self.exited(pid)
        assert code == 1, f"{pid} exited {code} after its worker {victim.pid} was killed:\n{log[-3000:]}"
        assert re.search(rf"worker \d \(pid {victim.pid}; tasks '[^)]*\) was killed by SIGKILL", log), log[-3000:]
        self.start(pid)
        self.settle()
        return f"SIGKILL worker {victim.pid} of {pid}, {pid} exited 1, restarted"

    def freeze_processor(self, pid: str) -> str:
        """SIGSTOP of the processor and its workers (a frozen machine) until the other processor
        took the frozen one's tasks over and checkpointed them past where the frozen one was: its
        session expired meanwhile, and what the new owner wrote to the changelog is there. Then
        SIGCONT."""
        other = self.other(pid)
        theirs = {int(t.split()[1]) for t in self.owners[pid]}
        p = self.procs[pid]
        expired_before = len(REJOINED.findall(p.log_text()))
        workers = [w.pid for w in self.workers(pid)]
        stopped = time.monotonic_ns()
        for w in workers:
            os.kill(w, signal.SIGSTOP)
        os.kill(p.proc.pid, signal.SIGSTOP)
        wait_stopped([*workers, p.proc.pid])
        frozen = time.monotonic_ns()
        try:
            self.evidence.refresh()
            where = {q: self.evidence.last_offset.get((pid, q), -1) for q in theirs}
            self.view.wait_stable([self.procs[other]], timeout=RECOVERY_S)

            def past() -> bool:
                self.evidence.refresh()
                return all(self.evidence.checkpointed.get((other, q), -1) > o for q, o in where.items())

            self.wait(past, f"{other} to checkpoint {pid}'s tasks past offsets {where}", alive=(other,))
        finally:
            continued = time.monotonic_ns()
            for w in [*workers, p.proc.pid]:
                os.kill(w, signal.SIGCONT)
        self.evidence.refresh()
        tenures = {r.instance for r in self.evidence.records if r.processor == pid and r.start_ns < stopped}
        self.freezes.append(Freeze(pid, frozen, continued, tenures))
        self.settle()
        expired = len(REJOINED.findall(p.log_text()))
        assert expired == expired_before + 1, (
            f"{pid} did not abandon its tasks and rejoin once:\n{p.log_text()[-3000:]}"
        )
        return f"SIGSTOP {pid} for {(continued - frozen) / 1e9:.1f} s (tasks {sorted(theirs)}), SIGCONT"

    def pause_broker(self) -> str:
        assert self.broker.process is not None
        os.kill(self.broker.process.pid, signal.SIGSTOP)
        try:
            threading.Event().wait(BROKER_PAUSE_S)  # the fault itself: the broker answers nothing this long
        finally:
            os.kill(self.broker.process.pid, signal.SIGCONT)
        self.settle()
        return f"SIGSTOP broker for {BROKER_PAUSE_S} s, SIGCONT"

    def damage_running(self, pid: str) -> str:
        """Flip the values of a running task's store that its next reads must take from LMDB: with
        the task's worker frozen, after a commit that finished, the counts of the words it has not
        processed since (those wait in the store's write buffer, which the next commit writes
        over the damage). The first read of one of them must fail the processor."""
        task = self.rng.choice(sorted(self.owners[pid]))
        partition = int(task.split()[1])
        name = task_dir_name(task)
        data = self.store_dir(self.location[pid], task) / "data.mdb"
        by_pid = {w.pid: w for w in self.workers(pid)}
        self.evidence.refresh()
        hosts = [w for w in by_pid if f"{name}.{w}.log" in self.evidence.by_file]
        assert len(hosts) == 1, f"{task} has records from {len(hosts)} of {pid}'s workers {sorted(by_pid)}"
        worker, stem = hosts[0], f"{name}.{hosts[0]}"
        flipped: list[str] = []
        for _ in range(50):
            os.kill(worker, signal.SIGSTOP)
            try:
                wait_stopped([worker])
                self.evidence.refresh()
                commits = self.evidence.commits[stem]
                starts = [i for i, c in enumerate(commits) if c[0] == "C"]
                done = starts and any(c[0] == "K" for c in commits[starts[-1] :])
                processed = self.evidence.by_file[f"{stem}.log"]
                if done and processed:
                    since = commits[starts[-1]][3]
                    buffered = {word(partition, r.offset) for r in processed if r.start_ns > since}
                    buffered.add(word(partition, processed[-1].offset + 1))  # the message it may be in
                    for key in sorted({f"w{i}" for i in range(WORDS)} - buffered):
                        if flip_values(data, key):
                            flipped.append(key)
                    if flipped:
                        break
            finally:
                os.kill(worker, signal.SIGCONT)
            # Mid-commit, or every word waits in the buffer: after the task's next checkpoint, again.
            self.wait(
                self.checkpointed(stem, len(self.evidence.commits[stem])), f"a checkpoint of {task}", alive=(pid,)
            )
        assert flipped, f"found no moment to damage {task}'s store in 50 of its commits"
        code, log = self.exited(pid)
        where = re.escape(str(data.parent))
        failed = [line for line in log.splitlines() if line.startswith("samzamp run: failed:")]
        assert code == 1, f"{pid} exited {code} after {task}'s store was damaged:\n{log[-3000:]}"
        assert len(failed) == 1, log[-3000:]
        m = re.match(
            rf"samzamp run: failed: store 'counts' of task '{task}' in {where}: the value of key b'(w\d+)' "
            rf"in {where}/data\.mdb fails its checksum",
            failed[0],
        )
        assert m is not None, failed[0]
        assert m.group(1) in flipped, f"{failed[0]}: not one of the values flipped, {flipped}"
        self.damages.append(
            Damage(self.location[pid], task, "it was marked damaged", self.runs[pid], f"{task} at {pid}")
        )
        self.start(pid)
        self.settle()
        return (
            f"flipped {len(flipped)} values of {task}'s store in {pid} while it ran: {m.group(1)} failed it, restarted"
        )

    def damage_stopped(self, pid: str) -> str:
        how = self.rng.choice(["SIGTERM", "SIGKILL"])
        p = self.procs[pid]
        if how == "SIGTERM":
            code = p.stop()
            assert code == 0, f"{pid} exited {code} on SIGTERM:\n{p.log_text()[-3000:]}"
        else:
            p.kill()
        loc = self.location[pid]
        held = sorted(d.name for d in (self.state(loc) / "counts").iterdir() if (d / "data.mdb").exists())
        mine = [t for t in sorted(self.owners[pid]) if task_dir_name(t) in held]
        task = self.rng.choice(mine) if mine else self.rng.choice(held).replace("_", " ")
        key = self.rng.choice([f"w{i}" for i in range(WORDS)])
        n = flip_values(self.store_dir(loc, task) / "data.mdb", key)
        assert n >= 1, f"{key} is not in {task}'s store at {loc}"
        self.damages.append(Damage(loc, task, "it was found damaged", self.runs[pid], f"{task} at {pid}"))
        self.start(pid)
        self.settle()
        return f"{how} {pid}, flipped {key} of {task}'s store ({n} copies), restarted"

    # -- the campaign ----------------------------------------------------------------------------
    def run(self) -> None:
        self.flow = InputFlow(self.bootstrap, self.topic)
        self.wait(lambda: self.flow.count >= 200, "input before the campaign")
        self.start("p1")
        self.view.wait_stable([self.procs["p1"]], timeout=RECOVERY_S)
        self.start("p2")
        self.settle()
        faults = [f for f, n in PLAN.items() for _ in range(n)]
        self.rng.shuffle(faults)
        for i, fault in enumerate(faults, start=1):
            began = time.monotonic()
            target = self.rng.choice(["p1", "p2"])
            self.story.append(f"#{i} {fault}" + ("" if fault == "pause_broker" else f" {target}"))
            fn = getattr(self, fault)
            done = fn() if fault == "pause_broker" else fn(target)
            self.story[-1] = f"#{i} {done} ({time.monotonic() - began:.1f} s)"
            print(self.story[-1], flush=True)

    def finish(self) -> None:
        """Stop the input, wait until every message was processed, stop both processors cleanly."""
        assert self.flow is not None
        self.written = self.flow.stop()
        expected = self.written

        def all_processed() -> bool:
            self.evidence.refresh()
            return not missing_offsets(self.evidence.records, expected, PARTITIONS)

        self.wait(all_processed, f"every one of the {expected} inputs to be processed", alive=("p1", "p2"))
        latest = self.view.latest()
        assert latest is not None
        self.model = latest[1]
        for pid, p in self.procs.items():
            code = p.stop()
            assert code == 0, f"{pid} exited {code} on SIGTERM:\n{p.log_text()[-3000:]}"
        self.check_damages()

    # -- the checks -------------------------------------------------------------------------------
    def check(self) -> None:
        self.evidence.refresh()
        records = self.evidence.records
        written = self.written
        self.check_input(written)
        missing = missing_offsets(records, written, PARTITIONS)
        assert not missing, f"{len(missing)} inputs never processed, first {missing[:5]}"
        self.check_exclusive(records)
        live = self.check_counts(written)
        self.check_changelog(live)
        self.check_checkpoints()
        for d in self.damages:  # not opened since its damage: its next open must still refuse it
            path = self.store_dir(d.location, d.task)
            why = check_env(path)
            if why is None:
                engine = LmdbEngine(path)
                try:
                    why = engine.verify()
                finally:
                    engine.close()
            assert why is not None, f"the damage of {d.what} went unnoticed: its store now passes every check"

    def check_input(self, written: int) -> None:
        """The premise of ``word``: partition p holds messages p, p + 4, ... each once, in order."""
        held: dict[int, list[int]] = defaultdict(list)
        for m in read_all(self.bootstrap, self.topic, list(range(PARTITIONS))):
            assert m.offset() == len(held[m.partition()]), f"partition {m.partition()} has a gap at {m.offset()}"
            held[m.partition()].append(int(m.value().decode()[1:]))
        for p in range(PARTITIONS):
            assert held[p] == list(range(p, written, PARTITIONS)), f"input partition {p} is not what was produced"

    def check_exclusive(self, records: list[Record]) -> None:
        """No two processors processed one task's messages at one time, and a frozen processor,
        once continued, processed nothing more of the tasks it had. The one message each of its
        processes was in when frozen ends only after it is continued (a frozen process cannot be
        interrupted): those are left out of the overlap check."""
        spanning: set[Record] = set()
        for f in self.freezes:
            late = [r for r in records if r.instance in f.tenures and r.start_ns > f.continued_ns]
            assert not late, f"{f.processor} processed {len(late)} messages of its old tasks after SIGCONT: {late[:3]}"
            frozen = {
                r
                for r in records
                if r.processor == f.processor and r.start_ns < f.frozen_ns and r.end_ns > f.continued_ns
            }
            assert len(frozen) <= POOL, f"more messages than processes of {f.processor} span its freeze: {frozen}"
            spanning |= frozen
        check_ownership([r for r in records if r not in spanning])

    def check_counts(self, written: int) -> dict[str, dict[str, int]]:
        """Each task's store, where the task ran last, holds the counts of all its partition's input;
        task -> its counts."""
        live = {}
        for c in self.model.containers.values():
            for task in c.tasks:
                p = int(task.split()[1])
                live[task] = store_counts(self.store_dir(c.location_id, task))
                last = len(range(p, written, PARTITIONS)) - 1
                assert live[task] == truths_at(p, {last})[last], (
                    f"{task}'s store at {c.location_id} is not the true count"
                )
        return live

    def changelog_records(self) -> dict[int, list[tuple[int, str, int | None]]]:
        """Changelog partition -> its records as (offset, key, count or None for a tombstone)."""
        out: dict[int, list[tuple[int, str, int | None]]] = defaultdict(list)
        for m in read_all(self.bootstrap, self.changelog, list(range(PARTITIONS))):
            v = m.value()
            out[m.partition()].append((m.offset(), m.key().decode(), None if v is None else struct.unpack(">q", v)[0]))
        return out

    def check_changelog(self, live: dict[str, dict[str, int]]) -> None:
        """The changelog alone gives each store back: the last value of each key."""
        held = self.changelog_records()
        for task, counts in live.items():
            last: dict[str, int | None] = {}
            for _, key, value in held[self.model.tasks[task].changelog_partition]:
                last[key] = value
            restored = {k: v for k, v in last.items() if v is not None}
            assert restored == counts, f"{task}: its changelog gives {restored}, its store holds {counts}"

    def check_checkpoints(self) -> None:
        """Every checkpoint is a state the changelog gives back: up to its marker, the changelog
        holds the counts of exactly the inputs the checkpoint covers (a restore from it is exact)."""
        held = self.changelog_records()
        by_task: dict[str, list[tuple[int, int]]] = defaultdict(list)
        for cp in read_checkpoint_records(self.bootstrap, self.job):
            marker = cp.state_markers.get("counts")
            assert marker is not None, f"a checkpoint of {cp.task_name} without its store marker"
            offsets = {s.partition: o for s, o in cp.offsets().items()}
            by_task[cp.task_name].append((int(marker), offsets.get(int(cp.task_name.split()[1]), -1)))
        assert set(by_task) == set(self.model.tasks), f"checkpoints of {sorted(by_task)}"
        for task, cuts in by_task.items():
            p = int(task.split()[1])
            restored = states_at(held[self.model.tasks[task].changelog_partition], {m for m, _ in cuts})
            truth = truths_at(p, {o for _, o in cuts})
            for marker, offset in cuts:
                wrong = sorted(set(restored[marker].items()) ^ set(truth[offset].items()))
                assert not wrong, (
                    f"{task}: the checkpoint at input offset {offset}, changelog marker {marker} restores "
                    f"counts off the true ones (changelog's and true values of the words): {wrong[:6]}"
                )

    def close(self) -> None:
        if self.flow is not None:
            self.flow.halt()
        self.view.close()


def test_a_fault_campaign_leaves_the_counts_exact(zookeeper, unique, tmp_path: Path) -> None:
    seed = int(os.environ.get("SAMZAMP_CAMPAIGN_SEED") or random.SystemRandom().randrange(2**32))
    print(f"fault campaign SAMZAMP_CAMPAIGN_SEED={seed}", flush=True)
    began = time.monotonic()
    broker = EmbeddedBroker(die_with_parent=True).start()  # its own: the campaign pauses it
    campaign = Campaign(tmp_path, broker, zookeeper.connect_string, unique, seed)
    try:
        try:
            campaign.run()
            campaign.finish()
            campaign.check()
        except Exception as e:
            what = str(e) if isinstance(e, AssertionError) else f"{type(e).__name__}: {e}"
            raise AssertionError(campaign.say(what)) from e
        finally:
            campaign.close()
    finally:
        broker.stop()
    print(
        f"fault campaign seed {seed}: {len(campaign.story)} faults, {campaign.written} inputs, "
        f"{len(campaign.verified)} damaged stores restored at their next open, "
        f"{len(campaign.damages)} never opened again; {time.monotonic() - began:.0f} s",
        flush=True,
    )
