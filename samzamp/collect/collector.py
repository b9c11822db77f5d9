"""The MessageCollector a task sends through: serialize with the stream's serdes, count the send for
commit, and hand an output the system refuses to the task's ``OutputFailures`` rule."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from samzamp.api.collector import MessageCollector
from samzamp.api.envelope import OutgoingMessageEnvelope, SystemStream
from samzamp.api.errors import SerdeError, SystemFailureError
from samzamp.api.serde import Serde
from samzamp.collect.output_failures import OutputFailures
from samzamp.metrics.registry import Counter
from samzamp.systems.base import Flushable, KeyedSend, SystemProducer

__all__ = ["TaskCollector"]

log = logging.getLogger(__name__)

SerdeLookup = Callable[[SystemStream], tuple[Serde | None, Serde | None]]
Encode = Callable[[Any], bytes]
SendFn = Callable[[str, "bytes | None", "bytes | None", "int | None", "bytes | None"], None]


class TaskCollector(MessageCollector):
    """One per task. ``producers_used`` are the producers its commit must flush."""

    __slots__ = (
        "_dropped",
        "_drop_errors",
        "_fallback_system",
        "_producers",
        "output_failures",
        "_send_calls",
        "_routes",
        "_serdes_of",
        "task_name",
        "producers_used",
    )

    def __init__(
        self,
        task_name: str,
        producers: dict[str, SystemProducer],
        serdes_of: SerdeLookup,
        drop_serialization_errors: bool,
        send_calls: Counter,
        dropped: Counter,
        *,
        output_failures: OutputFailures,
        fallback_system: str | None = None,
    ) -> None:
        """``output_failures``: what becomes of an output the system refuses at send time (the
        same rule decides about failed deliveries at commit). ``fallback_system``: where a send to a
        system that is not configured goes, as if it named this system (``samzamp.testing.TestRunner``
        only; None: such a send fails the task)."""
        self.task_name = task_name
        self.output_failures = output_failures
        self._fallback_system = fallback_system
        self.producers_used: set[Flushable] = set()
        self._producers = producers
        self._serdes_of = serdes_of
        self._routes: dict[SystemStream, tuple[Encode, Encode, SendFn, KeyedSend | None]] = {}
        self._drop_errors = drop_serialization_errors
        self._send_calls = send_calls
        self._dropped = dropped

    def flush(self, timeout_s: float = 60.0) -> int:
        """Wait until every message this task sent so far is acknowledged or failed (failures stay
        for the commit to judge); how many were neither within ``timeout_s`` per producer."""
        return sum(p.flush(timeout_s) for p in self.producers_used)

    def _route(self, ss: SystemStream) -> tuple[Encode, Encode, SendFn, KeyedSend | None]:
        target = ss
        if ss.system not in self._producers and self._fallback_system is not None:
            target = SystemStream(self._fallback_system, ss.stream)
            log.info(
                "task %r sent to %s: system %r is not configured; it goes to %s", self.task_name, ss, ss.system, target
            )
        try:
            producer = self._producers[target.system]
        except KeyError:
            raise SystemFailureError(
                f"task {self.task_name!r} sent to {ss}, but system {ss.system!r} is not configured (add systems.{ss.system}.samza.factory)"
            ) from None
        key_serde, msg_serde = self._serdes_of(target)
        route = self._routes[ss] = (
            _encoder(key_serde),
            _encoder(msg_serde),
            producer.send,
            producer.keyed_sender(target.stream),
        )
        self.producers_used.add(producer)
        return route

    def send(self, envelope: OutgoingMessageEnvelope) -> None:
        ss = envelope.system_stream
        key_enc, msg_enc, producer_send, keyed_send = self._routes.get(ss) or self._route(ss)
        key = envelope.key
        value = envelope.message
        pkey = envelope.partition_key
        try:
            if key is not None:
                key = key_enc(key)
            if value is not None:
                value = msg_enc(value)
            if pkey is not None:
                pkey = key_enc(pkey)
        except Exception as e:
            if self._drop_errors:
                self._dropped.count += 1
                log.warning("task %r: dropped an output to %s that failed to serialize: %s", self.task_name, ss, e)
                return
            raise SerdeError(
                f"task {self.task_name!r}: cannot serialize an output to {ss}: {type(e).__name__}: {e} "
                "(set its serdes with streams.<id>.samza.key.serde / msg.serde, or task.drop.serialization.errors=true)"
            ) from e
        self._send_calls.count += 1
        if keyed_send is not None and pkey is None and envelope.partition is None:
            try:
                keyed_send(value, key)  # the common case, without the producer's Python frame
                return
            except Exception:
                pass  # back-pressure or a failure: send() waits for room, or reports what is wrong
        try:
            producer_send(ss.stream, key, value, envelope.partition, pkey)
        except SystemFailureError as e:  # the system refused this message (never back-pressure)
            self.output_failures.at_send(ss, e)


def _encoder(serde: Serde | None) -> Encode:
    """The serde's ``to_bytes``; with no serde, values must already be bytes."""
    return serde.to_bytes if serde is not None else _as_bytes


def _as_bytes(value: Any) -> bytes:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    raise TypeError(f"no serde is configured and {type(value).__name__} is not bytes")
