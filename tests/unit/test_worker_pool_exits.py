"""How the pool hears a worker end: a ``Failed`` frame the worker sent before it closed its rings and
exited is the container's failure, whatever the loop sends it meanwhile; an exit without one is the
failure, with its exit code; either way the exit is logged.

The workers are this file run as a script (``python test_worker_pool_exits.py ROLE``), started by
the pool as it starts ``samzamp.worker``: they read their spec on stdin and attach to its rings.
A test waits for its worker's exit with ``waitid`` (without reaping it, so that the pool still sees
it through its pidfd); a worker that waits for the loop to fill its ring polls the ring's counter of
the sender's waits, which no fd signals.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import time
from typing import Any

import msgspec
import pytest

from samzamp.api.errors import TaskError, WorkerError
from samzamp.dispatch.process import frames as f
from samzamp.dispatch.process import pool as pool_module
from samzamp.dispatch.process.pool import WorkerPool
from samzamp.ipc import MIN_CAPACITY, attach_ring
from samzamp.metrics.registry import MetricsRegistry
from samzamp.model.job_model import TaskModel

MODEL = TaskModel("T", ())
STORE_FULL = "store 'counts' of task 'T' in /state/counts/T: no space left on its filesystem (0 bytes free)"


def _play_worker(role: str) -> int:
    """A worker as the pool sees one: Ready, then ``TaskAdded`` for the first task. Then it reports
    the task failed at the next frame the loop sends (``failed``), or once the loop waits for room
    in the ring, reading nothing more (``failed-when-full``), or reports itself failed (task -1) at
    the next frame (``broken``), or says nothing at the next frame (``silent``); it closes its ends
    of the rings and exits 1 (a real worker's ends close as its process ends)."""
    spec = msgspec.json.decode(sys.stdin.buffer.read(), type=f.WorkerSpec)
    rx = attach_ring(spec.to_worker).receiver()
    tx = attach_ring(spec.from_worker).sender()
    tx.send(f.encode(f.Ready(os.getpid())), timeout=30)
    add = f.decode_from_loop(rx.receive(timeout=30))
    assert isinstance(add, f.AddTask), add
    tx.send(f.encode(f.TaskAdded(add.task, [])), timeout=30)
    if role == "failed-when-full":
        deadline = time.monotonic() + 30
        while not rx._h.stats()[4]:  # the times its sender armed for room (SendStatistics.times_blocked)
            assert time.monotonic() < deadline, "the loop never filled the ring"
            time.sleep(0.001)
    else:
        rx.receive(timeout=30)
    if role == "broken":
        tx.send(f.encode(f.Failed(-1, "ValidationError", "Expected `array`, got `int`")), timeout=30)
    elif role != "silent":
        tx.send(f.encode(f.Failed(add.task, "StoreError", STORE_FULL)), timeout=30)
    rx.close()
    tx.close()
    return 1


class Run:
    """A pool of one scripted worker on a fresh loop, and what reached the container from it."""

    def __init__(self) -> None:
        self.failures: list[BaseException] = []
        self.loop_errors: list[dict[str, Any]] = []
        self.failed: asyncio.Future[None] | None = None

    def on_failure(self, error: BaseException) -> None:
        self.failures.append(error)
        if self.failed is not None and not self.failed.done():
            self.failed.set_result(None)

    async def started(self) -> WorkerPool:
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(lambda _, context: self.loop_errors.append(context))
        self.failed = loop.create_future()
        pool = WorkerPool(1, MIN_CAPACITY, loop, MetricsRegistry(), self.on_failure)
        pool.spawn()
        await pool.start({})
        await pool.add_task(0, MODEL, lambda frame: None)
        return pool


def _wait_exited(pid: int) -> None:
    """Block (the loop with it) until ``pid`` has exited, leaving it to be reaped by the pool."""
    os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)


@pytest.fixture
def scripted(monkeypatch: pytest.MonkeyPatch) -> Any:
    def use(role: str) -> Run:
        monkeypatch.setattr(pool_module, "WORKER_ARGV", (sys.executable, __file__, role))
        return Run()

    return use


@pytest.mark.parametrize("ring", ["with room", "full"])
def test_a_failed_frame_sent_before_the_worker_closed_its_ring_is_the_failure(
    scripted: Any, ring: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The worker sent ``Failed``, closed its rings and exited before the loop read any of it; the
    loop sends it more meanwhile (into a ring with room: the send finds the worker's end closed; or
    into a full one: the frames wait for room, and the worker's close wakes the loop to send them).
    Those frames go nowhere, and the container's failure is the worker's, not the closed ring."""
    run = scripted("failed" if ring == "with room" else "failed-when-full")

    async def main() -> int:
        pool = await run.started()
        w = pool.workers[0]
        try:
            window = f.encode(f.Window(0))
            pool.send(0, window)
            if ring == "full":
                while not w.waiting_for_room:
                    pool.send(0, window)
            _wait_exited(w.pid)
            pool.send(0, window)
            assert run.failed is not None
            await run.failed
            assert w.stopped is not None
            await w.stopped
        finally:
            pool.kill()
        return w.pid

    with caplog.at_level(logging.INFO, logger=pool_module.__name__):
        pid = asyncio.run(main())
    assert run.loop_errors == []
    assert len(run.failures) == 1, run.failures
    assert isinstance(run.failures[0], TaskError)
    assert str(run.failures[0]) == STORE_FULL
    exits = [(r.levelno, r.getMessage()) for r in caplog.records if "exited with code" in r.getMessage()]
    assert exits == [(logging.INFO, f"worker 0 (pid {pid}; tasks 'T') exited with code 1")]


def test_a_worker_that_exits_without_a_word_fails_the_container_with_its_exit_code(
    scripted: Any, caplog: pytest.LogCaptureFixture
) -> None:
    run = scripted("silent")

    async def main() -> int:
        pool = await run.started()
        w = pool.workers[0]
        try:
            pool.send(0, f.encode(f.Window(0)))
            _wait_exited(w.pid)
            pool.send(0, f.encode(f.Window(0)))
            assert run.failed is not None
            await run.failed
        finally:
            pool.kill()
        return w.pid

    with caplog.at_level(logging.INFO, logger=pool_module.__name__):
        pid = asyncio.run(main())
    assert run.loop_errors == []
    assert len(run.failures) == 1, run.failures
    assert isinstance(run.failures[0], WorkerError)
    assert str(run.failures[0]).startswith(f"worker 0 (pid {pid}; tasks 'T') exited with code 1; ")
    exits = [(r.levelno, r.getMessage()) for r in caplog.records if "exited with code" in r.getMessage()]
    assert exits == [(logging.WARNING, f"worker 0 (pid {pid}; tasks 'T') exited with code 1")]


def test_a_worker_failed_outside_its_tasks_fails_the_container_naming_the_worker(scripted: Any) -> None:
    run = scripted("broken")

    async def main() -> int:
        pool = await run.started()
        w = pool.workers[0]
        try:
            pool.send(0, f.encode(f.Window(0)))
            assert run.failed is not None
            await run.failed
        finally:
            pool.kill()
        return w.pid

    pid = asyncio.run(main())
    assert [str(e) for e in run.failures] == [
        f"worker 0 (pid {pid}; tasks 'T') failed: ValidationError: Expected `array`, got `int`"
    ]


def test_an_exit_the_loop_has_not_seen_yet_is_logged_when_the_pool_is_killed(
    scripted: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """The container failed for another reason and kills its pool before the loop saw a worker's exit:
    the exit is logged all the same."""
    run = scripted("silent")

    async def main() -> int:
        pool = await run.started()
        w = pool.workers[0]
        pool.send(0, f.encode(f.Window(0)))
        _wait_exited(w.pid)
        pool.kill()
        return w.pid

    with caplog.at_level(logging.INFO, logger=pool_module.__name__):
        pid = asyncio.run(main())
    exits = [(r.levelno, r.getMessage()) for r in caplog.records if "exited with code" in r.getMessage()]
    assert exits == [(logging.WARNING, f"worker 0 (pid {pid}; tasks 'T') exited with code 1")]


if __name__ == "__main__":
    sys.exit(_play_worker(sys.argv[1]))
