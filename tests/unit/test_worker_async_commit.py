"""A worker task's commit in two phases, the loop's side (``WorkerTaskProxy`` under a real ``RunLoop``):
the worker answers ``CommitReady(applying=True)`` once its stores' writes are set aside, and
``StoresApplied`` once they are durable, which the test decides. Meanwhile the task takes messages,
no checkpoint is written, and a task leaving the container (a rebalance) waits for it before its
final commit."""

from __future__ import annotations

import asyncio
from typing import Any

from fake_worker import Checkpoints, FakePool, run_worker_task

from samzamp.dispatch.process import frames as f
from samzamp.task.coordinator import ReadableCoordinator

N = 20


class ApplyingWorker(FakePool):
    """A worker that runs every message as soon as the loop turns, and applies a commit's stores
    when told. It answers on the next turn of the loop, as a real worker answers after the send."""

    def __init__(self) -> None:
        super().__init__()
        self.processed = 0
        self.commits: list[bool] = []  # each Commit frame's ``asynchronous``
        self.applying = False
        self.processed_while_applying = asyncio.Event()
        self.half_processed = asyncio.Event()
        self.committing = asyncio.Event()

    def received(self, frame: Any) -> None:
        asyncio.get_running_loop().call_soon(self._answer, frame)

    def _answer(self, frame: Any) -> None:
        if isinstance(frame, f.Process):
            n = sum(len(run) for _, run in frame.runs)
            self.processed += n
            if self.processed >= N // 2:
                self.half_processed.set()
            if self.applying:
                self.processed_while_applying.set()
            self.handler(f.Processed(0, frame.epoch, n, 1000, 1000))
        elif isinstance(frame, f.BeforeCommit):
            self.handler(f.BeforeCommitDone(0))
        elif isinstance(frame, f.Commit):
            self.commits.append(frame.asynchronous)
            self.committing.set()
            self.applying = frame.asynchronous
            self.handler(f.CommitReady(0, [], {}, frame.asynchronous))

    def applied(self) -> None:
        self.applying = False
        self.handler(f.StoresApplied(0))


async def _turns(n: int = 200) -> None:
    """Let the event loop run ``n`` turns (the run loop, the commit's coroutine)."""
    for _ in range(n):
        await asyncio.sleep(0)


def test_a_leaving_task_waits_for_its_commits_apply_and_processes_meanwhile() -> None:
    worker = ApplyingWorker()
    checkpoints = Checkpoints()

    async def main() -> None:
        run_loop, ti, consumers, runner = await run_worker_task(
            worker, N, checkpoints, windowable=False, batch_size=4, in_flight_limit=8, pack_runs=0
        )
        async with asyncio.timeout(30):
            await worker.half_processed.wait()
            coordinator = ReadableCoordinator()
            coordinator.commit()
            run_loop.on_requests(ti, coordinator)
            await worker.committing.wait()
            await worker.processed_while_applying.wait()  # the asynchronous phase: the task works on
            assert ti.state.commit_applying
            assert checkpoints.written == []  # the stores' writes are not durable yet

            leaving = run_loop.remove_task(ti)
            await _turns()
            assert not leaving.done()  # its final commit waits for the apply
            assert worker.commits == [True]
            assert checkpoints.written == []

            worker.applied()
            await leaving
        assert worker.commits == [True, False]  # the final commit of a leaving task is synchronous
        first, final = checkpoints.written
        assert first < final == worker.processed - 1
        run_loop.request_shutdown()
        await asyncio.wait_for(runner, 5)
        consumers.stop()

    asyncio.run(main())
