"""Assign-based Kafka consumer for a container's SSPs (samzamp does its own grouping: no group protocol)."""

from __future__ import annotations

import gc
import logging
import os
from array import array
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, TypeVar

import confluent_kafka
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

from samzamp import _fetchpack, _kafkafetch
from samzamp.api.envelope import SystemStreamPartition
from samzamp.api.errors import SystemFailureError
from samzamp.systems.base import OLDEST, UPCOMING, RawMessage, StartOffset
from samzamp.systems.kafka.assign import add_partitions, assign
from samzamp.systems.kafka.client_config import LIBRDKAFKA_LOG, ClientKind, KafkaClientSettings, client_config
from samzamp.systems.kafka.codes import PARTITION_EOF

__all__ = ["NATIVE_FETCH_ENV", "KafkaSystemConsumer", "consumer_config", "consumer_group"]

log = logging.getLogger(__name__)

# "0" here reads every batch through confluent-kafka's consume(), never from librdkafka in C.
NATIVE_FETCH_ENV = "SAMZAMP_KAFKA_NATIVE_FETCH"
# The confluent-kafka versions whose C layouts samzamp._kafkafetch was written against and tested with.
_NATIVE_FETCH_VERSIONS = frozenset({"2.16.1"})

_Run = TypeVar("_Run")


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


def consumer_group(clients: KafkaClientSettings, group_id: str) -> str:
    """The consumer group of the input consumers made with ``group_id``: the one their settings give
    (``systems.<s>.consumer.group.id`` or ``systems.<s>.kafka.group.id`` replace ``group_id``)."""
    return str(consumer_config(clients, "consumer", group_id)["group.id"])


class KafkaSystemConsumer:
    """One librdkafka consumer for every SSP of one system in this container."""

    def __init__(self, clients: KafkaClientSettings, group_id: str, batch: int = 2000) -> None:
        self._system = clients.system
        self._consumer = Consumer(consumer_config(clients, "consumer", group_id))
        self._starts: dict[SystemStreamPartition, StartOffset] = {}
        self._ssp_of: dict[tuple[str, int], SystemStreamPartition] = {}
        self._by_partition: dict[int, SystemStreamPartition] | None = None
        self._topic_counts: dict[str, int] = {}  # registered SSPs per topic
        self._batch = batch
        self._started = False
        self._paused: set[SystemStreamPartition] = set()
        self._native = _native_reader(self._consumer, self._system)

    @property
    def reads_natively(self) -> bool:
        """Whether ``poll_packed`` reads batches from librdkafka in C (else through ``consume()``)."""
        return self._native is not None

    def register(self, ssp: SystemStreamPartition, start: StartOffset) -> None:
        """Read ``ssp`` from ``start`` (OLDEST or an exact offset). Before ``start()`` it joins the
        first assignment; after, it is added to the running consumer at once (by the thread that
        polls, never during a poll). ValueError if ``ssp`` is registered already."""
        if ssp in self._starts:
            raise ValueError(f"{ssp} is already registered with the consumer of system {self._system!r}")
        tp = _start_partition(ssp, start)
        if self._started:
            add_partitions(self._consumer, [tp], self._topics())
        self._starts[ssp] = start
        self._indexed(ssp)

    def unregister(self, ssps: list[SystemStreamPartition]) -> None:
        """Stop reading ``ssps`` and forget them: no later ``poll`` returns a message of one, even one
        librdkafka had fetched before. ValueError naming any that is not registered."""
        unknown = [s for s in ssps if s not in self._starts]
        if unknown:
            raise ValueError(
                f"{', '.join(map(str, unknown))}: not registered with the consumer of system {self._system!r}"
            )
        tps = [TopicPartition(s.stream, s.partition) for s in ssps]
        # librdkafka keeps a partition's pause across unassign and assign: one registered again
        # would never be fetched. Resuming first is safe, as the unassign drops what it fetches.
        paused = [tp for s, tp in zip(ssps, tps, strict=True) if s in self._paused]
        if paused:
            self._consumer.resume(paused)
        if self._started and tps:
            self._consumer.incremental_unassign(tps)
        for s in ssps:
            del self._starts[s]
            self._unindexed(s)
        self._paused.difference_update(ssps)

    def _topics(self) -> set[str]:
        return set(self._topic_counts)

    # The lookups ``poll`` maps a message to its SSP with are kept as SSPs come and go, never rebuilt
    # per SSP: a start registers thousands, one at a time (rebuilding was partitions squared). Only
    # the thread that polls registers, between polls, so changing them in place is safe.
    def _indexed(self, ssp: SystemStreamPartition) -> None:
        self._ssp_of[(ssp.stream, ssp.partition)] = ssp
        counts = self._topic_counts
        counts[ssp.stream] = counts.get(ssp.stream, 0) + 1
        if len(counts) != 1:
            self._by_partition = None
        elif self._by_partition is not None:
            self._by_partition[ssp.partition] = ssp
        else:  # the first SSP, or the other topics left: rebuilt once
            self._by_partition = {s.partition: s for s in self._starts}

    def _unindexed(self, ssp: SystemStreamPartition) -> None:
        del self._ssp_of[(ssp.stream, ssp.partition)]
        counts = self._topic_counts
        counts[ssp.stream] -= 1
        if not counts[ssp.stream]:
            del counts[ssp.stream]
        if len(counts) != 1:
            self._by_partition = None
        elif self._by_partition is not None:
            del self._by_partition[ssp.partition]
        else:  # the other topics left: rebuilt once
            self._by_partition = {s.partition: s for s in self._starts}

    def start(self) -> None:
        assign(self._consumer, [_start_partition(ssp, start) for ssp, start in self._starts.items()])
        self._started = True

    def _consume(self, timeout_s: float) -> list[Any]:
        """What librdkafka has queued, up to a batch; if that is nothing, wait up to ``timeout_s``
        for the first message only."""
        # consume(n, t) waits for n messages or t: take what is there now, and if that is nothing,
        # wait only for the first message to arrive.
        msgs = self._consumer.consume(self._batch, 0)
        if not msgs and timeout_s > 0:
            msgs = self._consumer.consume(1, timeout_s)
            if msgs:
                msgs.extend(self._consumer.consume(self._batch - 1, 0))
        return msgs

    def poll(self, timeout_s: float) -> dict[SystemStreamPartition, list[RawMessage]]:
        msgs = self._consume(timeout_s)
        out: dict[SystemStreamPartition, list[RawMessage]] = {}
        # The SSPs by partition when this consumer reads a single topic (the common case), which
        # spares a topic() call and a tuple per message.
        by_partition = self._by_partition
        lookup: dict[Any, SystemStreamPartition] = by_partition if by_partition is not None else self._ssp_of
        # librdkafka discards what it had queued for a partition it unassigns (a version barrier);
        # a message of a partition not registered here, should one slip through, goes here unreturned
        # rather than failing the poll.
        dropped: list[RawMessage] = []
        # A consume batch comes in runs of one partition: look the SSP up when the run changes.
        last_key: object = None
        append = dropped.append
        for m in msgs:
            err = m.error()
            if err is not None:
                self._on_error(err)
                continue
            partition = m.partition()
            key = partition if by_partition is not None else (m.topic(), partition)
            if key != last_key:
                ssp = lookup.get(key)
                append = (out.get(ssp) or out.setdefault(ssp, [])).append if ssp is not None else dropped.append
                last_key = key
            ts_type, ts = m.timestamp()
            append((m.offset() or 0, m.key(), m.value(), ts if ts_type else 0))
        if dropped:
            log.debug(
                "kafka consumer of system %r: dropped %d messages of unregistered partitions",
                self._system,
                len(dropped),
            )
        return out

    def poll_packed(
        self,
        timeout_s: float,
        size: int,
        split: Mapping[SystemStreamPartition, tuple[int, bool]],
        run: Callable[[int, array[int], bytes], _Run],
    ) -> dict[SystemStreamPartition, tuple[int, list[list[_Run]]]]:
        """``poll``, the messages packed as they are taken from librdkafka's batch, in C
        (``samzamp.systems.base.PackedPolling``): no Python object per message where the batch is read
        from librdkafka itself (``samzamp._kafkafetch``), else none beyond the client's."""
        by_partition = self._by_partition
        lookup: dict[Any, SystemStreamPartition] = by_partition if by_partition is not None else self._ssp_of
        if self._native is not None:
            out, codes, dropped = self._native.read_batch(
                self._batch, timeout_s, lookup, by_partition is not None, split, size, run, array
            )
            errors = [KafkaError(code, reason) for code, reason in codes]
        else:
            with _gc_paused():
                msgs = self._consume(timeout_s)
                if not msgs:
                    return {}
                out, errors, dropped = _fetchpack.pack_consumed(
                    msgs, lookup, by_partition is not None, split, size, run, array
                )
                del msgs  # freed before collections resume: see _gc_paused
        for err in errors:  # after the batch, as a poll that raises drops its whole batch anyway
            self._on_error(err)
        if dropped:
            log.debug(
                "kafka consumer of system %r: dropped %d messages of unregistered partitions", self._system, dropped
            )
        return out

    def _on_error(self, err: KafkaError) -> None:
        if err.code() == PARTITION_EOF:
            return
        if err.fatal() or err.code() in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError.TOPIC_AUTHORIZATION_FAILED):
            raise SystemFailureError(f"kafka consumer of system {self._system!r}: {err.str()}")
        log.warning("kafka consumer of system %r: %s", self._system, err.str())

    def pause(self, ssps: list[SystemStreamPartition]) -> None:
        self._consumer.pause([TopicPartition(s.stream, s.partition) for s in ssps])
        self._paused.update(ssps)

    def resume(self, ssps: list[SystemStreamPartition]) -> None:
        self._consumer.resume([TopicPartition(s.stream, s.partition) for s in ssps])
        self._paused.difference_update(ssps)

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


def _native_reader(consumer: Consumer, system: str) -> _kafkafetch.Reader | None:
    """A reader of ``consumer``'s batches from librdkafka in C, or None where it cannot be used: the
    switch (NATIVE_FETCH_ENV) is "0", confluent-kafka is a version its layouts were not checked
    against, or ``attach`` refuses (it says why, logged at DEBUG)."""
    if os.environ.get(NATIVE_FETCH_ENV, "1") == "0":
        return None
    # the extension's own version, whose layouts these are (a str here; older releases gave a tuple)
    got: Any = confluent_kafka.cimpl.version()
    version = str(got[0] if isinstance(got, tuple) else got)
    if version not in _NATIVE_FETCH_VERSIONS:
        log.debug("kafka consumer of system %r: read through consume(): confluent-kafka %s", system, version)
        return None
    try:
        return _kafkafetch.attach(consumer, Consumer, confluent_kafka.cimpl.__file__, LIBRDKAFKA_LOG)
    except RuntimeError as e:
        log.debug("kafka consumer of system %r: read through consume(): %s", system, e)
        return None


@contextmanager
def _gc_paused() -> Iterator[None]:
    """No cyclic collection while a consumed batch is alive (unless collections were off already).

    confluent-kafka's Message objects are tracked by the cyclic GC, and a batch of 2,000 set off a few
    young-generation collections, each walking the messages alive: about 6% of what a poll costs,
    for objects that never form a cycle and are all freed by reference counting when the batch goes.
    Freed with collections off, the batch leaves the allocation count where it was. A poll that
    waits for its first message waits with collections off too: the loop is idle then, and they
    resume within one poll timeout.
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _start_partition(ssp: SystemStreamPartition, start: StartOffset) -> TopicPartition:
    """The partition to assign for reading ``ssp`` from ``start``."""
    if start == OLDEST:
        return TopicPartition(ssp.stream, ssp.partition, OFFSET_BEGINNING)
    if start == UPCOMING or not isinstance(start, int):
        raise SystemFailureError(f"{ssp}: start offset {start!r} must be resolved to an exact offset first")
    return TopicPartition(ssp.stream, ssp.partition, start)
