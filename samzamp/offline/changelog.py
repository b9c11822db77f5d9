"""Reading and writing one changelog partition with confluent-kafka, from inside a Spark task.

The Kafka source for Spark is not available offline, so each Spark task opens its own plain
consumer (assign, never a group) on the one partition it owns. ``ChangelogSource`` is what crosses
from the driver to the tasks: plain, picklable values, never a live client.

The end of a partition is found by reading until librdkafka's PARTITION_EOF event, never with
ListOffsets: the embedded Tansu broker answers ListOffsets(latest) too low (the base offset of the
last batch + 1), while the EOF event carries the true high watermark, on Tansu and on Kafka alike.

(confluent-kafka otherwise lives only in ``samzamp.systems.kafka``; this module reads with its
changelog reader, the one a container restores with, and configures every client with its
``client_config``: the system's kafka.*, consumer.* and producer.* blocks reach the executors'
clients too. It adds the write to a fixed partition with every delivery confirmed.)

A Spark task logs as the driver does (its --log-level and --log-format, carried by the source), so
librdkafka's lines from the executors' clients reach the same log.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaError, Producer

from samzamp import logs
from samzamp.api.errors import SamzampError
from samzamp.systems.kafka.changelog import CHANGELOG_STALL_S, ChangelogReader
from samzamp.systems.kafka.client_config import KafkaClientSettings, client_config

__all__ = ["ChangelogError", "ChangelogSource", "PartitionReader", "write_partition"]


class ChangelogError(SamzampError):
    """A changelog partition could not be read or written, or holds less than a checkpoint says."""


@dataclass(frozen=True)
class ChangelogSource:
    """One changelog topic: where it is and how to reach it (picklable, shipped to Spark tasks)."""

    system: str
    topic: str
    kafka: KafkaClientSettings  # every client of the changelog's system is configured from it
    log: logs.LogSetup = field(default_factory=logs.current)  # how the driver logs

    def log_here(self) -> None:
        """Log in this process (a Spark task's) as the driver does."""
        logs.configure(self.log.level, self.log.format)

    def ssp_name(self, partition: int) -> str:
        """``<system>.<stream>.<partition>``, as the OFFSET file names the changelog."""
        return f"{self.system}.{self.topic}.{partition}"


class PartitionReader(ChangelogReader):
    """``ChangelogReader`` as a Spark task runs it: the partition of ``source``, every error a
    ChangelogError."""

    def __init__(
        self,
        source: ChangelogSource,
        partition: int,
        start: int | None = None,
        upto: int | None = None,
        stall_s: float = CHANGELOG_STALL_S,
    ):
        source.log_here()
        super().__init__(
            source.kafka,
            source.topic,
            partition,
            start,
            upto,
            stall_s=stall_s,
            group_id="samzamp-offline",
            error=ChangelogError,
        )


def write_partition(
    source: ChangelogSource, topic: str, partition: int, records: Iterator[tuple[bytes, bytes | None]]
) -> int:
    """Produce ``records`` (key, value or None for a tombstone) to ``topic[partition]`` in order; wait
    until every one is acknowledged. Returns how many were written; raises ChangelogError naming the
    first failure."""
    source.log_here()
    producer = Producer(client_config(source.kafka, "changelog-writer", {"linger.ms": 5, "acks": "all"}))
    errors: list[str] = []

    def on_delivery(err: KafkaError | None, _msg: Any) -> None:
        if err is not None:
            errors.append(err.str())

    n = 0
    for key, value in records:
        while True:
            try:
                producer.produce(topic, value, key, partition=partition, on_delivery=on_delivery)
                break
            except BufferError:  # the local queue is full: let deliveries drain it
                producer.poll(0.1)
        n += 1
        if n % 1000 == 0:
            producer.poll(0)
    if producer.flush(60) != 0:
        errors.append("not every record was acknowledged within 60 s")
    if errors:
        raise ChangelogError(f"writing {topic} partition {partition}: {errors[0]}")
    return n
