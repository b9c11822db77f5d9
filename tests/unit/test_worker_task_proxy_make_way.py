"""A due window, commit or shutdown of a worker task waits for at most the message the worker is in,
however much was sent ahead: the loop asks the worker to yield (``Yield``), takes back what it did
not start (``Yielded``) and sends it again afterwards, in order, exactly once.

The worker here is scripted one message per step, so "how many messages ran between the moment the
operation came due and the operation" is exact. (tests/integration/test_worker_window_pacing.py
runs the real worker process.)"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from typing import Any

import pytest
from fake_worker import Checkpoints, FakePool, run_worker_task

from samzamp.container.run_loop import RunLoop
from samzamp.container.worker_task_proxy import WorkerTaskProxy
from samzamp.dispatch.process import frames as f
from samzamp.task.coordinator import ReadableCoordinator

N = 60
DUE_AFTER = 5  # messages run before the operation comes due


class SteppingWorker(FakePool):
    """The pool and a worker process, one message (or one other frame) per ``step``. A ``Yield`` is
    read at the next step, as the real worker reads it at its next report."""

    def __init__(self) -> None:
        super().__init__()
        self.yields: list[f.Yield] = []
        self.current: deque[tuple[int, int]] = deque()  # (epoch, offset) of the batch being run
        self.skip_epoch = -1
        self.ran: list[Any] = []  # offsets processed, "W" (window), "K" (commit), in order

    def received(self, frame: Any) -> None:
        (self.yields if isinstance(frame, f.Yield) else self.frames).append(frame)

    def step(self) -> None:
        for y in self.yields:
            if y.epoch > self.skip_epoch:
                self.skip_epoch = y.epoch
                self.handler(f.Yielded(0, y.epoch))
        self.yields.clear()
        while self.current and self.current[0][0] <= self.skip_epoch:
            self.current.popleft()
        while not self.current and self.frames:
            fr = self.frames.pop(0)
            if isinstance(fr, f.Process):
                if fr.epoch > self.skip_epoch:
                    self.current.extend((fr.epoch, raw[0]) for _, run in fr.runs for raw in run)
            elif isinstance(fr, f.Window):
                self.ran.append("W")
                self.handler(f.WindowDone(0, 1000, False, False, False, False))
                return
            elif isinstance(fr, f.BeforeCommit):
                self.handler(f.BeforeCommitDone(0))
            elif isinstance(fr, f.Commit):
                self.ran.append("K")
                self.handler(f.CommitReady(0, [], {}))
                return
        if self.current:
            epoch, offset = self.current.popleft()
            self.ran.append(offset)
            self.handler(f.Processed(0, epoch, 1, 1000, 1000))

    def offsets(self) -> list[int]:
        return [r for r in self.ran if isinstance(r, int)]


def _run(
    make_due: Callable[[RunLoop, WorkerTaskProxy], None], pack_runs: int = 0
) -> tuple[SteppingWorker, Checkpoints, int]:
    """Run N messages through a worker task with a deep in-flight bound; after DUE_AFTER messages,
    ``make_due`` makes an operation due. Returns the worker, the checkpoints and the sends in flight
    at that moment."""
    worker = SteppingWorker()
    checkpoints = Checkpoints()
    in_flight_when_due = 0

    async def main() -> None:
        nonlocal in_flight_when_due
        run_loop, ti, consumers, runner = await run_worker_task(
            worker,
            N,
            checkpoints,
            windowable=True,
            batch_size=32,
            in_flight_limit=32,  # the whole batch goes out before any measurement, as at start
            pack_runs=pack_runs,
        )
        due = False
        for _ in range(10_000):
            for _ in range(3):
                await asyncio.sleep(0)
            if not due and len(worker.offsets()) == DUE_AFTER:
                in_flight_when_due = ti.state.messages_in_flight
                make_due(run_loop, ti)
                due = True
            if runner.done() or (due and len(worker.offsets()) >= N and ti.state.idle and not worker.current):
                break
            worker.step()
        run_loop.request_shutdown()
        for _ in range(1000):  # the final commit needs the worker
            if runner.done():
                break
            worker.step()
            await asyncio.sleep(0.001)
        await asyncio.wait_for(runner, 5)
        consumers.stop()

    asyncio.run(main())
    return worker, checkpoints, in_flight_when_due


def _due_window(run_loop: RunLoop, ti: WorkerTaskProxy) -> None:
    ti.state.request_window()  # what the window timer does
    run_loop.task_ready(ti)


def _due_commit(run_loop: RunLoop, ti: WorkerTaskProxy) -> None:
    coordinator = ReadableCoordinator()
    coordinator.commit()  # as a task in another worker asking for a commit
    run_loop.on_requests(ti, coordinator)


# Packed runs of 8 (the fetch packs when every task runs in a worker): what is yielded back ends
# inside a run, and what was not sent yet goes back whole.
@pytest.mark.parametrize("pack_runs", [0, 8], ids=["messages", "packed"])
@pytest.mark.parametrize(("make_due", "op"), [(_due_window, "W"), (_due_commit, "K")], ids=["window", "commit"])
def test_a_due_window_or_commit_runs_after_at_most_one_more_message(
    make_due: Callable[[RunLoop, WorkerTaskProxy], None], op: str, pack_runs: int
) -> None:
    worker, checkpoints, in_flight = _run(make_due, pack_runs)
    assert in_flight > 10  # much more was sent ahead than one message
    at = worker.ran.index(op)
    assert worker.ran[:at] == list(range(at)), worker.ran
    assert at <= DUE_AFTER + 1, f"{op} ran after {at - DUE_AFTER} more messages: {worker.ran[: at + 1]}"
    if op == "K":
        assert checkpoints.written[0] == at - 1  # exactly what ran before the commit
    assert worker.offsets() == list(range(N))  # what was yielded ran afterwards: in order, exactly once


@pytest.mark.parametrize("pack_runs", [0, 8], ids=["messages", "packed"])
def test_a_shutdown_waits_for_at_most_one_more_message_and_checkpoints_what_ran(pack_runs: int) -> None:
    worker, checkpoints, in_flight = _run(lambda run_loop, ti: run_loop.request_shutdown(), pack_runs)
    assert in_flight > 10
    ran = worker.offsets()
    assert ran == list(range(len(ran)))
    assert len(ran) <= DUE_AFTER + 1, f"the shutdown waited for {len(ran) - DUE_AFTER} more messages"
    assert checkpoints.written == [len(ran) - 1]
