"""Helpers for standalone-mode tests: a job's processors as processes, input that keeps flowing,
what ZooKeeper says each processor owns, the ownership evidence the tasks write, and the word
counts of a counting job against its input."""

from __future__ import annotations

import functools
import re
import struct
import threading
from collections import Counter, defaultdict
from pathlib import Path
from typing import NamedTuple

from kafka_util import Container, job_toml, parsed_lines, produce, read_all, wait_until, write_config

from samzamp.coordinator.zk import job_models
from samzamp.coordinator.zk.client import connect
from samzamp.coordinator.zk.keys import ZkKeys
from samzamp.model.job_model import JobModel

APPLIED = re.compile(r"job model version (\d+) applied by processor (\S+): (\d+) tasks")
REGISTERED = re.compile(r"processor (\S+) at location (\S+) registered as")


def standalone_config(
    tmp_path: Path,
    job: str,
    topic: str,
    zk_connect: str,
    *,
    session_ms: int = 4000,
    debounce_ms: int = 300,
    consensus_ms: int = 20000,
    task_class: str = "recording_tasks:OwnershipTask",
    extra: str = "",
    top: str = "",
) -> tuple[Path, Path]:
    """A zk job reading ``topic``; its record directory. ``top``: keys before the first table."""
    rec = tmp_path / "rec"
    rec.mkdir(exist_ok=True)
    zk = f"""
[job.coordinator]
factory = "zk"
zk.connect = "{zk_connect}"
zk.session.timeout.ms = {session_ms}
zk.connection.timeout.ms = 20000
zk.consensus.timeout.ms = {consensus_ms}

[job.debounce]
time.ms = {debounce_ms}
{extra}
"""
    return write_config(tmp_path / "job.toml", job_toml(job, task_class, topic, rec, extra=zk, top=top)), rec


class Processor(Container):
    """``samzamp-container`` as processor ``pid`` at location ``location`` (its log: <tmp>/<pid>-<n>.log).
    ``pid`` None: the processor generates its id, as when processor.id is not set (its log:
    <tmp>/<location>-<n>.log); ``pid`` is then None until it registered."""

    def __init__(
        self, config: Path, bootstrap: str, pid: str | None, location: str, *overrides: str, run: int = 0
    ) -> None:
        self._pid = pid
        self.location = location
        given = (f"processor.id={pid}",) if pid is not None else ()
        super().__init__(
            config,
            bootstrap,
            *given,
            f"processor.location.id={location}",
            *overrides,
            log=config.parent / f"{pid or location}-{run}.log",
        )

    @property
    def pid(self) -> str | None:
        """Its processor id: as given, else the one it generated, once it registered."""
        if self._pid is None:
            m = REGISTERED.search(self.log_text())
            if m is not None:
                self._pid = m.group(1)
        return self._pid

    def applied(self) -> list[int]:
        """The job model versions this processor applied, in order."""
        return [int(m.group(1)) for m in APPLIED.finditer(self.log_text()) if m.group(2) == self.pid]


class InputFlow:
    """Messages keep arriving at every partition of ``topic`` (``batch`` at a time) until ``stop``."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, batch: int = 40, pause_s: float = 0.05) -> None:
        self.count = 0
        self._stop = threading.Event()
        self._args = (bootstrap, topic, partitions, batch, pause_s)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        bootstrap, topic, partitions, batch, pause_s = self._args
        while not self._stop.is_set():
            produce(bootstrap, topic, partitions, batch, start=self.count)
            self.count += batch
            self._stop.wait(pause_s)

    def stop(self) -> int:
        """Stop producing; how many messages were written."""
        self._stop.set()
        self._thread.join(timeout=60)
        return self.count


class ZkView:
    """What ZooKeeper says of a job: its published job models."""

    def __init__(self, connect_string: str, job: str, job_id: str = "1") -> None:
        self.client = connect(connect_string, 10000, 10000)
        self.keys = ZkKeys(job, job_id)

    def close(self) -> None:
        self.client.stop()
        self.client.close()

    def latest(self) -> tuple[int, JobModel] | None:
        version = job_models.read_version(self.client, self.keys)
        if version is None:
            return None
        return version, job_models.read_job_model(self.client, self.keys, version)

    def wait_stable(
        self, processors: list[Processor], timeout: float = 90, after: int = 0
    ) -> tuple[int, dict[str, set[str]]]:
        """Until the newest version (one newer than ``after``) gives tasks to exactly ``processors``
        and each applied it; that version and what each owns in it."""
        found: list[tuple[int, JobModel]] = []

        def stable() -> bool:
            for p in processors:
                if not p.alive():
                    raise AssertionError(f"processor {p.pid} exited ({p.proc.returncode}):\n{p.log_text()[-3000:]}")
            latest = self.latest()
            if latest is None:
                return False
            version, model = latest
            if version <= after or set(model.containers) != {p.pid for p in processors}:
                return False
            if not all(version in p.applied() for p in processors):
                return False
            found[:] = [latest]
            return True

        wait_until(stable, timeout, f"processors {[p.pid for p in processors]} to apply one job model")
        version, model = found[0]
        return version, {pid: set(c.tasks) for pid, c in model.containers.items()}


def moved(before: dict[str, set[str]], after: dict[str, set[str]]) -> int:
    """How many tasks changed owner between two assignments."""
    owner_before = {t: p for p, ts in before.items() for t in ts}
    return sum(1 for p, ts in after.items() for t in ts if owner_before.get(t) != p)


class Record(NamedTuple):
    processor: str
    partition: int
    offset: int
    start_ns: int
    end_ns: int
    file: str
    instance: str  # the task object that wrote it: one tenure of the task in one processor


def ownership_records(rec: Path) -> list[Record]:
    """Every ``O`` line of every record file (``OwnershipTask``); each line is parsed once, however
    often a test polls (``parsed_lines``)."""
    out = []
    for f in sorted(rec.glob("*.log")):
        out += parsed_lines(f, "ownership", functools.partial(_ownership_record, f.name))
    return out


def _ownership_record(file: str, line: str) -> Record:
    kind, proc, partition, offset, start, end, instance = line.split()
    assert kind == "O"
    return Record(proc, int(partition), int(offset), int(start), int(end), file, instance)


def check_ownership(records: list[Record]) -> None:
    """Within each tenure (one task object in one processor) offsets only grow, and no two
    processors ever processed one task's messages at the same time."""
    by_tenure: dict[str, list[Record]] = defaultdict(list)
    for r in records:
        by_tenure[r.instance].append(r)
    for name, rows in by_tenure.items():
        offsets = [r.offset for r in rows]
        assert offsets == sorted(set(offsets)), f"{name}: offsets repeated or out of order"
    by_partition: dict[int, list[Record]] = defaultdict(list)
    for r in records:
        by_partition[r.partition].append(r)
    for partition, rows in by_partition.items():
        rows.sort(key=lambda r: r.start_ns)
        for a, b in zip(rows, rows[1:], strict=False):
            if a.processor != b.processor:
                assert a.end_ns <= b.start_ns, (
                    f"partition {partition}: {a.processor} processed offset {a.offset} until {a.end_ns} while "
                    f"{b.processor} had started offset {b.offset} at {b.start_ns}"
                )


def missing_offsets(records: list[Record], written: int, partitions: int) -> list[tuple[int, int]]:
    """(partition, offset) of the messages ``produce`` wrote (``written`` of them, round robin) that no
    record shows processed."""
    seen = {(r.partition, r.offset) for r in records}
    per = defaultdict(int)
    for i in range(written):
        per[i % partitions] += 1
    return sorted((p, o) for p, n in per.items() for o in range(n) if (p, o) not in seen)


WORDS = 37  # message "m<i>" is word "w<i % 37>" (StoreCountTask, OwnershipCountTask)


def changelog_counts(bootstrap: str, changelog: str, model: JobModel) -> dict[str, dict[str, int]]:
    """Task -> word -> count in the store "counts" as its changelog ends: the stores' committed
    state once their processors stopped cleanly (a transactional restore reverts in the changelog
    what a task wrote past its checkpoint). ``model``: where each task's changelog partition is."""
    task_of = {t.changelog_partition: name for name, t in model.tasks.items()}
    counts: dict[str, dict[str, int]] = {name: {} for name in task_of.values()}
    for m in read_all(bootstrap, changelog, sorted(task_of)):
        store = counts[task_of[m.partition()]]
        if m.value() is None:
            store.pop(m.key().decode(), None)
        else:
            store[m.key().decode()] = struct.unpack(">q", m.value())[0]
    return counts


def input_counts(written: int, partitions: int) -> dict[str, dict[str, int]]:
    """Task -> word -> count of the ``written`` messages ``produce`` wrote (round robin)."""
    per: dict[str, Counter[str]] = {f"Partition {p}": Counter() for p in range(partitions)}
    for i in range(written):
        per[f"Partition {i % partitions}"][f"w{i % WORDS}"] += 1
    return {t: dict(c) for t, c in per.items()}
