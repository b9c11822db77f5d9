"""The high-level API's graph, plan and record format, and applications run in memory
(``TestRunner.from_app``): operator ids, the config the graph derives, the intermediate record
format and the end-of-stream counting that ends a run by itself."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from high_level_apps import AsyncRekey, FilterMerge, Rekey

from samzamp import (
    ConfigError,
    SerdeError,
    StreamApplicationDescriptor,
    SystemStream,
    SystemStreamPartition,
    Windows,
)
from samzamp.config import validate
from samzamp.config.config import Config
from samzamp.operators.control import EndOfStreamStates
from samzamp.serde.intermediate import (
    DrainMessage,
    EndOfStreamMessage,
    IntermediateMessageSerde,
    WatermarkMessage,
    aggregate_partition,
    java_string_hash,
)
from samzamp.serde.registry import JsonSerde
from samzamp.testing import TestRunner

BASE = {
    "job.name": "wordcount",
    "job.id": "1",
    "job.default.system": "kafka",
    "systems.kafka.samza.factory": "kafka",
}


def _settings(app: str, **extra: Any) -> Any:
    return validate(Config({**BASE, "app.class": app, **extra}))


# -- op ids ----------------------------------------------------------------------------------------
def test_op_ids_are_job_name_id_opcode_and_the_user_id_or_the_position() -> None:
    g = StreamApplicationDescriptor("wordcount", "1")
    words = g.input_stream("lines").flat_map(str.split).filter(bool)
    keyed = words.partition_by(lambda w: w, lambda w: 1, id="by-word")
    keyed.window(Windows.keyed_tumbling_window(lambda kv: kv.key, timedelta(seconds=2), int, lambda m, n: n), id="c")
    ids = [op.op_id for op in g.operators]
    assert ids == [
        "lines",
        "wordcount-1-flat_map-0",
        "wordcount-1-filter-1",
        "wordcount-1-partition_by-by-word",
        "wordcount-1-partition_by-by-word",  # the intermediate stream's input: Samza's stream id
        "wordcount-1-window-c",
    ]
    assert [op.opcode for op in g.operators][-3:] == ["partition_by", "input", "window"]


@pytest.mark.parametrize("bad", ["has space", "dot.ted", "", "ü"])
def test_an_id_with_characters_a_topic_or_key_cannot_have_is_refused(bad: str) -> None:
    g = StreamApplicationDescriptor("wordcount", "1")
    with pytest.raises(ConfigError, match="partition_by operator id"):
        g.input_stream("lines").partition_by(lambda w: w, lambda w: 1, id=bad)


def test_a_duplicate_id_names_the_operator() -> None:
    g = StreamApplicationDescriptor("wordcount", "1")
    s = g.input_stream("lines")
    s.partition_by(lambda w: w, lambda w: 1, id="same")
    with pytest.raises(ConfigError, match="wordcount-1-partition_by-same"):
        s.partition_by(lambda w: w, lambda w: 1, id="same")


def test_an_id_too_long_for_a_topic_is_refused() -> None:
    g = StreamApplicationDescriptor("j" * 245, "1")
    with pytest.raises(ConfigError, match="at most 249"):
        g.input_stream("lines").map(str)


def test_the_digest_is_the_same_for_the_same_graph_and_differs_for_another() -> None:
    def build(user_id: str) -> str:
        g = StreamApplicationDescriptor("wordcount", "1")
        g.input_stream("lines").partition_by(lambda w: w, lambda w: 1, id=user_id).send_to(g.output_stream("out"))
        return g.digest()

    assert build("a") == build("a")
    assert build("a") != build("b")


# -- the plan --------------------------------------------------------------------------------------
def test_the_graph_derives_inputs_intermediate_streams_stores_and_the_window_timer() -> None:
    st = _settings("high_level_apps:Rekey")
    assert st.task.task_class == ""
    topic = "wordcount-1-partition_by-by-word"
    assert st.task.inputs == (SystemStream("kafka", "lines"), SystemStream("kafka", topic))
    assert st.task.intermediate == frozenset({SystemStream("kafka", topic)})
    stream = st.stream(SystemStream("kafka", topic))
    assert stream.intermediate
    assert stream.offset_default == "oldest"  # whatever the system's default says
    assert (stream.key_serde, stream.msg_serde) == ("json", "json")
    assert st.application is not None
    assert st.application.feeds == {SystemStream("kafka", topic): frozenset({SystemStream("kafka", "lines")})}


def test_windows_and_joins_get_changelogged_stores_and_the_gcd_of_their_durations_as_window_ms() -> None:
    st = _settings("high_level_apps:WindowJoin")
    assert st.task.window_ms == 2000
    for store in ("wordcount-1-window-w", "wordcount-1-join-j-L", "wordcount-1-join-j-R"):
        s = st.stores[store]
        assert s.changelog == SystemStream("kafka", store)
        assert (s.key_serde, s.msg_serde) == ("json", "json")
    assert st.stream(SystemStream("kafka", "a")).key_serde == "string"
    assert st.application is not None
    [join] = st.application.joins
    assert (join.left, join.right) == (frozenset({SystemStream("kafka", "a")}), frozenset({SystemStream("kafka", "b")}))


def test_the_users_keys_win_over_what_the_graph_derives() -> None:
    st = _settings("high_level_apps:Rekey", **{"task.window.ms": 500, "streams.lines.samza.msg.serde": "string"})
    assert st.task.window_ms == 500
    assert st.stream(SystemStream("kafka", "lines")).msg_serde == "string"


def test_app_class_and_task_class_together_is_an_error_naming_both() -> None:
    with pytest.raises(ConfigError, match="app.class: and task.class are both set"):
        _settings("high_level_apps:Rekey", **{"task.class": "samzamp.examples.word_count:WordCountTask"})


def test_a_class_that_is_not_a_stream_application_is_an_error() -> None:
    with pytest.raises(ConfigError, match="must be a class that subclasses samzamp.StreamApplication"):
        _settings("high_level_apps:NotAnApplication")


def test_task_inputs_that_differ_from_the_graphs_are_an_error() -> None:
    with pytest.raises(ConfigError, match="task.inputs"):
        _settings("high_level_apps:Rekey", **{"task.inputs": ["kafka.other"]})
    same = ["kafka.lines", "kafka.wordcount-1-partition_by-by-word"]
    assert _settings("high_level_apps:Rekey", **{"task.inputs": same}).task.inputs[0].stream == "lines"


def test_a_duplicate_id_in_describe_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="the id 'same' is used twice"):
        _settings("high_level_apps:DuplicateId")


def test_an_async_function_after_a_window_is_refused_when_the_task_class_is_made() -> None:
    from samzamp.operators.factory import job_task_class

    with pytest.raises(ConfigError, match="async def after window"):
        job_task_class(_settings("high_level_apps:AsyncAfterWindow"))


# -- the record format of intermediate streams -----------------------------------------------------
def test_java_string_hash_and_aggregate_partition_vectors() -> None:
    assert java_string_hash("wordcount-1-partition_by-by-word") == -1034960285
    assert aggregate_partition("wordcount-1-partition_by-by-word", 4) == 1
    assert aggregate_partition("wordcount-1-partition_by-by-word", 8) == 5
    assert java_string_hash("drain-test-1-partition_by-p1") == 1061148352
    assert aggregate_partition("drain-test-1-partition_by-p1", 4) == 0
    assert java_string_hash("") == 0
    assert java_string_hash("a") == 97
    assert java_string_hash("😀") == 1772899  # two UTF-16 code units, as Java counts them


def test_records_round_trip_with_their_type_byte() -> None:
    serde = IntermediateMessageSerde(JsonSerde())
    user = serde.to_bytes({"n": 1})
    assert user[0] == 0
    assert serde.from_bytes(user) == {"n": 1}
    for message, kind in (
        (WatermarkMessage("Partition 0", 123), 1),
        (EndOfStreamMessage("Partition 1"), 2),
        (DrainMessage(None, "run-7"), 3),
    ):
        data = serde.to_bytes(message)
        assert data[0] == kind
        assert serde.from_bytes(data) == message


def test_control_messages_in_samza_s_java_spellings_are_read() -> None:
    serde = IntermediateMessageSerde(JsonSerde())
    assert serde.from_bytes(b'\x03{"version":1,"taskName":"Partition 2","runId":"r1"}') == DrainMessage(
        "Partition 2", "r1"
    )
    assert serde.from_bytes(b'\x02{"version":1,"task-name":null}') == EndOfStreamMessage(None)


@pytest.mark.parametrize("data", [b"\x07{}", b"", b"\x04x"])
def test_an_unknown_type_byte_is_a_deserialization_error(data: bytes) -> None:
    with pytest.raises(SerdeError):
        IntermediateMessageSerde(JsonSerde()).from_bytes(data)


# -- end-of-stream counting ------------------------------------------------------------------------
INTER = SystemStream("kafka", "inter")


def test_a_name_counts_once_and_the_last_producer_completes_the_aggregate_partition() -> None:
    agg, other = SystemStreamPartition("kafka", "inter", 1), SystemStreamPartition("kafka", "inter", 0)
    states = EndOfStreamStates([agg, other], {INTER: 3})
    assert not states.update(agg, "Partition 0")
    assert not states.update(agg, "Partition 0")  # a duplicate counts once
    assert not states.update(agg, "Partition 1")
    assert not states.is_done(agg)
    assert states.update(agg, "Partition 2")  # the third name: done, and the task broadcasts
    assert states.is_done(agg)
    assert not states.update(agg, "Partition 3")  # once done, nothing more to do
    assert not states.stream_done(INTER)
    assert not states.update(other, None)  # an aggregator's copy: done at once, no broadcast
    assert states.stream_done(INTER)
    assert states.seen(agg) == {"Partition 0", "Partition 1", "Partition 2"}


# -- applications in memory ------------------------------------------------------------------------
WORDS = ["a b c", "a b", "z", "c c c"]


def _expected_upper() -> list[str]:
    return sorted(w.upper() for line in WORDS for w in line.split())


@pytest.mark.parametrize("factor", [1, 2])
def test_a_re_keyed_application_ends_by_itself_with_every_message(factor: int) -> None:
    result = TestRunner.from_app(Rekey, {"job.elasticity.factor": factor}).add_input("lines", WORDS, partitions=3).run()
    assert sorted(result.messages("out")) == _expected_upper()
    # The intermediate topic: every word keyed where Kafka's partitioner puts it, and its end of
    # stream counted on the aggregate partition, from each producer task once.
    topic = "test-runner-1-partition_by-by-word"
    parts = result.records(topic)
    assert len(parts) == 3
    agg = aggregate_partition(topic, 3)
    named = [m for _k, m in parts[agg] if isinstance(m, EndOfStreamMessage)]
    assert sorted(m.task_name for m in named) == sorted(_producer_names(result))
    for p, part in enumerate(parts):
        copies = [m for _k, m in part if isinstance(m, EndOfStreamMessage) and m.task_name is None]
        assert len(copies) == (0 if p == agg else 1)
        # No word after the last producer's end of stream on the aggregate partition, nor after the
        # copy on the others: each producer's words were sent (and acknowledged) before its end.
        last_user = max((i for i, (_k, m) in enumerate(part) if not isinstance(m, EndOfStreamMessage)), default=-1)
        ends = [i for i, (_k, m) in enumerate(part) if isinstance(m, EndOfStreamMessage)]
        assert last_user < ends[-1]
    assert result.metrics["OperatorImpl"]["test-runner-1-map-2-messages"] == len(_expected_upper())


def _producer_names(result: Any) -> list[str]:
    """The tasks that read a partition of ``lines``: each sends one named end of stream."""
    tasks = result.processor.container.tasks
    return [name for name, t in tasks.items() if any(s.stream == "lines" for s in t.ssps)]


def test_an_application_with_an_async_function_runs_on_the_loop() -> None:
    result = TestRunner.from_app(AsyncRekey, {"task.max.concurrency": 4}).add_input("lines", WORDS, partitions=2).run()
    assert sorted(result.messages("out")) == _expected_upper()


def test_merge_filter_flat_map_and_sink() -> None:
    result = (
        TestRunner.from_app(FilterMerge, {"job.name": "fm"})
        .add_input("a", [1, 2, 3, 4], partitions=2)
        .add_input("b", [1, 2], partitions=2)
        .run()
    )
    evens = [2, 4, 10, 20]
    assert sorted(result.messages("out")) == sorted([m for e in evens for m in (e, e + 1)])
    assert sorted(result.messages("sunk")) == evens


def test_send_to_sends_a_kv_as_key_and_value() -> None:
    result = TestRunner.from_app(Rekey).add_input("lines", WORDS, partitions=2).run()
    pairs = sorted(rec for part in result.records("out") for rec in part)
    assert pairs == sorted((w.lower(), w) for w in _expected_upper())


def test_the_tasks_commit_writes_the_windows_held_in_memory_to_their_store(tmp_path: Any) -> None:
    from samzamp import IncomingMessageEnvelope, TaskContext
    from samzamp.model.job_model import TaskModel
    from samzamp.operators.factory import job_task_class
    from samzamp.storage.lmdb import LmdbEngine
    from samzamp.storage.store import LmdbKeyValueStore
    from samzamp.task.coordinator import ReadableCoordinator

    st = _settings("high_level_apps:WindowJoin")
    store_name = "wordcount-1-window-w"
    stores = {
        n: LmdbKeyValueStore(n, LmdbEngine(tmp_path / n, sync=False), JsonSerde(), JsonSerde(), None)
        for n in (store_name, "wordcount-1-join-j-L", "wordcount-1-join-j-R")
    }
    store = stores[store_name]
    task = job_task_class(st)()
    ssp = SystemStreamPartition("kafka", "a", 0)
    task.init(
        TaskContext("Partition 0", frozenset([ssp]), st.config, stores, task_model=TaskModel("Partition 0", (ssp,)))
    )
    task.process(IncomingMessageEnvelope(ssp, 0, "k", 1), None, ReadableCoordinator())
    with store.all() as entries:
        assert list(entries) == []  # held in memory
    task.before_commit()
    with store.all() as entries:
        [(key, state)] = list(entries)
    assert key[0] == "k"
    assert state["v"] == 0  # the fold of WindowJoin keeps its initial value
    for s in stores.values():
        s.close()
