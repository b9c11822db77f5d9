"""The loop's side of a worker task (WorkerTaskProxy) with a scripted worker: messages taken back
after a commit request are sent again in order, exactly once, and a drain's last window() sees
every message before the drain point. (The real worker process runs the same frames in
tests/integration; here the worker's answers are scripted so the interleavings are exact.)"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from fake_worker import Checkpoints, FakePool, run_worker_task

from samzamp.container.run_loop import RunLoop
from samzamp.dispatch.process import frames as f


class ScriptedWorker(FakePool):
    """Stands in for the pool and the worker process: records what it runs, answers every frame,
    and asks for a commit after each offset in ``requests`` (once each)."""

    def __init__(self, requests: set[int]) -> None:
        super().__init__()
        self.requests = set(requests)
        self.ran: list[Any] = []  # offsets processed, "W" (window), "D" (on_drain), in order
        self.skip_epoch = -1
        self.hold_drain = False  # keep on_drain "running" until released
        self.held: list[Any] = []
        self.proxy: Any = None  # the task's proxy, once it started
        self.process_calls: list[int] = []  # its process-calls after each frame served

    def serve(self) -> None:
        while self.frames:
            frame = self.frames.pop(0)
            if isinstance(frame, f.Process):
                if frame.epoch <= self.skip_epoch:
                    continue
                done = 0
                for done, raw in enumerate((m for _, run in frame.runs for m in run), 1):  # noqa: B007 - read after the loop
                    self.ran.append(raw[0])
                    if raw[0] in self.requests:
                        self.requests.discard(raw[0])
                        self.handler(f.Processed(0, frame.epoch, done, 1000 * done, 1000))
                        self.handler(f.Requested(0, frame.epoch, True, False, False, False))
                        self.skip_epoch = frame.epoch
                        break
                else:
                    self.handler(f.Processed(0, frame.epoch, done, 1000 * done, 1000))
            elif isinstance(frame, f.Window):
                self.ran.append("W")
                self.handler(f.WindowDone(0, 1000, False, False, False, False))
            elif isinstance(frame, f.Drain) and self.hold_drain:
                self.held.append(frame)
            elif isinstance(frame, f.Drain):
                self.ran.append("D")
                self.handler(f.DrainDone(0, False, False, False, False))
            elif isinstance(frame, f.BeforeCommit):
                self.handler(f.BeforeCommitDone(0))
            elif isinstance(frame, f.Commit):
                self.handler(f.CommitReady(0, [], {}))
            self.process_calls.append(self.proxy.m_process_calls.count)


def _run(
    n: int,
    requests: set[int],
    windowable: bool,
    drain_after: int,
    stop_during_on_drain: bool = False,
    pack_runs: int = 0,
) -> tuple[ScriptedWorker, Checkpoints, RunLoop]:
    worker = ScriptedWorker(requests)
    worker.hold_drain = stop_during_on_drain
    checkpoints = Checkpoints()

    async def main() -> RunLoop:
        run_loop, worker.proxy, consumers, runner = await run_worker_task(
            worker, n, checkpoints, windowable=windowable, batch_size=4, in_flight_limit=16, pack_runs=pack_runs
        )
        drained = False
        # Served until the loop ends, however long a loaded machine takes (its commits run on a
        # thread): a fixed number of turns ran out under load, leaving the worker unserved.
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            worker.serve()
            await asyncio.sleep(0)
            if not drained and len([r for r in worker.ran if isinstance(r, int)]) >= drain_after:
                run_loop.drain("n")
                drained = True
            if worker.held and not run_loop.shutdown_requested:
                run_loop.request_shutdown()  # SIGTERM while the worker runs on_drain
                for _ in range(20):
                    await asyncio.sleep(0)
                worker.hold_drain = False
                worker.frames[:0] = worker.held
                worker.held.clear()
            if runner.done():
                break
        await asyncio.wait_for(runner, 5)
        consumers.stop()
        return run_loop

    return worker, checkpoints, asyncio.run(main())


# Packed runs of 3 (the fetch packs when every task runs in a worker): requests land inside runs,
# and a run larger than the in-flight bound lets go goes in part.
@pytest.mark.parametrize("pack_runs", [0, 3], ids=["messages", "packed"])
@pytest.mark.parametrize("windowable", [False, True])
def test_messages_taken_back_after_requests_run_once_in_order_and_the_drain_window_comes_last(
    windowable: bool, pack_runs: int
) -> None:
    n = 60
    worker, checkpoints, run_loop = _run(
        n, {1, 2, 5, 9, 17, 30, 41, 52, 56, 57}, windowable, drain_after=20, pack_runs=pack_runs
    )
    offsets = [r for r in worker.ran if isinstance(r, int)]
    assert offsets == list(range(n))  # in order, none skipped, none twice
    assert checkpoints.written == sorted(checkpoints.written)  # never backwards
    assert checkpoints.written[-1] == n - 1  # the drain's final checkpoint covers everything
    tail = worker.ran[-2:] if windowable else worker.ran[-1:]
    assert tail == (["W", "D"] if windowable else ["D"])  # after the last message
    assert run_loop.drain_complete
    # process-calls never goes down (a taken-back message is not uncounted) and counts each once
    assert worker.process_calls == sorted(worker.process_calls)
    assert worker.process_calls[-1] == n


@pytest.mark.parametrize("pack_runs", [0, 3], ids=["messages", "packed"])
def test_a_stop_while_a_worker_runs_on_drain_waits_for_it_and_commits_once(pack_runs: int) -> None:
    worker, checkpoints, run_loop = _run(
        30, set(), False, drain_after=10, stop_during_on_drain=True, pack_runs=pack_runs
    )
    assert worker.ran == [*range(30), "D"]
    assert checkpoints.written == [29]  # the drain's commit; the shutdown did not start a second one
    assert run_loop.drain_complete
