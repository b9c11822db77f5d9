"""Assign-based Kafka consumer for a container's SSPs (samzamp does its own grouping: no group protocol)."""

from __future__ import annotations

import logging
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

from samzamp.api.envelope import SystemStreamPartition
from samzamp.api.errors import SystemFailureError
from samzamp.systems.base import OLDEST, UPCOMING, RawMessage, StartOffset
from samzamp.systems.kafka.assign import assign
from samzamp.systems.kafka.client_config import ClientKind, KafkaClientSettings, client_config
from samzamp.systems.kafka.codes import PARTITION_EOF

__all__ = ["KafkaSystemConsumer", "consumer_config"]

log = logging.getLogger(__name__)


def consumer_config(
    clients: KafkaClientSettings, kind: ClientKind, group_id: str, owned: dict[str, Any] | None = None
) -> dict[str, Any]:
    """An input consumer's settings: samzamp's consumer defaults, the system's blocks, then ``owned``.

    Offsets are samzamp's (its checkpoints): the consumer never commits or stores one.
    """
    defaults: dict[str, Any] = {
        "group.id": group_id,  # never joined (assign only); librdkafka wants one
        "auto.offset.reset": "earliest",  # a checkpoint past retention resumes at the oldest message
        "fetch.wait.max.ms": 50,
        # librdkafka waits 1 s by default before fetching again once its queue was full: a stall for a
        # loop that drains the queue in milliseconds.
        "fetch.queue.backoff.ms": 10,
        "queued.max.messages.kbytes": 16384,
    }
    return client_config(
        clients, kind, defaults, {"enable.auto.commit": False, "enable.auto.offset.store": False, **(owned or {})}
    )


class KafkaSystemConsumer:
    """One librdkafka consumer for every SSP of one system in this container."""

    def __init__(self, clients: KafkaClientSettings, group_id: str, batch: int = 2000) -> None:
        self._system = clients.system
        self._consumer = Consumer(consumer_config(clients, "consumer", group_id))
        self._starts: dict[SystemStreamPartition, StartOffset] = {}
        self._ssp_of: dict[tuple[str, int], SystemStreamPartition] = {}
        self._by_partition: dict[int, SystemStreamPartition] | None = None
        self._batch = batch

    def register(self, ssp: SystemStreamPartition, start: StartOffset) -> None:
        self._starts[ssp] = start
        self._ssp_of[(ssp.stream, ssp.partition)] = ssp
        topics = {s.stream for s in self._starts}
        self._by_partition = {s.partition: s for s in self._starts} if len(topics) == 1 else None

    def start(self) -> None:
        tps = []
        for ssp, start in self._starts.items():
            if start == OLDEST:
                offset = OFFSET_BEGINNING
            elif start == UPCOMING or not isinstance(start, int):
                raise SystemFailureError(f"{ssp}: start offset {start!r} must be resolved to an exact offset first")
            else:
                offset = start
            tps.append(TopicPartition(ssp.stream, ssp.partition, offset))
        assign(self._consumer, tps)

    def poll(self, timeout_s: float) -> dict[SystemStreamPartition, list[RawMessage]]:
        # consume(n, t) waits for n messages or t: take what is there now, and if that is nothing,
        # wait only for the first message to arrive.
        msgs = self._consumer.consume(self._batch, 0)
        if not msgs and timeout_s > 0:
            msgs = self._consumer.consume(1, timeout_s)
            if msgs:
                msgs.extend(self._consumer.consume(self._batch - 1, 0))
        out: dict[SystemStreamPartition, list[RawMessage]] = {}
        ssp_of = self._ssp_of
        # The SSPs by partition when this consumer reads a single topic (the common case), which
        # spares a topic() call and a tuple per message.
        by_partition = self._by_partition
        # A consume batch comes in runs of one partition: look the SSP up when the run changes.
        last_key: object = None
        bucket: list[RawMessage] = []
        append = bucket.append
        for m in msgs:
            err = m.error()
            if err is not None:
                self._on_error(err)
                continue
            partition = m.partition()
            key = partition if by_partition is not None else (m.topic(), partition)
            if key != last_key:
                ssp = by_partition[partition] if by_partition is not None else ssp_of[key]  # type: ignore[index]
                bucket = out.get(ssp) or out.setdefault(ssp, [])
                append = bucket.append
                last_key = key
            ts_type, ts = m.timestamp()
            append((m.offset() or 0, m.key(), m.value(), ts if ts_type else 0))
        return out

    def _on_error(self, err: KafkaError) -> None:
        if err.code() == PARTITION_EOF:
            return
        if err.fatal() or err.code() in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError.TOPIC_AUTHORIZATION_FAILED):
            raise SystemFailureError(f"kafka consumer of system {self._system!r}: {err.str()}")
        log.warning("kafka consumer of system %r: %s", self._system, err.str())

    def pause(self, ssps: list[SystemStreamPartition]) -> None:
        self._consumer.pause([TopicPartition(s.stream, s.partition) for s in ssps])

    def resume(self, ssps: list[SystemStreamPartition]) -> None:
        self._consumer.resume([TopicPartition(s.stream, s.partition) for s in ssps])

    def high_watermark(self, ssp: SystemStreamPartition) -> int | None:
        # cached=True reads the high watermark that fetch responses carry: right on Tansu too,
        # unlike ListOffsets(latest) (see ARCHITECTURE.md, known quirks).
        try:
            _low, high = self._consumer.get_watermark_offsets(TopicPartition(ssp.stream, ssp.partition), cached=True)
        except Exception:
            return None
        return int(high) if high >= 0 else None

    def stop(self) -> None:
        try:
            self._consumer.close()
        except RuntimeError:
            pass
