"""samzamp._deliveries: the changelog producer's delivery reports kept in C. The newest acknowledged
offset (a store's marker), the acknowledged runs (how a commit finds records its task did not write)
and the failures (which fail the commit) per topic partition, each taken once."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import KafkaError, Message

from samzamp import _deliveries
from samzamp._deliveries import Deliveries
from samzamp.systems.kafka import KafkaClientSettings
from samzamp.systems.kafka.changelog import ChangelogProducer

NOWHERE = "127.0.0.1:1"


def acked(d: Deliveries, topic: str, partition: int, *offsets: int) -> None:
    for o in offsets:
        d(None, Message(topic=topic, partition=partition, offset=o))


def test_the_stub_names_exactly_what_the_module_has() -> None:
    stub = (Path(_deliveries.__file__).parent / "_deliveries.pyi").read_text()
    assert {n for n in dir(_deliveries) if not n.startswith("_")} == {"Deliveries"}
    assert "class Deliveries:" in stub
    methods = {n for n in dir(Deliveries) if not n.startswith("_")}
    assert methods == {"newest", "take_acked", "take_errors"}
    for name in methods:
        assert f"def {name}(" in stub


def test_offsets_are_kept_per_partition_as_runs_taken_once_and_the_newest_stays() -> None:
    d = Deliveries()
    assert d.newest("cl", 0) is None
    assert d.take_acked("cl", 0) == []
    acked(d, "cl", 0, 5, 6, 7, 10, 11)
    acked(d, "cl", 1, 3)
    acked(d, "other", 0, 100)
    assert d.newest("cl", 0) == 11
    assert d.newest("cl", 1) == 3
    assert d.newest("other", 0) == 100
    assert d.take_acked("cl", 0) == [(5, 7), (10, 11)]
    assert d.take_acked("cl", 0) == []  # taken
    assert d.newest("cl", 0) == 11  # never forgotten
    acked(d, "cl", 0, 12)
    assert d.take_acked("cl", 0) == [(12, 12)]
    assert d.take_acked("cl", 1) == [(3, 3)]
    assert d.newest("cl", 2) is None


def test_runs_come_back_sorted_and_an_older_offset_never_lowers_the_newest() -> None:
    d = Deliveries()
    acked(d, "cl", 0, 20, 21, 4, 5)
    assert d.take_acked("cl", 0) == [(4, 5), (20, 21)]
    assert d.newest("cl", 0) == 21


def test_a_topic_is_matched_by_its_text_not_its_object() -> None:
    d = Deliveries()
    acked(d, "".join(["c", "l"]), 0, 1)
    acked(d, "".join(["c", "l"]), 0, 2)
    assert d.take_acked("cl", 0) == [(1, 2)]


def test_failures_name_the_partition_and_are_taken_once() -> None:
    d = Deliveries()
    d(KafkaError(KafkaError._MSG_TIMED_OUT), Message(topic="cl", partition=2, offset=-1001))
    acked(d, "cl", 2, 7)
    assert d.take_errors("cl", 1) == []
    assert d.take_errors("cl", 2) == ["cl[2]: Local: Message timed out"]
    assert d.take_errors("cl", 2) == []
    assert d.newest("cl", 2) == 7  # a failure is no acknowledgement
    assert d.take_acked("cl", 2) == [(7, 7)]


def test_bad_calls_raise() -> None:
    d = Deliveries()
    with pytest.raises(TypeError):
        d(None)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        d.newest(0, 0)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        Deliveries(1)  # type: ignore[call-arg]


def test_a_changelog_producer_reports_a_record_it_could_not_deliver() -> None:
    # confluent-kafka calls the C callback as it would a Python one: the failure reaches take_errors.
    clients = KafkaClientSettings("kafka", NOWHERE, "t", producer={"message.timeout.ms": 200})
    p = ChangelogProducer(clients)
    try:
        p.send("cl", 3, b"k", b"v")
        assert p.flush(10) == 0
        errors = p.take_errors("cl", 3)
        assert len(errors) == 1
        assert errors[0].startswith("cl[3]: ")
        assert p.newest("cl", 3) is None
        assert p.take_acked("cl", 3) == []
    finally:
        p.stop()
