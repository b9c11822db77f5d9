"""High watermarks: a copy of each partition's, taken by the poller, for the lag metrics to read.

Only the thread that polls calls into a consumer once fetching started: confluent-kafka (2.x) lets
one thread at a time into a client, and a second caller waits, retrying now and then, while the
fetch thread on idle input polls back to back, so a metrics call could wait until data arrives.
Hence the copy, refreshed every ``HIGH_WATERMARK_REFRESH_S`` by the poller.

Threading: ``refresh`` is called by whichever thread polls, holding the poll lock
(``samzamp.consume.poll_handoff``), and ``expire`` and ``forget`` by the loop thread holding the
same lock; ``get`` by any thread (a metrics gauge), without a lock: the copy is replaced, never
changed, so a reader sees the old one or the new one.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping

from samzamp.api.envelope import SystemStreamPartition
from samzamp.systems.base import SystemConsumer

__all__ = ["HIGH_WATERMARK_REFRESH_S", "HighWatermarks"]

# How often the poller copies the high watermarks the lag metrics read.
HIGH_WATERMARK_REFRESH_S = 1.0


class HighWatermarks:
    """The high watermarks of the partitions read, as the poller last copied them."""

    __slots__ = ("_clock", "_consumers", "_copy", "due")

    def __init__(self, consumers: Mapping[str, SystemConsumer], clock: Callable[[], float]) -> None:
        self._consumers = consumers
        self._clock = clock
        self._copy: dict[SystemStreamPartition, int | None] = {}
        # When the poller copies them next: it compares the clock with this before each poll, an
        # attribute rather than a call, as the check runs at every poll.
        self.due = 0.0

    def refresh(self, partitions: Iterable[SystemStreamPartition]) -> None:
        """Poller: copy the high watermark of each of ``partitions`` (those read, every one)."""
        self.due = self._clock() + HIGH_WATERMARK_REFRESH_S
        hw: dict[SystemStreamPartition, int | None] = {}
        for ssp in partitions:
            c = self._consumers.get(ssp.system)
            hw[ssp] = c.high_watermark(ssp) if c is not None else None
        self._copy = hw  # one assignment: see the module docstring

    def expire(self) -> None:
        """Partitions were added: the next poll copies every high watermark, theirs included."""
        self.due = 0.0

    def forget(self, partitions: Collection[SystemStreamPartition]) -> None:
        """``partitions`` are not read any more."""
        self._copy = {s: hw for s, hw in self._copy.items() if s not in partitions}

    def get(self, ssp: SystemStreamPartition) -> int | None:
        """The high watermark of ``ssp``'s partition (a key bucket's is its partition's) as last
        copied (at most about ``HIGH_WATERMARK_REFRESH_S`` old while fetching); None if unknown."""
        return self._copy.get(ssp if ssp.key_bucket == -1 else ssp._replace(key_bucket=-1))
