"""What the unit tests of worker tasks share, without a worker process.

The loop's side (``WorkerTaskProxy``): a pool whose worker the test plays, the proxy on it, and a
run loop over an in-memory input that drives the proxy. The proxy reaches its worker only through
the pool (``add_task``, ``tasks_on``, ``send``) and hears from it only through the handler it gave
``add_task``. ``FakePool`` stands in for both: a test's worker reads the frames sent to it and
answers by calling ``handler``.

The worker's side (``samzamp.worker.host.Worker``): ``worker_without_rings``, a worker whose serving
state is set up and nothing else, for a test to give it rings of its own and tasks."""

from __future__ import annotations

import asyncio
import time
from collections import deque
from typing import Any, NamedTuple

from samzamp.api.envelope import SystemStreamPartition
from samzamp.choose.round_robin import RoundRobinChooser
from samzamp.config import load_config, validate
from samzamp.config.settings import JobSettings
from samzamp.consume.system_consumers import SystemConsumers
from samzamp.container.run_loop import RunLoop
from samzamp.container.worker_task_proxy import WorkerTaskProxy
from samzamp.dispatch.process import frames as f
from samzamp.metrics.deltas import DeltaTracker
from samzamp.metrics.registry import MetricsRegistry
from samzamp.model.job_model import TaskModel
from samzamp.systems.inmemory.system import InMemoryStreams, InMemorySystemConsumer
from samzamp.worker.host import Worker

SSP = SystemStreamPartition("mem", "in", 0)
MODEL = TaskModel("T", (SSP,))  # the task every test here runs: "T", reading SSP


class FakePool:
    """The WorkerPool surface WorkerTaskProxy uses, for a task on worker 0 that shares it with
    ``tasks - 1`` others. Keeps the worker's ``handler`` and the frames sent to the worker, decoded:
    in ``frames``, unless a subclass's ``received`` does something else with them."""

    def __init__(self, tasks: int = 1) -> None:
        self.tasks = tasks
        self.handler: Any = None
        self.frames: list[Any] = []

    async def add_task(self, worker: int, model: Any, handler: Any) -> tuple[int, list[Any]]:
        self.handler = handler
        return 0, []

    def tasks_on(self, worker: int) -> int:
        return self.tasks

    def send(self, worker: int, frame: bytes) -> None:
        self.received(f.decode_from_loop(frame))

    def received(self, frame: Any) -> None:
        self.frames.append(frame)


def worker_task(
    pool: FakePool,
    *,
    batch_size: int,
    in_flight_limit: int,
    windowable: bool = False,
    metrics: MetricsRegistry | None = None,
    run_loop: RunLoop | None = None,
) -> WorkerTaskProxy:
    """``MODEL``'s task on ``pool``'s worker 0, from no checkpoint, not started yet; it reports to
    ``run_loop`` (without one, to no one)."""
    return WorkerTaskProxy(
        MODEL.name,
        frozenset(MODEL.ssps),
        windowable,
        pool,  # type: ignore[arg-type]
        0,
        {},
        batch_size=batch_size,
        in_flight_limit=in_flight_limit,
        metrics=metrics if metrics is not None else MetricsRegistry(),
        on_ready=run_loop.task_ready if run_loop else lambda t: None,
        on_requests=run_loop.on_requests if run_loop else lambda t, c: None,
        on_dirty=run_loop.mark_dirty if run_loop else lambda flush: None,
    )


def job_settings() -> JobSettings:
    """A job reading the in-memory stream ``mem.in`` from its oldest offset, with no timed commit."""
    return validate(
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


class Checkpoints:
    """The checkpoint writer: keeps ``SSP``'s offset of each checkpoint written, in order."""

    run_id = ""

    def __init__(self) -> None:
        self.written: list[int] = []

    def write_checkpoint(
        self, name: str, offsets: dict[SystemStreamPartition, int], markers: Any, **_version_2: Any
    ) -> None:
        self.written.append(offsets[SSP])

    async def write_checkpoint_async(
        self, name: str, offsets: dict[SystemStreamPartition, int], markers: Any, **_version_2: Any
    ) -> None:
        self.write_checkpoint(name, offsets, markers)


class Running(NamedTuple):
    run_loop: RunLoop
    task: WorkerTaskProxy
    consumers: SystemConsumers
    runner: asyncio.Task[Any]


async def run_worker_task(
    pool: FakePool,
    messages: int,
    checkpoints: Checkpoints,
    *,
    windowable: bool,
    batch_size: int,
    in_flight_limit: int,
    pack_runs: int,
) -> Running:
    """On the running event loop: ``messages`` messages on ``SSP`` (offsets 0, 1, ...), consumed by a
    run loop whose one task is ``MODEL``'s on ``pool``, started; the run loop runs as ``runner``.
    The caller plays the worker, then stops the run loop and the consumers."""
    streams = InMemoryStreams()
    streams.create("in", 1)
    for _ in range(messages):
        streams.append("in", 0, None, b"x")
    consumer = InMemorySystemConsumer(streams)
    consumer.register(SSP, 0)
    metrics = MetricsRegistry()
    loop = asyncio.get_running_loop()
    consumers = SystemConsumers({"mem": consumer}, [SSP], RoundRobinChooser(), metrics, 10_000, 50, pack_runs=pack_runs)
    run_loop = RunLoop(consumers, checkpoints, job_settings().task, metrics, loop)  # type: ignore[arg-type]
    ti = worker_task(
        pool,
        windowable=windowable,
        batch_size=batch_size,
        in_flight_limit=in_flight_limit,
        metrics=metrics,
        run_loop=run_loop,
    )
    await ti.start(MODEL)
    run_loop.add_task(ti)
    consumers.start(loop, run_loop.wake, run_loop.abort)
    return Running(run_loop, ti, consumers, loop.create_task(run_loop.run()))


def worker_without_rings(report_after: int) -> Worker:
    """A ``Worker`` with only its serving and reporting state: no rings (set ``rx``, ``tx``), config,
    producers, call slot or tasks (add them to ``tasks``; they count in ``metrics``); it reports every ``report_after`` messages."""
    w = Worker.__new__(Worker)
    w.inbox, w.out, w._reports = deque(), [], {}
    w._unreported_ns = w._unreported = 0
    w._urgent = False
    w._report_after = report_after
    w._metrics_due = time.monotonic_ns() + f.METRICS_EVERY_NS
    w.metrics = MetricsRegistry()
    w.metrics_sent = DeltaTracker(w.metrics)
    w.max_frame = 1 << 20
    w.calls = None  # no task.callback.timeout.ms
    w.tasks, w.producers, w.changelogs = {}, {}, {}
    return w
