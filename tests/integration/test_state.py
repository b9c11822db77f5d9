"""Against the real broker: LMDB stores changelogged to Kafka, restored on start."""

from __future__ import annotations

import itertools
import json
import os
import random
import re
import shutil
import signal
import struct
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import Producer
from kafka_util import (
    Container,
    checkpointed_past,
    count_lines,
    counts_store,
    job_toml,
    produce,
    read_all,
    read_checkpoint_records,
    read_checkpoints,
    records,
    seed_input,
    starting_offsets,
    wait_until,
    whole_lines,
    write_config,
)

from samzamp.commit.checkpoint import Checkpoint
from samzamp.storage.lmdb import LmdbEngine
from samzamp.systems.kafka.embedded import EmbeddedBroker

pytestmark = pytest.mark.integration

PARTITIONS = 4
WORDS = 37


def _store_toml(tmp_path: Path, unique: str, topic: str, task: str) -> tuple[Path, Path, Path]:
    rec = tmp_path / "rec"
    rec.mkdir(exist_ok=True)
    state = tmp_path / "state"
    extra = counts_store(f"kafka.counts-log-{unique}")
    top = f'"job.logged.store.base.dir" = "{state}"'
    cfg = write_config(
        tmp_path / "job.toml", job_toml(f"state-{unique}", f"recording_tasks:{task}", topic, rec, extra, top)
    )
    return cfg, rec, state


def _store_contents(state: Path) -> dict[str, dict[str, int]]:
    """Task dir -> {key: value} of every local "counts" store (read with LMDB directly)."""
    out = {}
    for d in sorted((state / "counts").iterdir()):
        engine = LmdbEngine(d)
        try:
            out[d.name] = {k.decode(): struct.unpack(">q", v)[0] for k, v in engine.items()}
        finally:
            engine.close()
    return out


def _true_counts(n: int) -> dict[str, dict[str, int]]:
    per: dict[str, Counter[str]] = {f"Partition_{p}": Counter() for p in range(PARTITIONS)}
    for i in range(n):
        per[f"Partition_{i % PARTITIONS}"][f"w{i % WORDS}"] += 1
    return {t: dict(c) for t, c in per.items()}


def _replayed(log: str) -> list[int]:
    return [int(x) for x in re.findall(r"replayed (\d+) changelog records", log)]


def _run_until(cfg: Path, broker, rec: Path, n: int, log: Path, *overrides: str) -> str:
    """Run a container until ``n`` distinct offsets were processed (over all runs) and every task's
    store was opened, then stop it cleanly; returns its log."""
    c = Container(cfg, broker.bootstrap_servers, *overrides, log=log)
    wait_until(lambda: len(_replayed(c.log_text())) >= PARTITIONS, 60, "every store opened", c)
    wait_until(lambda: len({(p, o) for _, p, o in records(rec)}) >= n, 120, f"{n} processed", c)
    assert c.stop() == 0, c.log_text()[-3000:]
    return c.log_text()


def test_counts_continue_after_restart_and_a_full_replay_gives_the_same_state(broker, unique, tmp_path: Path) -> None:
    topic = f"in-{unique}"
    seed_input(broker.bootstrap_servers, topic, PARTITIONS, 4_000)
    cfg, rec, state = _store_toml(tmp_path, unique, topic, "StoreCountTask")
    _run_until(cfg, broker, rec, 4_000, tmp_path / "run-0.log")
    assert _store_contents(state) == _true_counts(4_000)

    produce(broker.bootstrap_servers, topic, PARTITIONS, 2_000, start=4_000)
    log = _run_until(cfg, broker, rec, 6_000, tmp_path / "run-1.log")
    assert _store_contents(state) == _true_counts(6_000)
    assert _replayed(log) == [0] * PARTITIONS, "host affinity: a clean stop leaves nothing to replay"

    # Without the local stores, the full replay of the changelog gives the same state.
    shutil.rmtree(state)
    log = _run_until(cfg, broker, rec, 6_000, tmp_path / "run-2.log")
    # Every record of every task's changelog: a word's count once per commit (write.batch.size).
    assert sum(_replayed(log)) == len(read_all(broker.bootstrap_servers, f"counts-log-{unique}", [0, 1, 2, 3]))
    assert _store_contents(state) == _true_counts(6_000)


def test_host_affinity_replays_only_what_was_written_after_the_recorded_offset(broker, unique, tmp_path: Path) -> None:
    topic = f"in-{unique}"
    seed_input(broker.bootstrap_servers, topic, PARTITIONS, 2_000)
    cfg, rec, state = _store_toml(tmp_path, unique, topic, "StoreCountTask")
    _run_until(cfg, broker, rec, 2_000, tmp_path / "run-0.log")
    # Move one task's local store back in time: keep a copy from now, run more, then put the copy back.
    saved = tmp_path / "saved"
    shutil.copytree(state / "counts" / "Partition_1", saved)
    produce(broker.bootstrap_servers, topic, PARTITIONS, 1_000, start=2_000)
    _run_until(cfg, broker, rec, 3_000, tmp_path / "run-1.log")
    shutil.rmtree(state / "counts" / "Partition_1")
    shutil.copytree(saved, state / "counts" / "Partition_1")
    log = _run_until(cfg, broker, rec, 3_000, tmp_path / "run-2.log")
    # Partition 1 processed 250 more messages in run 1, over all 37 words: its one commit (the clean
    # stop's) wrote each word's count once (write.batch.size), and exactly those records replay.
    replayed = dict(re.findall(r"store 'counts' of task 'Partition (\d)': .*?replayed (\d+) changelog", log))
    assert replayed == {"0": "0", "1": str(WORDS), "2": "0", "3": "0"}
    assert _store_contents(state) == _true_counts(3_000)


def test_deleted_keys_stay_deleted_after_restore(broker, unique, tmp_path: Path) -> None:
    topic = f"in-{unique}"
    n = 900
    seed_input(broker.bootstrap_servers, topic, PARTITIONS, n)
    cfg, rec, state = _store_toml(tmp_path, unique, topic, "StoreDeleteTask")
    expected = {f"k{i}" for i in range(n) if i % 3}

    def keys() -> set[str]:
        return {k for d in _store_contents(state).values() for k in d}

    _run_until(cfg, broker, rec, n, tmp_path / "run-0.log")
    assert keys() == expected
    shutil.rmtree(state)  # a full restore replays puts and tombstones
    log = _run_until(cfg, broker, rec, n, tmp_path / "run-1.log")
    assert sum(_replayed(log)) >= n
    assert keys() == expected


@pytest.mark.parametrize("pool", [1, 2], ids=["inline", "pool2"])
def test_sigkill_at_random_points_leaves_exact_counts(broker, unique, tmp_path: Path, pool: int) -> None:
    n, kills = 100_000, 5
    topic = f"in-{unique}"
    seed_input(broker.bootstrap_servers, topic, PARTITIONS, n)
    cfg, rec, state = _store_toml(tmp_path, unique, topic, "CheckpointedStoreCountTask")
    # 20 µs a message and a commit every 100 ms: a run writes a checkpoint after a few thousand
    # messages, however fast the machine, and the input outlasts the kills. Changelog writes reach
    # the broker within 5 ms, not at the 100 ms linger: a kill soon after a checkpoint leaves writes
    # past it in the changelog, for the restart to revert. A write batch of 8 keys (of 37 words a
    # task) sends records between commits, coalesced: the batch and the revert both meet the kills.
    overrides = (
        f"job.container.thread.pool.size={pool}",
        "test.busy.us=20",
        "task.commit.ms=100",
        "systems.kafka.producer.linger.ms=5",
        "stores.counts.write.batch.size=8",
    )
    rng = random.Random(4321)

    def processed() -> int:
        return count_lines(rec)

    started: list[dict[tuple[str, int], int]] = []
    for run in range(kills):
        files_before = set(rec.glob("*.log"))
        c = Container(cfg, broker.bootstrap_servers, *overrides, log=tmp_path / f"run-{run}.log")
        # Each run checkpoints progress of its own before it is killed (its tasks record checkpoints
        # as K lines), then goes on for a random 0.5-2.5% of the input, about a commit interval's
        # worth: the next run starts from a newer checkpoint, with a store whose changelog holds
        # writes past it, and the input lasts for every run.
        c.wait_started()
        starts = starting_offsets(c.log_text())
        started.append(starts)
        wait_until(lambda f=files_before, s=starts: checkpointed_past(rec, f, s), 120, f"run {run} checkpoint", c)
        target = processed() + rng.randint(n // 200, n // 40)
        wait_until(lambda t=target: processed() >= t, 120, f"run {run} progress", c)
        c.kill()
    _run_until(cfg, broker, rec, n, tmp_path / "final.log", *overrides)
    logs = "".join(f.read_text() for f in tmp_path.glob("*.log"))
    reverted = sum(int(x) for x in re.findall(r"reverted (\d+) uncommitted writes", logs))
    assert reverted > 0, "no kill left uncommitted changelog writes: the test did not exercise the revert"
    # The premise: each restart started from a newer checkpoint than the run before it.
    started.append(starting_offsets((tmp_path / "final.log").read_text()))
    assert all(a != b for a, b in itertools.pairwise(started)), started
    # Outputs may repeat after the kills; the state may not: every count is exact.
    assert _store_contents(state) == _true_counts(n)
    # And a restore from the changelog alone gives the same state.
    shutil.rmtree(state)
    _run_until(cfg, broker, rec, n, tmp_path / "restore.log", *overrides)
    assert _store_contents(state) == _true_counts(n)


@pytest.mark.parametrize("pool", [2], ids=["pool2"])
def test_counts_continue_in_worker_processes(broker, unique, tmp_path: Path, pool: int) -> None:
    topic = f"in-{unique}"
    seed_input(broker.bootstrap_servers, topic, PARTITIONS, 4_000)
    cfg, rec, state = _store_toml(tmp_path, unique, topic, "StoreCountTask")
    over = f"job.container.thread.pool.size={pool}"
    _run_until(cfg, broker, rec, 4_000, tmp_path / "run-0.log", over)
    assert _store_contents(state) == _true_counts(4_000)
    produce(broker.bootstrap_servers, topic, PARTITIONS, 2_000, start=4_000)
    log = _run_until(cfg, broker, rec, 6_000, tmp_path / "run-1.log", over)
    assert _replayed(log) == [0] * PARTITIONS
    assert _store_contents(state) == _true_counts(6_000)


def _restore_gauges(log: str) -> dict[str, tuple[int, int]]:
    """Task -> (counts-restored-records, counts-reverted-records) from the last metrics line that has them
    (the restored count is there while the restore runs, the reverted one once it ended)."""
    gauges: dict[str, tuple[int, int]] = {}
    for line in re.findall(r"metrics (\{.*\})$", log, re.MULTILINE):
        groups = json.loads(line)
        found = {
            g.removeprefix("TaskName-"): (m["counts-restored-records"], m["counts-reverted-records"])
            for g, m in groups.items()
            if "counts-reverted-records" in m
        }
        if found:
            gauges = found
    return gauges


@pytest.mark.parametrize("pool", [1, 2], ids=["inline", "pool2"])
def test_restore_gauges_are_reported_wherever_the_task_runs(broker, unique, tmp_path: Path, pool: int) -> None:
    """<store>-restored-records and -reverted-records are in the container's metrics for tasks in worker
    processes too, equal to what each task's restore logged."""
    topic = f"in-{unique}"
    seed_input(broker.bootstrap_servers, topic, PARTITIONS, 1_000)
    cfg, rec, state = _store_toml(tmp_path, unique, topic, "StoreCountTask")
    over = f"job.container.thread.pool.size={pool}"
    _run_until(cfg, broker, rec, 1_000, tmp_path / "run-0.log", over)
    shutil.rmtree(state)  # the next start restores every store in full from its changelog
    c = Container(cfg, broker.bootstrap_servers, over, "metrics.log.interval.ms=100", log=tmp_path / "run-1.log")
    wait_until(lambda: len(_restore_gauges(c.log_text())) >= PARTITIONS, 60, "restore gauges of every task", c)
    assert c.stop() == 0, c.log_text()[-3000:]
    log = c.log_text()
    replayed = dict(re.findall(r"store 'counts' of task '(Partition \d)': .*?replayed (\d+) changelog", log))
    assert len(replayed) == PARTITIONS
    # A full restore of every record the changelogs hold.
    assert sum(int(n) for n in replayed.values()) == len(
        read_all(broker.bootstrap_servers, f"counts-log-{unique}", list(range(PARTITIONS)))
    )
    assert _restore_gauges(log) == {task: (int(n), 0) for task, n in replayed.items()}


def _restored_states(rec: Path, pids: set[int] | None = None) -> dict[str, dict[str, int]]:
    """Task dir name -> the store as the task saw it at init, from its ``.state`` dump (complete ones)."""
    out = {}
    for f in rec.glob("*.state"):
        task, pid, _ = f.name.rsplit(".", 2)
        lines = f.read_text().splitlines()
        if (pids is None or int(pid) in pids) and lines and lines[-1] == "END":
            out[task] = {w: int(c) for w, c in (line.split() for line in lines[:-1])}
    return out


def _counts_at(checkpoint_offsets: dict[int, int]) -> dict[str, dict[str, int]]:
    """The true counts of each task over the inputs its checkpoint covers."""
    per: dict[str, Counter[str]] = {f"Partition_{p}": Counter() for p in range(PARTITIONS)}
    for p, last in checkpoint_offsets.items():
        for o in range(last + 1):
            per[f"Partition_{p}"][f"w{(o * PARTITIONS + p) % WORDS}"] += 1
    return {t: dict(c) for t, c in per.items()}


@pytest.mark.parametrize("pool", [1, 2], ids=["inline", "pool2"])
def test_a_restore_never_resurrects_writes_no_checkpoint_covers(broker, unique, tmp_path: Path, pool: int) -> None:
    """Writes after the last checkpoint (a killed run) must not come back, even through a later full
    restore whose cut lies past them: that needs the revert of uncommitted changelog writes."""
    n = 8_000
    topic = f"in-{unique}"
    job = f"state-{unique}"
    seed_input(broker.bootstrap_servers, topic, PARTITIONS, n)
    cfg, rec, state = _store_toml(tmp_path, unique, topic, "StoreCountTask")
    pool_size = f"job.container.thread.pool.size={pool}"
    # Run 1: killed mid-stream, leaving changelog writes that no checkpoint covers.
    c = Container(cfg, broker.bootstrap_servers, pool_size, "task.commit.ms=2000", log=tmp_path / "run-1.log")
    wait_until(lambda: count_lines(rec) >= n // 2, 120, "half processed", c)
    # Every task checkpointed before the kill, so what run 1 wrote after that is uncommitted: a task
    # with no checkpoint at all keeps the state its changelog holds (retain.existing.state), and a
    # commit round's checkpoints come out task by task, as each task's store writes become durable.
    wait_until(
        lambda: len({task for task, _ in read_checkpoints(broker.bootstrap_servers, job)}) >= PARTITIONS,
        60,
        "a checkpoint of every task",
        c,
    )
    c.kill()
    # Run 2: restores (reverting run 1's writes), processes a few messages, and stops at the third
    # message of some task: its final checkpoint covers far fewer inputs than run 1 had written.
    c = Container(cfg, broker.bootstrap_servers, pool_size, "test.shutdown.after=3", log=tmp_path / "run-2.log")
    assert c.proc.wait(timeout=60) == 0, c.log_text()[-3000:]
    last: dict[int, int] = {}
    for _task, offsets in read_checkpoints(broker.bootstrap_servers, job):
        last.update(offsets)
    # Run 3: no local state; a full restore to the last checkpoint. What the tasks see at init must be
    # exactly the counts of the inputs that checkpoint covers.
    shutil.rmtree(state)
    known = set(rec.glob("*.state"))
    c = Container(cfg, broker.bootstrap_servers, pool_size, "test.shutdown.after=1", log=tmp_path / "run-3.log")
    wait_until(lambda: len(set(rec.glob("*.state")) - known) >= PARTITIONS, 60, "restored stores", c)
    new_pids = {int(f.name.rsplit(".", 2)[1]) for f in set(rec.glob("*.state")) - known}
    wait_until(lambda: len(_restored_states(rec, new_pids)) >= PARTITIONS, 30, "state dumps", c)
    c.kill()
    assert _restored_states(rec, new_pids) == _counts_at(last)


def test_a_record_another_process_wrote_into_a_task_s_changelog_is_written_over_before_a_checkpoint_covers_it(
    broker, unique, tmp_path: Path
) -> None:
    """A processor frozen past its session and then continued delivers the changelog records its
    producer still held, after those of the task's new owner (test_fault_campaign finds them).
    Here such a record is written by hand: w5 = 999999 in Partition 1's changelog partition, past
    the task's own records. The task then writes other words only; its next commit must write w5's
    true count over the stranger's before its marker covers it, so that the restore of its last
    checkpoint, from the changelog alone, is exact."""
    n = 400
    topic = f"in-{unique}"
    seed_input(broker.bootstrap_servers, topic, PARTITIONS, n)
    cfg, rec, state = _store_toml(tmp_path, unique, topic, "CheckpointedStoreCountTask")
    pool = "job.container.thread.pool.size=2"
    c = Container(cfg, broker.bootstrap_servers, pool, log=tmp_path / "run-0.log")
    last = n // PARTITIONS - 1
    wait_until(
        lambda: {(p, last) for p in range(PARTITIONS)} <= {(p, o) for _, p, o in records(rec, "K")},
        60,
        "all checkpointed",
        c,
    )
    stranger = Producer({"bootstrap.servers": broker.bootstrap_servers})
    stranger.produce(f"counts-log-{unique}", struct.pack(">q", 999_999), b"w5", partition=1)
    assert stranger.flush(30) == 0
    more = [i for i in range(1000, 1040) if i % WORDS != 5]
    for i in more:
        stranger.produce(topic, f"m{i}".encode(), str(i).encode(), partition=1)
    assert stranger.flush(30) == 0
    end = last + len(more)
    wait_until(lambda: (1, end) in {(p, o) for _, p, o in records(rec, "K")}, 60, "the new input checkpointed", c)
    assert c.stop() == 0, c.log_text()[-3000:]
    said = rf"task 'Partition 1': changelog kafka\.counts-log-{unique}\.1 holds 1 record\(s\) it did not write, at "
    assert len(re.findall(rf"WARNING .*{said}offsets \d+ ", c.log_text())) == 1, c.log_text()[-3000:]
    truth = _true_counts(n)
    truth["Partition_1"] = dict(Counter(truth["Partition_1"]) + Counter(f"w{i % WORDS}" for i in more))
    assert _store_contents(state) == truth, "the live stores are not the true counts"
    shutil.rmtree(state)  # the changelog alone, to the last checkpoints
    _run_through(cfg, broker, rec, 0, tmp_path / "run-1.log", pool)
    assert _store_contents(state) == truth, "the stores restored from the changelog are not the true counts"


def test_spark_restore_leaves_nothing_for_the_container_to_replay(broker, unique, tmp_path: Path) -> None:
    """The offline restore builds every task's store at its checkpoint: the next container start
    trusts it (host affinity) and replays nothing, and the state is the job's."""
    topic = f"in-{unique}"
    seed_input(broker.bootstrap_servers, topic, PARTITIONS, 3_000)
    cfg, rec, state = _store_toml(tmp_path, unique, topic, "StoreDeleteTask")
    _run_until(cfg, broker, rec, 3_000, tmp_path / "run-0.log")
    before = _store_contents(state)
    shutil.rmtree(state)
    done = subprocess.run(
        [sys.executable, "-m", "samzamp.cli.restore_stores", str(cfg), "--store", "counts", "--set",
         f"systems.kafka.bootstrap.servers={broker.bootstrap_servers}"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert re.search(rf"restored store=counts .*tasks={PARTITIONS} ", done.stdout), done.stdout
    assert re.search(r"spark stage \d+ done: .*; \d+ tasks", done.stderr), done.stderr[-3000:]  # progress, no tty
    assert _store_contents(state) == before
    log = _run_until(cfg, broker, rec, 3_000, tmp_path / "run-1.log")
    assert _replayed(log) == [0] * PARTITIONS, log[-2000:]
    assert "full restore" not in log
    assert _store_contents(state) == before


def _run_through(cfg: Path, broker, rec: Path, n: int, log: Path, *overrides: str) -> str:
    """Run a container until every store is open and, in this run, the last of the first ``n``
    inputs of each partition was processed (none when ``n`` is 0), then stop it cleanly."""
    earlier = set(rec.glob("*.log"))
    ends = {(p, n // PARTITIONS - 1) for p in range(PARTITIONS)} if n else set()

    def done() -> bool:
        seen = set()
        for f in set(rec.glob("*.log")) - earlier:
            seen.update((int(p), int(o)) for _, p, o in (line.split() for line in whole_lines(f)))
        return ends <= seen

    c = Container(cfg, broker.bootstrap_servers, *overrides, log=log)
    wait_until(lambda: len(_replayed(c.log_text())) >= PARTITIONS, 60, "every store opened", c)
    wait_until(done, 120, f"the last of {n} inputs processed", c)
    assert c.stop() == 0, c.log_text()[-3000:]
    return c.log_text()


@pytest.mark.parametrize("pool", [1, 2], ids=["inline", "pool2"])
def test_a_changelog_that_cannot_be_written_fails_the_commit_even_with_producer_errors_dropped(
    broker, unique, tmp_path: Path, pool: int
) -> None:
    """The changelog lives on its own broker, which stops answering mid-run (SIGSTOP): its writes
    time out. task.drop.producer.errors=true covers outputs only, so the container must fail
    without ever checkpointing past the writes its changelog lacks (nor without store markers),
    and once the broker answers again a restart gives exact counts, also restored from the
    changelog alone."""
    n1, n2 = 2_000, 2_000
    topic = f"in-{unique}"
    job = f"cl-fail-{unique}"
    seed_input(broker.bootstrap_servers, topic, PARTITIONS, n1)
    rec = tmp_path / "rec"
    rec.mkdir()
    state = tmp_path / "state"
    with EmbeddedBroker(die_with_parent=True) as changelog_broker:
        extra = (
            counts_store(f"changelogs.counts-log-{unique}")
            + f"""
[systems.changelogs]
samza.factory = "kafka"
bootstrap.servers = "{changelog_broker.bootstrap_servers}"
producer.message.timeout.ms = 2000
"""
        )
        top = f'"job.logged.store.base.dir" = "{state}"\n"task.drop.producer.errors" = true'
        cfg = write_config(
            tmp_path / "job.toml", job_toml(job, "recording_tasks:StoreCountTask", topic, rec, extra, top)
        )
        over = f"job.container.thread.pool.size={pool}"
        # Run 1: every store committed with its markers.
        _run_through(cfg, broker, rec, n1, tmp_path / "run-1.log", over)
        assert _store_contents(state) == _true_counts(n1)
        run1_last = n1 // PARTITIONS - 1

        # Run 2: once the stores are restored, the changelog's broker stops answering; more input arrives.
        c = Container(cfg, broker.bootstrap_servers, over, log=tmp_path / "run-2.log")
        wait_until(lambda: len(_replayed(c.log_text())) >= PARTITIONS, 60, "every store opened", c)
        assert changelog_broker.process is not None
        os.kill(changelog_broker.process.pid, signal.SIGSTOP)
        try:
            produce(broker.bootstrap_servers, topic, PARTITIONS, n2, start=n1)
            try:
                c.proc.wait(timeout=90)
            except subprocess.TimeoutExpired:
                c.stop()  # it runs on: its final commit shows what it checkpoints meanwhile
                failed_by_itself = False
            else:
                failed_by_itself = True
        finally:
            os.kill(changelog_broker.process.pid, signal.SIGCONT)
        log = c.log_text()
        checkpoints = read_checkpoint_records(broker.bootstrap_servers, job)

        def brief(cp: Checkpoint) -> str:
            return f"{cp.task_name}: {sorted((s.partition, o) for s, o in cp.offsets().items())} {cp.state_markers}"

        without_markers = [brief(cp) for cp in checkpoints if "counts" not in cp.state_markers]
        assert not without_markers, (
            f"{len(without_markers)} checkpoints without store markers, first {without_markers[:3]}"
        )
        past = [brief(cp) for cp in checkpoints if max(cp.offsets().values(), default=-1) > run1_last]
        assert not past, f"{len(past)} checkpoints past inputs whose changelog writes failed, first {past[:3]}"
        assert failed_by_itself, log[-3000:]
        assert c.proc.returncode != 0, log[-3000:]
        assert "changelog writes failed" in log, log[-3000:]

        # Run 3: the broker answers again; every count is exact, with the local stores and without.
        _run_through(cfg, broker, rec, n1 + n2, tmp_path / "run-3.log", over)
        assert _store_contents(state) == _true_counts(n1 + n2)
        shutil.rmtree(state)
        _run_through(cfg, broker, rec, 0, tmp_path / "run-4.log", over)
        assert _store_contents(state) == _true_counts(n1 + n2)


@pytest.mark.parametrize("batch", [None, 1], ids=["default-batch", "batch1"])
def test_a_key_written_many_times_between_commits_reaches_the_changelog_once_and_restores_exactly(
    broker, unique, tmp_path: Path, batch: int | None
) -> None:
    """stores.<name>.write.batch.size: a key's writes that wait together go to the changelog as its
    newest one (Samza's CachedStore, Kafka Streams' record cache); 1 sends every write. Either way a
    full restore from the changelog gives the exact counts."""
    n = 4_000
    topic = f"in-{unique}"
    seed_input(broker.bootstrap_servers, topic, PARTITIONS, n)
    cfg, rec, state = _store_toml(tmp_path, unique, topic, "StoreCountTask")
    # No commit comes due while it runs: the only one is the final commit of the clean stop.
    sets = ["task.commit.ms=600000"] + ([] if batch is None else [f"stores.counts.write.batch.size={batch}"])
    _run_until(cfg, broker, rec, n, tmp_path / "run-0.log", *sets)
    assert _store_contents(state) == _true_counts(n)
    changelog = read_all(broker.bootstrap_servers, f"counts-log-{unique}", list(range(PARTITIONS)))
    per_partition = Counter(m.partition() for m in changelog)
    # Each task counted 1,000 inputs over all 37 words: 37 records (each word's final count) when the
    # writes wait, 1,000 (one a write) when each goes at once.
    want = WORDS if batch is None else n // PARTITIONS
    assert per_partition == {p: want for p in range(PARTITIONS)}
    last = {(m.partition(), m.key().decode()): struct.unpack(">q", m.value())[0] for m in changelog}
    truth = _true_counts(n)
    assert last == {(p, w): c for p in range(PARTITIONS) for w, c in truth[f"Partition_{p}"].items()}
    shutil.rmtree(state)  # a full restore from the changelog alone
    log = _run_until(cfg, broker, rec, n, tmp_path / "run-1.log", *sets)
    assert sum(_replayed(log)) == want * PARTITIONS
    assert _store_contents(state) == truth
