"""samzamp.testing.TestRunner: the real run loop over the in-memory system, in every task shape."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

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


# -- a test kit closer to TopologyTestDriver ---------------------------------------------------------


class WordCount(StreamTask, InitableTask, WindowableTask):
    """docs/task-api.md's task, as written there: it sends to system "kafka", which the test config does not name."""

    def init(self, context):
        self.counts = {}

    def process(self, envelope, collector, coordinator):
        self.counts[envelope.message] = self.counts.get(envelope.message, 0) + 1

    def window(self, collector, coordinator):
        for word, n in self.counts.items():
            collector.send(OutgoingMessageEnvelope(SystemStream("kafka", "counts"), n, key=word))


def test_the_readme_word_count_emits_its_counts_at_the_end_of_its_input():
    result = TestRunner(WordCount, {"task.window.ms": 10}).add_input("words", ["a", "b", "a"]).run()
    assert result.messages("counts") == [2, 1]
    assert result.records("counts") == [[("a", 2), ("b", 1)]]


class Ordered(StreamTask, WindowableTask, EndOfStreamListenerTask):
    def process(self, envelope, collector, coordinator):
        collector.send(OutgoingMessageEnvelope(OUT, ["process", envelope.message]))

    def window(self, collector, coordinator):
        collector.send(OutgoingMessageEnvelope(OUT, "window"))

    def on_end_of_stream(self, collector, coordinator):
        collector.send(OutgoingMessageEnvelope(OUT, "end of stream"))


def test_end_of_input_runs_a_last_window_then_on_end_of_stream_unless_turned_off():
    result = TestRunner(Ordered).add_input("in", ["x", "y"]).run()
    assert result.messages("out") == [["process", "x"], ["process", "y"], "window", "end of stream"]
    off = TestRunner(Ordered, {"task.window.on.end.of.stream": False}).add_input("in", ["x"]).run()
    assert off.messages("out") == [["process", "x"], "end of stream"]


def test_the_container_runs_no_extra_window_at_the_end_of_input_by_default():
    from samzamp.config import load_config, validate

    task = f"{Ordered.__module__}:Ordered"
    config = {"job.name": "j", "task.class": task, "task.inputs": "k.s", "systems.k.samza.factory": "kafka"}
    assert validate(load_config(None, config)).task.window_on_end_of_stream is False
    config["task.window.on.end.of.stream"] = "true"
    assert validate(load_config(None, config)).task.window_on_end_of_stream is True


class Greeter(StreamTask):
    def process(self, envelope, collector, coordinator):
        greeting = f"hello {envelope.message}"
        collector.send(OutgoingMessageEnvelope(SystemStream("kafka", "greetings"), greeting, key=envelope.key))


GREETER_TOML = f"""
[job]
name = "greeter"
[task]
class = "{Greeter.__module__}:Greeter"
inputs = ["kafka.names", "kafka.unused"]
[systems.kafka]
samza.factory = "kafka"
bootstrap.servers = "broker.example.com:9093"
consumer."security.protocol" = "SASL_SSL"
samza.key.serde = "string"
samza.msg.serde = "string"
"""


def test_the_jobs_own_systems_become_in_memory_with_their_serdes(tmp_path):
    job = tmp_path / "job.toml"
    job.write_text(GREETER_TOML)
    result = TestRunner.from_config(job).add_input("names", ["ann", "bob"], keys=["1", "1"]).run()
    assert result.records("greetings") == [[("1", "hello ann"), ("1", "hello bob")]]
    # The job's serdes, not the runner's msgpack: "string" on the wire.
    assert [v for _o, _k, v, _t in result.processor.inmemory["kafka"].partitions["greetings"][0]] == [
        b"hello ann",
        b"hello bob",
    ]
    assert "test" not in result.processor.inmemory  # the job's system is the only one


class Stamps(StreamTask):
    def process(self, envelope, collector, coordinator):
        collector.send(OutgoingMessageEnvelope(OUT, [envelope.key, envelope.message, envelope.timestamp]))


def test_inputs_carry_keys_and_timestamps_to_the_envelope():
    from samzamp.testing import Record

    result = (
        TestRunner(Stamps)
        .add_partitioned_input("in", [[Record("a", key="k1", timestamp=1000)], [Record("b", timestamp=2000)]])
        .run()
    )
    assert sorted(result.messages("out"), key=str) == [["k1", "a", 1000], [None, "b", 2000]]
    result = TestRunner(Stamps).add_input("in", ["c", "d"], keys=["x", "y"], timestamps=[5, 6]).run()
    assert result.messages("out") == [["x", "c", 5], ["y", "d", 6]]


class KeysPerTask(StreamTask, InitableTask):
    def init(self, context):
        self.task_name = context.task_name

    def process(self, envelope, collector, coordinator):
        collector.send(OutgoingMessageEnvelope(OUT, [self.task_name, envelope.key]))


def test_keyed_input_goes_to_the_partition_its_key_hashes_to():
    words = ["a", "a", "d", "d", "b", "e"]  # round-robin would split a and d over both partitions
    result = TestRunner(KeysPerTask).add_input("in", words, partitions=2, keys=words).run()
    tasks_of: dict[str, set[str]] = {}
    for task, key in result.messages("out"):
        tasks_of.setdefault(key, set()).add(task)
    assert all(len(tasks) == 1 for tasks in tasks_of.values())  # one key, one partition
    assert len(set().union(*tasks_of.values())) == 2  # and both partitions got some


class StoreCounter(StreamTask, InitableTask):
    def init(self, context):
        self.store = context.get_store("counts")

    def process(self, envelope, collector, coordinator):
        word = envelope.message
        self.store.put(word, (self.store.get(word) or 0) + 1)


STORE_CONFIG = {
    "stores.counts.factory": "lmdb",
    "stores.counts.key.serde": "string",
    "stores.counts.msg.serde": "long",
    "stores.counts.changelog": "kafka.counts-changelog",
    "systems.kafka.samza.factory": "kafka",
    "systems.kafka.samza.key.serde": "string",
    "systems.kafka.samza.msg.serde": "string",
}


def test_a_store_is_read_after_the_run_as_the_final_commit_left_it():
    # With the string serde and Kafka's murmur2 placement, a and e go to partition 0, d to 1.
    words = ["a", "d", "a", "e", "a", "d"]
    result = TestRunner(StoreCounter, STORE_CONFIG).add_input("words", words, partitions=2, keys=words).run()
    assert result.store("counts") == {"a": 3, "d": 2, "e": 1}
    assert result.store("counts", task="Partition 0") == {"a": 3, "e": 1}
    assert result.store("counts", task="Partition 1") == {"d": 2}
    base = Path(result.settings.non_logged_store_base_dir)
    assert base.name.startswith("samzamp-test-")
    assert (base / "counts" / "Partition_0").is_dir()
    result.close()
    assert not base.exists()


def test_in_memory_bounded_partitions_end_in_the_same_poll_as_their_last_messages():
    from samzamp import SystemStreamPartition
    from samzamp.systems.base import END_OF_STREAM, OLDEST
    from samzamp.systems.inmemory import InMemoryStreams, InMemorySystemConsumer

    streams = InMemoryStreams()
    streams.create("in", 1, bounded=True)
    streams.append("in", 0, None, b"m", 42)
    consumer = InMemorySystemConsumer(streams)
    ssp = SystemStreamPartition("test", "in", 0)
    consumer.register(ssp, OLDEST)
    assert consumer.poll(0.01) == {ssp: [(0, None, b"m", 42), (END_OF_STREAM, None, None, 0)]}
    assert consumer.poll(0.01) == {}
