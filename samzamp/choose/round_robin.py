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

    __slots__ = ("_messages", "_queue")

    def __init__(self) -> None:
        self._queue: deque[tuple[Lane, Buffered]] = deque()
        self._messages = 0  # what the held envelopes carry (a metrics gauge reads it)

    def update(self, ssp: Lane, message: Buffered) -> None:
        self._queue.append((ssp, message))
        self._messages += messages_in(message)

    def choose(self) -> tuple[Lane, Buffered] | None:
        if not self._queue:
            return None
        chosen = self._queue.popleft()
        self._messages -= messages_in(chosen[1])
        return chosen

    def remove(self, ssp: Lane) -> None:
        # At most one envelope per SSP is held: drop the first match.
        for i, (held, message) in enumerate(self._queue):
            if held == ssp:
                del self._queue[i]
                self._messages -= messages_in(message)
                return

    def __len__(self) -> int:
        return self._messages
