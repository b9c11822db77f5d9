"""KafkaSystemConsumer gains and loses partitions while it reads (``register`` after ``start``,
``unregister``), on the real broker: a partition added is read from exactly the offset given, one
removed is never returned again, whatever librdkafka had fetched for it, and one added again is read
from its new start. The other partitions read on untouched."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from kafka_util import create_topic, produce

from samzamp.api.envelope import SystemStreamPartition
from samzamp.systems.base import OLDEST
from samzamp.systems.kafka import EmbeddedBroker, KafkaClientSettings, KafkaSystemConsumer

pytestmark = pytest.mark.integration

Offsets = dict[SystemStreamPartition, list[int]]


class Reading:
    """A consumer and every offset its polls returned, per SSP."""

    def __init__(self, consumer: KafkaSystemConsumer) -> None:
        self.consumer = consumer
        self.seen: Offsets = {}

    def poll_until(self, done: Callable[[Offsets], bool], what: str, timeout: float = 30) -> Offsets:
        """Poll until ``done(seen)``; returns what these polls alone returned."""
        got: Offsets = {}
        deadline = time.monotonic() + timeout
        while not done(self.seen):
            assert time.monotonic() < deadline, f"timed out waiting for {what}; read {self.seen}"
            for ssp, msgs in self.consumer.poll(0.05).items():
                offsets = [m[0] for m in msgs]
                self.seen.setdefault(ssp, []).extend(offsets)
                got.setdefault(ssp, []).extend(offsets)
        return got


def count(ssp: SystemStreamPartition, n: int) -> Callable[[Offsets], bool]:
    return lambda seen: len(seen.get(ssp, [])) >= n


def consumer(broker: EmbeddedBroker) -> KafkaSystemConsumer:
    return KafkaSystemConsumer(KafkaClientSettings("kafka", broker.bootstrap_servers, "test-dynamic"), "test-dynamic")


def test_a_partition_added_removed_and_added_again_while_reading(broker: EmbeddedBroker, unique: str) -> None:
    topic = f"dynamic-{unique}"
    create_topic(broker.bootstrap_servers, topic, 2)
    produce(broker.bootstrap_servers, topic, 2, 40)  # offsets 0..19 in each partition
    p0, p1 = SystemStreamPartition("kafka", topic, 0), SystemStreamPartition("kafka", topic, 1)
    c = consumer(broker)
    r = Reading(c)
    try:
        c.register(p0, OLDEST)
        c.start()
        r.poll_until(count(p0, 20), "p0's first 20")

        began = time.monotonic()
        c.register(p1, 7)
        got = r.poll_until(count(p1, 1), "p1's first message")
        print(f"\nregister after start -> first message of the new partition: {time.monotonic() - began:.3f} s")
        got_rest = r.poll_until(count(p1, 13), "p1 from 7 to its end")
        assert r.seen[p1] == list(range(7, 20))  # exactly from the offset given, nothing else
        assert p0 not in got
        assert p0 not in got_rest

        c.unregister([p1])
        produce(broker.bootstrap_servers, topic, 2, 20, start=40)  # offsets 20..29 in each
        got = r.poll_until(count(p0, 30), "p0's new messages")
        assert p1 not in got  # produced to p1 alongside p0's, but not read
        assert r.seen[p0] == list(range(30))

        c.register(p1, 25)
        r.poll_until(count(p1, 13 + 5), "p1 from 25")
        assert r.seen[p1] == [*range(7, 20), *range(25, 30)]
    finally:
        c.stop()


def test_a_partition_unregistered_with_messages_fetched_returns_none_of_them(
    broker: EmbeddedBroker, unique: str
) -> None:
    """librdkafka fetches ahead (here most of a 2000-message partition, in batches of 10 polls
    hand out); after ``unregister`` no poll returns any of what it held."""
    topic = f"dynamic-{unique}"
    create_topic(broker.bootstrap_servers, topic, 2)
    produce(broker.bootstrap_servers, topic, 2, 4000)
    p0, p1 = SystemStreamPartition("kafka", topic, 0), SystemStreamPartition("kafka", topic, 1)
    c = KafkaSystemConsumer(
        KafkaClientSettings("kafka", broker.bootstrap_servers, "test-dynamic"), "test-dynamic", batch=10
    )
    r = Reading(c)
    try:
        c.register(p0, OLDEST)
        c.register(p1, OLDEST)
        c.start()
        r.poll_until(count(p1, 10), "p1's first batch")
        c.unregister([p1])
        before = len(r.seen[p1])
        r.poll_until(count(p0, 2000), "all of p0")
        assert len(r.seen[p1]) == before
        assert r.seen[p0] == list(range(2000))
    finally:
        c.stop()


def test_a_partition_paused_when_unregistered_reads_again_when_registered(broker: EmbeddedBroker, unique: str) -> None:
    """librdkafka keeps a partition's pause across unassign and assign: back-pressure had paused it,
    its task moved away and back, and it must be read again."""
    topic = f"dynamic-{unique}"
    create_topic(broker.bootstrap_servers, topic, 2)
    produce(broker.bootstrap_servers, topic, 2, 20)  # offsets 0..9 in each partition
    p0, p1 = SystemStreamPartition("kafka", topic, 0), SystemStreamPartition("kafka", topic, 1)
    c = consumer(broker)
    r = Reading(c)
    try:
        c.register(p0, OLDEST)
        c.register(p1, OLDEST)
        c.start()
        r.poll_until(count(p1, 10), "p1")
        c.pause([p1])
        c.unregister([p1])
        c.register(p1, 4)
        r.poll_until(count(p1, 16), "p1 from 4 again")
        assert r.seen[p1] == [*range(10), *range(4, 10)]
    finally:
        c.stop()


def test_register_and_unregister_refuse_what_they_cannot_do(broker: EmbeddedBroker, unique: str) -> None:
    topic = f"dynamic-{unique}"
    create_topic(broker.bootstrap_servers, topic, 1)
    ssp = SystemStreamPartition("kafka", topic, 0)
    c = consumer(broker)
    try:
        c.register(ssp, OLDEST)
        c.start()
        with pytest.raises(ValueError, match="already registered") as e:
            c.register(ssp, 0)
        assert str(ssp) in str(e.value)
        c.unregister([ssp])
        with pytest.raises(ValueError, match="not registered") as e:
            c.unregister([ssp])
        assert str(ssp) in str(e.value)
    finally:
        c.stop()


def test_messages_map_to_their_ssp_as_the_consumer_goes_from_one_topic_to_two_and_back(
    broker: EmbeddedBroker, unique: str
) -> None:
    """One topic read maps a message by its partition alone; a second topic, added and removed
    again, switches that lookup to (topic, partition) and back: partition 0 of each stays apart."""
    x, y = f"dynamic-x-{unique}", f"dynamic-y-{unique}"
    for t in (x, y):
        create_topic(broker.bootstrap_servers, t, 1)
        produce(broker.bootstrap_servers, t, 1, 5)
    sx, sy = SystemStreamPartition("kafka", x, 0), SystemStreamPartition("kafka", y, 0)
    c = consumer(broker)
    r = Reading(c)
    try:
        c.register(sx, OLDEST)
        c.start()
        r.poll_until(count(sx, 5), "x")
        c.register(sy, 2)
        produce(broker.bootstrap_servers, x, 1, 5, start=5)
        r.poll_until(lambda seen: count(sx, 10)(seen) and count(sy, 3)(seen), "x and y")
        c.unregister([sy])
        produce(broker.bootstrap_servers, x, 1, 5, start=10)
        produce(broker.bootstrap_servers, y, 1, 5, start=5)
        r.poll_until(count(sx, 15), "x after y left")
        assert r.seen == {sx: list(range(15)), sy: [2, 3, 4]}
    finally:
        c.stop()
