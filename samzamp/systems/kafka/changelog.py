"""Kafka I/O of store changelogs: a producer that knows the newest acknowledged offset per partition,
and the reader of one partition between two offsets (restore) or from an offset to its end (trim),
for a container and for the offline jobs.

Ends are found by reading to the partition-EOF event, never with ListOffsets (Tansu answers it low).

A reader never waits forever:

- ``missing_partition`` first: a consumer assigned a partition that does not exist (or a topic that
  does not) gets no record, no error and no EOF from librdkafka, ever; the topic's metadata says so
  at once;
- ``batches`` then: waiting that brings neither a record nor the partition's end for
  ``CHANGELOG_STALL_S`` is an error naming the offset reached. Only time spent waiting counts: the
  caller's own work between batches (applying a big restore to LMDB) never does, and every batch
  starts the count again, so a restore that progresses at all, however slowly, is never cut off.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from samzamp._deliveries import Deliveries
from samzamp.api.errors import SystemFailureError
from samzamp.api.metrics import Timer
from samzamp.systems.kafka.assign import assign
from samzamp.systems.kafka.client_config import EOF_READER, KafkaClientSettings, client_config
from samzamp.systems.kafka.codes import AUTO_OFFSET_RESET, PARTITION_EOF
from samzamp.systems.kafka.producer import IDEMPOTENT_CONNECT, PRODUCER_LINGER_MS, close_client

if TYPE_CHECKING:
    from samzamp.config.settings import JobSettings

__all__ = [
    "CHANGELOG_PRODUCER_DEFAULTS",
    "CHANGELOG_STALL_S",
    "ChangelogProducer",
    "ChangelogReader",
    "batches",
    "changelog_producers",
    "missing_partition",
    "read_changelog",
]

# How long a changelog read may wait with nothing coming, neither a record nor the partition's end
# (and how long the partition's metadata may take). A healthy broker answers a fetch within
# fetch.wait.max.ms; 60 s outlasts a leader election and the 45 s broker pause that a running job
# rides out, and a read that progresses never meets it (see the module docstring). Past it the
# broker is gone or the end cannot be reached: failing says so, where waiting on would hang the
# container with no output. The offline jobs' reader waits as long.
CHANGELOG_STALL_S = 60.0


# What a changelog producer starts from (``systems.<s>.producer.*`` overrides any of it); idempotent,
# as outputs are: a retried batch lands once, in order, so a restore replays each write once, in
# the order the store made them.
CHANGELOG_PRODUCER_DEFAULTS: dict[str, Any] = {
    "linger.ms": PRODUCER_LINGER_MS,
    "enable.idempotence": True,
    **IDEMPOTENT_CONNECT,  # its producer id at once, not after librdkafka's 0.5-1 s retry
    "acks": "all",
    "queue.buffering.max.messages": 200000,
}


class ChangelogProducer:
    """Sends store changes; ``newest(topic, partition)`` is the highest acknowledged offset there,
    and ``take_acked`` the offsets its records got (as runs: a partition's reports come in offset
    order), so that a task can tell its own records in its changelog partition from records another
    process wrote there.

    Every changelog record gets a delivery report (that is how the offsets are learned); reports
    are served by a background thread and by ``flush``, and kept by ``samzamp._deliveries`` in C
    (a Python callback per record cost about a microsecond, holding the GIL the task's thread
    needs). Failures are kept per changelog partition, which is per task: the tasks of a process
    share this producer, and each task's commit must see the failures of its own writes, never lose
    them to another task's commit.

    ``waits``, when its host sets one, times each send that found the local queue full, until the
    queue took it: how long the broker held a store's writes back.
    """

    waits: Timer | None = None

    def __init__(self, clients: KafkaClientSettings) -> None:
        self._deliveries = Deliveries()
        # Every delivery report, successful ones too: they are how the acknowledged offsets are learned.
        owned = {"on_delivery": self._deliveries, "delivery.report.only.error": False}
        self._producer = Producer(client_config(clients, "changelog-producer", CHANGELOG_PRODUCER_DEFAULTS, owned))
        self._produce = self._producer.produce
        self._stopping = False
        self._thread = threading.Thread(target=self._serve, name="samzamp-changelog", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stopping:
            self._producer.poll(0.1)

    def send(self, topic: str, partition: int, key: bytes, value: bytes | None) -> None:
        try:
            self._produce(topic, value, key, partition)
        except BufferError:  # the local queue is full
            self._send_when_room(topic, partition, key, value)

    def _send_when_room(self, topic: str, partition: int, key: bytes, value: bytes | None) -> None:
        """Send once deliveries made room in the local queue; the wait is timed in ``waits``."""
        full_since = time.monotonic_ns()
        while True:
            self._producer.poll(0.01)
            try:
                self._produce(topic, value, key, partition)
                break
            except BufferError:
                pass
        if self.waits is not None:
            self.waits.update(time.monotonic_ns() - full_since)

    def flush(self, timeout_s: float) -> int:
        return int(self._producer.flush(timeout_s))

    def take_errors(self, topic: str, partition: int) -> list[str]:
        """Delivery failures of records sent to ``topic[partition]`` since the last call."""
        return self._deliveries.take_errors(topic, partition)

    def newest(self, topic: str, partition: int) -> int | None:
        return self._deliveries.newest(topic, partition)

    def take_acked(self, topic: str, partition: int) -> list[tuple[int, int]]:
        """The offsets of the records sent to ``topic[partition]`` and acknowledged since the last
        call, as sorted runs ``(first, last)`` of consecutive offsets."""
        return self._deliveries.take_acked(topic, partition)

    def stop(self) -> None:
        """Deliver what is queued (10 s at most), then let the client go: its connections close now
        rather than reconnect to a broker that is stopping too. A second call does nothing."""
        if self._stopping:
            return
        self._producer.flush(10)
        self._stopping = True
        self._thread.join(timeout=2)
        close_client(self._producer)


def changelog_producers(
    settings: JobSettings, kafka: Mapping[str, KafkaClientSettings]
) -> dict[str, ChangelogProducer]:
    """One changelog producer for each system that carries a store's changelog (none: no changelogs)."""
    systems = sorted({st.changelog.system for st in settings.stores.values() if st.changelog is not None})
    return {s: ChangelogProducer(kafka[s]) for s in systems}


def missing_partition(
    consumer: Consumer, topic: str, partition: int, timeout_s: float = CHANGELOG_STALL_S
) -> str | None:
    """Why changelog ``topic[partition]`` cannot be read: the topic or the partition does not exist,
    or its metadata did not come within ``timeout_s``; None when it exists."""
    try:
        md = consumer.list_topics(topic, timeout=timeout_s).topics.get(topic)
    except KafkaException as e:
        err = e.args[0] if e.args else None
        why = err.str() if isinstance(err, KafkaError) else str(e)
        return (
            f"changelog {topic}[{partition}]: no metadata of the topic within {timeout_s:.0f} s ({why}); "
            "is its system's broker reachable?"
        )
    if md is None or md.error is not None:
        why = md.error.str() if md is not None and md.error is not None else "not in the broker's metadata"
        return (
            f"changelog topic {topic} does not exist ({why}), so partition {partition} cannot be read; "
            "create it (compacted, a partition for each task) or check the store's changelog setting"
        )
    if partition not in md.partitions:
        n = len(md.partitions)
        return (
            f"changelog {topic}[{partition}] does not exist: {topic} has {n} partitions (0..{n - 1}) and the "
            f"task reading partition {partition} needs at least {partition + 1}; add partitions to {topic} "
            "(each task owns one), or check that the task -> changelog partition mapping is the one the "
            "changelog was written with"
        )
    return None


def batches(
    consumer: Consumer, stall_s: float = CHANGELOG_STALL_S, clock: Callable[[], float] = time.monotonic
) -> Iterator[list[Message]]:
    """What ``consumer`` delivers (records and events), a non-empty batch at a time, until ``stall_s``
    of waiting brought nothing: then the iteration ends, and the caller says what that means. Time
    between batches (the caller's) is not waiting."""
    waiting_since: float | None = None
    while True:
        # consume(n, t) waits for n messages or t: take what is there, else wait for the next one.
        batch = consumer.consume(5000, 0)
        if not batch:
            now = clock()
            if waiting_since is None:
                waiting_since = now
            elif now - waiting_since >= stall_s:
                return
            batch = consumer.consume(1, min(0.5, stall_s))
            if not batch:
                continue
        waiting_since = None
        yield batch


class ChangelogReader:
    """The records of one changelog partition in offset order: ``(offset, key, value or None for a
    tombstone)``. The one reader of changelogs: a container's restore (``read_changelog``) and the
    offline jobs' Spark tasks (``samzamp.offline.changelog``).

    ``start`` None reads from the oldest record; an int from that offset, which the partition must
    hold: an offset before its oldest record or past its end is an error, never a silent jump to the
    end, which would restore nothing. ``upto`` None reads to the partition's end (the first
    PARTITION_EOF); an int stops after the last record at or below it, and a partition that ends
    before ``upto`` is an error (a checkpoint covers records the topic no longer has). After the
    iteration, ``end`` is the partition's end offset if the read reached it (None if it stopped at
    ``upto`` first). A partition that does not exist, a record without a key, and ``stall_s`` of
    waiting with neither a record nor the end are errors too. Every error is ``error(message)``,
    the message naming the topic and partition.

    Used by one thread; iterate once.
    """

    def __init__(
        self,
        clients: KafkaClientSettings,
        topic: str,
        partition: int,
        start: int | None = None,
        upto: int | None = None,
        *,
        stall_s: float = CHANGELOG_STALL_S,
        group_id: str = "samzamp-changelog-restore",
        error: Callable[[str], Exception] = SystemFailureError,
    ) -> None:
        self.clients = clients
        self.topic = topic
        self.partition = partition
        self.start = start
        self.upto = upto
        self.stall_s = stall_s
        self.end: int | None = None
        self._group_id = group_id
        self._error = error

    def _where(self) -> str:
        return f"changelog {self.topic}[{self.partition}]"

    def __iter__(self) -> Iterator[tuple[int, bytes, bytes | None]]:
        owned = {
            **EOF_READER,
            "enable.auto.commit": False,  # assign only: offsets are the checkpoints', never the group's
            "auto.offset.reset": "earliest" if self.start is None else "error",
        }
        defaults = {"group.id": self._group_id, "fetch.wait.max.ms": 10, "fetch.queue.backoff.ms": 10}
        consumer = Consumer(client_config(self.clients, "changelog-reader", defaults=defaults, owned=owned))
        try:
            missing = missing_partition(consumer, self.topic, self.partition, self.stall_s)
            if missing is not None:
                raise self._error(missing)
            first = OFFSET_BEGINNING if self.start is None else self.start
            assign(consumer, [TopicPartition(self.topic, self.partition, first)])
            yield from self._records(consumer)
        finally:
            consumer.close()

    def _records(self, consumer: Consumer) -> Iterator[tuple[int, bytes, bytes | None]]:
        upto = self.upto
        last = -1 if self.start is None else self.start - 1  # the last offset read, or the one before the start
        for batch in batches(consumer, self.stall_s):
            for m in batch:
                err = m.error()
                if err is not None:
                    if err.code() == PARTITION_EOF:
                        self.end = max(int(m.offset() or 0), last + 1)
                        if upto is not None and self.end <= upto:
                            raise self._error(
                                f"{self._where()} ends at offset {self.end}, but a checkpoint covers it up to "
                                f"offset {upto}: the topic lost records a checkpoint relies on (recreated, "
                                "truncated, or deleted by retention: a changelog must be compacted, never deleted); "
                                "restore from an older state or reset the job's checkpoints"
                            )
                        return
                    if err.code() == AUTO_OFFSET_RESET:
                        raise self._error(
                            f"{self._where()} does not hold offset {self.start} where the read starts ({err.str()}): "
                            "the topic was recreated or truncated, or retention deleted records, since that offset "
                            "was recorded. A local store recorded at it no longer matches its changelog: delete the "
                            "store's directory to restore it from the changelog as it is"
                        )
                    raise self._error(f"reading {self._where()}: {err.str()}")
                offset = int(m.offset() or 0)
                if upto is not None and offset > upto:
                    return
                key = m.key()
                if key is None:
                    raise self._error(
                        f"{self._where()}: the record at offset {offset} has no key; a changelog record always "
                        "has one (is this topic really a store's changelog?)"
                    )
                last = offset
                yield offset, key, m.value()
                if upto is not None and offset >= upto:
                    return
        reached = f"offset {last + 1}" if last >= 0 else "its oldest record"
        toward = "its end" if upto is None else f"offset {upto}"
        raise self._error(
            f"{self._where()}: neither a record nor the end of the partition came within {self.stall_s:.0f} s, "
            f"reading at {reached} toward {toward}; is the broker of system {self.clients.system!r} reachable?"
        )


def read_changelog(
    clients: KafkaClientSettings,
    topic: str,
    partition: int,
    start: int,
    last: int | None,
    stall_s: float = CHANGELOG_STALL_S,
) -> Iterator[tuple[int, bytes, bytes | None]]:
    """A container's read of ``topic[partition]`` from ``start`` (-2: the oldest) through ``last``
    inclusive, or to the partition's end when ``last`` is None: ``ChangelogReader``'s records, its
    errors ``SystemFailureError``."""
    return iter(ChangelogReader(clients, topic, partition, None if start < 0 else start, last, stall_s=stall_s))
