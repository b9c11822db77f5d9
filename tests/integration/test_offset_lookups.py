"""The Kafka admin's offset lookups that ``samzamp reset-offsets`` uses, on the real broker: the oldest
offset, and the first offset at or after a time, exact although Tansu answers offsets-for-times
with 0 whatever the time."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Producer
from kafka_util import create_topic

from samzamp.api.envelope import SystemStreamPartition
from samzamp.systems.kafka import EmbeddedBroker, KafkaClientSettings, KafkaSystemAdmin

pytestmark = pytest.mark.integration


def test_offsets_for_times_finds_the_first_message_at_or_after_the_time(broker: EmbeddedBroker, unique: str) -> None:
    bs = broker.bootstrap_servers
    topic = f"times-{unique}"
    create_topic(bs, topic, 2)
    t0 = int(time.time() * 1000) - 60_000
    p = Producer({"bootstrap.servers": bs})
    for i in range(10):  # one batch each: the answer is a message, not a batch
        p.produce(topic, b"x", partition=0, timestamp=t0 + i * 1000)
        assert p.flush(30) == 0
    admin = KafkaSystemAdmin(KafkaClientSettings("kafka", bs, "samzamp-test-offset-lookups"))
    try:
        zero, empty = SystemStreamPartition("kafka", topic, 0), SystemStreamPartition("kafka", topic, 1)
        assert admin.beginning_offsets([zero, empty]) == {zero: 0, empty: 0}
        assert admin.offsets_for_times([zero, empty], t0 - 1) == {zero: 0, empty: 0}
        assert admin.offsets_for_times([zero], t0 + 3500) == {zero: 4}
        assert admin.offsets_for_times([zero], t0 + 9000) == {zero: 9}
        assert admin.offsets_for_times([zero, empty], t0 + 60_000) == {zero: 10, empty: 0}  # none: the end
    finally:
        admin.stop()
