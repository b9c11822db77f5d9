"""Kafka producer shared by the tasks run in one process; a background thread serves delivery reports."""

from __future__ import annotations

import functools
import logging
import threading
import time
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer

from samzamp.api.errors import SystemFailureError
from samzamp.api.metrics import Timer
from samzamp.systems.base import KeyedSend
from samzamp.systems.kafka.client_config import ClientKind, KafkaClientSettings, client_config
from samzamp.systems.partitioner import murmur2_partition

__all__ = ["IDEMPOTENT_CONNECT", "OUTPUT_PRODUCER_DEFAULTS", "KafkaSystemProducer", "close_client"]

log = logging.getLogger(__name__)

# Kafka Streams' default; librdkafka's is 5 ms. A loaded job then sends few, large batches, and the
# broker's cost is mostly per request: one producer at 35k messages/s into 4 partitions cost Tansu
# 3.2 µs of CPU a message at 5 ms, 1.05 at 50 and 0.5 at 100. On bench/cpu_scaling's job (pool 2,
# 2 cores that the workers share with the broker) 100 ms against 50 took a sixth off the broker's
# CPU and a third off the workers' librdkafka threads, and the job ran 3% faster. A commit's flush
# sends at once whatever lingers.
PRODUCER_LINGER_MS = 100

# What an output producer starts from (``systems.<s>.producer.*`` overrides any of it). Idempotence:
# the broker drops a batch the producer sent again after a lost response, and keeps each
# partition's batches in the order sent, so a retry neither repeats nor reorders a key's outputs
# (librdkafka then caps max.in.flight at 5 and retries until message.timeout.ms, 5 minutes).
# An idempotent producer sends nothing before the broker gave it a producer id. librdkafka asks for
# one at once, and with sparse connections (its default) finds no broker connected yet, so it asks
# again only 0.5 or 1 s later: every container's first commit waited that long. Connecting to the
# brokers at creation (IDEMPOTENT_CONNECT) has the id there within a round trip.
IDEMPOTENT_CONNECT: dict[str, Any] = {"enable.sparse.connections": False}
OUTPUT_PRODUCER_DEFAULTS: dict[str, Any] = {
    "linger.ms": PRODUCER_LINGER_MS,
    "partitioner": "murmur2_random",  # the Java client's placement of keyed messages
    "enable.idempotence": True,
    **IDEMPOTENT_CONNECT,
    "acks": "all",
    "queue.buffering.max.messages": 200000,
    "delivery.report.only.error": True,
}


def close_client(producer: Producer) -> None:
    """Destroy a librdkafka producer now, closing its connections (confluent-kafka 2.x's close();
    where it has none, the client goes with its last reference)."""
    close = getattr(producer, "close", None)
    if close is not None:
        close()


class KafkaSystemProducer:
    """Produces outputs; ``send`` never blocks for long: a full local queue waits for deliveries.

    librdkafka reports only failed deliveries (delivery.report.only.error): one Python callback per
    message would cost more than the rest of the send path. A commit learns that its outputs are
    durable from ``flush`` (every queued message acknowledged or failed) and ``take_errors``.

    ``waits``, when its host sets one, times each send that found the local queue full, from then
    until the queue took it (Kafka's producer has the like: bufferpool-wait-time): how long the
    broker held a task back.
    """

    waits: Timer | None = None

    def __init__(self, clients: KafkaClientSettings, kind: ClientKind = "producer") -> None:
        conf = client_config(clients, kind, OUTPUT_PRODUCER_DEFAULTS, {"on_delivery": self._on_delivery})
        system = self._system = clients.system
        self._errors: list[str] = []
        self._producer = Producer(conf)
        self._produce = self._producer.produce
        self._partitions: dict[str, int] = {}
        self._stopping = False
        self._thread = threading.Thread(target=self._serve_deliveries, name=f"samzamp-producer-{system}", daemon=True)
        self._thread.start()

    def _on_delivery(self, err: KafkaError | None, msg: Any) -> None:
        if err is not None:  # list.append is atomic: called on the delivery thread or in flush
            self._errors.append(f"{msg.topic()}[{msg.partition()}]: {err.str()}")

    def take_errors(self) -> list[str]:
        errors, self._errors = self._errors, []
        return errors

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
    ) -> None:
        if partition is None and partition_key is None:
            try:
                self._produce(stream, value, key)  # the common case: librdkafka places keyed messages
                return
            except BufferError:
                pass
            except Exception as e:
                raise self._refused(stream, key, value, e) from e
        elif partition is None:
            assert partition_key is not None
            partition = murmur2_partition(partition_key, self._partition_count(stream))
        full_since = 0
        while True:
            try:
                if partition is None:
                    self._produce(stream, value, key)
                else:
                    self._produce(stream, value, key, partition)
                break
            except BufferError:
                # Back-pressure: the local queue is full; the delivery thread is draining it.
                if not full_since:
                    full_since = time.monotonic_ns()
                time.sleep(0.001)
            except Exception as e:
                raise self._refused(stream, key, value, e) from e
        if full_since and self.waits is not None:
            self.waits.update(time.monotonic_ns() - full_since)

    def _refused(self, stream: str, key: bytes | None, value: bytes | None, error: Exception) -> SystemFailureError:
        """``produce`` refused one message (not back-pressure): why, in the words a user can act on."""
        size = len(key or b"") + len(value or b"")
        err = error.args[0] if isinstance(error, KafkaException) and error.args else None
        if isinstance(err, KafkaError):
            why = err.str()
            if err.code() == KafkaError.MSG_SIZE_TOO_LARGE:
                why += f" (above systems.{self._system}.producer.message.max.bytes?)"
        else:
            why = f"{type(error).__name__}: {error}"
        return SystemFailureError(f"system {self._system!r} refused a message to {stream!r} of {size} bytes: {why}")

    def keyed_sender(self, stream: str) -> KeyedSend:
        # librdkafka's produce itself, the stream bound in C: no Python frame per message. A
        # BufferError (queue full) or any other failure goes back to the caller, who calls send.
        return functools.partial(self._produce, stream)

    def flush(self, timeout_s: float) -> int:
        return int(self._producer.flush(timeout_s))

    def stop(self) -> None:
        """Deliver what is queued (10 s at most), then let the client go: its connections close now
        rather than reconnect to a broker that is stopping too. A second call does nothing."""
        if self._stopping:
            return
        self._producer.flush(10)
        self._stopping = True
        self._thread.join(timeout=2)
        close_client(self._producer)
