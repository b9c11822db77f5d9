"""Stub of the native extension samzamp._deliveries (native/deliveries.c). Private: only
samzamp.systems.kafka.changelog imports it.

Written by hand from native/deliveries.c; keep the two in step (tests/unit/test_deliveries.py checks
that every name here exists in the built module and the other way round).
"""

from typing import Any

__all__ = ["Deliveries"]

class Deliveries:
    """A producer's ``on_delivery`` callback that keeps, per (topic, partition), the newest
    acknowledged offset, the acknowledged offsets not yet taken (as runs of consecutive offsets) and
    the failures not yet taken. Called and used holding the GIL, from any thread."""

    def __call__(self, err: Any, msg: Any, /) -> None: ...
    def newest(self, topic: str, partition: int, /) -> int | None: ...
    def take_acked(self, topic: str, partition: int, /) -> list[tuple[int, int]]: ...
    def take_errors(self, topic: str, partition: int, /) -> list[str]: ...
