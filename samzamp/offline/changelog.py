"""Reading and writing one changelog partition with confluent-kafka, from inside a Spark task.

The Kafka source for Spark is not available offline, so each Spark task opens its own plain
consumer (assign, never a group) on the one partition it owns. ``ChangelogSource`` is what crosses
from the driver to the tasks: plain, picklable values, never a live client.

The end of a partition is found by reading until librdkafka's PARTITION_EOF event, never with
ListOffsets: the embedded Tansu broker answers ListOffsets(latest) too low (the base offset of the
last batch + 1), while the EOF event carries the true high watermark, on Tansu and on Kafka alike.

(confluent-kafka otherwise lives only in ``samzamp.systems.kafka``; this module reuses its client
settings (``client_config``: the system's kafka.*, consumer.* and producer.* blocks reach the
executors' clients too), its consumer defaults and its EOF code, and adds the two things an offline job needs that a container does not:
a bounded read up to a cut, and a write to a fixed partition with every delivery confirmed.)
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition

from samzamp.api.errors import SamzampError
from samzamp.systems.kafka.assign import assign
from samzamp.systems.kafka.changelog import CHANGELOG_STALL_S, batches, missing_partition
from samzamp.systems.kafka.client_config import EOF_READER, KafkaClientSettings, client_config
from samzamp.systems.kafka.codes import PARTITION_EOF
from samzamp.systems.kafka.consumer import consumer_config

__all__ = ["ChangelogError", "ChangelogSource", "PartitionReader", "write_partition"]


class ChangelogError(SamzampError):
    """A changelog partition could not be read or written, or holds less than a checkpoint says."""


@dataclass(frozen=True)
class ChangelogSource:
    """One changelog topic: where it is and how to reach it (picklable, shipped to Spark tasks)."""

    system: str
    topic: str
    kafka: KafkaClientSettings  # every client of the changelog's system is configured from it

    def ssp_name(self, partition: int) -> str:
        """``<system>.<stream>.<partition>``, as the OFFSET file names the changelog."""
        return f"{self.system}.{self.topic}.{partition}"


class PartitionReader:
    """The records of one partition in offset order: ``(offset, key, value or None for a tombstone)``.

    ``start`` None reads from the oldest record, an int from that offset. ``upto`` None reads to the
    partition's end (the first PARTITION_EOF); an int stops after the last record with offset <= upto,
    and raises ChangelogError if the partition ends before ``upto`` (a checkpoint that covers records
    the topic no longer has: recreated or truncated). After iterating, ``end`` is the partition's end
    offset if the read reached it (None if it stopped at ``upto`` first). A partition that does not
    exist, or ``stall_s`` of waiting with neither a record nor the end, raises ChangelogError too
    (the container's reader's guards: ``samzamp.systems.kafka.changelog``).

    Used by one thread; iterate once.
    """

    def __init__(
        self,
        source: ChangelogSource,
        partition: int,
        start: int | None = None,
        upto: int | None = None,
        stall_s: float = CHANGELOG_STALL_S,
    ):
        self.source = source
        self.partition = partition
        self.start = start
        self.upto = upto
        self.stall_s = stall_s
        self.end: int | None = None

    def _where(self) -> str:
        return f"changelog {self.source.system}.{self.source.topic} partition {self.partition}"

    def __iter__(self) -> Iterator[tuple[int, bytes, bytes | None]]:
        # An explicit start offset out of range is an error, not a silent jump to the oldest record.
        owned = {**EOF_READER, "auto.offset.reset": "earliest" if self.start is None else "error"}
        consumer = Consumer(consumer_config(self.source.kafka, "changelog-reader", "samzamp-offline", owned))
        try:
            missing = missing_partition(consumer, self.source.topic, self.partition, self.stall_s)
            if missing is not None:
                raise ChangelogError(missing)
            first = OFFSET_BEGINNING if self.start is None else self.start
            assign(consumer, [TopicPartition(self.source.topic, self.partition, first)])
            yield from self._records(consumer)
        finally:
            consumer.close()

    def _records(self, consumer: Consumer) -> Iterator[tuple[int, bytes, bytes | None]]:
        upto = self.upto
        last = -1 if self.start is None else self.start - 1
        for msgs in batches(consumer, self.stall_s):
            for m in msgs:
                err = m.error()
                if err is not None:
                    if err.code() == PARTITION_EOF:
                        self.end = max(int(m.offset() or 0), last + 1)
                        if upto is not None and self.end <= upto:
                            raise ChangelogError(
                                f"{self._where()} ends at offset {self.end}, but a checkpoint covers it up to "
                                f"offset {upto}: the topic lost records a checkpoint relies on (recreated or "
                                "truncated?); restore from an older state or reset the job's checkpoints"
                            )
                        return
                    raise ChangelogError(f"{self._where()}: {err.str()}")
                offset = int(m.offset() or 0)
                if upto is not None and offset > upto:
                    return
                key = m.key()
                if key is None:
                    raise ChangelogError(
                        f"{self._where()}: record at offset {offset} has no key; a changelog record always has one "
                        "(is this topic really a store's changelog?)"
                    )
                last = offset
                yield offset, key, m.value()
                if upto is not None and offset == upto:
                    return
        raise ChangelogError(
            f"{self._where()}: neither a record nor the end of the partition came within {self.stall_s:.0f} s, "
            f"reading at offset {last + 1 if last >= 0 else 'its oldest record'}; is the broker reachable?"
        )


def write_partition(
    source: ChangelogSource, topic: str, partition: int, records: Iterator[tuple[bytes, bytes | None]]
) -> int:
    """Produce ``records`` (key, value or None for a tombstone) to ``topic[partition]`` in order; wait
    until every one is acknowledged. Returns how many were written; raises ChangelogError naming the
    first failure."""
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
