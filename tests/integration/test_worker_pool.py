"""The worker pool against the real broker: a worker's death, the container's death, clean shutdown."""

from __future__ import annotations

import re
import signal
import time
from collections import defaultdict
from pathlib import Path

import psutil
import pytest
from kafka_util import (
    Container,
    count_lines,
    job_toml,
    produced_offsets,
    read_checkpoints,
    records,
    seed_input,
    starting_offsets,
    wait_until,
    write_config,
)

pytestmark = pytest.mark.integration

PARTITIONS = 4
WORKER_MODULE = "samzamp.worker"


def _workers(c: Container) -> list[psutil.Process]:
    kids = psutil.Process(c.proc.pid).children(recursive=True)
    return [p for p in kids if WORKER_MODULE in " ".join(p.cmdline())]


def _gone(procs: list[psutil.Process], timeout: float) -> list[psutil.Process]:
    """The processes still alive (zombies count as gone: nothing runs) after ``timeout``."""
    _, alive = psutil.wait_procs(procs, timeout=timeout)
    return [p for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


def _expected(n: int) -> set[tuple[int, int]]:
    return {(p, o) for p, offs in produced_offsets(n, PARTITIONS).items() for o in offs}


def _job(tmp_path: Path, unique: str, topic: str, task: str = "OrderTask") -> tuple[Path, Path]:
    rec = tmp_path / "rec"
    rec.mkdir(exist_ok=True)
    cfg = write_config(tmp_path / "job.toml", job_toml(f"pool-{unique}", f"recording_tasks:{task}", topic, rec))
    return cfg, rec


def test_sigkill_of_one_worker_stops_the_container_and_a_restart_finishes(broker, unique, tmp_path: Path) -> None:
    n = 40_000
    topic = f"in-{unique}"
    seed_input(broker.bootstrap_servers, topic, PARTITIONS, n)
    cfg, rec = _job(tmp_path, unique, topic)
    # 100 µs a message: 2 s of work for the two workers, so the kill lands while most is still to do.
    pool = ("job.container.thread.pool.size=2", "test.busy.us=100")
    c = Container(cfg, broker.bootstrap_servers, *pool, log=tmp_path / "run-0.log")
    # After a checkpoint (OrderTask records them as K lines): the restart resumes from it.
    wait_until(lambda: count_lines(rec) >= 2_000 and count_lines(rec, "K ") > 0, 120, "a checkpoint", c)
    workers = _workers(c)
    assert len(workers) == 2, [p.cmdline() for p in workers]
    everything = [psutil.Process(c.proc.pid), *psutil.Process(c.proc.pid).children(recursive=True)]
    victim = workers[0]
    killed_at = time.monotonic()
    victim.send_signal(signal.SIGKILL)
    code = c.proc.wait(timeout=30)
    took = time.monotonic() - killed_at
    assert code != 0
    assert took < 2.0, f"the container took {took:.1f} s to notice its worker died"
    log = c.log_text()
    assert re.search(rf"worker \d \(pid {victim.pid}; tasks '[^)]*\) was killed by SIGKILL", log), log[-2000:]
    left = _gone(everything, 5)
    assert not left, f"processes of the old container remain: {[(p.pid, p.cmdline()) for p in left]}"
    done_before = {(p, o) for _, p, o in records(rec)}
    assert len(done_before) < n // 2, "the first run finished before the kill: the restart would test nothing"

    c2 = Container(cfg, broker.bootstrap_servers, *pool, log=tmp_path / "run-1.log")
    c2.wait_started()  # a SIGTERM before then kills it rather than stopping it
    assert any(starting_offsets(c2.log_text()).values()), "the restart did not start from a checkpoint"
    wait_until(lambda: {(p, o) for _, p, o in records(rec)} >= _expected(n), 180, "every offset processed", c2)
    assert c2.stop() == 0, c2.log_text()[-3000:]


def test_sigkill_of_the_container_leaves_no_worker(broker, unique, tmp_path: Path) -> None:
    topic = f"in-{unique}"
    seed_input(broker.bootstrap_servers, topic, PARTITIONS, 20_000)
    cfg, rec = _job(tmp_path, unique, topic)
    c = Container(cfg, broker.bootstrap_servers, "job.container.thread.pool.size=2", log=tmp_path / "run.log")
    wait_until(lambda: count_lines(rec) >= 1_000, 120, "some progress", c)
    workers = _workers(c)
    assert len(workers) == 2
    c.kill()
    left = _gone(workers, 5)
    assert not left, f"workers outlived their container: {[p.pid for p in left]}"


def test_clean_shutdown_closes_every_task_in_its_worker(broker, unique, tmp_path: Path) -> None:
    n = 4_000
    topic = f"in-{unique}"
    seed_input(broker.bootstrap_servers, topic, PARTITIONS, n)
    cfg, rec = _job(tmp_path, unique, topic, "ClosingOrderTask")
    c = Container(cfg, broker.bootstrap_servers, "job.container.thread.pool.size=2", log=tmp_path / "run.log")
    wait_until(lambda: count_lines(rec) >= n, 120, "all processed", c)
    workers = {p.pid for p in _workers(c)}
    assert c.stop() == 0, c.log_text()[-3000:]
    closed = sorted(p.name for p in rec.glob("*.closed"))
    assert len(closed) == PARTITIONS, closed
    # Closed where they ran: in the workers, two tasks each (balanced by partitions).
    pids = [int(name.split(".")[-2]) for name in closed]
    assert set(pids) == workers
    assert sorted(pids.count(p) for p in set(pids)) == [2, 2]


def test_a_task_that_fails_in_init_names_the_task_and_worker(broker, unique, tmp_path: Path) -> None:
    topic = f"in-{unique}"
    seed_input(broker.bootstrap_servers, topic, PARTITIONS, 10)
    cfg, _ = _job(tmp_path, unique, topic, "FailingInitTask")
    c = Container(cfg, broker.bootstrap_servers, "job.container.thread.pool.size=2", log=tmp_path / "run.log")
    assert c.proc.wait(timeout=60) == 1
    log = c.log_text()
    assert "could not start" in log
    assert "init failed on purpose" in log
    assert "Partition" in log


def test_a_shutdown_request_in_a_worker_stops_the_container_cleanly(broker, unique, tmp_path: Path) -> None:
    """A task in a worker asks for shutdown: the container finishes what it had sent to its workers,
    commits it all and exits 0, without waiting out task.shutdown.ms for messages it never sent."""
    topic = f"in-{unique}"
    seed_input(broker.bootstrap_servers, topic, PARTITIONS, 20_000)
    cfg, rec = _job(tmp_path, unique, topic)
    c = Container(
        cfg, broker.bootstrap_servers, "job.container.thread.pool.size=2", "test.shutdown.after=500",
        log=tmp_path / "run.log",
    )  # fmt: skip
    assert c.proc.wait(timeout=120) == 0, c.log_text()[-3000:]
    log = c.log_text()
    assert "task.shutdown.ms passed" not in log, log[-2000:]
    processed: dict[int, list[int]] = defaultdict(list)
    for _, p, o in records(rec):
        processed[p].append(o)
    final: dict[int, int] = {}
    for _task, offsets in read_checkpoints(broker.bootstrap_servers, f"pool-{unique}"):
        final.update(offsets)
    for p, offsets in processed.items():
        assert offsets == list(range(len(offsets))), f"partition {p}: not a gap-free prefix"
        assert final[p] == offsets[-1], f"partition {p}: checkpoint {final[p]}, processed up to {offsets[-1]}"


@pytest.mark.parametrize("pool", [1, 2])
def test_the_container_and_its_workers_freeze_what_start_up_built(broker, unique, tmp_path: Path, pool: int) -> None:
    """The CLI's container (pool 1: tasks on the loop) and each worker (pool 2) move their start-up
    objects out of the cyclic GC's reach before the first message (see samzamp/gc_freeze.py)."""
    topic = f"in-{unique}"
    seed_input(broker.bootstrap_servers, topic, PARTITIONS, 40)
    cfg, rec = _job(tmp_path, unique, topic, "GcFreezeTask")
    c = Container(cfg, broker.bootstrap_servers, f"job.container.thread.pool.size={pool}", log=tmp_path / "run.log")
    wait_until(lambda: len(records(rec, "G")) >= PARTITIONS, 120, "every task's first message", c)
    assert c.stop() == 0, c.log_text()[-3000:]
    frozen = [a for _, a, _ in records(rec, "G")]
    assert len(frozen) == PARTITIONS
    assert min(frozen) > 1000, frozen  # modules, config, tasks: thousands of objects


def test_a_process_call_past_the_callback_timeout_fails_the_container_naming_task_and_offset(
    broker, unique, tmp_path: Path
) -> None:
    """A worker's process() that never returns in time: the container fails naming the task, SSP
    and offset (not a message queued behind it, nor another task's), kills the worker, and no
    checkpoint reaches that offset."""
    n, slow_offset, timeout_ms = 2_000, 300, 1_000
    topic = f"in-{unique}"
    seed_input(broker.bootstrap_servers, topic, PARTITIONS, n)
    cfg, rec = _job(tmp_path, unique, topic, "SlowAtTask")
    c = Container(
        cfg,
        broker.bootstrap_servers,
        "job.container.thread.pool.size=2",
        f"task.callback.timeout.ms={timeout_ms}",
        "test.slow.partition=1",
        f"test.slow.offset={slow_offset}",
        log=tmp_path / "run-0.log",
    )
    wait_until(lambda: ("S", 1, slow_offset) in records(rec, "S"), 60, "the slow call", c)
    workers = _workers(c)
    started = time.monotonic()
    assert c.proc.wait(timeout=30) != 0
    took = time.monotonic() - started
    log = c.log_text()
    assert took < timeout_ms / 1000 * 1.25 + 5, f"the timeout fired {took:.1f} s after the slow call began"
    expected = (
        f"task 'Partition 1' failed processing SystemStreamPartition [kafka, {topic}, 1] offset {slow_offset}: "
        f"process() did not return within task.callback.timeout.ms = {timeout_ms} ms"
    )
    assert expected in log, log[-3000:]
    assert not _gone(workers, 10), "a worker outlived its container"
    last: dict[int, int] = {}
    for _task, offsets in read_checkpoints(broker.bootstrap_servers, f"pool-{unique}"):
        last.update(offsets)
    assert last.get(1, -1) < slow_offset, f"checkpointed past the stuck message: {last}"
    assert (1, slow_offset) not in {(p, o) for _, p, o in records(rec)}
