"""``SamzaContainer.apply`` on the in-memory system: tasks that stay run on untouched, tasks that
leave finish and commit and close, tasks that arrive resume from their checkpoint. The same moves
against the real broker, with stores and worker processes: tests/integration/test_dynamic_tasks.py."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import msgspec
import pytest

from samzamp import ClosableTask, InitableTask, StreamTask
from samzamp.api.errors import TaskError
from samzamp.config import load_config, validate
from samzamp.model.job_model import JobModel
from samzamp.processor.stream_processor import StreamProcessor
from samzamp.systems.inmemory.system import InMemoryStreams

EVENTS: list[tuple[Any, ...]] = []
CHANGED = threading.Condition()


class Tenured(StreamTask, InitableTask, ClosableTask):
    """Records ("I", task, id) at init, ("P", task, id, offset) per message, ("E", task, id) at close."""

    fail_init = False

    def init(self, context: Any) -> None:
        self.name = context.task_name
        self.id = id(self)
        if Tenured.fail_init:
            raise RuntimeError("init failed on purpose")
        _event("I", self.name, self.id)

    def process(self, envelope: Any, collector: Any, coordinator: Any) -> None:
        _event("P", self.name, self.id, envelope.offset)

    def close(self) -> None:
        _event("E", self.name, self.id)


def _event(*e: Any) -> None:
    with CHANGED:
        EVENTS.append(e)
        CHANGED.notify_all()


async def _until(pred: Callable[[], bool]) -> None:
    def wait() -> bool:
        with CHANGED:
            return CHANGED.wait_for(pred, 10)

    assert await asyncio.to_thread(wait), "timed out"


def _processed(task: str) -> list[int]:
    return [e[3] for e in EVENTS if e[0] == "P" and e[1] == task]


def _processor(streams: InMemoryStreams, **more: Any) -> StreamProcessor:
    config = {
        "job.name": "job",
        "job.default.system": "mem",
        "task.class": f"{Tenured.__module__}:{Tenured.__qualname__}",
        "task.inputs": ["mem.in"],
        "task.commit.ms": -1,
        "metrics.log.interval.ms": 0,
        "systems.mem.samza.factory": "inmemory",
        "systems.mem.samza.msg.serde": "msgpack",
        "systems.mem.default.stream.samza.offset.default": "oldest",
        **more,
    }
    return StreamProcessor(validate(load_config(None, config)), inmemory={"mem": streams})


def _append(streams: InMemoryStreams, partition: int, n: int) -> None:
    for i in range(n):
        streams.append("in", partition, None, msgspec.msgpack.encode(i))


def test_a_task_leaves_and_comes_back_where_its_checkpoint_left_it() -> None:
    EVENTS.clear()
    streams = InMemoryStreams()
    streams.create("in", 2)  # unbounded: the test decides when the job stops
    _append(streams, 0, 10)
    _append(streams, 1, 10)
    processor = _processor(streams)

    async def main() -> None:
        run = asyncio.create_task(processor.run())
        await _until(lambda: len(_processed("Partition 0")) == 10 and len(_processed("Partition 1")) == 10)
        container = processor.container
        assert container is not None
        full = container.job_model
        staying = container.tasks["Partition 0"]
        await container.apply(full.only(["Partition 0"], generation=2))
        assert list(container.tasks) == ["Partition 0"]
        assert container.tasks["Partition 0"] is staying
        snapshot = processor.metrics.snapshot()
        assert "TaskName-Partition 1" not in snapshot
        assert "TaskName-Partition 0" in snapshot
        # Input of the task that left waits; the staying task goes on.
        _append(streams, 1, 5)
        _append(streams, 0, 5)
        await _until(lambda: len(_processed("Partition 0")) == 15)
        assert len(_processed("Partition 1")) == 10
        with pytest.raises(ValueError, match="not newer"):
            await container.apply(JobModel(2, dict(full.tasks)))
        await container.apply(JobModel(3, dict(full.tasks)))
        assert container.tasks["Partition 0"] is staying
        await _until(lambda: len(_processed("Partition 1")) == 15)
        processor.stop()
        await asyncio.wait_for(run, 10)

    asyncio.run(main())
    # Partition 1's second tenure resumed after the first one's final checkpoint: nothing twice.
    assert _processed("Partition 1") == list(range(15))
    assert _processed("Partition 0") == list(range(15))
    p1 = [e for e in EVENTS if e[1] == "Partition 1" and e[0] in "IE"]
    assert [e[0] for e in p1] == ["I", "E", "I", "E"]
    p0 = [e[0] for e in EVENTS if e[1] == "Partition 0" and e[0] in "IE"]
    assert p0 == ["I", "E"]  # untouched by both applies


def test_a_broadcast_partitions_gauges_stay_while_any_task_reads_it_and_speak_for_the_slowest() -> None:
    EVENTS.clear()
    streams = InMemoryStreams()
    streams.create("in", 2)
    streams.create("bc", 1)
    _append(streams, 0, 2)
    _append(streams, 1, 2)
    for i in range(3):
        streams.append("bc", 0, None, msgspec.msgpack.encode(i))
    processor = _processor(streams, **{"task.broadcast.inputs": "mem.bc#0"})
    checkpointed, behind = "mem-bc-0-checkpointed-offset", "mem-bc-0-messages-behind-high-watermark"

    async def main() -> None:
        run = asyncio.create_task(processor.run())
        await _until(lambda: len(_processed("Partition 0")) == 5 and len(_processed("Partition 1")) == 5)
        container = processor.container
        assert container is not None
        full = container.job_model
        # Partition 1 leaves with a final checkpoint of bc-0 at 2; Partition 0, which reads bc-0 too,
        # has none yet, so a restart of it would not resume past 2: the gauge must not say 2.
        await container.apply(full.only(["Partition 0"], generation=2))
        snapshot = processor.metrics.snapshot()
        assert snapshot["OffsetManagerMetrics"][checkpointed] is None
        assert snapshot["SystemConsumersMetrics"][behind] == 0
        # Now Partition 0 leaves (checkpoint 2) and Partition 1 comes back from its own checkpoint.
        await container.apply(full.only(["Partition 1"], generation=3))
        assert processor.metrics.snapshot()["OffsetManagerMetrics"][checkpointed] == 2
        await container.apply(JobModel(4, {}))
        snapshot = processor.metrics.snapshot()
        assert checkpointed not in snapshot.get("OffsetManagerMetrics", {})
        assert behind not in snapshot.get("SystemConsumersMetrics", {})
        processor.stop()
        await asyncio.wait_for(run, 10)

    asyncio.run(main())


def test_a_task_that_cannot_start_fails_the_container_not_only_the_apply() -> None:
    EVENTS.clear()
    streams = InMemoryStreams()
    streams.create("in", 2)
    _append(streams, 0, 3)
    _append(streams, 1, 3)
    processor = _processor(streams)

    async def main() -> None:
        run = asyncio.create_task(processor.run())
        await _until(lambda: len(_processed("Partition 0")) == 3 and len(_processed("Partition 1")) == 3)
        container = processor.container
        assert container is not None
        full = container.job_model
        await container.apply(full.only(["Partition 0"], generation=2))
        Tenured.fail_init = True
        try:
            with pytest.raises(TaskError, match="init failed on purpose"):
                await container.apply(JobModel(3, dict(full.tasks)))
        finally:
            Tenured.fail_init = False
        # Half a model is never run: the processor fails too, with the same error.
        with pytest.raises(TaskError, match="init failed on purpose"):
            await asyncio.wait_for(run, 10)

    asyncio.run(main())
