"""Runs of messages (task.consumer.batch.size): an inline task takes several messages of one SSP per
choice, and must behave exactly as one message per choice does: order, commit and shutdown requests
handled before the next message, no progress recorded past a failure."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest

from samzamp import (
    CheckpointListenerTask,
    OutgoingMessageEnvelope,
    StreamTask,
    SystemStream,
    TaskError,
)
from samzamp.testing import TestRunner

OUT = SystemStream("test", "out")
BATCH_SIZES = [0, 1, 7, 50]


class Echo(StreamTask):
    def process(self, envelope, collector, coordinator):
        collector.send(OutgoingMessageEnvelope(OUT, [envelope.system_stream_partition.partition, envelope.offset]))


@pytest.mark.parametrize("batch", BATCH_SIZES)
def test_every_message_once_in_partition_order(batch: int) -> None:
    result = (
        TestRunner(Echo, {"task.consumer.batch.size": batch}).add_input("in", list(range(3000)), partitions=3).run()
    )
    seen: dict[int, list[int]] = {}
    for partition, offset in result.messages("out"):
        seen.setdefault(partition, []).append(offset)
    assert seen == {p: list(range(1000)) for p in range(3)}
    for p in range(3):  # the per-SSP offset gauge follows what was processed
        assert result.metrics[f"TaskName-Partition {p}"][f"test-in-{p}-offset"] == 999


class CommitEveryTenth(StreamTask, CheckpointListenerTask):
    """Records the order of process calls and commits; asks for a commit after every tenth message."""

    events: ClassVar[list[tuple[str, Any]]] = []

    def process(self, envelope, collector, coordinator):
        self.events.append(("process", envelope.offset))
        if envelope.offset % 10 == 9:
            coordinator.commit()

    def before_commit(self) -> None:
        self.events.append(("commit", None))


@pytest.mark.parametrize("batch", BATCH_SIZES)
def test_commit_request_commits_before_the_next_message(batch: int) -> None:
    CommitEveryTenth.events = []
    TestRunner(CommitEveryTenth, {"task.consumer.batch.size": batch}).add_input("in", list(range(100))).run()
    events = CommitEveryTenth.events
    for i, (kind, offset) in enumerate(events):
        if kind == "process" and offset % 10 == 9 and i + 1 < len(events):
            assert events[i + 1] == ("commit", None), f"message {offset} asked for a commit; next was {events[i + 1]}"
    assert [o for k, o in events if k == "process"] == list(range(100))


class ShutdownAtFive(StreamTask):
    processed: ClassVar[list[int]] = []

    def process(self, envelope, collector, coordinator):
        self.processed.append(envelope.offset)
        if envelope.offset == 5:
            coordinator.shutdown()


@pytest.mark.parametrize("batch", BATCH_SIZES)
def test_shutdown_request_stops_before_the_next_message(batch: int) -> None:
    ShutdownAtFive.processed = []
    result = TestRunner(ShutdownAtFive, {"task.consumer.batch.size": batch}).add_input("in", list(range(100))).run()
    assert ShutdownAtFive.processed == [0, 1, 2, 3, 4, 5]
    assert result.metrics["TaskName-Partition 0"]["messages-actually-processed"] == 6


class FailAtTwenty(StreamTask):
    def process(self, envelope, collector, coordinator):
        if envelope.offset == 20:
            raise ValueError("offset 20 is poison")
        collector.send(OutgoingMessageEnvelope(OUT, envelope.offset))


@pytest.mark.parametrize("batch", BATCH_SIZES)
def test_failure_mid_run_stops_at_the_failed_message(batch: int) -> None:
    runner = TestRunner(FailAtTwenty, {"task.consumer.batch.size": batch}).add_input("in", list(range(100)))
    with pytest.raises(TaskError, match="offset 20") as info:
        runner.run()
    assert "Partition 0" in str(info.value)


class IgnoredFailures(StreamTask):
    def process(self, envelope, collector, coordinator):
        if envelope.offset % 4 == 0:
            raise KeyError(envelope.offset)
        collector.send(OutgoingMessageEnvelope(OUT, envelope.offset))


@pytest.mark.parametrize("batch", BATCH_SIZES)
def test_ignored_exceptions_mid_run_go_on(batch: int) -> None:
    result = (
        TestRunner(IgnoredFailures, {"task.consumer.batch.size": batch, "task.ignored.exceptions": "KeyError"})
        .add_input("in", list(range(40)))
        .run()
    )
    assert result.messages("out") == [o for o in range(40) if o % 4]
    assert result.metrics["TaskName-Partition 0"]["messages-actually-processed"] == 40


class PickySerde:
    """A string serde that cannot decode the value b"bad"."""

    def to_bytes(self, value):
        return value.encode()

    def from_bytes(self, data):
        if data == b"bad":
            raise ValueError("undecodable")
        return data.decode()


class Forward(StreamTask):
    def process(self, envelope, collector, coordinator):
        collector.send(OutgoingMessageEnvelope(OUT, envelope.message))


@pytest.mark.parametrize("batch", BATCH_SIZES)
def test_dropped_undecodable_messages_mid_run_and_first_in_a_run(batch: int) -> None:
    config = {
        "task.consumer.batch.size": batch,
        "task.drop.deserialization.errors": True,
        "serializers.registry.picky.class": f"{__name__}:PickySerde",
        "systems.test.samza.msg.serde": "picky",
    }
    messages = ["bad", "a", "b", "bad", "c", "bad"]
    result = TestRunner(Forward, config).add_input("in", messages).run()
    assert result.messages("out") == ["a", "b", "c"]
    assert result.metrics["SystemConsumersMetrics"]["deserialization error"] == 3
