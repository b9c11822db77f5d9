"""A send that finds a Kafka producer's local queue full waits for room, and each such send is timed
once (``samzamp.systems.kafka.buffer_waits``). Against a broker that is not there, a queue of one
message stays full until that message's delivery times out: the next send waits about that long."""

from __future__ import annotations

import pytest

from samzamp.metrics.registry import MetricsRegistry
from samzamp.systems.kafka import KafkaClientSettings, KafkaSystemProducer
from samzamp.systems.kafka.buffer_waits import CHANGELOG_WAITS, PRODUCER_WAITS, time_buffer_waits
from samzamp.systems.kafka.changelog import ChangelogProducer

NOWHERE = "127.0.0.1:1"  # nothing listens: every delivery fails after message.timeout.ms
TIMEOUT_MS = 500


def _clients() -> KafkaClientSettings:
    producer = {"message.timeout.ms": TIMEOUT_MS, "queue.buffering.max.messages": 1, "linger.ms": 0}
    return KafkaClientSettings("kafka", NOWHERE, "test-buffer-waits", producer=producer)


@pytest.mark.parametrize("partition", [None, 0], ids=["keyed", "partition"])
def test_an_output_send_that_finds_the_queue_full_waits_and_is_timed_once(partition: int | None) -> None:
    metrics = MetricsRegistry()
    p = KafkaSystemProducer(_clients())
    try:
        time_buffer_waits(metrics, [p])
        timer = metrics.timer("SystemProducersMetrics", PRODUCER_WAITS)
        p.send("out", b"k", b"first", partition, None)
        assert timer.count == 0  # the queue had room
        p.send("out", b"k", b"second", partition, None)  # room once the first one's delivery failed
        assert timer.count == 1
        assert TIMEOUT_MS // 2 * 1_000_000 <= timer.total_ns == timer.max_ns
        assert len(p.take_errors()) == 1  # the first one, failed: its room is what the second took
    finally:
        p.stop()


def test_a_store_write_that_finds_the_changelog_queue_full_waits_and_is_timed_once() -> None:
    metrics = MetricsRegistry()
    p = ChangelogProducer(_clients())
    try:
        time_buffer_waits(metrics, changelogs=[p])
        timer = metrics.timer("SystemProducersMetrics", CHANGELOG_WAITS)
        p.send("cl", 0, b"k", b"first")
        assert timer.count == 0
        p.send("cl", 0, b"k", b"second")
        assert timer.count == 1
        assert TIMEOUT_MS // 2 * 1_000_000 <= timer.total_ns == timer.max_ns
        assert metrics.timer("SystemProducersMetrics", PRODUCER_WAITS).count == 0  # outputs apart
    finally:
        p.stop()


def test_producers_of_other_systems_are_left_alone() -> None:
    metrics = MetricsRegistry()

    class Other:
        pass

    other = Other()
    time_buffer_waits(metrics, [other])
    assert not hasattr(other, "waits")
