"""A worker's tasks' metrics reach the container's registry: the worker sends what they gained as
``Metrics`` frames (at most once per ``frames.METRICS_EVERY_NS``, and before ``TaskRemoved`` and
``Stopped``), and the pool adds them to the container's registry, so a task's counts there are
whole when it leaves (its group goes with it) or the workers stop."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from fake_worker import worker_without_rings

from samzamp.api.envelope import OutgoingMessageEnvelope, SystemStream, SystemStreamPartition
from samzamp.api.task import InitableTask, StreamTask
from samzamp.dispatch.process import frames as f
from samzamp.dispatch.process.pool import WorkerPool
from samzamp.ipc import MIN_CAPACITY
from samzamp.metrics.registry import MetricsRegistry
from samzamp.model.job_model import TaskModel
from samzamp.systems.inmemory.system import InMemoryStreams, InMemorySystemProducer
from samzamp.task.runtime import TaskRuntime
from samzamp.worker.host import Worker, WorkerTask

SSP = SystemStreamPartition("mem", "in", 0)
OUT = SystemStream("mem", "out")
GROUP = "TaskName-T"


class CountingTask(StreamTask, InitableTask):
    """Sends each message on, and counts it in a metric of its own."""

    def init(self, context: Any) -> None:
        self.seen = context.metrics.counter("seen")
        self.lookups = context.metrics.timer("lookup-ns")
        self.size = 0
        context.metrics.gauge("size", fn=lambda: self.size)
        context.metrics.gauge("mode").set("fast")  # never changes

    def process(self, envelope: Any, collector: Any, coordinator: Any) -> None:
        self.seen.inc()
        self.lookups.update(100)
        self.size += 1
        collector.send(OutgoingMessageEnvelope(OUT, envelope.message))


class CapturingSend:
    def __init__(self) -> None:
        self.frames: list[Any] = []

    def send_many(self, records: list[bytes]) -> None:
        self.frames.extend(f.decode_from_worker(r) for r in records)


def _runtime(w: Worker) -> TaskRuntime:
    """``CountingTask``'s runtime, started as the worker starts a task it takes on: counting in its metrics."""
    rt = TaskRuntime(
        TaskModel("T", (SSP,)),
        CountingTask,
        {"mem": InMemorySystemProducer(InMemoryStreams())},
        lambda _: (None, None),
        w.metrics,
        drop_serialization_errors=False,
        drop_deserialization_errors=False,
        drop_producer_errors=False,
        ignored_exceptions=(),
    )
    rt.init({})
    return rt


def _worker() -> tuple[Worker, CapturingSend]:
    """A worker running ``CountingTask`` as task index 0."""
    w = worker_without_rings(f.report_after(256))
    tx = CapturingSend()
    w.tx = tx  # type: ignore[assignment]
    w.tasks = {0: WorkerTask(_runtime(w))}
    return w, tx


def _process(w: Worker, first: int, n: int) -> None:
    w._process(f.Process(0, 0, [(0, [(o, None, b"x", 0) for o in range(first, first + n)])]))


def _metrics(frames: list[Any]) -> list[f.Metrics]:
    return [fr for fr in frames if isinstance(fr, f.Metrics)]


class Container:
    """The loop's side: a pool of one worker (not started) adding what it hears to ``registry``."""

    def __init__(self) -> None:
        self.registry = MetricsRegistry()
        self.loop = asyncio.new_event_loop()
        self.pool = WorkerPool(1, MIN_CAPACITY, self.loop, self.registry, lambda e: None)

    def hear(self, frames: list[Any]) -> None:
        for fr in frames:
            if isinstance(fr, f.Metrics):
                self.pool._handle(self.pool.workers[0], fr)

    def close(self) -> None:
        self.pool.kill()
        self.loop.close()


@pytest.fixture
def container() -> Any:
    c = Container()
    yield c
    c.close()


def test_metrics_go_out_once_per_interval_with_the_reports(container: Container) -> None:
    w, tx = _worker()
    _process(w, 0, 10)
    w._send_out()
    assert not _metrics(tx.frames), "metrics went out before their interval"
    w._metrics_due = 0  # the interval has passed
    _process(w, 10, 5)
    w._send_out()
    sent = _metrics(tx.frames)
    assert len(sent) == 1
    container.hear(tx.frames)
    snap = container.registry.snapshot()
    assert snap[GROUP]["send-calls"] == 15
    assert snap[GROUP]["seen"] == 15
    assert snap[GROUP]["size"] == 15
    assert snap[GROUP]["lookup-ns"] == {"avg": 100, "count": 15, "max": 100}
    tx.frames.clear()
    w._send_out()
    assert not _metrics(tx.frames), "the next ones wait for the next interval"


def test_a_removed_task_sends_its_last_counts_before_task_removed(container: Container) -> None:
    w, tx = _worker()
    _process(w, 0, 7)
    w._remove_task(0)
    w._send_out()
    kinds = [type(fr).__name__ for fr in tx.frames]
    assert kinds[-2:] == ["Metrics", "TaskRemoved"], kinds
    container.hear(tx.frames)
    assert container.registry.snapshot()[GROUP]["send-calls"] == 7
    assert container.registry.snapshot()[GROUP]["seen"] == 7


def test_stop_sends_the_last_counts_of_every_task_before_stopped(container: Container) -> None:
    w, tx = _worker()
    _process(w, 0, 4)
    w._metrics_due = 0
    w._send_out()  # 4 went out with the reports
    _process(w, 4, 3)
    w._stop()
    kinds = [type(fr).__name__ for fr in tx.frames]
    assert kinds[-2:] == ["Metrics", "Stopped"], kinds
    container.hear(tx.frames)
    assert container.registry.snapshot()[GROUP]["send-calls"] == 7  # each count added once


def test_a_task_that_comes_back_to_its_worker_counts_from_zero(container: Container) -> None:
    w, tx = _worker()
    _process(w, 0, 6)
    w._remove_task(0)
    w._send_out()
    container.hear(tx.frames)
    container.registry.remove(GROUP)  # as the container does once TaskRemoved came
    tx.frames.clear()
    w.tasks = {1: WorkerTask(_runtime(w))}  # the same task, taken on again by the same worker
    w._process(f.Process(1, 0, [(0, [(o, None, b"x", 0) for o in range(6, 8)])]))
    w._metrics_due = 0
    w._send_out()
    container.hear(tx.frames)
    assert container.registry.snapshot()[GROUP]["send-calls"] == 2
    assert container.registry.snapshot()[GROUP]["mode"] == "fast"  # sent again, though unchanged


def test_metrics_too_large_for_one_ring_record_go_in_several_frames(container: Container) -> None:
    w, tx = _worker()
    for i in range(200):
        w.metrics.counter(GROUP, f"a-rather-long-metric-name-of-the-task-number-{i}").inc(i + 1)
    w.max_frame = 1024  # a small ring's record limit
    _process(w, 0, 3)
    w._stop()
    sent = _metrics(tx.frames)
    assert len(sent) > 1
    assert all(len(f.encode(fr)) <= 1024 for fr in sent)
    container.hear(tx.frames)
    snap = container.registry.snapshot()[GROUP]
    assert sum(v for n, v in snap.items() if n.startswith("a-rather")) == sum(range(1, 201))
    assert snap["send-calls"] == 3
