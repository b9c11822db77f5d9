"""Helpers for tests against the real embedded broker: topics, producing, reading, running containers."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from samzamp.commit.checkpoint import Checkpoint, decode_checkpoint, decode_key
from samzamp.systems.kafka.codes import PARTITION_EOF

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(timeout=30)
    deadline = time.monotonic() + 15
    while name not in admin.list_topics(timeout=5).topics:
        assert time.monotonic() < deadline, f"topic {name} never appeared"
        time.sleep(0.05)


def produce(bootstrap: str, topic: str, partitions: int, count: int, start: int = 0) -> None:
    """``count`` string messages "m<i>" spread round-robin over the partitions."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(start, start + count):
        p.produce(topic, f"m{i}".encode(), str(i).encode(), partition=i % partitions)
        if i % 5000 == 0:
            p.poll(0)
    assert p.flush(30) == 0


def produced_offsets(count: int, partitions: int) -> dict[int, set[int]]:
    """Partition -> the offsets ``produce`` wrote ``count`` messages to (round robin over partitions)."""
    per: dict[int, set[int]] = {p: set() for p in range(partitions)}
    for i in range(count):
        per[i % partitions].add(i // partitions)
    return per


def seed_input(bootstrap: str, topic: str, partitions: int, count: int) -> None:
    """A new input topic holding ``count`` messages (see ``produce``)."""
    create_topic(bootstrap, topic, partitions)
    produce(bootstrap, topic, partitions, count)


def read_all(bootstrap: str, topic: str, partitions: list[int]) -> list[Any]:
    """Every record of the partitions, from the oldest to the end. The embedded broker can serve a
    read that skips a batch (ARCHITECTURE.md, skipped records): a read whose offsets have a hole is
    made again, so that a record missing from what this returns is missing from the topic."""
    for _ in range(3):
        out, ends = _read_once(bootstrap, topic, partitions)
        seen: dict[int, set[int]] = defaultdict(set)
        for m in out:
            seen[m.partition()].add(m.offset())
        if all(len(seen[p]) == end for p, end in ends.items()):  # offsets 0 to end - 1, each once
            break
    return out


def _read_once(bootstrap: str, topic: str, partitions: list[int]) -> tuple[list[Any], dict[int, int]]:
    """One read of the partitions to their ends: the records, and each partition's end offset."""
    # Quick to the end, as KafkaSystemAdmin.read_all: the topic's leaders learnt before assign()
    # (else librdkafka queries the oldest offset 500 ms late: samzamp.systems.kafka.assign), an
    # empty fetch answered after 10 ms (fetch.wait.max.ms, 500 by default), and consume(n, t),
    # which waits for n messages or t, taking what is there and blocking only for one.
    c = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "test-read", "enable.partition.eof": True, "fetch.wait.max.ms": 10}
    )
    c.list_topics(topic, timeout=10)
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
    out = []
    ends: dict[int, int] = {}
    deadline = time.monotonic() + 60
    try:
        while len(ends) < len(partitions):
            assert time.monotonic() < deadline, f"reading {topic} did not reach its end"
            for m in c.consume(5000, 0) or c.consume(1, 0.5):
                err = m.error()
                if err is None:
                    out.append(m)
                elif err.code() == PARTITION_EOF:
                    ends[m.partition()] = m.offset()
    finally:
        c.close()
    return out, ends


def end_offsets(bootstrap: str, topic: str, partitions: list[int]) -> dict[int, int]:
    """Each partition's end (high watermark), found as samzamp finds it: by reading to the
    end-of-partition event, which says it right on Tansu, unlike ListOffsets (ARCHITECTURE.md)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "test-end", "enable.partition.eof": True})
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
    out: dict[int, int] = {}
    deadline = time.monotonic() + 60
    try:
        while len(out) < len(partitions):
            assert time.monotonic() < deadline, f"reading {topic} did not reach its end"
            for m in c.consume(5000, 0.5):
                err = m.error()
                if err is not None and err.code() == PARTITION_EOF:
                    out[m.partition()] = m.offset()
    finally:
        c.close()
    return out


def read_checkpoints(bootstrap: str, job: str, job_id: str = "1") -> list[tuple[str, dict[int, int]]]:
    """Every checkpoint record in topic order, as (task name, {partition: offset})."""
    return [
        (cp.task_name, {o.partition: o.offset for o in cp.input_offsets})
        for cp in read_checkpoint_records(bootstrap, job, job_id)
    ]


def read_checkpoint_records(bootstrap: str, job: str, job_id: str = "1") -> list[Checkpoint]:
    """Every checkpoint record in topic order, decoded (offsets and state markers)."""
    topic = f"__samza_checkpoint_ver_1_for_{job}_{job_id}"
    out = []
    for m in read_all(bootstrap, topic, [0]):
        key = decode_key(m.key())
        assert key is not None
        out.append(decode_checkpoint(key.task_name, m.value()))
    return out


def child_env() -> dict[str, str]:
    """The environment of a samzamp command run by a test: the test tasks importable."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), str(ROOT), env.get("PYTHONPATH", "")])
    return env


def write_config(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


class Container:
    """``bin/samzamp-container`` as a subprocess with the test tasks importable."""

    started: ClassVar[list[Container]] = []  # killed after each test if still running (conftest)

    def __init__(
        self,
        config: Path,
        bootstrap: str,
        *overrides: str,
        log: Path | None = None,
        wrapper: Sequence[str] = (),
        args: Sequence[str] = (),
    ) -> None:
        """``wrapper``: a command that runs the container as its arguments (e.g. in other namespaces).
        ``args``: more command-line arguments (``--log-format json``)."""
        env = child_env()
        argv = [
            *wrapper,
            sys.executable,
            "-m",
            "samzamp.cli.container",
            str(config),
            "--set",
            f"systems.kafka.bootstrap.servers={bootstrap}",
        ]
        for o in overrides:
            argv += ["--set", o]
        argv += args
        self.log = log
        out = open(log, "ab") if log else subprocess.DEVNULL  # noqa: SIM115
        try:
            self.proc = subprocess.Popen(argv, env=env, stdout=out, stderr=out, cwd=str(ROOT))
            Container.started.append(self)
        finally:
            if log:
                out.close()  # the child has its own copy

    def wait_started(self, timeout: float = 120) -> None:
        """Until its tasks started (it logged their starting offsets): from then on SIGTERM stops it
        cleanly; before its signal handlers are installed, SIGTERM kills it. Needs ``log``."""
        assert self.log is not None, "wait_started reads the container's log: give it one"
        wait_until(lambda: "starting offsets" in self.log_text(), timeout, "the container to start its tasks", self)

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)

    def stop(self, timeout: float = 60) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=timeout)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log_text(self) -> str:
        """Its log so far. While it runs, whole lines only: a line it is still writing (a JSON
        metrics report, a multi-byte character) is read once it is whole."""
        if not (self.log and self.log.exists()):
            return ""
        data = self.log.read_bytes()
        if self.proc.poll() is None:
            data = data[: data.rfind(b"\n") + 1]
        return data.decode()


def run_drain(config: Path, bootstrap: str, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """``bin/samzamp-drain config --set systems.kafka.bootstrap.servers=... *args``, output captured."""
    env = child_env()
    cmd = [
        sys.executable,
        "-m",
        "samzamp.cli.drain",
        str(config),
        "--set",
        f"systems.kafka.bootstrap.servers={bootstrap}",
    ]
    return subprocess.run(
        [*cmd, *args], env=env, cwd=str(ROOT), capture_output=True, text=True, timeout=timeout, check=False
    )


def wait_until(cond: Callable[[], bool], timeout: float, what: str, container: Container | None = None) -> None:
    """Poll ``cond`` (a condition on files or topics written by another process) until it holds."""
    deadline = time.monotonic() + timeout
    while not cond():
        if container is not None and not container.alive():
            raise AssertionError(
                f"container exited ({container.proc.returncode}) while waiting for {what}:\n{container.log_text()[-3000:]}"
            )
        if time.monotonic() > deadline:
            tail = container.log_text()[-3000:] if container else ""
            raise AssertionError(f"timed out waiting for {what}\n{tail}")
        time.sleep(0.05)


def job_toml(job: str, task_class: str, input_topic: str, record_dir: Path, extra: str = "", top: str = "") -> str:
    return f"""
test.record.dir = "{record_dir}"
{top}

[job]
name = "{job}"
default.system = "kafka"

[task]
class = "{task_class}"
inputs = ["kafka.{input_topic}"]
commit.ms = 300

[systems.kafka]
samza.factory = "kafka"
default.stream.samza.offset.default = "oldest"

[streams.{input_topic}]
samza.key.serde = "string"
samza.msg.serde = "string"

[metrics]
log.interval.ms = 0
{extra}
"""


def counts_store(changelog: str, write_batch_size: int | None = None) -> str:
    """The TOML of the store "counts" (string keys, long values) the state tests' tasks count in,
    changelogged to ``changelog`` (system.stream); ``write_batch_size``: its
    stores.counts.write.batch.size (1: one changelog record per write), None for the default."""
    batch = "" if write_batch_size is None else f"write.batch.size = {write_batch_size}\n"
    return f"""
[stores.counts]
factory = "lmdb"
changelog = "{changelog}"
key.serde = "string"
msg.serde = "long"
{batch}"""


class _RecordFile:
    """One record file as far as it was read. The tasks append whole lines (one ``os.write`` of
    each, O_APPEND) and never rewrite one, so each read takes only what was appended since the
    last, up to its last complete line: a test that polls its records every 50 ms reads each byte
    once, instead of re-reading (and re-parsing) every file each time while its containers run."""

    def __init__(self, ident: tuple[int, int]) -> None:
        self.ident = ident  # (st_dev, st_ino): a file replaced under the same name is read anew
        self.pos = 0
        self.lines: list[str] = []
        self.heads: dict[str, int] = {}  # the word before a line's first space -> how many lines
        self.triples: list[tuple[str, int, int]] = []  # the lines of three words, parsed (records)
        self.parsed = 0  # how many of ``lines`` ``triples`` has seen
        self.by_parser: dict[str, list[Any]] = {}  # parsed_lines: every line, parsed by the parser named

    def parse(self) -> list[tuple[str, int, int]]:
        for line in self.lines[self.parsed :]:
            parts = line.split()
            if len(parts) == 3:
                self.triples.append((parts[0], int(parts[1]), int(parts[2])))
            self.parsed += 1
        return self.triples


_record_files: dict[Path, _RecordFile] = {}


def _record_file(path: Path) -> _RecordFile:
    """``path``'s complete lines so far, reading only what was appended since the last call."""
    st = os.stat(path)
    rf = _record_files.get(path)
    if rf is None or rf.ident != (st.st_dev, st.st_ino) or st.st_size < rf.pos:
        rf = _record_files[path] = _RecordFile((st.st_dev, st.st_ino))
    if st.st_size > rf.pos:
        with open(path, "rb") as fh:
            fh.seek(rf.pos)
            data = fh.read()
        end = data.rfind(b"\n") + 1  # a line still being written is read once it is whole
        new = data[:end].decode().splitlines()
        rf.pos += end
        rf.lines += new
        for line in new:
            head, space, _ = line.partition(" ")
            if space:
                rf.heads[head] = rf.heads.get(head, 0) + 1
    return rf


def whole_lines(path: Path) -> list[str]:
    """The complete lines of the record file ``path`` so far: a line another process is still
    writing is left out until it is whole (read incrementally, so a poll costs only what is new)."""
    return _record_file(path).lines


def parsed_lines(path: Path, name: str, parse: Callable[[str], Any]) -> list[Any]:
    """Every complete line of the record file ``path``, parsed by ``parse`` (each line once: the
    parsed lines are kept under ``name``, which stands for ``parse``)."""
    rf = _record_file(path)
    done = rf.by_parser.setdefault(name, [])
    done += [parse(line) for line in rf.lines[len(done) :]]
    return done


def forget_record_files() -> None:
    """Drop what was read of record files (after each test: conftest)."""
    _record_files.clear()


def records(record_dir: Path, kinds: str = "P") -> list[tuple[str, int, int]]:
    """(kind, a, b) lines of every record file in ``record_dir`` (all runs)."""
    out = []
    for f in sorted(record_dir.glob("*.log")):
        out += [t for t in _record_file(f).parse() if t[0] in kinds]
    return out


class NewLines:
    """The lines starting with ``prefix`` added to the record files of ``record_dir`` since the last
    call (the first call: every one so far), for a poll that builds on what it saw before."""

    def __init__(self, record_dir: Path, prefix: str) -> None:
        self._dir = record_dir
        self._prefix = prefix
        self._taken: dict[Path, int] = {}

    def __call__(self) -> list[str]:
        out = []
        for f in sorted(self._dir.glob("*.log")):
            lines = _record_file(f).lines
            out += [line for line in lines[self._taken.get(f, 0) :] if line.startswith(self._prefix)]
            self._taken[f] = len(lines)
        return out


class NewRecords:
    """The (kind, a, b) lines of ``kinds`` added to the record files of ``record_dir`` since the
    last call (the first call: every one so far), for a poll that builds on what it saw before."""

    def __init__(self, record_dir: Path, kinds: str = "P") -> None:
        self._dir = record_dir
        self._kinds = kinds
        self._taken: dict[Path, int] = {}

    def __call__(self) -> list[tuple[str, int, int]]:
        out = []
        for f in sorted(self._dir.glob("*.log")):
            triples = _record_file(f).parse()
            out += [t for t in triples[self._taken.get(f, 0) :] if t[0] in self._kinds]
            self._taken[f] = len(triples)
        return out


def count_lines(record_dir: Path, prefix: str = "P ") -> int:
    """How many lines of the record files in ``record_dir`` start with ``prefix``."""
    head, space, rest = prefix.partition(" ")
    n = 0
    for f in record_dir.glob("*.log"):
        rf = _record_file(f)
        if space and not rest:  # "K ": a line's first word, counted as it was read
            n += rf.heads.get(head, 0)
        else:
            n += sum(1 for line in rf.lines if line.startswith(prefix))
    return n


def starting_offsets(log: str) -> dict[tuple[str, int], int]:
    """Where a container started each task's reading of each input partition, from the "starting
    offsets" line of its ``log``: (task as record files name it, partition) -> the next offset, 0 for
    'oldest'."""
    line = next(x for x in log.splitlines() if "starting offsets" in x)
    found = re.findall(r"'([^':]+): SystemStreamPartition \[[^,\]]+, [^,\]]+, (\d+)[^\]]*\]': (\d+|'oldest')", line)
    return {(task.replace(" ", "_"), int(p)): 0 if o == "'oldest'" else int(o) for task, p, o in found}


def checkpointed_past(record_dir: Path, files_before: set[Path], starts: dict[tuple[str, int], int]) -> bool:
    """Whether a task recorded (a ``K`` line, in a record file not in ``files_before``) a checkpoint
    that covers a message at or past where it started (``starts``, of ``starting_offsets``): the run
    checkpointed progress of its own, which the checkpoint a task writes at start (its restored
    position) is not."""
    for f in set(record_dir.glob("*.log")) - files_before:
        task = f.name.rsplit(".", 2)[0]
        for line in whole_lines(f):
            kind, *rest = line.split()
            if kind == "K" and int(rest[-1]) >= starts.get((task, int(rest[0])), 0):
                return True
    return False
