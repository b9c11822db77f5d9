"""Kafka producer shared by the tasks run in one process; a background thread serves delivery reports."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from confluent_kafka import KafkaError, Producer

from samzamp.api.errors import SystemFailureError
from samzamp.systems.base import DeliveryTracker

__all__ = ["KafkaSystemProducer", "murmur2_partition"]

log = logging.getLogger(__name__)


def _murmur2(data: bytes) -> int:
    """Kafka's murmur2 (the Java client's default partitioner), so keyed outputs land where Kafka's would."""
    length = len(data)
    seed = 0x9747B28C
    m = 0x5BD1E995
    h = (seed ^ length) & 0xFFFFFFFF
    n4 = length // 4
    for i in range(n4):
        k = int.from_bytes(data[4 * i : 4 * i + 4], "little")
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> 24
        k = (k * m) & 0xFFFFFFFF
        h = (h * m) & 0xFFFFFFFF
        h ^= k
    rest = length & 3
    tail = 4 * n4
    if rest == 3:
        h ^= data[tail + 2] << 16
    if rest >= 2:
        h ^= data[tail + 1] << 8
    if rest >= 1:
        h ^= data[tail]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h


def murmur2_partition(key: bytes, partitions: int) -> int:
    return (_murmur2(key) & 0x7FFFFFFF) % partitions


class KafkaSystemProducer:
    """Produces outputs; ``send`` never blocks for long: a full local queue waits for deliveries."""

    def __init__(self, system: str, bootstrap: str, user_config: dict[str, Any]) -> None:
        conf: dict[str, Any] = {
            "bootstrap.servers": bootstrap,
            "linger.ms": 5,
            "partitioner": "murmur2_random",  # the Java client's placement of keyed messages
            "enable.idempotence": False,
            "acks": "all",
            "queue.buffering.max.messages": 200000,
        }
        conf.update({k: v for k, v in user_config.items() if k != "bootstrap.servers"})
        self._system = system
        self._producer = Producer(conf)
        self._partitions: dict[str, int] = {}
        self._stopping = False
        self._fatal: str | None = None
        self._thread = threading.Thread(target=self._serve_deliveries, name=f"samzamp-producer-{system}", daemon=True)
        self._thread.start()

    def _serve_deliveries(self) -> None:
        while not self._stopping:
            self._producer.poll(0.1)

    def _partition_count(self, stream: str) -> int:
        n = self._partitions.get(stream)
        if n is None:
            md = self._producer.list_topics(stream, timeout=10)
            topic = md.topics.get(stream)
            if topic is None or topic.error is not None or not topic.partitions:
                raise SystemFailureError(f"system {self._system!r}: stream {stream!r} does not exist")
            n = self._partitions[stream] = len(topic.partitions)
        return n

    def send(
        self,
        stream: str,
        key: bytes | None,
        value: bytes | None,
        partition: int | None,
        partition_key: bytes | None,
        tracker: DeliveryTracker,
    ) -> None:
        if partition is None and partition_key is not None:
            partition = murmur2_partition(partition_key, self._partition_count(stream))

        def on_delivery(err: KafkaError | None, _msg: Any) -> None:
            tracker.on_ack(None if err is None else f"{stream}: {err.str()}")

        tracker.sent += 1
        while True:
            try:
                if partition is None:
                    self._producer.produce(stream, value, key, on_delivery=on_delivery)
                else:
                    self._producer.produce(stream, value, key, partition, on_delivery=on_delivery)
                return
            except BufferError:
                # Back-pressure: the local queue is full; the delivery thread is draining it.
                time.sleep(0.001)
            except Exception as e:
                tracker.sent -= 1
                raise SystemFailureError(f"system {self._system!r}: cannot send to {stream!r}: {e}") from e

    def flush(self, timeout_s: float) -> int:
        return int(self._producer.flush(timeout_s))

    def stop(self) -> None:
        self._producer.flush(10)
        self._stopping = True
        self._thread.join(timeout=2)
