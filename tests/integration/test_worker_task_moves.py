"""Tasks that move between worker processes, against the real broker: the loop's side of the pool runs
in the test (``WorkerPool`` on this process's event loop), the workers are real processes.

A task with a changelogged store is taken on by worker 0, processes, commits and is given up; its
store's lock is then free. Taken on by worker 1 with nothing of it on local disk, its store is
restored from the changelog up to the commit's marker; and moved back to worker 0, it finds it again.
The evidence is the task's own: what its init found in its store, in a file named by its pid.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
from pathlib import Path
from typing import Any

import pytest
from kafka_util import counts_store, create_topic, job_toml, wait_until, write_config

from samzamp.api.envelope import SystemStreamPartition
from samzamp.api.errors import WorkerError
from samzamp.config import load_config, validate
from samzamp.dispatch.process import frames as f
from samzamp.dispatch.process.pool import WorkerPool
from samzamp.metrics.registry import MetricsRegistry
from samzamp.model.job_model import TaskModel
from samzamp.storage.dirs import StoreLockedError, lock_store_dir, store_dir, unlock_store_dir
from samzamp.systems.kafka.embedded import EmbeddedBroker

pytestmark = pytest.mark.integration

TASK = "Partition 0"
WORDS = 37  # StoreCountTask's words: message m<i> is word w<i % 37>


class TaskFrames:
    """The loop's side of one task in a worker, reduced to what these tests need: its frames, in order."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[Any] = asyncio.Queue()

    def __call__(self, frame: Any) -> None:
        self.queue.put_nowait(frame)

    async def next(self) -> Any:
        return await asyncio.wait_for(self.queue.get(), 60)


async def _process(pool: WorkerPool, worker: int, index: int, frames: TaskFrames, first: int, n: int) -> None:
    """Messages m<first>.. m<first + n - 1> at those offsets, one batch; returns once all are done."""
    messages = [(o, None, f"m{o}".encode(), 0) for o in range(first, first + n)]
    pool.send(worker, f.encode(f.Process(index, 0, [(0, messages)])))
    done = 0
    while done < n:
        frame = await frames.next()
        assert isinstance(frame, f.Processed), frame
        done += frame.count


async def _commit(pool: WorkerPool, worker: int, index: int, frames: TaskFrames) -> dict[str, str]:
    """The worker's commit steps (flush the changelog, commit the store): the checkpoint's markers."""
    pool.send(worker, f.encode(f.Commit(index)))
    frame = await frames.next()
    assert isinstance(frame, f.CommitReady), frame
    assert frame.errors == []
    return dict(frame.markers)


def _found_at_init(rec: Path, pid: int) -> dict[str, int]:
    """What StoreCountTask's init found in its store in process ``pid``."""
    lines = (rec / f"{TASK.replace(' ', '_')}.{pid}.state").read_text().splitlines()
    assert lines[-1] == "END"
    return {word: int(count) for word, count in (line.split() for line in lines[:-1])}


def _lock_is_free(path: Path) -> bool:
    try:
        fd = lock_store_dir(path, wait_s=0)
    except StoreLockedError:
        return False
    unlock_store_dir(fd)
    return True


def _config(tmp_path: Path, broker: EmbeddedBroker, unique: str, task: str, extra: str = "") -> dict[str, Any]:
    """The job's flattened config as the container hands it to its workers."""
    rec = tmp_path / "rec"
    rec.mkdir(exist_ok=True)
    top = f'"job.logged.store.base.dir" = "{tmp_path / "state"}"'
    text = job_toml(f"moves-{unique}", f"recording_tasks:{task}", f"in-{unique}", rec, extra, top)
    path = write_config(tmp_path / "job.toml", text)
    return dict(load_config(path, {"systems.kafka.bootstrap.servers": broker.bootstrap_servers}))


def test_a_task_moved_between_workers_finds_its_store_where_it_lands(
    broker: EmbeddedBroker, unique: str, tmp_path: Path
) -> None:
    changelog = f"counts-log-{unique}"
    create_topic(broker.bootstrap_servers, changelog, 1)
    store = counts_store(f"kafka.{changelog}")
    config = _config(tmp_path, broker, unique, "StoreCountTask", store)
    ssp = SystemStreamPartition("kafka", f"in-{unique}", 0)
    local = store_dir(tmp_path / "state", "counts", TASK)
    rec = tmp_path / "rec"
    failures: list[BaseException] = []

    async def main() -> list[int]:
        pool = WorkerPool(
            2,
            validate(load_config(None, config)).worker_ring_bytes,
            asyncio.get_running_loop(),
            MetricsRegistry(),
            failures.append,
        )
        pool.spawn()
        try:
            await pool.start(config)
            pids = [w.pid for w in pool.workers]

            # Worker 0: from an empty store, two of each word; committed, then given up.
            frames = TaskFrames()
            index, _ = await pool.add_task(0, TaskModel(TASK, (ssp,), 0, {}), frames)
            assert _found_at_init(rec, pids[0]) == {}
            await _process(pool, 0, index, frames, 0, 2 * WORDS)
            markers = await _commit(pool, 0, index, frames)
            assert not _lock_is_free(local)  # the check can fail: the worker holds it while it runs the task
            await pool.remove_task(0, index)
            assert _lock_is_free(local)
            assert pool.tasks_on(0) == 0
            shutil.rmtree(local)  # as on another host: only the changelog has the task's state

            # Worker 1: restored from the changelog up to the commit's marker; a third of each word.
            frames = TaskFrames()
            index, _ = await pool.add_task(1, TaskModel(TASK, (ssp,), 0, markers), frames)
            assert _found_at_init(rec, pids[1]) == {f"w{i}": 2 for i in range(WORDS)}
            await _process(pool, 1, index, frames, 2 * WORDS, WORDS)
            markers = await _commit(pool, 1, index, frames)
            await pool.remove_task(1, index)

            # Back on worker 0, under a new index: its local store, left by worker 1, is taken as is.
            frames = TaskFrames()
            back, _ = await pool.add_task(0, TaskModel(TASK, (ssp,), 0, markers), frames)
            assert back == 1  # never the index the task had there before
            await pool.stop()
        finally:
            pool.kill()
        return pids

    pids = asyncio.run(main())
    assert failures == []
    assert _found_at_init(rec, pids[0]) == {f"w{i}": 3 for i in range(WORDS)}  # its last init, on worker 0
    processed: dict[int, list[int]] = {pid: [] for pid in pids}  # offsets, by the pid that processed them
    for log in sorted(rec.glob("*.log")):
        pid = int(log.name.split(".")[-2])
        processed[pid] += [int(line.split()[2]) for line in log.read_text().splitlines() if line.startswith("P ")]
    assert processed == {pids[0]: list(range(2 * WORDS)), pids[1]: list(range(2 * WORDS, 3 * WORDS))}


def test_an_add_awaited_on_a_worker_that_fails_or_dies_raises_instead_of_waiting(
    broker: EmbeddedBroker, unique: str, tmp_path: Path
) -> None:
    config = _config(tmp_path, broker, unique, "InitByNameTask")
    config["test.init.fail"] = "Partition 1"
    config["test.init.hang"] = "Partition 2"
    ssp = SystemStreamPartition("kafka", f"in-{unique}", 0)
    rec = tmp_path / "rec"
    failures: list[BaseException] = []

    async def main() -> None:
        pool = WorkerPool(
            2,
            validate(load_config(None, config)).worker_ring_bytes,
            asyncio.get_running_loop(),
            MetricsRegistry(),
            failures.append,
        )
        pool.spawn()
        try:
            await pool.start(config)

            # The task's init fails: the add raises it, naming the worker and the task.
            with pytest.raises(
                WorkerError, match=r"worker 0 \(pid \d+; tasks 'Partition 1'\) could not start task 'Partition 1'"
            ):
                await asyncio.wait_for(pool.add_task(0, TaskModel("Partition 1", (ssp,)), TaskFrames()), 60)
            assert failures == []  # the add's caller had the news; the pool did not report it again
            with pytest.raises(WorkerError, match="init failed on purpose"):  # nothing more goes to that worker
                await pool.add_task(0, TaskModel("Partition 0", (ssp,)), TaskFrames())

            # The worker dies while the add is awaited: the add raises that.
            adding = asyncio.ensure_future(pool.add_task(1, TaskModel("Partition 2", (ssp,)), TaskFrames()))
            started = rec / f"Partition_2.{pool.workers[1].pid}.log"
            await asyncio.to_thread(wait_until, started.exists, 30, "the hanging init")
            os.kill(pool.workers[1].pid, signal.SIGKILL)
            with pytest.raises(WorkerError, match=r"worker 1 \(pid \d+; tasks 'Partition 2'\) was killed by SIGKILL"):
                await asyncio.wait_for(adding, 30)
        finally:
            pool.kill()

    asyncio.run(main())
    assert len(failures) == 1  # a worker's death is the container's news too
    assert "killed by SIGKILL" in str(failures[0])
