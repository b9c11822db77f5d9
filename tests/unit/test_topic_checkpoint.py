"""The checkpoint topic reader: samzamp's records are read; Apache Samza's are reported, never skipped silently."""

from __future__ import annotations

import json
import logging

import pytest

from samzamp.api.envelope import SystemStreamPartition
from samzamp.api.errors import ConfigError
from samzamp.commit.topic_checkpoint import TopicCheckpointManager, samza_checkpoint_task
from samzamp.model.control_state import ControlState, SSPControl
from samzamp.systems.inmemory.system import InMemoryStreams, InMemorySystemAdmin, InMemorySystemProducer

TOPIC = "__samza_checkpoint_ver_1_for_wc_1"
GROUPER = "GroupByPartition"


def samza_key(task: str, kind: str = "checkpoint") -> bytes:
    """A checkpoint key as Samza's KafkaCheckpointLogKeySerde writes it."""
    return json.dumps(
        {
            "systemstreampartition-grouper-factory": "org.apache.samza.container.grouper.stream.GroupByPartitionFactory",
            "taskName": task,
            "type": kind,
        }
    ).encode()


def samza_v1_value(partition: int, offset: int) -> bytes:
    """A CheckpointV1 value as Samza's CheckpointV1Serde writes it: SSP string -> its fields."""
    ssp = f"SystemStreamPartition [kafka, lines, {partition}]"
    return json.dumps(
        {ssp: {"system": "kafka", "stream": "lines", "partition": str(partition), "offset": str(offset)}}
    ).encode()


def _manager(streams: InMemoryStreams) -> TopicCheckpointManager:
    m = TopicCheckpointManager(InMemorySystemAdmin(streams), InMemorySystemProducer(streams), TOPIC, GROUPER)
    m.create_topic()
    return m


@pytest.mark.parametrize("kind", ["checkpoint", "checkpoint-v2"])
def test_a_topic_of_samza_checkpoints_only_is_a_config_error_naming_job_id(kind: str) -> None:
    streams = InMemoryStreams()
    manager = _manager(streams)
    for p in range(3):
        streams.append(TOPIC, 0, samza_key(f"Partition {p}", kind), samza_v1_value(p, 41))
    with pytest.raises(ConfigError) as exc:
        manager.read_last_checkpoints()
    assert exc.value.key == "job.id"
    assert TOPIC in exc.value.problem
    assert "Apache Samza's checkpoints (3 task(s), e.g. 'Partition 0')" in exc.value.problem
    assert "another job.id" in exc.value.problem
    assert "delete the topic" in exc.value.problem


def test_samza_records_beside_samzamp_s_own_are_ignored_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    streams = InMemoryStreams()
    manager = _manager(streams)
    streams.append(TOPIC, 0, samza_key("Partition 0"), samza_v1_value(0, 41))
    manager.write_checkpoint("Partition 0", {SystemStreamPartition("kafka", "lines", 0): 7})
    with caplog.at_level(logging.WARNING):
        last = manager.read_last_checkpoints()
    assert last["Partition 0"].offsets() == {SystemStreamPartition("kafka", "lines", 0): 7}
    assert "ignoring Apache Samza's checkpoints of 1 task(s)" in caplog.text


def test_records_of_no_known_format_are_skipped_and_said(caplog: pytest.LogCaptureFixture) -> None:
    streams = InMemoryStreams()
    manager = _manager(streams)
    streams.append(TOPIC, 0, b"not json", b"x")
    streams.append(TOPIC, 0, None, b"x")
    with caplog.at_level(logging.WARNING):
        assert manager.read_last_checkpoints() == {}
    assert "skipped 2 record(s) that are not samzamp checkpoints" in caplog.text


@pytest.mark.parametrize(
    ("key", "task"),
    [
        (samza_key("Partition 3"), "Partition 3"),
        (
            b'{"taskName": "SystemStreamPartition [kafka, lines, 0]", "type": "checkpoint"}',
            "SystemStreamPartition [kafka, lines, 0]",
        ),
        (b'{"type": "checkpoint", "task_name": "Partition 0", "grouper": "GroupByPartition"}', None),
        (b"[1, 2]", None),
        (b"\xff", None),
        (None, None),
    ],
)
def test_samza_checkpoint_task(key: bytes | None, task: str | None) -> None:
    assert samza_checkpoint_task(key) == task


def test_a_version_1_record_still_reads_and_version_2_carries_the_run_and_control_state() -> None:
    streams = InMemoryStreams()
    manager = _manager(streams)
    ssp = SystemStreamPartition("kafka", "lines", 0)
    # As samzamp wrote checkpoints before version 2.
    old = {
        "version": "1",
        "checkpoint_id": "1-1",
        "task_name": "Partition 1",
        "input_offsets": [{"system": "kafka", "stream": "lines", "partition": 1, "offset": 4}],
        "state_markers": {"counts": "9"},
    }
    key = json.dumps({"task_name": "Partition 1", "grouper": GROUPER, "type": "checkpoint"}).encode()
    InMemorySystemProducer(streams).send(TOPIC, key, json.dumps(old).encode(), 0, None)
    manager.run_id = "run-7"
    control = ControlState("run-7", sources_drained=True, drain=[SSPControl("kafka", "mid", 2, names=["Partition 0"])])
    manager.write_checkpoint("Partition 0", {ssp: 7}, {"counts": "3"}, control=control, drained=True)
    last = manager.read_last_checkpoints()
    v1, v2 = last["Partition 1"], last["Partition 0"]
    assert (v1.offsets(), v1.state_markers, v1.run_id, v1.drained, v1.control) == (
        {SystemStreamPartition("kafka", "lines", 1): 4},
        {"counts": "9"},
        "",
        False,
        None,
    )
    assert not v1.drained_in("run-7")
    assert (v2.offsets(), v2.state_markers, v2.run_id, v2.control) == ({ssp: 7}, {"counts": "3"}, "run-7", control)
    assert v2.drained_in("run-7")
    assert not v2.drained_in("run-8")
    assert not v2.drained_in(None)
