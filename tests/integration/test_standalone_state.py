"""Standalone mode with state, against the real ZooKeeper and broker: host affinity.

Three processors at locations A, B and C, each with its own store directory (a location is a
machine), run a word count in a changelogged store (``StoreCountTask``, one changelog record per
message: stores.counts.write.batch.size = 1, so that what a task replays can be counted from its inputs). A task that comes back to its location reuses its local store and replays only the
changelog records written after the store's offset; a task that arrives at a location without its
store restores it from the changelog. The numbers of replayed records are asserted exactly, and the
counts at the end against the input.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest
from kafka_util import counts_store, create_topic, produce, produced_offsets, read_all, records, wait_until
from standalone_util import InputFlow, Processor, ZkView, moved, standalone_config
from test_state import _store_contents
from test_state_survives_restarts import _produced, _word_counts

from samzamp.storage.dirs import store_dir, task_dir_name
from samzamp.storage.offset_file import read_offset_file

pytestmark = pytest.mark.integration

PARTITIONS = 8
LOCATIONS = ("A", "B", "C")
TASK_OF = {p: f"Partition {p}" for p in range(PARTITIONS)}
PARTITION_OF = {t: p for p, t in TASK_OF.items()}
RESTORED = re.compile(
    r"store 'counts' of task '([^']+)': (?:full restore|local store at offset (-?\d+) \(host affinity\)); "
    r"replayed (\d+) changelog records"
)


class Job:
    """The counting job of one test: its config, topics, store directories and processors."""

    def __init__(self, tmp_path: Path, unique: str, bootstrap: str, zk_connect: str, debounce_ms: int) -> None:
        self.bootstrap = bootstrap
        self.topic = f"in-{unique}"
        self.changelog = f"counts-log-{unique}"
        self.name = f"ha-{unique}"
        self.tmp = tmp_path
        create_topic(bootstrap, self.topic, PARTITIONS)
        self.cfg, self.rec = standalone_config(
            tmp_path,
            self.name,
            self.topic,
            zk_connect,
            debounce_ms=debounce_ms,
            task_class="recording_tasks:StoreCountTask",
            extra=counts_store(f"kafka.{self.changelog}", write_batch_size=1),
            top='"job.host-affinity.enabled" = true',
        )
        self.view = ZkView(zk_connect, self.name)

    def state(self, location: str) -> Path:
        return self.tmp / f"state-{location}"

    def start(self, location: str, run: int, pid: str | None = None, *overrides: str) -> Processor:
        """A processor at ``location`` with that location's store directory (``pid`` None: generated)."""
        return Processor(
            self.cfg,
            self.bootstrap,
            pid,
            location,
            f"job.logged.store.base.dir={self.state(location)}",
            *overrides,
            run=run,
        )

    def homes(self) -> dict[str, str]:
        """Task -> the location of its processor in the newest job model."""
        latest = self.view.latest()
        assert latest is not None
        return {t: c.location_id for c in latest[1].containers.values() for t in c.tasks}

    def local_offset(self, location: str, task: str) -> int | None:
        """The changelog offset the task's local store at ``location`` is at (its OFFSET file), if any."""
        recorded = read_offset_file(store_dir(self.state(location), "counts", task))
        return None if recorded is None else recorded.offset

    def changelog_records(self, tasks: set[str]) -> dict[str, int]:
        """Task -> how many records its changelog partition holds."""
        latest = self.view.latest()
        assert latest is not None
        partitions = {latest[1].tasks[t].changelog_partition: t for t in tasks}
        held = Counter(m.partition() for m in read_all(self.bootstrap, self.changelog, sorted(partitions)))
        return {t: held[p] for p, t in partitions.items()}

    def processed(self) -> dict[str, int]:
        """Task -> how many distinct offsets of its partition were processed (over every run)."""
        seen = {(p, o) for _, p, o in records(self.rec)}
        per = Counter(TASK_OF[p] for p, _ in seen)
        return {t: per[t] for t in TASK_OF.values()}

    def wait_processed(self, written: int, processor: Processor) -> None:
        expected = {TASK_OF[p]: len(o) for p, o in produced_offsets(written, PARTITIONS).items()}
        wait_until(lambda: self.processed() == expected, 120, f"all {written} messages processed", processor)

    def check_final_counts(self, written: int) -> None:
        """Each task's store at its last location holds the exact word counts of its partition, and
        every message was processed exactly once (clean stops: a restart resumes after the commit)."""
        homes = self.homes()
        stores: dict[str, dict[str, int]] = {}
        for location in set(homes.values()):
            local = _store_contents(self.state(location))
            stores.update({task_dir_name(t): local[task_dir_name(t)] for t, at in homes.items() if at == location})
        assert stores == _word_counts(_produced(PARTITIONS, written), {p: task_dir_name(t) for p, t in TASK_OF.items()})
        repeated = [k for k, n in Counter((p, o) for _, p, o in records(self.rec)).items() if n > 1]
        assert not repeated, f"processed twice: {repeated[:10]}"


def restores(p: Processor, since: int = 0) -> list[tuple[str, int | None, int]]:
    """(task, local store offset or None for a full restore, records replayed) of each store the
    processor opened, in order, from the ``since``-th on."""
    return [
        (task, int(local) if local else None, int(replayed)) for task, local, replayed in RESTORED.findall(p.log_text())
    ][since:]


def test_rolling_restart_brings_every_task_back_to_its_location_with_nothing_to_replay(
    broker, zookeeper, unique, tmp_path: Path
) -> None:
    """Each processor in turn is stopped (SIGTERM) and started again at its location, with a new
    generated processor id, as a user who does not set processor.id restarts a machine's processor;
    input keeps arriving throughout.

    The debounce time decides whether a task comes back: when a processor leaves, the leader waits
    job.debounce.time.ms for the processors to stay unchanged before it computes a job model; if it
    computed one while the processor was away, the processor's tasks would move to the others, run
    there (writing their locality) and stay. So the debounce time must exceed a processor's restart
    (its exit plus its start-up until it registers: a few seconds here); the test keeps the default
    of 20 s and checks that each restart made exactly one new job model version. Meanwhile the
    stopped processor's tasks run nowhere, so their changelogs do not grow: each local store is at
    its changelog's end and its task replays exactly 0 records, however much input arrived.

    Only the first job model, before any restart, comes sooner: A starts first, leads, and forms the
    job with a debounce of 3 s (time for B and C to register) instead of waiting 20 s more. A is
    also the first to restart, and its restart comes back at the default: every restart is debounced
    by a leader at 20 s (B for A's, C for B's, the restarted A for C's), as with no override at all.
    """
    job = Job(tmp_path, unique, broker.bootstrap_servers, zookeeper.connect_string, debounce_ms=20_000)
    flow = InputFlow(broker.bootstrap_servers, job.topic, PARTITIONS, batch=16, pause_s=0.1)
    try:
        procs = {"A": job.start("A", 0, None, "job.debounce.time.ms=3000")}
        wait_until(lambda: "leads the job now" in procs["A"].log_text(), 60, "A to lead", procs["A"])
        procs.update({loc: job.start(loc, 0) for loc in LOCATIONS[1:]})
        version, _ = job.view.wait_stable(list(procs.values()), timeout=120)
        homes = job.homes()
        assert sorted(Counter(homes.values()).values()) == [2, 3, 3]
        wait_until(lambda: all(job.processed().values()), 60, "every task to count something", procs["A"])
        for run, location in enumerate(LOCATIONS, start=1):
            tasks = {t for t, at in homes.items() if at == location}
            assert procs[location].stop() == 0, procs[location].log_text()[-3000:]
            # Stopped cleanly: each store holds (and its OFFSET file says) every message its task
            # processed, one changelog record each, and the changelog holds nothing more.
            offsets = {t: job.local_offset(location, t) for t in tasks}
            processed = job.processed()
            assert {t: o + 1 for t, o in offsets.items() if o is not None} == {t: processed[t] for t in tasks}
            assert job.changelog_records(tasks) == {t: processed[t] for t in tasks}
            procs[location] = job.start(location, run)
            again, owners = job.view.wait_stable(list(procs.values()), timeout=120)
            assert again == version + 1, (
                f"the leader published {again - version} job models for one restart at {location}: the "
                "processor came back later than job.debounce.time.ms, so its tasks moved meanwhile"
            )
            version = again
            assert job.homes() == homes, f"after the restart at {location} tasks run elsewhere"
            assert owners[procs[location].pid] == tasks
            assert sorted(restores(procs[location])) == sorted((t, offsets[t], 0) for t in tasks)
        written = flow.stop()
        job.wait_processed(written, procs["A"])
        for p in procs.values():
            assert p.stop() == 0, p.log_text()[-3000:]
        job.check_final_counts(written)
    finally:
        flow.stop()
        job.view.close()


def test_a_moved_task_restores_its_changelog_and_one_that_returns_replays_only_its_tail(
    broker, zookeeper, unique, tmp_path: Path
) -> None:
    """C stops for good: its tasks move to A and B, where they have no local store, and restore all
    of their changelogs. More input arrives; then C starts again at its location, and the balance
    gives it back tasks whose stores it still has from before: each replays exactly the changelog
    records its task wrote while it ran elsewhere. The other tasks never restore again. The input
    stops before each move, so each changelog's end is known when its task restores."""
    job = Job(tmp_path, unique, broker.bootstrap_servers, zookeeper.connect_string, debounce_ms=500)
    first, second = 400, 560
    produce(broker.bootstrap_servers, job.topic, PARTITIONS, first)
    try:
        procs = {loc: job.start(loc, 0, pid=f"p{loc}") for loc in LOCATIONS}
        _, owners = job.view.wait_stable(list(procs.values()))
        homes = job.homes()
        job.wait_processed(first, procs["A"])
        opened = {loc: len(restores(p)) for loc, p in procs.items()}
        assert opened == {loc: len(owners[f"p{loc}"]) for loc in LOCATIONS}

        left = {t for t, at in homes.items() if at == "C"}
        assert procs["C"].stop() == 0, procs["C"].log_text()[-3000:]
        stale = {t: job.local_offset("C", t) for t in left}
        _, after = job.view.wait_stable([procs["A"], procs["B"]])
        assert moved(owners, after) == len(left)  # only C's tasks move
        total = job.changelog_records(left)
        assert total == {t: job.processed()[t] for t in left}
        arrived = [r for loc in ("A", "B") for r in restores(procs[loc], opened[loc])]
        assert sorted(arrived) == sorted((t, None, total[t]) for t in left), "a moved task must restore in full"
        opened = {loc: len(restores(procs[loc])) for loc in ("A", "B")}

        produce(broker.bootstrap_servers, job.topic, PARTITIONS, second, start=first)
        job.wait_processed(first + second, procs["A"])
        procs["C"] = job.start("C", 1, pid="pC")
        _, back = job.view.wait_stable(list(procs.values()))
        gained = back["pC"]
        assert len(gained) == 2
        ends = job.changelog_records(gained)
        assert ends == {t: job.processed()[t] for t in gained}
        expected = []
        for t in gained:
            local = stale.get(t)
            expected.append((t, local, ends[t] if local is None else ends[t] - local - 1))
        assert sorted(restores(procs["C"])) == sorted(expected)
        assert any(t in stale for t in gained), "the balance gave C none of its former tasks: nothing shows a tail"
        for t in gained & set(stale):
            assert 0 < ends[t] - stale[t] - 1 < ends[t]  # a tail: neither nothing nor everything
        assert {loc: len(restores(procs[loc])) for loc in ("A", "B")} == opened, "a task that stayed restored again"
        assert job.homes() == {t: "C" if t in gained else at for t, at in after_homes(after, procs).items()}
        for p in procs.values():
            assert p.stop() == 0, p.log_text()[-3000:]
        job.check_final_counts(first + second)
    finally:
        job.view.close()


def after_homes(owners: dict[str, set[str]], procs: dict[str, Processor]) -> dict[str, str]:
    """Task -> location, from an assignment by processor id."""
    location = {p.pid: loc for loc, p in procs.items()}
    return {t: location[pid] for pid, ts in owners.items() for t in ts}
