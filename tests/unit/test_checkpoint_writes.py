"""Checkpoint writes gathered (``samzamp.commit.checkpoint_writes``): the commits under way at once
write their checkpoints in one batch with one flush, each commit returns only once its own record
was acknowledged, and a batch that fails fails every commit in it."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from samzamp.api.envelope import SystemStreamPartition
from samzamp.api.errors import CheckpointError
from samzamp.commit.checkpoint_writes import CheckpointWrites
from samzamp.commit.topic_checkpoint import CheckpointWrite, TopicCheckpointManager
from samzamp.systems.inmemory.system import InMemoryStreams, InMemorySystemAdmin, InMemorySystemProducer

TOPIC = "__samza_checkpoint_ver_1_for_wc_1"
SSP = SystemStreamPartition("kafka", "lines", 0)


class CountingProducer(InMemorySystemProducer):
    def __init__(self, streams: InMemoryStreams) -> None:
        super().__init__(streams)
        self.flushes = 0

    def flush(self, timeout_s: float) -> int:
        self.flushes += 1
        return super().flush(timeout_s)


def test_a_batch_of_checkpoints_is_one_flush_and_each_task_reads_back_its_own() -> None:
    streams = InMemoryStreams()
    producer = CountingProducer(streams)
    manager = TopicCheckpointManager(InMemorySystemAdmin(streams), producer, TOPIC, "GroupByPartition")
    manager.create_topic()
    written = manager.write_checkpoints(
        [CheckpointWrite(f"Partition {p}", {SSP._replace(partition=p): p}) for p in range(5)]
    )
    assert [c.task_name for c in written] == [f"Partition {p}" for p in range(5)]
    assert producer.flushes == 1
    last = manager.read_last_checkpoints()
    assert {t: c.offsets() for t, c in last.items()} == {
        f"Partition {p}": {SSP._replace(partition=p): p} for p in range(5)
    }


class SlowWriter:
    """Writes one at a time (a test's fake has only ``write_checkpoint``), the first write held until released."""

    run_id = ""

    def __init__(self, fail: str | None = None) -> None:
        self.release = threading.Event()
        self.calls: list[str] = []
        self.fail = fail

    def write_checkpoint(self, task_name: str, offsets: Any, markers: Any, **_: Any) -> None:
        if not self.calls:
            self.release.wait(10)
        self.calls.append(task_name)
        if task_name == self.fail:
            raise CheckpointError(f"checkpoint of task {task_name!r} could not be written")


def test_checkpoints_asked_for_during_a_write_go_together_in_the_next_and_each_waits_for_its_own() -> None:
    async def main() -> None:
        writer = SlowWriter()
        writes = CheckpointWrites(writer)
        first = asyncio.create_task(writes.write("t0", {SSP: 1}, {}))
        await asyncio.sleep(0.05)  # t0's batch is being written: the next ones gather
        rest = [asyncio.create_task(writes.write(f"t{i}", {SSP: 1}, {})) for i in range(1, 4)]
        await asyncio.sleep(0.05)
        assert not first.done()
        assert not any(r.done() for r in rest)
        writer.release.set()
        await asyncio.gather(first, *rest)
        assert writer.calls == ["t0", "t1", "t2", "t3"]
        # Idle again: the next write starts a batch of its own.
        await writes.write("t4", {SSP: 2}, {})
        assert writer.calls[-1] == "t4"

    asyncio.run(main())


def test_a_batch_that_fails_fails_every_commit_in_it_and_the_next_batch_is_written() -> None:
    async def main() -> None:
        writer = SlowWriter(fail="t2")
        writes = CheckpointWrites(writer)
        first = asyncio.create_task(writes.write("t0", {SSP: 1}, {}))
        await asyncio.sleep(0.05)
        rest = [asyncio.create_task(writes.write(f"t{i}", {SSP: 1}, {})) for i in range(1, 4)]
        await asyncio.sleep(0.05)
        writer.release.set()
        await first
        results = await asyncio.gather(*rest, return_exceptions=True)
        assert all(isinstance(r, CheckpointError) for r in results)
        await writes.write("t5", {SSP: 1}, {})
        assert writer.calls[-1] == "t5"

    asyncio.run(main())


def test_the_run_id_is_the_writers() -> None:
    writer = SlowWriter()
    writer.run_id = "run-7"
    assert CheckpointWrites(writer).run_id == "run-7"


def test_nothing_to_write_writes_nothing() -> None:
    streams = InMemoryStreams()
    producer = CountingProducer(streams)
    manager = TopicCheckpointManager(InMemorySystemAdmin(streams), producer, TOPIC, "GroupByPartition")
    manager.create_topic()
    assert manager.write_checkpoints([]) == []
    assert producer.flushes == 0
