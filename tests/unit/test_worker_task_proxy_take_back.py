"""The loop's side of a worker task (WorkerTaskProxy) with a scripted worker: messages taken back
after a commit request are sent again in order, exactly once, and a drain's last window() sees
every message before the drain point. (The real worker process runs the same frames in
tests/integration; here the worker's answers are scripted so the interleavings are exact.)"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from samzamp.api.envelope import SystemStreamPartition
from samzamp.choose.round_robin import RoundRobinChooser
from samzamp.config import load_config, validate
from samzamp.consume.system_consumers import SystemConsumers
from samzamp.container.run_loop import RunLoop
from samzamp.container.worker_task_proxy import WorkerTaskProxy
from samzamp.coordinator.job_model import TaskModel
from samzamp.dispatch.process import frames as f
from samzamp.metrics.registry import MetricsRegistry
from samzamp.systems.inmemory.system import InMemoryStreams, InMemorySystemConsumer

SSP = SystemStreamPartition("mem", "in", 0)


class ScriptedWorker:
    """Stands in for the pool and the worker process: records what it runs, answers every frame,
    and asks for a commit after each offset in ``requests`` (once each)."""

    def __init__(self, requests: set[int]) -> None:
        self.requests = set(requests)
        self.frames: list[Any] = []
        self.handler: Any = None
        self.ran: list[Any] = []  # offsets processed, "W" (window), "D" (on_drain), in order
        self.skip_epoch = -1
        self.hold_drain = False  # keep on_drain "running" until released
        self.held: list[Any] = []

    # the WorkerPool surface WorkerTaskProxy uses
    async def add_task(self, worker: int, model: Any, handler: Any) -> int:
        self.handler = handler
        return 0

    def tasks_on(self, worker: int) -> int:
        return 1

    def send(self, worker: int, frame: bytes) -> None:
        self.frames.append(f.decode_from_loop(frame))

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
            elif isinstance(frame, f.Commit):
                self.handler(f.CommitReady(0, [], {}))


class Checkpoints:
    def __init__(self) -> None:
        self.written: list[int] = []

    def write_checkpoint(self, name: str, offsets: dict[SystemStreamPartition, int], markers: Any) -> None:
        self.written.append(offsets[SSP])


def _run(
    n: int,
    requests: set[int],
    windowable: bool,
    drain_after: int,
    stop_during_on_drain: bool = False,
    pack_runs: int = 0,
) -> tuple[ScriptedWorker, Checkpoints, RunLoop]:
    settings = validate(
        load_config(
            None,
            {
                "job.name": "job",
                "job.default.system": "mem",
                "task.class": "samzamp.examples.word_count:WordCountTask",
                "task.inputs": ["mem.in"],
                "task.commit.ms": -1,
                "systems.mem.samza.factory": "inmemory",
                "systems.mem.default.stream.samza.offset.default": "oldest",
            },
        )
    )
    streams = InMemoryStreams()
    streams.create("in", 1)
    for _ in range(n):
        streams.append("in", 0, None, b"x")
    consumer = InMemorySystemConsumer(streams)
    consumer.register(SSP, 0)
    metrics = MetricsRegistry()
    worker = ScriptedWorker(requests)
    worker.hold_drain = stop_during_on_drain
    checkpoints = Checkpoints()

    async def main() -> RunLoop:
        loop = asyncio.get_running_loop()
        consumers = SystemConsumers(
            {"mem": consumer}, [SSP], RoundRobinChooser(), metrics, 10_000, 50, pack_runs=pack_runs
        )
        run_loop = RunLoop([], consumers, checkpoints, settings.task, metrics, loop)  # type: ignore[arg-type]
        ti = WorkerTaskProxy(
            "T",
            frozenset([SSP]),
            windowable,
            worker,  # type: ignore[arg-type]
            0,
            {},
            batch_size=4,
            in_flight_limit=16,
            metrics=metrics,
            on_ready=run_loop.task_ready,
            on_requests=run_loop.on_requests,
            on_dirty=run_loop.mark_dirty,
        )
        await ti.start(TaskModel("T", (SSP,)))
        run_loop.add_task(ti)
        consumers.start(loop, run_loop.wake, run_loop.abort)
        runner = loop.create_task(run_loop.run())
        drained = False
        for _ in range(10_000):
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


@pytest.mark.parametrize("pack_runs", [0, 3], ids=["messages", "packed"])
def test_a_stop_while_a_worker_runs_on_drain_waits_for_it_and_commits_once(pack_runs: int) -> None:
    worker, checkpoints, run_loop = _run(
        30, set(), False, drain_after=10, stop_during_on_drain=True, pack_runs=pack_runs
    )
    assert worker.ran == [*range(30), "D"]
    assert checkpoints.written == [29]  # the drain's commit; the shutdown did not start a second one
    assert run_loop.drain_complete
