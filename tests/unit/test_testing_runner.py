"""samzamp.testing.TestRunner: the real run loop over the in-memory system, in every task shape."""

from __future__ import annotations

import asyncio
import threading

import pytest

from samzamp import (
    AsyncStreamTask,
    EndOfStreamListenerTask,
    InitableTask,
    OutgoingMessageEnvelope,
    StreamTask,
    SystemStream,
    TaskError,
    WindowableTask,
)
from samzamp.testing import TestRunner

OUT = SystemStream("test", "out")


class Upper(StreamTask):
    def process(self, envelope, collector, coordinator):
        collector.send(OutgoingMessageEnvelope(OUT, envelope.message.upper(), key=envelope.key))


class UpperCoroutine(AsyncStreamTask):
    async def process_async(self, envelope, collector, coordinator):
        await asyncio.sleep(0.001 * (envelope.offset % 3))
        collector.send(OutgoingMessageEnvelope(OUT, envelope.message.upper()))


class UpperCallback(AsyncStreamTask):
    def process_async(self, envelope, collector, coordinator, callback):
        def work():
            collector_send = OutgoingMessageEnvelope(OUT, envelope.message.upper())
            collector.send(collector_send)
            callback.complete()

        threading.Thread(target=work).start()


class Counting(StreamTask, InitableTask, WindowableTask, EndOfStreamListenerTask):
    def init(self, context):
        self.n = 0
        self.task_name = context.task_name

    def process(self, envelope, collector, coordinator):
        self.n += 1

    def window(self, collector, coordinator):
        pass

    def on_end_of_stream(self, collector, coordinator):
        collector.send(OutgoingMessageEnvelope(OUT, [self.task_name, self.n]))


class Failing(StreamTask):
    def process(self, envelope, collector, coordinator):
        if envelope.message == "bad":
            raise ValueError("cannot handle bad")


def test_sync_task_outputs_in_partition_order():
    result = TestRunner(Upper).add_input("in", ["a", "b", "c", "d"], partitions=1).run()
    assert result.messages("out") == ["A", "B", "C", "D"]


@pytest.mark.parametrize("task", [UpperCoroutine, UpperCallback])
def test_async_tasks_process_every_message(task):
    msgs = [f"m{i}" for i in range(200)]
    result = TestRunner(task, {"task.max.concurrency": 4}).add_input("in", msgs, partitions=2).run()
    assert sorted(result.messages("out")) == sorted(m.upper() for m in msgs)


def test_end_of_stream_per_task_with_group_by_partition():
    result = TestRunner(Counting).add_input("in", list(range(10)), partitions=3).run()
    assert sorted(result.messages("out")) == [["Partition 0", 4], ["Partition 1", 3], ["Partition 2", 3]]


def test_group_by_ssp_names_tasks_as_samza_does():
    result = (
        TestRunner(Counting, {"job.systemstreampartition.grouper.factory": "GroupBySystemStreamPartition"})
        .add_input("in", list(range(4)), partitions=2)
        .run()
    )
    names = sorted(name for name, _ in result.messages("out"))
    assert names == ["SystemStreamPartition [test, in, 0]", "SystemStreamPartition [test, in, 1]"]


def test_task_failure_names_task_ssp_and_offset():
    with pytest.raises(TaskError) as info:
        TestRunner(Failing).add_input("in", ["ok", "ok", "bad", "ok"]).run()
    text = str(info.value)
    assert "Partition 0" in text
    assert "SystemStreamPartition [test, in, 0]" in text
    assert "offset 2" in text


class NeverCompletes(AsyncStreamTask):
    def process_async(self, envelope, collector, coordinator, callback):
        pass  # the callback is never called


def test_callback_timeout_fails_the_container():
    from samzamp import CallbackTimeoutError

    with pytest.raises(CallbackTimeoutError, match="offset 0 timed out after 200 ms"):
        TestRunner(NeverCompletes, {"task.callback.timeout.ms": 200}).add_input("in", ["x"]).run(timeout_s=10)


def test_ignored_exceptions_let_processing_continue():
    result = TestRunner(Failing, {"task.ignored.exceptions": "ValueError"}).add_input("in", ["ok", "bad", "ok"]).run()
    assert result.metrics["TaskName-Partition 0"]["messages-actually-processed"] == 3


class FailsAtEndOfStream(StreamTask, EndOfStreamListenerTask):
    def process(self, envelope, collector, coordinator):
        collector.send(OutgoingMessageEnvelope(SystemStream("test", "out"), envelope.message))

    def on_end_of_stream(self, collector, coordinator):
        collector.send(OutgoingMessageEnvelope(SystemStream("test", "out"), "end"))
        raise ValueError("at the end")


def test_an_ignored_exception_in_on_end_of_stream_is_ignored_like_in_window_and_drain():
    # Samza's task.ignored.exceptions covers window, end of stream and drain alike.
    result = TestRunner(FailsAtEndOfStream, {"task.ignored.exceptions": "ValueError"}).add_input("in", ["a", "b"]).run()
    assert result.messages("out") == ["a", "b", "end"]
    with pytest.raises(TaskError, match="at the end"):
        TestRunner(FailsAtEndOfStream).add_input("in", ["a"]).run()
