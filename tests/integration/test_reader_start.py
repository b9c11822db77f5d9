"""A fresh reader of a topic from its oldest record gets its first record without librdkafka's
500 ms offset-query retry (samzamp.systems.kafka.assign): the input consumer at samza.offset.default
= oldest, the checkpoint and coordinator stream reads (read_all) and a changelog restored from its
start. A container makes four such reads in a row at start, so each one's delay was the bulk of
its start-up.

Each case takes the fastest of three fresh clients: without the fix every one of them waits at
least the timer's fixed 500 ms, whatever the machine's load; with it the first record comes after
one metadata and one ListOffsets round trip and a fetch (~15 ms here).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from kafka_util import create_topic, produce

from samzamp.api.envelope import SystemStreamPartition
from samzamp.systems.base import OLDEST
from samzamp.systems.kafka import EmbeddedBroker, KafkaClientSettings, KafkaSystemAdmin, KafkaSystemConsumer
from samzamp.systems.kafka.changelog import read_changelog

TRIES = 3
LIMIT_S = 0.4  # below librdkafka's 500 ms offset-query timer, far above a round trip or three


def fastest(first_record: Callable[[], object]) -> float:
    """The shortest of TRIES timings of ``first_record`` (each makes a fresh client)."""
    times = []
    for _ in range(TRIES):
        t = time.perf_counter()
        first_record()
        times.append(time.perf_counter() - t)
    return min(times)


@pytest.fixture
def topic(broker: EmbeddedBroker, unique: str) -> str:
    name = f"reader-start-{unique}"
    create_topic(broker.bootstrap_servers, name, 1)
    produce(broker.bootstrap_servers, name, 1, 3)
    return name


def clients(broker: EmbeddedBroker) -> KafkaClientSettings:
    return KafkaClientSettings("kafka", broker.bootstrap_servers, "samzamp-test-reader-start")


def test_input_consumer_from_oldest(broker: EmbeddedBroker, topic: str) -> None:
    def first_record() -> object:
        consumer = KafkaSystemConsumer(clients(broker), "test-reader-start")
        consumer.register(SystemStreamPartition("kafka", topic, 0), OLDEST)
        consumer.start()
        try:
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                got = consumer.poll(0.05)
                if got:
                    return got
            raise AssertionError(f"no record of {topic} within 10 s")
        finally:
            consumer.stop()

    assert fastest(first_record) < LIMIT_S


def test_read_all(broker: EmbeddedBroker, topic: str) -> None:
    admin = KafkaSystemAdmin(clients(broker))

    def first_record() -> object:
        records = admin.read_all(topic, 0)
        assert [r[0] for r in records] == [0, 1, 2]
        return records

    assert fastest(first_record) < LIMIT_S


def test_changelog_restore_from_oldest(broker: EmbeddedBroker, topic: str) -> None:
    def first_record() -> object:
        return next(read_changelog(clients(broker), topic, 0, -2, None))

    assert fastest(first_record) < LIMIT_S
