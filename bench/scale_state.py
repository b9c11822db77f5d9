"""A store of millions of keys: full restore rate at 1 and 10 million changelog records against a plain
consumer reading the same partition, host-affinity restart time, and commit time against a small store.

One embedded broker (Tansu, memory only, 127.0.0.1) serves the run. Each store size in ``--sizes``
(default 1,000,000 and 10,000,000; ``--quick``: 100,000 and 1,000,000) gets a changelog topic of one
partition, written once, straight into the topic (no job builds it): a record per distinct key, in
the store's changelog format (samzamp/storage/manager.py: the key and the value as the store's
serdes write them, here the string key ``u<k>`` and the JSON value ``{"count": 1, "ts": ...}`` of
bench/stateful_task.py), keys in a scattered order (``k = i * 2654435761 mod N``), as a compacted
changelog holds them in the order of their last write, not in key order. The job is
bench/stateful_task.py:StatefulCountTask (a count per key in the changelogged LMDB store "counts",
one output per input) on an input topic of one partition: one task, changelog partition 0, pool 0
(the task inline on the container's loop; ``--pool``), the store's defaults (checksums on, sync on,
``lmdb.map.size`` 64 MiB growing by doubling: the restore grows it four times on the way to
10 million keys).

**(a) Restore rate.** ``--repeat`` rounds, each running, in an order that alternates from round to
round, for each size: a container of a fresh job.id and an empty store directory (so a full restore
from the oldest record), which restores the store from the changelog and is then stopped (SIGTERM,
exit 0; its store directory is deleted); and two plain confluent-kafka consumers in this process,
reading the same partition from its oldest record to its end (partition EOF) with the reader's
librdkafka settings: "plain poll", the loop one usually writes (``poll()`` per message), and "plain
batch", ``consume(5000)`` per call (what samzamp's changelog reader does), each touching every
record's key and value. A restore's rate is the container's own log line (manager.py: "replayed N
changelog records in S s (R records/s)": from opening the store to the restore's last write and
sync, the reading included); a plain loop's is its records over assign -> partition end. Printed
per round and as medians; restore N / restore 1M per record (target >= 0.8 at 10M), and restore /
plain poll and restore / plain batch at each size.

**(c) Commit time.** Then two containers of the job run at once, one on a store of 10,000 keys
(its own changelog of 10,000 records) and one on the largest size's changelog, each restored in full
at its start; a thread of this process writes ``--write-rate`` inputs a second to each (noop's
click, its id random, so the task's key ``u<id % keys>`` hits a key of the whole store at random:
each write at the big store dirties a different LMDB page, as a store of live keys sees it),
task.commit.ms = 1000. For ``--commit-s`` seconds after ``--warmup-s``, the container's commit timers
are read from the metrics log (metrics.log.interval.ms = 1000, one JSON line a second): per report
the commits since the last and their mean time. SamzaContainerMetrics commit-ns (Prometheus'
samza_container_commit_seconds) runs from the commit's start to its checkpoint written, the
changelog flush, the LMDB write and fsync included; commit-sync-ns is the commit's synchronous
phase, the pause the task sees (task.commit.stores.async: the LMDB write and fsync run after it,
while the task processes; a samzamp without the timer prints that it has none). Printed for each:
commits, mean, median and largest of the per-report means, and big / small (target <= 1.5).

**(b) Host-affinity restart.** Then, ``--restarts`` times, each container in turn (the order
alternating) is stopped cleanly (SIGTERM: final commit, exit 0) and started again on the same
job.id and store directory while its input keeps coming: the time from the stop's SIGTERM to the
exit, from Popen to the first new output (OutputWatch: one ListOffsets request every 20 ms), and from
its log the records replayed (should be 0: the local store's OFFSET matches the checkpoint) and the
time it took to check the checksums of every local value before trusting the store
(manager.py's ``_verified_engine``: a full scan, which grows with the keys).

A round at 10 million records takes about 3.5 minutes here (the restore alone 160 s), so one round is
the default: the whole run then takes about 7.5 minutes, and (c)'s full restore of the largest
changelog is the second sample at that size.

Before the scale work, on this 2-core machine (``--repeat 1``): restore 117k records/s at 1M and 63k
at 10M (0.54 per record), where plain batch reads 582k and 871k records/s: the reading does not slow
down, LMDB does. Each restore batch (10,000 records, one LMDB transaction, fsynced) of scattered keys
dirties nearly as many distinct pages of a store of 35k pages at 1M keys (138 MiB) and 209k at 10M.
LmdbEngine alone, 1M records in 10,000-record batches: 117k records/s scattered, 203k with sync off,
562k in key order (which is about the 625k measured earlier, on a changelog of few keys). Commit
with 2,000 random writes/s: 78 ms at 10M keys against 33 ms at 10k (2.3x). Restart at 10M: first
output 6.4 s, of which 5.4 s checking the checksums of every local value; 1.0 s at 10k keys.

After (same machine, ``--repeat 1``, the machine shared): a restore writes 100,000-record
transactions through the map and syncs once (samzamp/storage/manager.py), and a kept store's
checksums are checked over its raw pages (``verify_lmdb``): restore 216k records/s at 1M and 219k at
10M (1.02 per record; 180k and 257k by sample), restart at 10M 1.28 s to first output, 0.34 s of it
the checksums; commit 79 ms at 10M keys against 31 ms (2.5x, unchanged: 2,000 random writes dirty
about 2,000 leaf and 1,000 branch pages of the big store per commit, 170 of the small one).
bench/store_engine.py measures the same in LmdbEngine alone, in seconds.

With the commit in two phases (task.commit.stores.async, the default: the LMDB write and fsync run on
a thread while the task processes; same machine, pool 0, two runs, each beside main's in one hold of
the bench lock): the pause the task sees, commit-sync-ns, 17.9 / 15.4 ms and 17.7 / 17.1 ms at 10M
/ 10k keys (1.17 and 1.03); to the checkpoint, commit-ns, 97.4 / 31.3 and 94.3 / 32.9 ms (3.11 and
2.86), where main's commit-ns, all of it a pause there, was 94.8 / 30.8 and 90.0 / 33.3 ms (3.08
and 2.70). The write itself costs what it did: the task no longer waits for it. With --pool 2 (the
task in a worker, its apply on a thread there): commit-sync-ns 21.0 / 18.8 ms (1.12), commit-ns
105.7 / 40.7 ms (2.60) against main's 91.7 / 33.4 ms (2.75): the worker's answer that the write is
done (``StoresApplied``, looked for every 2 ms while idle) adds some milliseconds to the checkpoint.

Printed: a table per part, with the targets. Exits 0 whatever the figures. The broker's RSS after the
changelogs are written and the largest store's data.mdb size are printed too. With BENCH_LOG_DIR the
container logs are kept there. On a 2-core machine the broker, the containers and this process share
the cores: absolute rates vary by run, the ratios measured side by side in one run are the figures.

    .venv/bin/python bench/scale_state.py [--quick] [--sizes 1000000,10000000] [--repeat R]
                                          [--write-rate R] [--commit-s S] [--restarts K] [--pool P]
                                          [--no-plain-poll-above N]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import msgspec
import noop
import psutil
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from turns import container_args

from samzamp.systems.kafka import EmbeddedBroker

RESTORE_TARGET = 0.8  # restore at the largest size / at 1M, per record
COMMIT_TARGET = 1.5  # commit time with the largest store / with SMALL_KEYS
SMALL_KEYS = 10_000
SCATTER = 2_654_435_761  # prime: i * SCATTER mod N visits every k < N once (N not a multiple of it)
CHANGELOG_VALUE = b'{"count":1,"ts":1700000000000}'
STORE = "counts"
TIMEOUT_S = 600.0

_LINE = r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) \S+ \S+: "
REPLAYED = re.compile(
    r"store '" + STORE + r"' of task '[^']*': (.*?); replayed (\d+) changelog records in ([\d.]+) s", re.M
)
CHECKED = re.compile(r"checked the checksums of its (\d+) local values in ([\d.]+) s", re.M)
METRICS = re.compile(_LINE + r"metrics (\{.*\})$", re.M)
# The reader's librdkafka settings (samzamp/systems/kafka/changelog.py: ChangelogReader).
READER_CONF = {
    "enable.auto.commit": False,
    "enable.partition.eof": True,
    "auto.offset.reset": "earliest",
    "fetch.wait.max.ms": 10,
    "fetch.queue.backoff.ms": 10,
}
CHANGELOG_PRODUCER_CONF = {
    "linger.ms": 50,
    "batch.size": 1_000_000,
    "queue.buffering.max.messages": 1_000_000,
    "acks": "all",
}


def log_time(stamp: str) -> float:
    return datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp()


def size_label(n: int) -> str:
    return f"{n / 1e6:g}M" if n >= 1_000_000 else f"{n / 1e3:g}k"


def changelog_topic(n: int) -> str:
    return f"bench-scale-changelog-{size_label(n)}"


def produce_changelog(bs: str, topic: str, n: int) -> None:
    """Write ``n`` changelog records of distinct keys ``u<k>`` (scattered order) to ``topic[0]``."""
    p = Producer({"bootstrap.servers": bs, **CHANGELOG_PRODUCER_CONF})
    produce = p.produce
    for i in range(n):
        key = f"u{i * SCATTER % n}".encode()
        while True:
            try:
                produce(topic, CHANGELOG_VALUE, key, 0)
                break
            except BufferError:
                p.poll(0.05)
        if i % 10000 == 0:
            p.poll(0)
    if p.flush(300) != 0:
        raise SystemExit(f"changelog {topic}: flush timed out")


def plain_read(bs: str, topic: str, batch: bool, group: str) -> tuple[int, float]:
    """Read ``topic[0]`` from its oldest record to its end: (records, seconds from assign to the end)."""
    c = Consumer({"bootstrap.servers": bs, "group.id": group, **READER_CONF})
    n = 0
    try:
        c.list_topics(topic, timeout=30)  # metadata first, as the reader does (missing_partition)
        t0 = time.perf_counter()
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        deadline = time.monotonic() + TIMEOUT_S
        while time.monotonic() < deadline:
            if batch:  # as changelog.batches: what is there, else wait for the next one
                msgs = c.consume(5000, 0) or c.consume(1, 0.5)
            else:
                msgs = [m for m in (c.poll(0.5),) if m is not None]
            for m in msgs:
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        return n, time.perf_counter() - t0
                    raise SystemExit(f"plain read of {topic}: {err.str()}")
                m.key()
                m.value()
                n += 1
        raise SystemExit(f"plain read of {topic}: no end within {TIMEOUT_S:.0f} s ({n} records)")
    finally:
        c.close()


def job_toml(
    job_id: str, store_dir: Path, changelog: str, input_topic: str, out_topic: str, keys: int, pool: int
) -> str:
    return f"""\
"job.logged.store.base.dir" = "{store_dir}"
"bench.keys" = {keys}
"metrics.log.interval.ms" = 1000

[job]
name = "bench-scale-state"
id = "{job_id}"
default.system = "kafka"
container.thread.pool.size = {pool}

[task]
class = "stateful_task:StatefulCountTask"
inputs = ["kafka.{input_topic}"]
commit.ms = 1000

[systems.kafka]
samza.factory = "kafka"
default.stream.samza.offset.default = "oldest"

[streams.{input_topic}]
samza.key.serde = "string"
samza.msg.serde = "json"

[streams.{out_topic}]
samza.key.serde = "string"
samza.msg.serde = "json"
partitions = 1

[stores.{STORE}]
factory = "lmdb"
changelog = "kafka.{changelog}"
key.serde = "string"
msg.serde = "json"
"""


class Container:
    """One ``bin/samzamp-container`` of the job, in its own process group, logging to ``log_path``."""

    def __init__(self, label: str, toml_path: Path, out_topic: str, bs: str, log_path: Path, workdir: Path) -> None:
        self.label = label
        self.toml_path = toml_path
        self.out_topic = out_topic
        self.bs = bs
        self.log_path = log_path
        self.workdir = workdir
        self.proc: subprocess.Popen[bytes] | None = None
        self.started = 0.0
        self.starts = 0

    def start(self) -> None:
        path = self.log_path.with_suffix(f".{self.starts}.log")
        self.starts += 1
        self.current_log = path
        with open(path, "wb") as log:
            self.started = time.perf_counter()
            self.proc = subprocess.Popen(
                container_args(self.toml_path, self.bs),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=noop.THIS.env(self.out_topic),
                cwd=self.workdir,
                start_new_session=True,
            )

    def text(self) -> str:
        return self.current_log.read_text(errors="replace")

    def check_alive(self) -> None:
        assert self.proc is not None
        if self.proc.poll() is not None:
            self.fail(f"{self.label}: container exited with {self.proc.returncode}")

    def fail(self, why: str) -> None:
        tail = self.text().splitlines()[-30:]
        print("\n".join([f"--- {self.label} log (last lines) ---", *tail, "---"]), file=sys.stderr)
        raise SystemExit(why)

    def wait_for(self, pattern: re.Pattern[str], what: str) -> re.Match[str]:
        deadline = time.monotonic() + TIMEOUT_S
        while True:
            m = pattern.search(self.text())
            if m is not None:
                return m
            self.check_alive()
            if time.monotonic() > deadline:
                self.fail(f"{self.label}: no {what} within {TIMEOUT_S:.0f} s")
            time.sleep(0.05)

    def stop(self) -> float:
        """SIGTERM, and the seconds until it exited 0."""
        assert self.proc is not None
        t = time.perf_counter()
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.fail(f"{self.label}: no exit within {TIMEOUT_S:.0f} s of SIGTERM")
        if self.proc.returncode != 0:
            self.fail(f"{self.label}: exited with {self.proc.returncode} on SIGTERM")
        return time.perf_counter() - t

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


@dataclass
class Restore:
    records: int
    seconds: float  # the container's own figure (opening the store to the restore's end)
    startup_s: float  # Popen to its log line

    @property
    def rate(self) -> float:
        return self.records / self.seconds if self.seconds > 0 else float("nan")


def restore_once(c: Container, expected: int) -> Restore:
    c.start()
    m = c.wait_for(REPLAYED, "restore line")
    startup_s = time.perf_counter() - c.started
    records, seconds = int(m.group(2)), float(m.group(3))
    if records != expected or not m.group(1).startswith("full restore"):
        c.fail(f"{c.label}: expected a full restore of {expected} records: {m.group(0)}")
    c.stop()
    return Restore(records, seconds, startup_s)


class Flow:
    """``rate`` inputs a second to each of ``topics`` (one partition each) from a thread, until ``stop``:
    noop's click with a random id."""

    def __init__(self, bs: str, topics: list[str], rate: float) -> None:
        self.sent = 0
        self._stop = threading.Event()
        self._producer = Producer({"bootstrap.servers": bs, **noop.PRODUCER_CONF})
        self._thread = threading.Thread(target=self._run, args=(topics, rate), daemon=True)
        self._thread.start()

    def _run(self, topics: list[str], rate: float) -> None:
        p = self._producer
        rnd = random.Random(35)
        encode = msgspec.json.encode
        t0 = time.monotonic()
        while not self._stop.wait(0.01):
            due = int((time.monotonic() - t0) * rate)
            for i in range(self.sent, due):
                value = encode({"id": rnd.randrange(1 << 40), "event": "click", "ts": 1700000000000 + i})
                for t in topics:
                    p.produce(t, value, str(i).encode(), 0)
            self.sent = max(self.sent, due)
            p.poll(0)

    def stop(self) -> None:
        if self._stop.is_set():
            return
        self._stop.set()
        self._thread.join(timeout=30)
        self._producer.flush(60)
        del self._producer  # its connections close now, not when the broker stops under them


@dataclass
class CommitStats:
    commits: int = 0
    means_ms: list[float] = field(default_factory=list)  # per metrics report with commits: their mean

    @property
    def mean_ms(self) -> float:
        return statistics.fmean(self.means_ms) if self.means_ms else float("nan")


COMMIT_TIMERS = ("commit-ns", "commit-sync-ns")  # to the checkpoint; the pause the task sees


def commit_stats(text: str, since: float, until: float, timer_name: str = "commit-ns") -> CommitStats:
    """From a container's metrics log: the commits reported in (since, until] and each report's mean
    of ``timer_name`` (none reported: a samzamp without that timer)."""
    out = CommitStats()
    last: tuple[int, int] | None = None
    for m in METRICS.finditer(text):
        t = log_time(m.group(1))
        timer = json.loads(m.group(2)).get("SamzaContainerMetrics", {}).get(timer_name)
        if timer is None:
            continue
        count, total = int(timer["count"]), int(timer["avg"]) * int(timer["count"])
        if t <= since:
            last = (count, total)
            continue
        if t > until:
            break
        if last is not None and count > last[0]:
            out.commits += count - last[0]
            out.means_ms.append((total - last[1]) / (count - last[0]) / 1e6)
        last = (count, total)
    return out


@dataclass
class Restart:
    stop_s: float
    first_output_s: float
    replayed: int
    how: str
    checked_s: float


def restart_once(c: Container, watch: noop.OutputWatch) -> Restart:
    stop_s = c.stop()
    before = watch.count()
    c.start()
    deadline = time.monotonic() + TIMEOUT_S
    while watch.count() <= before:
        c.check_alive()
        if time.monotonic() > deadline:
            c.fail(f"{c.label}: no output within {TIMEOUT_S:.0f} s of its restart")
        time.sleep(noop.OutputWatch.PERIOD_S)
    first = time.perf_counter() - c.started
    m = c.wait_for(REPLAYED, "restore line")
    checked = CHECKED.search(c.text())
    return Restart(stop_s, first, int(m.group(2)), m.group(1), float(checked.group(2)) if checked else 0.0)


def med(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


IDLE_IN, IDLE_OUT = "bench-scale-idle", "bench-scale-out-idle"
INS = {"small": "bench-scale-in-small", "big": "bench-scale-in-big"}
OUTS = {"small": "bench-scale-out-small", "big": "bench-scale-out-big"}


@dataclass
class Results:
    sizes: list[int]
    restores: dict[int, list[Restore]] = field(default_factory=dict)
    polls: dict[int, list[float]] = field(default_factory=dict)
    batches: dict[int, list[float]] = field(default_factory=dict)
    commits: dict[str, dict[str, CommitStats]] = field(default_factory=dict)  # which -> timer -> stats
    restarts: dict[str, list[Restart]] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for n in self.sizes:
            self.restores[n], self.polls[n], self.batches[n] = [], [], []


class Bench:
    def __init__(self, args: argparse.Namespace, bs: str, workdir: Path, res: Results) -> None:
        self.args = args
        self.bs = bs
        self.workdir = workdir
        self.log_dir = Path(os.environ.get("BENCH_LOG_DIR") or workdir)
        self.res = res
        self.containers: list[Container] = []
        self.flow: Flow | None = None

    def container(self, label: str, job_id: str, changelog: str, keys: int, in_topic: str, out_topic: str) -> Container:
        store_dir = self.workdir / "stores" / job_id
        toml = self.workdir / f"job-{job_id}.toml"
        toml.write_text(job_toml(job_id, store_dir, changelog, in_topic, out_topic, keys, self.args.pool))
        c = Container(label, toml, out_topic, self.bs, self.log_dir / f"container-{job_id}", self.workdir)
        self.containers.append(c)
        return c

    def restore_rounds(self) -> None:
        """(a): per round, for each size, a full restore and the two plain reads, the order alternating."""
        args, res = self.args, self.res
        print("\n(a) full restore from the changelog, against plain consumers reading the same partition")
        for rep in range(args.repeat):
            order = [(k, n) for n in res.sizes for k in ("restore", "batch", "poll")]
            if rep % 2:
                order.reverse()
            for kind, n in order:
                topic = changelog_topic(n)
                head = f"round {rep + 1}/{args.repeat}"
                if kind == "restore":
                    job_id = f"r{rep}-{size_label(n)}"
                    c = self.container(f"restore {size_label(n)}", job_id, topic, n, IDLE_IN, IDLE_OUT)
                    r = restore_once(c, n)
                    res.restores[n].append(r)
                    store_dir = self.workdir / "stores" / job_id
                    size = dir_bytes(store_dir)
                    shutil.rmtree(store_dir)
                    print(
                        f"{head} restore      {size_label(n):>5}: {r.rate:>10,.0f} records/s ({r.records:,} in "
                        f"{r.seconds:.2f} s; start -> restored {r.startup_s:.2f} s; store files {size / 2**20:,.0f} MiB)"
                    )
                    continue
                if kind == "poll" and args.no_plain_poll_above and n > args.no_plain_poll_above:
                    continue
                records, seconds = plain_read(self.bs, topic, kind == "batch", f"bench-plain-{kind}-{rep}-{n}")
                if records != n:
                    raise SystemExit(f"plain {kind} of {topic}: {records} records, expected {n}")
                (res.batches if kind == "batch" else res.polls)[n].append(records / seconds)
                print(
                    f"{head} plain {kind:<6} {size_label(n):>5}: {records / seconds:>10,.0f} records/s "
                    f"({records:,} in {seconds:.2f} s)"
                )

    def commits_and_restarts(self) -> None:
        """(c), then (b), on one small and one big container running at once."""
        args, res = self.args, self.res
        big = res.sizes[-1]
        print(
            f"\n(c) commit time: {SMALL_KEYS:,}-key store against {size_label(big)}-key store, "
            f"{args.write_rate:g} writes/s each at random keys, task.commit.ms = 1000"
        )
        pair: dict[str, tuple[Container, noop.OutputWatch]] = {}
        for which, n in (("small", SMALL_KEYS), ("big", big)):
            label = f"{which} ({size_label(n)} keys)"
            res.labels[which] = label
            c = self.container(label, which, changelog_topic(n), n, INS[which], OUTS[which])
            c.start()
            pair[which] = (c, noop.OutputWatch(self.bs, OUTS[which], 1))
        try:
            for w, (c, _) in pair.items():
                m = c.wait_for(REPLAYED, "restore line")
                full = Restore(int(m.group(2)), float(m.group(3)), time.perf_counter() - c.started)
                if w == "big":  # a full restore of the largest changelog too: one more sample for (a)
                    res.restores[big].append(full)
                print(
                    f"  {c.label}: restored {full.records:,} records in {full.seconds:.2f} s ({full.rate:,.0f} records/s)"
                )
            self.flow = Flow(self.bs, list(INS.values()), args.write_rate)
            since = time.time() + args.warmup_s
            time.sleep(args.warmup_s + args.commit_s)
            until = time.time()
            time.sleep(1.5)  # the report that covers ``until``
            for w, (c, _) in pair.items():
                res.commits[w] = {}
                for timer in COMMIT_TIMERS:
                    s = res.commits[w][timer] = commit_stats(c.text(), since, until, timer)
                    print(
                        f"  {c.label:<16} {timer:<15}{s.commits:>4} commits in {args.commit_s:g} s; per report: "
                        f"mean {s.mean_ms:7.1f} ms, median {med(s.means_ms):7.1f} ms, largest "
                        f"{max(s.means_ms, default=float('nan')):7.1f} ms"
                    )
            print(f"  {size_label(big)}-key store files: {dir_bytes(self.workdir / 'stores' / 'big') / 2**20:,.0f} MiB")

            print(f"\n(b) host-affinity restart (SIGTERM, start again on the same store), {args.restarts} each")
            for rep in range(args.restarts):
                for w in list(pair) if rep % 2 == 0 else list(pair)[::-1]:
                    c, watch = pair[w]
                    r = restart_once(c, watch)
                    res.restarts.setdefault(w, []).append(r)
                    print(
                        f"  {c.label:<16} stop {r.stop_s:5.2f} s; start -> first output {r.first_output_s:5.2f} s; "
                        f"replayed {r.replayed}; checksums checked in {r.checked_s:.2f} s; {r.how}"
                    )
            self.flow.stop()
            for c, _ in pair.values():
                c.stop()
        finally:
            for _, watch in pair.values():
                watch.close()

    def close(self) -> None:
        if self.flow is not None:
            self.flow.stop()
        for c in self.containers:
            c.kill()


def report(res: Results, repeat: int) -> None:
    sizes = res.sizes
    base, big = sizes[0], sizes[-1]
    print(f"\n(a) medians of {repeat} rounds, records/s")
    per_head = f"per rec / {size_label(base)}"
    print(
        f"{'records':>10}{'restore':>12}{'plain poll':>12}{'plain batch':>13}{'/ poll':>8}{'/ batch':>9}{per_head:>16}"
    )

    def rate(n: int) -> float:
        return med([r.rate for r in res.restores[n]])

    for n in sizes:
        print(
            f"{size_label(n):>10}{rate(n):>12,.0f}{med(res.polls[n]):>12,.0f}{med(res.batches[n]):>13,.0f}"
            f"{rate(n) / med(res.polls[n]):>8.2f}{rate(n) / med(res.batches[n]):>9.2f}{rate(n) / rate(base):>16.2f}"
        )
    by_round = [a.rate / b.rate for a, b in zip(res.restores[big], res.restores[base], strict=False)]
    print(
        f"restore {size_label(big)} / {size_label(base)} per record: {rate(big) / rate(base):.2f} "
        f"(target >= {RESTORE_TARGET}; medians of {len(res.restores[big])} and {len(res.restores[base])} restores, "
        f"the largest's last one in (c); by round {', '.join(f'{x:.2f}' for x in by_round)})"
    )
    for timer in COMMIT_TIMERS if res.commits else ():
        s, b = res.commits["small"][timer], res.commits["big"][timer]
        if not s.commits or not b.commits:
            print(f"(c) {timer}: not reported by this samzamp")
            continue
        print(
            f"(c) {timer} {size_label(big)} / {size_label(SMALL_KEYS)} keys: mean {b.mean_ms:.1f} / {s.mean_ms:.1f} ms "
            f"= {b.mean_ms / s.mean_ms:.2f}; medians {med(b.means_ms):.1f} / {med(s.means_ms):.1f} ms = "
            f"{med(b.means_ms) / med(s.means_ms):.2f} (target <= {COMMIT_TARGET})"
        )
    for w, rs in res.restarts.items():
        print(
            f"(b) restart {res.labels[w]}: start -> first output {med([r.first_output_s for r in rs]):.2f} s "
            f"(median of {len(rs)}), replayed {max(r.replayed for r in rs)} at most, checksums checked in "
            f"{med([r.checked_s for r in rs]):.2f} s, stop {med([r.stop_s for r in rs]):.2f} s"
        )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000000,10000000", help="changelog records (distinct keys), comma-separated")
    ap.add_argument("--repeat", type=int, default=1, help="restore rounds (default 1); medians reported")
    ap.add_argument("--write-rate", type=float, default=2000, help="inputs/s to each container in (c) (default 2000)")
    ap.add_argument("--warmup-s", type=float, default=5.0, help="seconds of (c) not measured (default 5)")
    ap.add_argument("--commit-s", type=float, default=30.0, help="seconds of (c) measured (default 30)")
    ap.add_argument("--restarts", type=int, default=2, help="host-affinity restarts of each container (default 2)")
    ap.add_argument("--pool", type=int, default=0, help="job.container.thread.pool.size (default 0: inline)")
    ap.add_argument("--no-plain-poll-above", type=int, default=0, help="no plain poll above this size (0: always)")
    ap.add_argument("--quick", action="store_true", help="sizes 100k,1M, 1 round, 10 s of commits, 1 restart")
    args = ap.parse_args(argv)
    if args.quick:
        args.sizes, args.repeat, args.commit_s, args.warmup_s, args.restarts = "100000,1000000", 1, 10.0, 3.0, 1
    sizes = sorted(int(s) for s in args.sizes.split(","))
    noop.set_fetch_queue_backoff(10)
    cmd = " ".join([".venv/bin/python", "bench/scale_state.py", *(argv if argv is not None else sys.argv[1:])])
    t_start = time.monotonic()
    res = Results(sizes)

    broker = EmbeddedBroker(die_with_parent=True).start()
    bs = broker.bootstrap_servers
    broker_proc = psutil.Process(broker.process.pid) if broker.process is not None else None
    try:
        written = sorted({*sizes, SMALL_KEYS})
        topics = [changelog_topic(n) for n in written]
        noop.create_topics(bs, [*topics, IDLE_IN, IDLE_OUT, *INS.values(), *OUTS.values()], partitions=1)
        print(
            f"broker {bs} (tansu, memory only); cpus: {os.cpu_count()}; load average {os.getloadavg()[0]:.2f}; "
            f"sizes {', '.join(map(size_label, sizes))}; pool {args.pool}; {args.repeat} restore rounds"
        )
        for n in written:
            t = time.perf_counter()
            produce_changelog(bs, changelog_topic(n), n)
            rss = broker_proc.memory_info().rss / 2**30 if broker_proc is not None else float("nan")
            print(
                f"changelog {changelog_topic(n)}: {n:,} records written in {time.perf_counter() - t:.1f} s; "
                f"broker RSS now {rss:.2f} GiB; {shutil.disk_usage(tempfile.gettempdir()).free / 2**30:.0f} GiB "
                "free on the temp disk"
            )
        with tempfile.TemporaryDirectory(prefix="samzamp-bench-scale-state-") as tmp:
            bench = Bench(args, bs, Path(tmp), res)
            try:
                bench.restore_rounds()
                bench.commits_and_restarts()
            finally:
                bench.close()
    finally:
        broker.stop()
    report(res, args.repeat)
    print(f"\nbench/scale_state.py took {time.monotonic() - t_start:.0f} s; load average {os.getloadavg()[0]:.2f}")
    print(f"reproduce: {cmd}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
