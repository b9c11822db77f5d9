"""A fresh reader of a topic from its oldest record does not wait on librdkafka's 500 ms
offset-query retry (samzamp.systems.kafka.assign): the input consumer at samza.offset.default =
oldest, the checkpoint and coordinator stream reads (read_all) and a changelog restored from its
start, and the offline jobs' changelog reader. A container makes four such reads in a row at start,
so each one's delay was the bulk of its start-up.

The evidence is the client's own: with librdkafka's ``topic`` debug context on, a consumer that
assigns a partition whose leader it does not know yet logs "no current leader for partition:
(re)starting offset query timer" and only then waits the timer's fixed 500 ms. Each case reads its
first record and checks librdkafka's log (the Python logger ``librdkafka``, where every client samzamp
makes sends its lines) for that line, and that the log was captured at all.
"""

from __future__ import annotations

import logging
import time

import pytest
from kafka_util import create_topic, produce

from samzamp.api.envelope import SystemStreamPartition
from samzamp.offline.changelog import ChangelogSource, PartitionReader
from samzamp.systems.base import OLDEST
from samzamp.systems.kafka import EmbeddedBroker, KafkaClientSettings, KafkaSystemAdmin, KafkaSystemConsumer
from samzamp.systems.kafka.changelog import read_changelog
from samzamp.systems.kafka.client_config import LIBRDKAFKA_LOG

pytestmark = pytest.mark.integration

TIMER_STARTED = "(re)starting offset query timer"


@pytest.fixture
def rdkafka_log(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.DEBUG, logger=LIBRDKAFKA_LOG.name)
    return caplog


def assert_no_offset_query_timer(caplog: pytest.LogCaptureFixture) -> None:
    err = "\n".join(r.getMessage() for r in caplog.records if r.name == LIBRDKAFKA_LOG.name)
    assert "#consumer-" in err, "librdkafka's debug log was not captured: the check below would prove nothing"
    timer = [line for line in err.splitlines() if TIMER_STARTED in line]
    assert timer == [], "the consumer waited librdkafka's offset-query timer:\n" + "\n".join(timer)


@pytest.fixture
def topic(broker: EmbeddedBroker, unique: str) -> str:
    name = f"reader-start-{unique}"
    create_topic(broker.bootstrap_servers, name, 1)
    produce(broker.bootstrap_servers, name, 1, 3)
    return name


def clients(broker: EmbeddedBroker) -> KafkaClientSettings:
    return KafkaClientSettings(
        "kafka", broker.bootstrap_servers, "samzamp-test-reader-start", common={"debug": "topic"}
    )


def test_input_consumer_from_oldest(broker: EmbeddedBroker, topic: str, rdkafka_log: pytest.LogCaptureFixture) -> None:
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

    first_record()
    assert_no_offset_query_timer(rdkafka_log)


def test_read_all(broker: EmbeddedBroker, topic: str, rdkafka_log: pytest.LogCaptureFixture) -> None:
    admin = KafkaSystemAdmin(clients(broker))

    def first_record() -> object:
        records = admin.read_all(topic, 0)
        assert [r[0] for r in records] == [0, 1, 2]
        return records

    first_record()
    assert_no_offset_query_timer(rdkafka_log)


def test_changelog_restore_from_oldest(
    broker: EmbeddedBroker, topic: str, rdkafka_log: pytest.LogCaptureFixture
) -> None:
    assert next(read_changelog(clients(broker), topic, 0, -2, None))[0] == 0
    assert_no_offset_query_timer(rdkafka_log)


def test_offline_changelog_reader_from_oldest(
    broker: EmbeddedBroker, topic: str, rdkafka_log: pytest.LogCaptureFixture
) -> None:
    # The reader each Spark task of compaction and bulk restore runs, called here in-process.
    reader = PartitionReader(ChangelogSource("kafka", topic, clients(broker)), 0)
    assert [offset for offset, _key, _value in reader] == [0, 1, 2]
    assert_no_offset_query_timer(rdkafka_log)


def test_input_partition_of_a_new_topic_added_after_start_from_oldest(
    broker: EmbeddedBroker, topic: str, unique: str, rdkafka_log: pytest.LogCaptureFixture
) -> None:
    # A task arriving in a running container: its input topic is new to the consumer.
    first = f"reader-start-first-{unique}"
    create_topic(broker.bootstrap_servers, first, 1)
    produce(broker.bootstrap_servers, first, 1, 1)
    consumer = KafkaSystemConsumer(clients(broker), "test-reader-start")
    try:
        consumer.register(SystemStreamPartition("kafka", first, 0), OLDEST)
        consumer.start()
        added = SystemStreamPartition("kafka", topic, 0)
        deadline = time.monotonic() + 10
        while not consumer.poll(0.05):
            assert time.monotonic() < deadline, f"no record of {first} within 10 s"
        began = time.monotonic()
        consumer.register(added, OLDEST)
        while added not in consumer.poll(0.05):
            assert time.monotonic() < deadline, f"no record of {topic} within 10 s"
        print(f"\nnew topic registered after start -> first record: {time.monotonic() - began:.3f} s")
    finally:
        consumer.stop()
    assert_no_offset_query_timer(rdkafka_log)
