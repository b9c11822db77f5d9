"""Against the real broker: state that no restart destroys. A lost checkpoint topic keeps the
stores; an input with more partitions keeps its tasks and their changelog partitions; a task's
changelog partition never changes, whatever the inputs do between restarts."""

from __future__ import annotations

import random
import re
import shutil
import struct
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient
from kafka_util import (
    ROOT,
    Container,
    child_env,
    count_lines,
    create_topic,
    read_all,
    seed_input,
    wait_until,
)
from test_state import _store_contents, _store_toml

from samzamp.coordinator.metadata_store import decode_coordinator_key
from samzamp.coordinator.task_history import CHANGELOG_NAMESPACE, SSP_NAMESPACE

pytestmark = pytest.mark.integration

WORDS = 37


def _config(tmp_path: Path, unique: str, topic: str, task: str) -> tuple[Path, Path, Path, str]:
    """test_state's counting job (store "counts", job "state-<unique>") and its changelog topic."""
    cfg, rec, state = _store_toml(tmp_path, unique, topic, task)
    return cfg, rec, state, f"counts-log-{unique}"


def _delete_topic(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.delete_topics([topic])[topic].result(timeout=30)
    deadline = time.monotonic() + 15
    while topic in admin.list_topics(timeout=5).topics:
        assert time.monotonic() < deadline, f"topic {topic} was never deleted"
        time.sleep(0.05)


def _word_counts(messages: dict[int, list[int]], task_of: dict[int, str]) -> dict[str, dict[str, int]]:
    """StoreCountTask's counts: message "m<i>" of input partition p counts word w<i % 37> in task_of[p]."""
    per: dict[str, Counter[str]] = {t: Counter() for t in task_of.values()}
    for p, indexes in messages.items():
        for i in indexes:
            per[task_of[p]][f"w{i % WORDS}"] += 1
    return {t: dict(c) for t, c in per.items()}


def _produced(partitions: int, count: int, start: int = 0) -> dict[int, list[int]]:
    """Input partition -> message indexes ``kafka_util.produce`` sent there."""
    out: dict[int, list[int]] = {p: [] for p in range(partitions)}
    for i in range(start, start + count):
        out[i % partitions].append(i)
    return out


def _dumps(rec: Path, known: set[Path]) -> dict[str, dict[str, int]]:
    """Task dir name -> the store as it was restored at init, from the complete dumps not in ``known``."""
    out = {}
    for f in set(rec.glob("*.state")) - known:
        lines = f.read_text().splitlines()
        if lines and lines[-1] == "END":
            out[f.name.rsplit(".", 2)[0]] = {k: int(v) for k, v in (line.split() for line in lines[:-1])}
    return out


def _changelog(bootstrap: str, topic: str, partitions: int) -> dict[int, list[tuple[bytes, bytes | None]]]:
    out: dict[int, list[tuple[bytes, bytes | None]]] = {p: [] for p in range(partitions)}
    for m in read_all(bootstrap, topic, list(range(partitions))):
        out[m.partition()].append((m.key(), m.value()))
    return out


def _history_records(bootstrap: str, coordinator: str) -> list[tuple[tuple[str, str] | None, bytes]]:
    """The task history records of a coordinator stream, in order."""
    out = []
    for m in read_all(bootstrap, coordinator, [0]):
        key = decode_coordinator_key(m.key())
        if key is not None and key[0] in (CHANGELOG_NAMESPACE, SSP_NAMESPACE):
            out.append((key, m.value()))
    return out


def _partition_count(bootstrap: str, topic: str) -> int:
    return len(AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10).topics[topic].partitions)


def _run(cfg: Path, broker, rec: Path, processed: int, log: Path, tasks: int, *overrides: str) -> str:
    """Run a container until ``tasks`` stores were restored (dumped) and ``processed`` messages were
    processed over all runs, then stop it cleanly; its log."""
    known = set(rec.glob("*.state"))
    c = Container(cfg, broker.bootstrap_servers, *overrides, log=log)
    wait_until(lambda: len(_dumps(rec, known)) >= tasks, 90, f"{tasks} stores restored", c)
    wait_until(lambda: count_lines(rec) >= processed, 120, f"{processed} processed", c)
    assert c.stop() == 0, c.log_text()[-3000:]
    return c.log_text()


@pytest.mark.parametrize(
    ("offset_default", "local_state", "pool"),
    [("upcoming", "kept", 1), ("oldest", "wiped", 1), ("upcoming", "wiped", 2), ("oldest", "kept", 2)],
    ids=["upcoming-local-inline", "oldest-changelog-inline", "upcoming-changelog-pool2", "oldest-local-pool2"],
)
def test_a_lost_checkpoint_topic_keeps_every_store(
    broker, unique, tmp_path: Path, offset_default: str, local_state: str, pool: int
) -> None:
    """The checkpoint topic is deleted while the job is stopped: the stores keep their state (from
    the local directory or the whole changelog), nothing is reverted, one warning per store."""
    parts, n = 4, 2_000
    topic = f"in-{unique}"
    seed_input(broker.bootstrap_servers, topic, parts, n)
    cfg, rec, state, changelog = _config(tmp_path, unique, topic, "StoreCountTask")
    pool_size = f"job.container.thread.pool.size={pool}"
    _run(cfg, broker, rec, n, tmp_path / "run-0.log", parts, pool_size)
    before = _store_contents(state)
    tasks = {p: f"Partition_{p}" for p in range(parts)}
    assert before == _word_counts(_produced(parts, n), tasks)
    records_before = sum(len(v) for v in _changelog(broker.bootstrap_servers, changelog, parts).values())

    _delete_topic(broker.bootstrap_servers, f"__samza_checkpoint_ver_1_for_state-{unique}_1")
    if local_state == "wiped":
        shutil.rmtree(state)
    known = set(rec.glob("*.state"))
    again = n if offset_default == "oldest" else 0
    log = _run(
        cfg,
        broker,
        rec,
        n + again,
        tmp_path / "run-1.log",
        parts,
        pool_size,
        f"systems.kafka.default.stream.samza.offset.default={offset_default}",
    )
    assert _dumps(rec, known) == before, "a store lost state at restore"
    for t in tasks.values():
        warning = rf"WARNING .*store 'counts' of task '{t.replace('_', ' ')}': no checkpoint records"
        assert len(re.findall(warning, log)) == 1, log[-3000:]
    # With "oldest" the inputs are processed again, on top of the kept state.
    assert _store_contents(state) == {t: {w: c * (2 if again else 1) for w, c in v.items()} for t, v in before.items()}
    after = _changelog(broker.bootstrap_servers, changelog, parts)
    assert all(v is not None for p in after.values() for _k, v in p), "a tombstone was written to the changelog"
    if not again:
        assert sum(len(v) for v in after.values()) == records_before, "a restart that processed nothing wrote"


@pytest.mark.parametrize(("old", "new", "pool"), [(4, 6, 1), (10, 12, 2)], ids=["4to6-inline", "10to12-pool2"])
def test_more_input_partitions_join_the_old_tasks_and_keep_their_state(
    broker, unique, tmp_path: Path, old: int, new: int, pool: int
) -> None:
    """The input is recreated with more partitions: with expansion (the default) partition p joins
    task p % old, every old count is intact and continues, and each task writes only to its own
    changelog partition."""
    n1, n2 = 50 * old, 30 * new
    topic = f"in-{unique}"
    seed_input(broker.bootstrap_servers, topic, old, n1)
    cfg, rec, state, changelog = _config(tmp_path, unique, topic, "StoreCountTask")
    pool_size = f"job.container.thread.pool.size={pool}"
    _run(cfg, broker, rec, n1, tmp_path / "run-0.log", old, pool_size)
    tasks = {p: f"Partition_{p}" for p in range(old)}
    before = _store_contents(state)
    assert before == _word_counts(_produced(old, n1), tasks)

    _delete_topic(broker.bootstrap_servers, topic)
    seed_input(broker.bootstrap_servers, topic, new, n2)
    known = set(rec.glob("*.state"))
    log = _run(cfg, broker, rec, n1 + n2, tmp_path / "run-1.log", old, pool_size)
    assert _dumps(rec, known) == before, "an old count was lost or moved at restore"
    assert sorted(f"Partition_{p}" for p in range(old)) == sorted(d.name for d in (state / "counts").iterdir())
    grown = _word_counts(_produced(new, n2), {p: tasks[p % old] for p in range(new)})
    expected = {t: dict(Counter(before[t]) + Counter(grown[t])) for t in tasks.values()}
    assert _store_contents(state) == expected
    # The changelog still has one partition per task, and each holds its own task's counts.
    assert _partition_count(broker.bootstrap_servers, changelog) == old
    for p, entries in _changelog(broker.bootstrap_servers, changelog, old).items():
        latest = {k.decode(): struct.unpack(">q", v)[0] for k, v in entries if v is not None}
        assert latest == expected[tasks[p]], f"changelog partition {p} holds another task's records"
    assert re.search(rf"SystemStreamPartition \[kafka, {topic}, {old}\].* joined task 'Partition 0'", log), log[-3000:]


def test_more_input_partitions_without_expansion_and_too_small_a_changelog_stop_the_start(
    broker, unique, tmp_path: Path
) -> None:
    """Without expansion the new partitions are new tasks; a changelog without partitions for them
    is an error (exit 2) before anything is restored or written."""
    topic = f"in-{unique}"
    seed_input(broker.bootstrap_servers, topic, 4, 400)
    cfg, rec, state, changelog = _config(tmp_path, unique, topic, "StoreCountTask")
    _run(cfg, broker, rec, 400, tmp_path / "run-0.log", 4)
    changelog_before = _changelog(broker.bootstrap_servers, changelog, 4)
    coordinator = f"__samza_coordinator_state-{unique}_1"
    history_before = _history_records(broker.bootstrap_servers, coordinator)
    assert len(history_before) == 8  # 4 tasks' changelog partitions, 4 SSPs' tasks
    checkpoints = f"__samza_checkpoint_ver_1_for_state-{unique}_1"
    checkpoints_before = len(read_all(broker.bootstrap_servers, checkpoints, [0]))

    _delete_topic(broker.bootstrap_servers, topic)
    seed_input(broker.bootstrap_servers, topic, 6, 600)
    done = subprocess.run(
        [sys.executable, "-m", "samzamp.cli.container", str(cfg), "--set",
         f"systems.kafka.bootstrap.servers={broker.bootstrap_servers}", "--set",
         "job.systemstreampartition.input.expansion.enabled=false"],
        env=child_env(), cwd=str(ROOT), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr[-3000:]
    line = done.stderr.strip().splitlines()[-1]
    assert f"stores.counts.changelog: changelog topic kafka.{changelog} of store 'counts' has 4 partitions" in line
    assert "needs 6" in line, line
    assert "'Partition 4'" in line, line
    assert "Add partitions" in line, line
    assert _changelog(broker.bootstrap_servers, changelog, 4) == changelog_before
    assert _history_records(broker.bootstrap_servers, coordinator) == history_before
    assert len(read_all(broker.bootstrap_servers, checkpoints, [0])) == checkpoints_before
    assert count_lines(rec) == 400


def test_a_task_never_restores_another_tasks_records_over_twenty_restarts(broker, unique, tmp_path: Path) -> None:
    """Twenty starts, each on a new input with 3 to 12 partitions (tasks added and removed): every
    task finds exactly its own keys at restore, with exact counts, also past "Partition 9"."""
    rng = random.Random(15)
    cfg, rec, state, changelog = _config(tmp_path, unique, f"in-{unique}-0", "TaskKeyCountTask")
    create_topic(broker.bootstrap_servers, changelog, 12)  # the operator made room for 12 tasks
    totals: Counter[str] = Counter()  # "<task>|<partition>" -> messages processed
    processed = 0
    for run in range(20):
        parts = rng.randint(3, 12) if run else 12
        topic = f"in-{unique}-{run}"
        seed_input(broker.bootstrap_servers, topic, parts, 5 * parts)
        known = set(rec.glob("*.state"))
        processed += 5 * parts
        pool = 2 if run % 4 == 3 else 1
        _run(cfg, broker, rec, processed, tmp_path / f"run-{run}.log", parts,
             f"task.inputs=kafka.{topic}", f"streams.{topic}.samza.key.serde=string",
             f"streams.{topic}.samza.msg.serde=string", f"job.container.thread.pool.size={pool}")  # fmt: skip
        restored = _dumps(rec, known)
        assert len(restored) == parts
        for task, store in restored.items():
            own = f"{task}|{task.split('_')[1]}"  # task "Partition_p" reads partition p only
            assert store == ({own: totals[own]} if totals[own] else {}), f"run {run}: {task} restored {store}"
        for p in range(parts):
            totals[f"Partition_{p}|{p}"] += 5


@pytest.mark.parametrize("pool", [1, 2], ids=["inline", "pool2"])
def test_a_kill_before_the_first_timed_commit_reverts_what_the_run_wrote(
    broker, unique, tmp_path: Path, pool: int
) -> None:
    """A task with stores checkpoints its starting cut before its first message, so a kill before
    its first timed commit still has a checkpoint: the restart reverts the run's writes instead of
    keeping them as state without a checkpoint, and reprocessing does not count anything twice."""
    parts, n = 4, 2_000
    topic = f"in-{unique}"
    seed_input(broker.bootstrap_servers, topic, parts, n)
    cfg, rec, state, changelog = _config(tmp_path, unique, topic, "StoreCountTask")
    pool_size = f"job.container.thread.pool.size={pool}"
    # Each write goes to the changelog at once, so the run leaves writes there before any commit.
    each = "stores.counts.write.batch.size=1"
    c = Container(cfg, broker.bootstrap_servers, pool_size, each, "task.commit.ms=600000", log=tmp_path / "run-0.log")
    wait_until(lambda: count_lines(rec) >= n // 2, 60, "half processed", c)
    written = lambda: sum(len(v) for v in _changelog(broker.bootstrap_servers, changelog, parts).values())  # noqa: E731
    wait_until(lambda: written() >= n // 4, 60, "changelog writes", c)
    c.kill()
    log = _run(cfg, broker, rec, count_lines(rec) + n, tmp_path / "run-1.log", parts, pool_size, each)
    assert "no checkpoint records" not in log
    assert _store_contents(state) == _word_counts(_produced(parts, n), {p: f"Partition_{p}" for p in range(parts)})
