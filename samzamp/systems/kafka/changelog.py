"""Kafka I/O of store changelogs: a producer that knows the newest acknowledged offset per partition,
and a reader of one partition between two offsets (restore) or from an offset to its end (trim).

Ends are found by reading to the partition-EOF event, never with ListOffsets (Tansu answers it low).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition

from samzamp.api.errors import SystemFailureError
from samzamp.systems.kafka.assign import assign
from samzamp.systems.kafka.client_config import EOF_READER, KafkaClientSettings, client_config
from samzamp.systems.kafka.codes import PARTITION_EOF
from samzamp.systems.kafka.producer import PRODUCER_LINGER_MS

if TYPE_CHECKING:
    from samzamp.config.settings import JobSettings

__all__ = ["ChangelogProducer", "changelog_producers", "read_changelog"]


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


def read_changelog(
    clients: KafkaClientSettings, topic: str, partition: int, start: int, last: int | None
) -> Iterator[tuple[int, bytes, bytes | None]]:
    """(offset, key, value) of ``topic[partition]`` from ``start`` (-2: the oldest) through ``last``
    inclusive, or to the partition's end when ``last`` is None."""
    consumer = Consumer(
        client_config(
            clients,
            "changelog-reader",
            defaults={"group.id": "samzamp-changelog-restore", "fetch.wait.max.ms": 10, "fetch.queue.backoff.ms": 10},
            owned=EOF_READER,
        )
    )
    try:
        assign(consumer, [TopicPartition(topic, partition, OFFSET_BEGINNING if start < 0 else start)])
        while True:
            # consume(n, t) waits for n messages or t: take what is there, else wait for the next one.
            batch = consumer.consume(5000, 0) or consumer.consume(1, 0.5)
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
                yield offset, m.key() or b"", m.value()
                if last is not None and offset >= last:
                    return
    finally:
        consumer.close()
