"""The Spark offline jobs against the real broker: changelog compaction and bulk store restore.

One changelog of three partitions (tasks "Partition 0..2"), written in two phases with overwrites,
tombstones and records after each task's checkpointed cut; a snapshot is taken between the phases.
Spark runs in local mode: one session shared by the module, and each CLI once as a subprocess (the
two that run Spark jobs side by side, started once the changelog is written).
"""

from __future__ import annotations

import itertools
import logging
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, ConfigResource
from kafka_util import ROOT, create_topic, read_all

from samzamp.api.envelope import SystemStreamPartition
from samzamp.api.errors import ConfigError
from samzamp.commit.topic_checkpoint import TopicCheckpointManager
from samzamp.config import load_config
from samzamp.config.settings import checkpoint_topic_name
from samzamp.offline.compaction import SNAPSHOT_META, compact_changelog, read_snapshot_meta
from samzamp.offline.job import StoreJob, read_cuts, resolve_store
from samzamp.offline.restore import TaskRestore, restore_stores, restore_task
from samzamp.offline.spark_session import StageLog, progress_log, spark_session
from samzamp.storage.dirs import StoreLockedError, lock_store_dir, unlock_store_dir
from samzamp.storage.lmdb import LmdbEngine
from samzamp.storage.offset_file import read_offset_file, write_offset_file
from samzamp.systems.kafka import KafkaSystemAdmin, KafkaSystemProducer

pytestmark = pytest.mark.integration

_ids = itertools.count()
STORE = "counts"
BIN = b"\x00\xff\x00"  # values are bytes, not text

# (key, value or None) per partition, in offset order; offsets count from 0 within each partition.
PHASE_1 = {
    0: [(b"a", b"1"), (b"b", b"1"), (b"c", b"1"), (b"a", b"2"), (b"b", None)],  # offsets 0-4
    1: [(b"g", b"1"), (b"h", b"1"), (b"g", None)],  # offsets 0-2
    2: [],
}
PHASE_2 = {
    # cut 8: after it, a is overwritten, c deleted, b (deleted before the cut) written again, f is new
    0: [(b"c", b"2"), (b"d", BIN), (b"e", b"1"), (b"e", None), (b"a", b"3"), (b"c", None), (b"b", b"2"), (b"f", b"1")],
    # cut 4: g comes back after its tombstone; h is deleted after the cut
    1: [(b"g", b"2"), (b"h", b"2"), (b"h", None)],
    2: [(b"k", b"1"), (b"k", b"2"), (b"m", b"1")],
}
CUTS = {"Partition 0": 8, "Partition 1": 4, "Partition 2": -1}  # task 2's checkpoint has no marker for the store
AT_CUT = {
    "Partition 0": [(b"a", b"2"), (b"c", b"2"), (b"d", BIN)],
    "Partition 1": [(b"g", b"2"), (b"h", b"2")],
    "Partition 2": [],
}
TASKS = ("Partition 0", "Partition 1", "Partition 2")


@dataclass
class Setup:
    bootstrap: str
    config: Path
    changelog: str
    job: StoreJob
    snapshot_a: Path  # compacted after phase 1: ends at or before every cut
    snapshot_a_line: str
    tmp: Path


def _produce(bootstrap: str, topic: str, records: dict[int, list[tuple[bytes, bytes | None]]], first: dict[int, int]):
    """Write in batches of two (several record batches per partition); check the offsets the broker gave."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    got: list[tuple[int, int]] = []

    def on_delivery(err: Any, msg: Any) -> None:
        assert err is None, err
        got.append((msg.partition(), msg.offset()))

    expected = []
    for partition, recs in records.items():
        for i, (key, value) in enumerate(recs):
            producer.produce(topic, value, key, partition=partition, on_delivery=on_delivery)
            expected.append((partition, first[partition] + i))
            if i % 2 == 1:
                assert producer.flush(30) == 0
    assert producer.flush(30) == 0
    assert sorted(got) == sorted(expected)


def _config_text(job: str, input_topic: str, changelog: str, bootstrap: str, base: Path) -> str:
    return f"""
[job]
name = "{job}"
default.system = "kafka"
logged.store.base.dir = "{base}"

[task]
class = "samzamp.examples.word_count:WordCount"
inputs = ["kafka.{input_topic}"]

[systems.kafka]
samza.factory = "kafka"
bootstrap.servers = "{bootstrap}"

[stores.{STORE}]
factory = "lmdb"
changelog = "kafka.{changelog}"
key.serde = "string"
msg.serde = "string"
"""


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    session = spark_session("local[2]", "samzamp-offline-tests")
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture(scope="module")
def setup(broker: Any, spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Setup:
    n = next(_ids)
    bootstrap = broker.bootstrap_servers
    job_name, input_topic, changelog = f"offline-{n}-{os.getpid()}", f"offline-in-{n}", f"offline-changelog-{n}"
    tmp = tmp_path_factory.mktemp("offline")
    create_topic(bootstrap, input_topic, 3)  # 3 input partitions: tasks "Partition 0..2"
    create_topic(bootstrap, changelog, 3)
    config = tmp / "job.toml"
    config.write_text(_config_text(job_name, input_topic, changelog, bootstrap, tmp / "state"))
    job = resolve_store(load_config(config), STORE)

    _produce(bootstrap, changelog, PHASE_1, {0: 0, 1: 0, 2: 0})
    snapshot_a = tmp / "snapshot-a"
    line = compact_changelog(spark, job, snapshot_a).summary_line()
    _produce(bootstrap, changelog, PHASE_2, {p: len(r) for p, r in PHASE_1.items()})

    admin = KafkaSystemAdmin(job.source.kafka)
    producer = KafkaSystemProducer(job.source.kafka)
    manager = TopicCheckpointManager(admin, producer, checkpoint_topic_name(job_name, "1"), "GroupByPartition")
    manager.create_topic()
    try:
        for task, markers in [
            ("Partition 0", {STORE: "3"}),  # an older checkpoint of task 0: the newest below wins
            ("Partition 0", {STORE: "8"}),
            ("Partition 1", {STORE: "4", "other": "99"}),
            ("Partition 2", {"other": "5"}),
            ("Partition 7", {STORE: "1"}),  # a task the job does not have
        ]:
            partition = int(task.split()[1])
            manager.write_checkpoint(task, {SystemStreamPartition("kafka", input_topic, partition): 0}, markers)
    finally:
        producer.stop()
    return Setup(bootstrap, config, changelog, job, snapshot_a, line, tmp)


def _counts(line: str) -> dict[str, str]:
    return dict(word.split("=", 1) for word in shlex.split(line) if "=" in word)


def _job_with_base(s: Setup, base: Path) -> StoreJob:
    return resolve_store(load_config(s.config, {"job.logged.store.base.dir": str(base)}), STORE)


def _store_content(base: Path, task: str) -> tuple[list[tuple[bytes, bytes]], int | None, Any]:
    path = base / STORE / task.replace(" ", "_")
    engine = LmdbEngine(path)
    try:
        return list(engine.items()), engine.changelog_offset(), read_offset_file(path)
    finally:
        engine.close()


def _assert_restored_at_cuts(s: Setup, base: Path) -> None:
    for i, task in enumerate(TASKS):
        items, lmdb_offset, offset_file = _store_content(base, task)
        assert items == AT_CUT[task], task  # deleted keys stay deleted; nothing after the cut is applied
        assert lmdb_offset == CUTS[task]
        assert offset_file is not None
        assert (offset_file.changelog, offset_file.offset) == (f"kafka.{s.changelog}.{i}", CUTS[task])


def _cli(module: str, *args: str) -> list[str]:
    return [sys.executable, "-m", f"samzamp.cli.{module}", *args]


def _cli_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def _run_cli(module: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        _cli(module, *args), cwd=str(cwd), capture_output=True, text=True, timeout=300, env=_cli_env()
    )


class Started:
    """The module's two Spark commands, started side by side as soon as the data is in place (each
    starts a JVM of its own; neither reads what the other writes), each awaited by its test."""

    def __init__(self, s: Setup) -> None:
        self._tmp = s.tmp
        self._procs: dict[str, subprocess.Popen[str]] = {}
        self.compacted, self.compacted_topic = s.tmp / "snapshot-b", f"{s.changelog}-compacted"
        self.restored = s.tmp / "state-snapshot"
        self._start(
            "compact", "compact_changelog", str(s.config), "--store", STORE, "--output", str(self.compacted),
            "--to-topic", self.compacted_topic, "--master", "local[2]",
        )  # fmt: skip
        self._start(
            "restore", "restore_stores", str(s.config), "--store", STORE, "--snapshot", str(s.snapshot_a),
            "--master", "local[2]", "--set", f"job.logged.store.base.dir={self.restored}",
        )  # fmt: skip

    def _start(self, name: str, module: str, *args: str) -> None:
        # Output to files, not pipes: a command must never block on a full pipe nobody reads yet.
        with open(self._tmp / f"{name}.out", "w") as out, open(self._tmp / f"{name}.err", "w") as err:
            self._procs[name] = subprocess.Popen(
                _cli(module, *args), cwd=str(self._tmp), stdout=out, stderr=err, text=True, env=_cli_env()
            )

    def result(self, name: str) -> subprocess.CompletedProcess[str]:
        proc = self._procs[name]
        code = proc.wait(timeout=300)
        out, err = (self._tmp / f"{name}.out").read_text(), (self._tmp / f"{name}.err").read_text()
        return subprocess.CompletedProcess(proc.args, code, out, err)

    def stop(self) -> None:
        for proc in self._procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()


@pytest.fixture(scope="module", autouse=True)
def started(setup: Setup) -> Iterator[Started]:
    commands = Started(setup)
    try:
        yield commands
    finally:
        commands.stop()


def test_cuts_come_from_each_tasks_newest_checkpoint(setup: Setup) -> None:
    assert read_cuts(setup.job) == CUTS
    assert [(t.task_name, t.partition) for t in setup.job.tasks] == [(t, i) for i, t in enumerate(TASKS)]


def test_snapshot_between_phases(setup: Setup, spark: Any) -> None:
    assert _counts(setup.snapshot_a_line) == {
        "store": STORE,
        "changelog": f"kafka.{setup.changelog}",
        "partitions": "3",
        "records_read": "8",
        "keys_kept": "3",
        "tombstones_dropped": "2",  # b in partition 0, g in partition 1
        "superseded": "3",
    }
    meta = read_snapshot_meta(setup.snapshot_a)
    assert (meta.topic, {p: e.end for p, e in meta.partitions.items()}) == (setup.changelog, {0: 5, 1: 3, 2: 0})
    rows = sorted(tuple(r) for r in spark.read.parquet(str(setup.snapshot_a)).collect())
    assert rows == [(0, b"a", b"2", 3), (0, b"c", b"1", 2), (1, b"h", b"1", 1)]


def test_compaction_cli_counts_parquet_and_compacted_topic(setup: Setup, spark: Any, started: Started) -> None:
    out, to_topic = started.compacted, started.compacted_topic
    r = started.result("compact")
    assert r.returncode == 0, r.stderr[-3000:]
    lines = r.stdout.strip().splitlines()
    assert len(lines) == 1, r.stdout
    assert _counts(lines[0]) == {
        "store": STORE,
        "changelog": f"kafka.{setup.changelog}",
        "partitions": "3",
        "records_read": "22",
        "keys_kept": "7",
        "tombstones_dropped": "3",  # c and e in partition 0, h in partition 1
        "superseded": "12",
        "to_topic": to_topic,
        "records_written": "7",
    }
    live = [
        (0, b"d", BIN, 6), (0, b"a", b"3", 9), (0, b"b", b"2", 11), (0, b"f", b"1", 12),
        (1, b"g", b"2", 3),
        (2, b"k", b"2", 1), (2, b"m", b"1", 2),
    ]  # fmt: skip
    assert sorted(tuple(r) for r in spark.read.parquet(str(out)).collect()) == sorted(live)
    assert (out / SNAPSHOT_META).exists()
    assert {p: e.end for p, e in read_snapshot_meta(out).partitions.items()} == {0: 13, 1: 6, 2: 3}

    # The compacted topic: same partitions, live records in their source order, created compacted.
    written = [(m.partition(), m.key(), m.value()) for m in read_all(setup.bootstrap, to_topic, [0, 1, 2])]
    assert sorted(written, key=lambda w: w[0]) == [(p, k, v) for p, k, v, _o in live]
    resource = ConfigResource("TOPIC", to_topic)
    admin = AdminClient({"bootstrap.servers": setup.bootstrap})  # held: the future needs a live client
    configs = admin.describe_configs([resource])[resource].result(30)
    assert configs["cleanup.policy"].value == "compact"

    # Compacted past task 0's and task 1's cuts: restoring from it is refused before Spark starts.
    r = _run_cli("restore_stores", str(setup.config), "--store", STORE, "--snapshot", str(out), cwd=setup.tmp)
    assert r.returncode == 2, r.stderr
    assert "past task 'Partition 0''s checkpointed cut 8" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    with pytest.raises(ConfigError, match="up to offset 12, past task 'Partition 0'"):
        restore_stores(spark, _job_with_base(setup, setup.tmp / "never"), CUTS, out)
    assert not (setup.tmp / "never").exists()


def test_restore_builds_every_store_at_its_cut(setup: Setup, spark: Any) -> None:
    base = setup.tmp / "state-restore"
    # A stale store of task 0, ahead of its checkpoint: wiped, not merged.
    stale = base / STORE / "Partition_0"
    engine = LmdbEngine(stale)
    engine.apply([(b"zzz", b"stale"), (b"a", b"stale")], changelog_offset=12)
    engine.close()
    write_offset_file(stale, f"kafka.{setup.changelog}.0", 12)

    job = _job_with_base(setup, base)
    result = restore_stores(spark, job, read_cuts(job))
    _assert_restored_at_cuts(setup, base)
    assert _counts(result.summary_line()) == {
        "store": STORE,
        "changelog": f"kafka.{setup.changelog}",
        "tasks": "3",
        "keys": "5",
        "snapshot_records": "0",
        "changelog_records": "14",  # offsets 0-8 of partition 0, 0-4 of partition 1, none of partition 2
        "tombstones": "3",
    }
    assert [(t.task_name, t.keys, t.changelog_records, t.tombstones) for t in result.tasks] == [
        ("Partition 0", 3, 9, 2),
        ("Partition 1", 2, 5, 1),
        ("Partition 2", 0, 0, 0),
    ]


def test_restore_cli_from_snapshot_taken_before_the_cuts(setup: Setup, started: Started) -> None:
    base = started.restored
    r = started.result("restore")
    assert r.returncode == 0, r.stderr[-3000:]
    _assert_restored_at_cuts(setup, base)  # the same stores as from the changelog alone
    lines = r.stdout.strip().splitlines()
    assert len(lines) == 4, r.stdout
    per_task = [_counts(line) for line in lines[:3]]
    assert [(c["task"], c["cut"], c["keys"], c["snapshot_records"], c["changelog_records"]) for c in per_task] == [
        ("Partition 0", "8", "3", "2", "4"),  # snapshot a@3, c@2; changelog offsets 5-8
        ("Partition 1", "4", "2", "1", "2"),  # snapshot h@1; changelog offsets 3-4
        ("Partition 2", "-1", "0", "0", "0"),
    ]
    summary = _counts(lines[3])
    assert (summary["keys"], summary["snapshot_records"], summary["changelog_records"], summary["tombstones"]) == (
        "5",
        "3",
        "6",
        "1",
    )


def test_restore_refuses_a_store_held_by_a_live_process(setup: Setup, spark: Any) -> None:
    base = setup.tmp / "state-locked"
    held = base / STORE / "Partition_1"
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys; from pathlib import Path; from samzamp.storage.dirs import lock_store_dir; "
         f"lock_store_dir(Path({str(held)!r})); print('locked', flush=True); sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=str(ROOT),
    )  # fmt: skip
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "locked"
        r = _run_cli(
            "restore_stores", str(setup.config), "--store", STORE, "--set", f"job.logged.store.base.dir={base}",
            cwd=setup.tmp,
        )  # fmt: skip
        assert r.returncode == 3, r.stderr
        assert len(r.stderr.strip().splitlines()) == 1
        assert "held by a live process" in r.stderr
        assert "Partition_1" in r.stderr
        with pytest.raises(StoreLockedError):
            restore_stores(spark, _job_with_base(setup, base), CUTS)
        assert sorted(p.name for p in (base / STORE).iterdir()) == ["Partition_1"]  # nothing else was written
        # A Spark task that finds its directory taken (after the driver's check) reports it, writes nothing.
        plan = TaskRestore("Partition 1", 1, 4, str(held))
        done = restore_task(setup.job.source, plan)
        assert done.locked
        assert done.error is not None
        assert "held by a live process" in done.error
        assert sorted(p.name for p in held.iterdir()) == ["LOCK"]
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=30)
        holder.stdout.close()  # type: ignore[union-attr]
    # Once the holder is gone, the same restore goes through.
    fd = lock_store_dir(held)  # (the kernel dropped the dead holder's lock)
    unlock_store_dir(fd)


def test_bad_arguments_exit_2(setup: Setup) -> None:
    r = _run_cli("restore_stores", str(setup.config), "--store", "nope", cwd=setup.tmp)
    assert r.returncode == 2
    assert r.stderr.strip() == (
        "samzamp restore-stores: config error: stores.nope: store 'nope' is not configured (stores.nope.factory); "
        "stores: counts"
    )
    r = _run_cli(
        "compact_changelog", str(setup.config), "--store", STORE, "--output", str(setup.snapshot_a), cwd=setup.tmp
    )
    assert r.returncode == 2
    assert "is not empty; pick a new directory or pass --overwrite" in r.stderr


def test_restore_task_reports_a_changelog_that_ends_before_the_cut(setup: Setup) -> None:
    path = setup.tmp / "state-short" / STORE / "Partition_2"
    done = restore_task(setup.job.source, TaskRestore("Partition 2", 2, 100, str(path)))
    assert not done.locked
    assert done.error is not None
    assert "ends at offset 3, but a checkpoint covers it up to offset 100" in done.error
    assert read_offset_file(path) is None  # the container will not trust it: it rebuilds from the changelog


def test_each_spark_stage_of_a_job_is_logged_once_when_it_finished(
    spark: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """Without a terminal an offline job says how far it got: a line per finished stage, naming
    its tasks; stages of jobs that ran before the log started are not its own."""
    spark.sparkContext.parallelize(range(10), 2).count()  # a job before: not logged
    caplog.set_level(logging.INFO, logger=progress_log.name)
    stages = StageLog(spark, poll_s=0.05).start()
    try:
        pairs = spark.sparkContext.parallelize(range(1000), 4).map(lambda x: (x % 7, 1))
        assert dict(pairs.reduceByKey(lambda a, b: a + b, 3).collect())[0] == 143
    finally:
        stages.stop()
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("spark stage")]
    tasks = sorted(int(m.group(1)) for line in lines if (m := re.search(r"; (\d+) tasks \(0 failed", line)))
    assert tasks == [3, 4], lines  # the map side's 4 tasks, the reduce side's 3, once each
