"""Topic metadata, creation, and exact end offsets (portable to Tansu: see ``end_offsets``)."""

from __future__ import annotations

import logging
import time
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic, OffsetSpec  # type: ignore[attr-defined]

from samzamp.api.envelope import SystemStreamPartition
from samzamp.api.errors import SystemFailureError
from samzamp.systems.base import RawMessage
from samzamp.systems.kafka.assign import assign
from samzamp.systems.kafka.client_config import EOF_READER, KafkaClientSettings, client_config
from samzamp.systems.kafka.codes import PARTITION_EOF

__all__ = ["KafkaSystemAdmin"]

log = logging.getLogger(__name__)


class KafkaSystemAdmin:
    """Metadata, topic creation and whole-partition reads of one Kafka system.

    Its admin client lives from the first call to ``stop`` (a call after ``stop`` makes a new one).
    librdkafka's log lines of that client wait for a poll (``client_config`` routes them to Python
    logging): each call serves them first, and ``stop`` serves the last ones.
    """

    def __init__(self, clients: KafkaClientSettings) -> None:
        self._clients = clients
        self._system = clients.system
        self._bootstrap = clients.bootstrap
        self._client: Any = None

    @property
    def _admin(self) -> Any:
        """The admin client, made on first use; its waiting log lines served."""
        if self._client is None:
            self._client = AdminClient(client_config(self._clients, "admin"))
        self._client.poll(0)
        return self._client

    def partition_counts(self, streams: list[str]) -> dict[str, int]:
        try:
            md = self._admin.list_topics(timeout=15)
        except KafkaException as e:
            raise SystemFailureError(f"system {self._system!r}: cannot reach Kafka at {self._bootstrap}: {e}") from None
        out = {}
        for s in streams:
            t = md.topics.get(s)
            if t is not None and t.error is None and t.partitions:
                out[s] = len(t.partitions)
        return out

    def create_stream(self, stream: str, partitions: int, replication_factor: int, configs: dict[str, str]) -> bool:
        futures = self._admin.create_topics([NewTopic(stream, partitions, replication_factor, config=configs)])
        try:
            futures[stream].result(timeout=30)
        except KafkaException as e:
            if e.args and e.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS:
                return False
            raise SystemFailureError(f"system {self._system!r}: cannot create stream {stream!r}: {e}") from None
        # Wait until the metadata shows it, so consumers and producers created next can see it.
        deadline = time.monotonic() + 15
        while stream not in self.partition_counts([stream]):
            if time.monotonic() > deadline:
                raise SystemFailureError(f"system {self._system!r}: stream {stream!r} was created but never appeared")
            time.sleep(0.05)
        log.info("created stream %s.%s with %d partitions", self._system, stream, partitions)
        return True

    def add_partitions(self, stream: str, partitions: int) -> None:
        """Grow ``stream`` to ``partitions`` partitions (CreatePartitions). SystemFailureError with the
        broker's reason if it refuses (not every broker can: Tansu cannot)."""
        try:
            self._admin.create_partitions([NewPartitions(stream, partitions)])[stream].result(timeout=30)
        except KafkaException as e:
            reason = e.args[0].str() if e.args and hasattr(e.args[0], "str") else str(e)
            raise SystemFailureError(
                f"system {self._system!r}: cannot grow stream {stream!r} to {partitions} partitions: {reason}"
            ) from None

    def _eof_reader(self) -> Any:
        """A consumer that reads a partition forward to its end (the EOF event), fetching eagerly."""
        return Consumer(
            client_config(
                self._clients,
                "end-offsets",
                defaults={"group.id": "samzamp-end-offsets", "fetch.wait.max.ms": 10},
                owned=EOF_READER,
            )
        )

    def end_offsets(self, ssps: list[SystemStreamPartition]) -> dict[SystemStreamPartition, int]:
        """Exact high watermarks, found by reading to the partition-EOF event.

        ListOffsets(latest) can answer too low on Tansu (the base offset of the last batch + 1), so
        it is only a starting point: reading from there to EOF costs at most one batch, and on a
        real Kafka broker the EOF comes at once.
        """
        if not ssps:
            return {}
        consumer = self._eof_reader()
        try:
            marks = self._watermarks(ssps)
            tps = []
            for ssp in ssps:
                if marks is not None:
                    low, high = marks[(ssp.stream, ssp.partition)]
                else:
                    low, high = consumer.get_watermark_offsets(
                        TopicPartition(ssp.stream, ssp.partition), timeout=15, cached=False
                    )
                tps.append(TopicPartition(ssp.stream, ssp.partition, max(int(low), int(high) - 1, 0)))
            consumer.assign(tps)
            pending = {(s.stream, s.partition): s for s in ssps}
            out: dict[SystemStreamPartition, int] = {}
            last_seen: dict[tuple[str, int], int] = {}
            deadline = time.monotonic() + 30
            while pending:
                if time.monotonic() > deadline:
                    raise SystemFailureError(f"system {self._system!r}: no end-of-partition from {sorted(pending)}")
                # consume(n, t) waits for n messages or t: take what is there, and block only for one.
                for m in consumer.consume(1000, 0) or consumer.consume(1, 0.2):
                    key = (m.topic() or "", m.partition() or 0)
                    offset = m.offset() or 0
                    err = m.error()
                    if err is None:
                        last_seen[key] = offset
                    elif err.code() == PARTITION_EOF and key in pending:
                        out[pending.pop(key)] = max(offset, last_seen.get(key, -1) + 1)
            return out
        finally:
            consumer.close()

    def _watermarks(self, ssps: list[SystemStreamPartition]) -> dict[tuple[str, int], tuple[int, int]] | None:
        """(low, high) of each SSP's partition from two ListOffsets requests for all of them, not a
        round trip per partition (a task start of hundreds of partitions waited seconds for them);
        None when the broker does not answer them (the caller asks partition by partition)."""
        if len(ssps) < 2:
            return None
        partitions = {(s.stream, s.partition) for s in ssps}
        try:
            found = []
            for spec in (OffsetSpec.earliest(), OffsetSpec.latest()):  # type: ignore[no-untyped-call]
                futures = self._admin.list_offsets(
                    {TopicPartition(t, p): spec for t, p in partitions}, request_timeout=15
                )
                found.append({(tp.topic, tp.partition): int(f.result(timeout=30).offset) for tp, f in futures.items()})
        except Exception as e:  # any failure: the per-partition way
            log.debug(
                "system %r: ListOffsets for %d partitions failed (%s): asking each", self._system, len(partitions), e
            )
            return None
        low, high = found
        if set(low) != partitions or set(high) != partitions:
            return None
        return {tp: (low[tp], high[tp]) for tp in partitions}

    def beginning_offsets(self, ssps: list[SystemStreamPartition]) -> dict[SystemStreamPartition, int]:
        """The oldest offset each SSP still holds (its low watermark: where a full re-read starts)."""
        if not ssps:
            return {}
        consumer = Consumer(client_config(self._clients, "end-offsets", defaults={"group.id": "samzamp-end-offsets"}))
        try:
            out = {}
            for ssp in ssps:
                try:
                    low, _high = consumer.get_watermark_offsets(
                        TopicPartition(ssp.stream, ssp.partition), timeout=15, cached=False
                    )
                except KafkaException as e:
                    raise SystemFailureError(f"system {self._system!r}: oldest offset of {ssp}: {e}") from None
                out[ssp] = max(int(low), 0)
            return out
        finally:
            consumer.close()

    def offsets_for_times(self, ssps: list[SystemStreamPartition], time_ms: int) -> dict[SystemStreamPartition, int]:
        """The first offset of each SSP whose message timestamp is ``time_ms`` or later (Kafka's
        offsets-for-times); the end offset where none is.

        The broker's answer (ListOffsets by timestamp) is only a starting point: Tansu answers 0
        whatever the time. So each partition is read from there to the first message at or after
        ``time_ms``: on a real Kafka broker that is the first message read.
        """
        if not ssps:
            return {}
        consumer = self._eof_reader()
        try:
            try:
                found = consumer.offsets_for_times(
                    [TopicPartition(s.stream, s.partition, time_ms) for s in ssps], timeout=15
                )
            except KafkaException as e:
                raise SystemFailureError(f"system {self._system!r}: offsets for time {time_ms}: {e}") from None
            starts = {(tp.topic, tp.partition): tp.offset for tp in found}
            lows = self.beginning_offsets(ssps)
            tps = []
            for ssp in ssps:
                start = starts.get((ssp.stream, ssp.partition), -1)
                tps.append(TopicPartition(ssp.stream, ssp.partition, max(int(start), lows[ssp])))
            assign(consumer, tps)
            pending = {(s.stream, s.partition): s for s in ssps}
            out: dict[SystemStreamPartition, int] = {}
            deadline = time.monotonic() + 120
            while pending:
                if time.monotonic() > deadline:
                    raise SystemFailureError(
                        f"system {self._system!r}: no answer for time {time_ms} from {sorted(pending)}"
                    )
                for m in consumer.consume(1000, 0) or consumer.consume(1, 0.2):
                    key = (m.topic() or "", m.partition() or 0)
                    if key not in pending:
                        continue
                    err = m.error()
                    ts = m.timestamp()
                    at_or_after = err is None and ts[0] and ts[1] >= time_ms
                    if at_or_after or (err is not None and err.code() == PARTITION_EOF):
                        out[pending.pop(key)] = m.offset() or 0
                        consumer.pause([TopicPartition(*key)])  # found: nothing more of it is wanted
                    elif err is not None:
                        raise SystemFailureError(f"system {self._system!r}: reading {key[0]}[{key[1]}]: {err.str()}")
            return out
        finally:
            consumer.close()

    def read_all(self, stream: str, partition: int, start: int = 0) -> list[RawMessage]:
        """Every message of one partition, from offset ``start`` (0: the oldest) to the end
        (PARTITION_EOF), in offset order; from the oldest when ``start`` is past the end."""
        consumer = Consumer(
            client_config(
                self._clients,
                "metadata-reader",
                # An empty fetch answers after fetch.wait.max.ms: keep reaching the end quick.
                # A ``start`` past the end (the topic was recreated) reads it from its oldest record.
                defaults={"group.id": "samzamp-read-all", "fetch.wait.max.ms": 10, "auto.offset.reset": "earliest"},
                owned=EOF_READER,
            )
        )
        out: list[RawMessage] = []
        try:
            assign(consumer, [TopicPartition(stream, partition, start if start > 0 else OFFSET_BEGINNING)])
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                # consume(n, t) waits for n messages or t (this broker answers fetches late): take
                # what is there, and block only for one.
                batch = consumer.consume(5000, 0) or consumer.consume(1, 0.5)
                for m in batch:
                    err = m.error()
                    if err is None:
                        ts = m.timestamp()
                        out.append((m.offset() or 0, m.key(), m.value(), ts[1] if ts[0] else 0))
                    elif err.code() == PARTITION_EOF:
                        return out
                    else:
                        raise SystemFailureError(f"system {self._system!r}: reading {stream}[{partition}]: {err.str()}")
            raise SystemFailureError(f"system {self._system!r}: reading {stream}[{partition}] did not reach its end")
        finally:
            consumer.close()

    def stop(self) -> None:
        """Let the admin client go now, closing its connections: before the embedded broker stops,
        so that librdkafka has no connection to lose ("Disconnected") when it does."""
        client, self._client = self._client, None
        if client is not None:
            client.poll(0)  # its last log lines
