"""TaskCollector: a message placed by its key goes through the producer's keyed sender (librdkafka's
produce bound to the stream, for Kafka); anything else, or a keyed send that fails (a full queue),
goes through ``send``, which waits for room or reports. Each message is sent exactly once."""

from __future__ import annotations

from typing import Any

import pytest

from samzamp import OutgoingMessageEnvelope, SystemFailureError, SystemStream
from samzamp.collect.collector import TaskCollector
from samzamp.collect.output_failures import OutputFailures
from samzamp.metrics.registry import MetricsRegistry
from samzamp.serde.registry import JsonSerde, StringSerde

OUT = SystemStream("kafka", "out")


class RecordingProducer:
    def __init__(self, keyed_failures: int = 0) -> None:
        self.keyed: list[tuple[str, Any, Any]] = []
        self.sent: list[tuple[str, Any, Any, Any, Any]] = []
        self.keyed_failures = keyed_failures

    def keyed_sender(self, stream: str) -> Any:
        def send(value: bytes | None, key: bytes | None) -> None:
            if self.keyed_failures:
                self.keyed_failures -= 1
                raise BufferError("Local: Queue full")
            self.keyed.append((stream, key, value))

        return send

    def send(self, stream: str, key: Any, value: Any, partition: Any, partition_key: Any) -> None:
        self.sent.append((stream, key, value, partition, partition_key))

    def flush(self, timeout_s: float) -> int:
        return 0

    def take_errors(self) -> list[str]:
        return []

    def stop(self) -> None: ...


def collector(producer: RecordingProducer) -> tuple[TaskCollector, MetricsRegistry]:
    m = MetricsRegistry()
    serdes = (StringSerde(), JsonSerde())
    c = TaskCollector(
        "t",
        {"kafka": producer},
        lambda ss: serdes,
        False,
        m.counter("t", "send-calls"),
        m.counter("t", "dropped"),
        output_failures=OutputFailures("t", False, m.counter("t", "producer-send-failed")),
    )
    return c, m


def test_a_keyed_message_goes_through_the_keyed_sender_serialized() -> None:
    p = RecordingProducer()
    c, m = collector(p)
    c.send(OutgoingMessageEnvelope(OUT, {"n": 1}, key="k"))
    c.send(OutgoingMessageEnvelope(OUT, None))
    assert p.keyed == [("out", b"k", b'{"n":1}'), ("out", None, None)]
    assert p.sent == []
    assert m.snapshot()["t"]["send-calls"] == 2


def test_a_pinned_partition_or_a_partition_key_goes_through_send() -> None:
    p = RecordingProducer()
    c, _ = collector(p)
    c.send(OutgoingMessageEnvelope(OUT, 1, key="k", partition=3))
    c.send(OutgoingMessageEnvelope(OUT, 2, key="k", partition_key="p"))
    assert p.keyed == []
    assert p.sent == [("out", b"k", b"1", 3, None), ("out", b"k", b"2", None, b"p")]


def test_a_failed_keyed_send_is_sent_once_through_send() -> None:
    p = RecordingProducer(keyed_failures=1)
    c, _ = collector(p)
    c.send(OutgoingMessageEnvelope(OUT, 1, key="a"))
    c.send(OutgoingMessageEnvelope(OUT, 2, key="b"))
    assert p.sent == [("out", b"a", b"1", None, None)]
    assert p.keyed == [("out", b"b", b"2")]


def test_a_send_to_an_unconfigured_system_fails_unless_a_fallback_system_takes_it() -> None:
    p = RecordingProducer()
    c, _ = collector(p)
    with pytest.raises(SystemFailureError, match="system 'elsewhere' is not configured"):
        c.send(OutgoingMessageEnvelope(SystemStream("elsewhere", "out"), "x"))
    m = MetricsRegistry()
    routed = TaskCollector(
        "t",
        {"kafka": p},
        lambda ss: (StringSerde(), JsonSerde()),
        False,
        m.counter("t", "send-calls"),
        m.counter("t", "dropped"),
        output_failures=OutputFailures("t", False, m.counter("t", "producer-send-failed")),
        fallback_system="kafka",
    )
    routed.send(OutgoingMessageEnvelope(SystemStream("elsewhere", "side"), [1], key="k"))
    assert p.keyed == [("side", b"k", b"[1]")]
