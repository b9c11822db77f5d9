"""A stand-in for confluent-kafka's Message, and a poll packed through samzamp._fetchpack with it:
what the tests of the C packing path hand it in place of a real consumer's batch."""

from __future__ import annotations

from array import array
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from samzamp import _fetchpack
from samzamp.api.envelope import SystemStreamPartition
from samzamp.systems.base import RawMessage

_R = TypeVar("_R")


class FakeMessage:
    """What the C code calls of a confluent-kafka Message."""

    def __init__(
        self,
        topic: str,
        partition: int,
        offset: int | None,
        key: bytes | None,
        value: bytes | None,
        ts: tuple[int, int] = (1, 1_700_000_000_000),
        error: Any = None,
    ) -> None:
        self._t, self._p, self._o, self._k, self._v, self._ts, self._e = topic, partition, offset, key, value, ts, error

    def error(self) -> Any:
        return self._e

    def topic(self) -> str:
        return self._t

    def partition(self) -> int:
        return self._p

    def offset(self) -> int | None:
        return self._o

    def key(self) -> bytes | None:
        return self._k

    def value(self) -> bytes | None:
        return self._v

    def timestamp(self) -> tuple[int, int]:
        return self._ts

    def raw(self) -> RawMessage:
        """The tuple KafkaSystemConsumer.poll makes of it."""
        ts_type, ts = self._ts
        return (self._o or 0, self._k, self._v, ts if ts_type else 0)


def pack_polled(
    polled: Mapping[SystemStreamPartition, list[RawMessage]],
    size: int,
    split: Mapping[SystemStreamPartition, tuple[int, bool]],
    run: Callable[[int, array[int], bytes], _R],
) -> dict[SystemStreamPartition, tuple[int, list[list[_R]]]]:
    """``polled`` (a consumer's ``poll``, data messages only) as ``poll_packed`` gives it: each message
    made a ``FakeMessage`` and the batch packed in C, as the Kafka consumer packs what it consumed."""
    assert all(m[0] >= 0 for msgs in polled.values() for m in msgs), "a Kafka partition has no markers"
    batch = [FakeMessage(s.stream, s.partition, *m[:3], ts=(1, m[3])) for s, msgs in polled.items() for m in msgs]
    lookup: dict[Any, SystemStreamPartition] = {(s.stream, s.partition): s for s in polled}
    out, errors, dropped = _fetchpack.pack_consumed(batch, lookup, False, split, size, run, array)
    assert (errors, dropped) == ([], 0)
    return out
