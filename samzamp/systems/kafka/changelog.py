"""Kafka I/O of store changelogs: a producer that knows the newest acknowledged offset per partition,
and a reader of one partition between two offsets (restore) or from an offset to its end (trim).

Ends are found by reading to the partition-EOF event, never with ListOffsets (Tansu answers it low).

A reader never waits forever (the offline jobs' reader uses the same two guards):

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

from samzamp.api.errors import SystemFailureError
from samzamp.systems.kafka.assign import assign
from samzamp.systems.kafka.client_config import EOF_READER, KafkaClientSettings, client_config
from samzamp.systems.kafka.codes import PARTITION_EOF
from samzamp.systems.kafka.producer import PRODUCER_LINGER_MS

if TYPE_CHECKING:
    from samzamp.config.settings import JobSettings

__all__ = [
    "CHANGELOG_STALL_S",
    "ChangelogProducer",
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


class ChangelogProducer:
    """Sends store changes; ``newest(topic, partition)`` is the highest acknowledged offset there.

    Every changelog record gets a delivery report (that is how the offsets are learned); reports
    are served by a background thread and by ``flush``. Failures are kept per changelog partition,
    which is per task: the tasks of a process share this producer, and each task's commit must see
    the failures of its own writes, never lose them to another task's commit.
    """

    def __init__(self, clients: KafkaClientSettings) -> None:
        defaults: dict[str, Any] = {
            "linger.ms": PRODUCER_LINGER_MS,
            "enable.idempotence": False,
            "acks": "all",
            "queue.buffering.max.messages": 200000,
        }
        # Every delivery report, successful ones too: they are how the acknowledged offsets are learned.
        owned = {"on_delivery": self._on_delivery, "delivery.report.only.error": False}
        self._producer = Producer(client_config(clients, "changelog-producer", defaults, owned))
        self._produce = self._producer.produce
        self._newest: dict[tuple[str, int], int] = {}
        self._errors: dict[tuple[str, int], list[str]] = {}
        self._errors_lock = threading.Lock()  # failures are reported on two threads (see above)
        self._stopping = False
        self._thread = threading.Thread(target=self._serve, name="samzamp-changelog", daemon=True)
        self._thread.start()

    def _on_delivery(self, err: KafkaError | None, msg: Any) -> None:
        key = (msg.topic(), msg.partition())
        if err is not None:
            with self._errors_lock:
                self._errors.setdefault(key, []).append(f"{key[0]}[{key[1]}]: {err.str()}")
            return
        offset = msg.offset()
        if offset > self._newest.get(key, -1):
            self._newest[key] = offset

    def _serve(self) -> None:
        while not self._stopping:
            self._producer.poll(0.1)

    def send(self, topic: str, partition: int, key: bytes, value: bytes | None) -> None:
        while True:
            try:
                self._produce(topic, value, key, partition)
                return
            except BufferError:
                self._producer.poll(0.01)

    def flush(self, timeout_s: float) -> int:
        return int(self._producer.flush(timeout_s))

    def take_errors(self, topic: str, partition: int) -> list[str]:
        """Delivery failures of records sent to ``topic[partition]`` since the last call."""
        with self._errors_lock:
            return self._errors.pop((topic, partition), [])

    def newest(self, topic: str, partition: int) -> int | None:
        return self._newest.get((topic, partition))

    def stop(self) -> None:
        self._producer.flush(10)
        self._stopping = True
        self._thread.join(timeout=2)


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


def read_changelog(
    clients: KafkaClientSettings,
    topic: str,
    partition: int,
    start: int,
    last: int | None,
    stall_s: float = CHANGELOG_STALL_S,
) -> Iterator[tuple[int, bytes, bytes | None]]:
    """(offset, key, value) of ``topic[partition]`` from ``start`` (-2: the oldest) through ``last``
    inclusive, or to the partition's end when ``last`` is None. ``SystemFailureError`` naming the
    topic and partition when it does not exist, or when ``stall_s`` of waiting brings neither a
    record nor its end (see the module docstring)."""
    consumer = Consumer(
        client_config(
            clients,
            "changelog-reader",
            defaults={"group.id": "samzamp-changelog-restore", "fetch.wait.max.ms": 10, "fetch.queue.backoff.ms": 10},
            owned=EOF_READER,
        )
    )
    try:
        missing = missing_partition(consumer, topic, partition, stall_s)
        if missing is not None:
            raise SystemFailureError(missing)
        assign(consumer, [TopicPartition(topic, partition, OFFSET_BEGINNING if start < 0 else start)])
        reached = "its oldest record" if start < 0 else f"offset {start}"  # where the read stands
        for batch in batches(consumer, stall_s):
            for m in batch:
                err = m.error()
                if err is not None:
                    if err.code() == PARTITION_EOF:
                        if last is not None and (m.offset() or 0) <= last:
                            raise SystemFailureError(
                                f"changelog {topic}[{partition}] ends at {m.offset()}, before offset {last} "
                                "that the checkpoint records; the changelog lost data (retention?)"
                            )
                        return
                    raise SystemFailureError(f"reading changelog {topic}[{partition}]: {err.str()}")
                offset = m.offset() or 0
                if last is not None and offset > last:
                    return
                reached = f"offset {offset + 1}"
                yield offset, m.key() or b"", m.value()
                if last is not None and offset >= last:
                    return
        toward = "its end" if last is None else f"offset {last}"
        raise SystemFailureError(
            f"changelog {topic}[{partition}]: neither a record nor the end of the partition came within "
            f"{stall_s:.0f} s, reading at {reached} toward {toward}; is the broker of system "
            f"{clients.system!r} reachable? (a restart restores again from the checkpoint)"
        )
    finally:
        consumer.close()
