"""``assign`` and ``add_partitions``: a consumer's partitions, reading from the first fetch librdkafka can make.

librdkafka resolves a logical start offset (OFFSET_BEGINNING, OFFSET_END) with a ListOffsets request
to the partition's leader. A fresh client does not know the leader when ``assign()`` is called; it
then arms a fixed 500 ms retry timer (rdkafka_partition.c, "no current leader for partition:
(re)starting offset query timer") and does not query when the metadata arrives a millisecond later.
Every fresh reader of a topic from its oldest record (the checkpoint topic, the coordinator stream,
a changelog restored from its start, an input at samza.offset.default = oldest) so started half a
second late; four of them in a row were most of a container's start-up. Fetching the topics'
metadata first, one request, lets the offset query go out at once. This holds on any Kafka broker:
the timer is the client's.

A partition added to a running consumer (``incremental_assign``) meets the same timer when its
topic is new to the client; a topic the consumer already reads has its leaders known (a topic's
metadata carries every partition), so only new topics are looked up first.
"""

from __future__ import annotations

import logging

from confluent_kafka import Consumer, KafkaException, TopicPartition

__all__ = ["add_partitions", "assign"]

log = logging.getLogger(__name__)

# Far above a healthy round trip; a broker slower than this makes the 500 ms moot. Kept short
# because the input consumer assigns on the event loop's thread.
METADATA_TIMEOUT_S = 2.0


def assign(consumer: Consumer, partitions: list[TopicPartition]) -> None:
    """``consumer.assign(partitions)``; when any starts at a logical offset (< 0), the leaders of
    those topics are learnt first, so that the consumer's first fetch is not 500 ms late. A failed
    metadata request only loses that gain: the partitions are assigned all the same, and an error
    reaching the broker shows in the consumer's own events."""
    _learn_leaders(consumer, partitions, known=set())
    consumer.assign(partitions)


def add_partitions(consumer: Consumer, partitions: list[TopicPartition], known_topics: set[str]) -> None:
    """``consumer.incremental_assign(partitions)`` on a consumer that already reads ``known_topics``:
    as ``assign``, the leaders of a new topic with a partition at a logical offset are learnt first."""
    _learn_leaders(consumer, partitions, known=known_topics)
    consumer.incremental_assign(partitions)


def _learn_leaders(consumer: Consumer, partitions: list[TopicPartition], known: set[str]) -> None:
    logical = sorted({tp.topic for tp in partitions if tp.offset < 0 and tp.topic not in known})
    for topic in logical:
        try:
            consumer.list_topics(topic, timeout=METADATA_TIMEOUT_S)
        except KafkaException as e:
            log.debug("metadata of %s before assign: %s", topic, e)
