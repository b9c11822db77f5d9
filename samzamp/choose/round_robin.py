"""Round-robin MessageChooser: holds at most one envelope per SSP and hands them out first in, first out.

The contract is Samza's: ``update`` is called with an SSP's next envelope only after the previous one
from that SSP was chosen *and* taken for processing, so one busy task never lets its SSP hog the loop.
"""

from __future__ import annotations

from collections import deque

from samzamp.consume.lane import Lane
from samzamp.consume.packed import Buffered, messages_in

__all__ = ["RoundRobinChooser"]


class RoundRobinChooser:
    """The default ``samzamp.consume.MessageChooser``: first offered, first chosen."""

    __slots__ = ("_queue",)

    def __init__(self) -> None:
        self._queue: deque[tuple[Lane, Buffered]] = deque()

    def update(self, ssp: Lane, message: Buffered) -> None:
        self._queue.append((ssp, message))

    def choose(self) -> tuple[Lane, Buffered] | None:
        return self._queue.popleft() if self._queue else None

    def remove(self, ssp: Lane) -> None:
        # At most one envelope per SSP is held: drop the first match.
        for i, (held, _) in enumerate(self._queue):
            if held == ssp:
                del self._queue[i]
                return

    def __len__(self) -> int:
        # Counted when asked (gauges, a drain), not kept up on every choice: at most one envelope
        # per SSP. tuple(): a copy in one C call, as a gauge reads it from another thread.
        return sum(messages_in(message) for _, message in tuple(self._queue))
