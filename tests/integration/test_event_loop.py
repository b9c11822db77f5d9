"""Acceptance of the container issue against the real broker: order, crash safety, low watermark, exclusion."""

from __future__ import annotations

import random
import statistics
from collections import defaultdict
from pathlib import Path

import pytest
from kafka_util import (
    Container,
    NewRecords,
    count_lines,
    job_toml,
    produced_offsets,
    read_all,
    read_checkpoints,
    records,
    seed_input,
    wait_until,
    write_config,
)

pytestmark = pytest.mark.integration

PARTITIONS = 4


def _expected(n: int) -> dict[int, set[int]]:
    return produced_offsets(n, PARTITIONS)


POOLS = pytest.mark.parametrize("pool", [1, 2, 4], ids=lambda n: f"pool{n}")


def _pool(n: int) -> str:
    return f"job.container.thread.pool.size={n}"


@POOLS
def test_order_and_exactly_once_in_a_clean_run(broker, unique, tmp_path: Path, pool: int) -> None:
    n = 20_000
    topic, out = f"in-{unique}", f"out-{unique}"
    seed_input(broker.bootstrap_servers, topic, PARTITIONS, n)
    rec = tmp_path / "rec"
    rec.mkdir()
    extra = f'[streams.{out}]\nsamza.key.serde = "string"\nsamza.msg.serde = "string"\npartitions = 2\n'
    cfg = write_config(
        tmp_path / "job.toml",
        job_toml(f"order-{unique}", "recording_tasks:OrderTask", topic, rec, extra, top=f'test.output = "{out}"'),
    )
    c = Container(
        cfg, broker.bootstrap_servers, "task.fetch.threshold=400", _pool(pool), log=tmp_path / "container.log"
    )
    wait_until(lambda: count_lines(rec) >= n, 120, f"{n} processed messages", c)
    assert c.stop() == 0, c.log_text()[-3000:]

    seen: dict[int, list[int]] = defaultdict(list)
    for _, p, o in records(rec):
        seen[p].append(o)
    for p in range(PARTITIONS):
        offsets = seen[p]
        assert all(a < b for a, b in zip(offsets, offsets[1:], strict=False)), f"partition {p} out of order"
        assert set(offsets) == _expected(n)[p]
        assert len(offsets) == len(set(offsets)), f"partition {p} has duplicates in a clean run"
    # Every input was forwarded exactly once and the final checkpoint is each partition's last offset.
    assert sorted(m.value().decode() for m in read_all(broker.bootstrap_servers, out, [0, 1])) == sorted(
        f"m{i}" for i in range(n)
    )
    final: dict[int, int] = {}
    for _task, offsets in read_checkpoints(broker.bootstrap_servers, f"order-{unique}"):
        final.update(offsets)
    assert final == {p: max(_expected(n)[p]) for p in range(PARTITIONS)}


def _assert_checkpoints_monotonic(checkpoints: list[tuple[str, dict[int, int]]]) -> None:
    last: dict[tuple[str, int], int] = {}
    for task, offsets in checkpoints:
        for p, o in offsets.items():
            assert o >= last.get((task, p), -1), (
                f"checkpoint of {task} partition {p} went back from {last[(task, p)]} to {o}"
            )
            last[(task, p)] = o


def _crash_loop(
    broker, tmp_path: Path, job: str, topic: str, task: str, n: int, kills: int, kinds: str, *overrides: str
):
    """Run, SIGKILL at random points ``kills`` times, then run to the end; return the checkpoints
    written during each run (with the run's record file set) for the caller to check."""
    rng = random.Random(1234)
    rec = tmp_path / "rec"
    rec.mkdir()
    cfg = write_config(tmp_path / "job.toml", job_toml(job, f"recording_tasks:{task}", topic, rec))
    done_prefix = f"{kinds} "
    runs = []
    new_records, done = NewRecords(rec, kinds), set()

    def covered() -> bool:
        done.update((p, o) for _, p, o in new_records())
        return len(done) >= n

    for run in range(kills + 1):
        before = len(read_checkpoints(broker.bootstrap_servers, job)) if run else 0
        files_before = set(rec.glob("*.log"))
        checkpoints_before = count_lines(rec, "K ")
        c = Container(cfg, broker.bootstrap_servers, *overrides, log=tmp_path / f"container-{run}.log")
        if run < kills:
            # Kill after a random share of the input, once this run has written a checkpoint (its tasks
            # record them as K lines), so that the kill lands after a checkpoint with more work done
            # since. A run that already covered the whole input is killed at once.
            target = count_lines(rec, done_prefix) + rng.randint(n // 50, n // (kills + 2))
            wait_until(lambda t=target: count_lines(rec, done_prefix) >= t or covered(), 120, f"run {run} progress", c)
            wait_until(
                lambda k=checkpoints_before: count_lines(rec, "K ") > k or covered(), 60, f"run {run} checkpoint", c
            )
            c.kill()
        else:
            # Up and consuming (signal handlers in place) before the stop, even if nothing is left.
            wait_until(lambda c=c: "starting offsets" in c.log_text(), 60, "the last run to start", c)
            wait_until(covered, 180, "every offset processed", c)
            assert c.stop() == 0, c.log_text()[-3000:]
        cps = read_checkpoints(broker.bootstrap_servers, job)
        runs.append((set(rec.glob("*.log")) - files_before, cps[before:]))
    return rec, runs


@POOLS
def test_crash_safety_sigkill_at_random_points(broker, unique, tmp_path: Path, pool: int) -> None:
    n = 100_000
    topic, job = f"in-{unique}", f"crash-{unique}"
    seed_input(broker.bootstrap_servers, topic, PARTITIONS, n)
    # Frequent commits: each run is killed right after its first checkpoint (see _crash_loop).
    rec, runs = _crash_loop(broker, tmp_path, job, topic, "OrderTask", n, 5, "P", _pool(pool), "task.commit.ms=50")
    processed = {(p, o) for _, p, o in records(rec)}
    expected = {(p, o) for p, offs in _expected(n).items() for o in offs}
    assert processed == expected, f"{len(expected - processed)} inputs never processed"
    all_cps = [cp for _, cps in runs for cp in cps]
    _assert_checkpoints_monotonic(all_cps)
    # A checkpoint covers only processed messages: everything at or below it was recorded before.
    _assert_checkpoints_cover_only_completed(runs, "P")
    assert sum(len(cps) for _, cps in runs[:-1]) > 0, "no checkpoint was written before the kills"


def _assert_checkpoints_cover_only_completed(runs, kind: str) -> None:
    completed: set[tuple[int, int]] = set()
    for files, cps in runs:
        for f in files:
            for line in f.read_text().splitlines():
                k, p, o = line.split()
                if k == kind:
                    completed.add((int(p), int(o)))
        for task, offsets in cps:
            for p, o in offsets.items():
                missing = [x for x in range(o + 1) if (p, x) not in completed]
                assert not missing, f"checkpoint {task} p{p}@{o} covers incomplete offsets {missing[:5]}"


@POOLS
def test_low_watermark_async_out_of_order_with_sigkill(broker, unique, tmp_path: Path, pool: int) -> None:
    n = 30_000
    topic, job = f"in-{unique}", f"lowwm-{unique}"
    seed_input(broker.bootstrap_servers, topic, PARTITIONS, n)
    rec, runs = _crash_loop(
        broker,
        tmp_path,
        job,
        topic,
        "RandomAsyncTask",
        n,
        5,
        "C",
        "task.max.concurrency=8",
        "task.commit.ms=100",
        _pool(pool),
    )
    completed = {(p, o) for k, p, o in records(rec, "C")}
    expected = {(p, o) for p, offs in _expected(n).items() for o in offs}
    assert completed == expected, f"{len(expected - completed)} messages lost"
    _assert_checkpoints_monotonic([cp for _, cps in runs for cp in cps])
    _assert_checkpoints_cover_only_completed(runs, "C")
    # The test means something only if completions really came out of order.
    out_of_order = 0
    for f in rec.glob("*.log"):
        last: dict[int, int] = {}
        for line in f.read_text().splitlines():
            k, p, o = line.split()
            if k == "C":
                if int(o) < last.get(int(p), -1):
                    out_of_order += 1
                last[int(p)] = max(int(o), last.get(int(p), -1))
    assert out_of_order > 100, "completions were not out of order: max.concurrency had no effect"


@POOLS
@pytest.mark.parametrize(("task", "concurrency"), [("SyncSpanTask", 1), ("AsyncSpanTask", 1), ("AsyncSpanTask", 4)])
def test_window_and_commit_exclusive_with_process(
    broker, unique, tmp_path: Path, task: str, concurrency: int, pool: int
) -> None:
    n = 8_000
    topic, job = f"in-{unique}", f"excl-{unique}"
    seed_input(broker.bootstrap_servers, topic, PARTITIONS, n)
    rec = tmp_path / "rec"
    rec.mkdir()
    cfg = write_config(tmp_path / "job.toml", job_toml(job, f"recording_tasks:{task}", topic, rec))
    c = Container(
        cfg,
        broker.bootstrap_servers,
        f"task.max.concurrency={concurrency}",
        _pool(pool),
        "task.window.ms=100",
        "task.commit.ms=150",
        log=tmp_path / "container.log",
    )
    wait_until(lambda: count_lines(rec, "P ") >= n, 180, "all processed", c)
    assert c.stop() == 0, c.log_text()[-3000:]

    per_file = {f: [tuple(line.split()) for line in f.read_text().splitlines()] for f in rec.glob("*.log")}
    windows_seen = commits_seen = 0
    intervals: list[float] = []
    for spans in per_file.values():
        procs = sorted((int(a), int(b)) for k, a, b in spans if k == "P")
        others = [(k, int(a), int(b)) for k, a, b in spans if k in "WK"]
        windows_seen += sum(1 for k, *_ in others if k == "W")
        commits_seen += sum(1 for k, *_ in others if k == "K")
        for k, a, b in others:
            overlapping = [(pa, pb) for pa, pb in procs if pa < b and a < pb]
            assert not overlapping, f"{k} span overlaps {len(overlapping)} process spans"
        starts = sorted(a for k, a, _ in others if k == "W")
        intervals += [(b - a) / 1e6 for a, b in zip(starts, starts[1:], strict=False)]
        # With concurrency > 1, messages of one task really overlapped each other.
        if concurrency > 1:
            assert any(b1 > a2 for (a1, b1), (a2, b2) in zip(procs, procs[1:], strict=False))
    assert windows_seen >= 8
    assert commits_seen >= 4
    median = statistics.median(intervals)
    assert 50 <= median <= 150, f"window ran every {median:.0f} ms, not every 100 ms (±50%)"
