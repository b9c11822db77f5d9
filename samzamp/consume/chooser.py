"""The MessageChooser the fan-in feeds: what ``SystemConsumers`` needs of a chooser (Samza's
``MessageChooser``). Implementations live in ``samzamp.choose``, the next stage, and the container
hands one in, so this stage never imports a later one.
"""

from __future__ import annotations

from typing import Protocol

from samzamp.consume.lane import Lane
from samzamp.consume.packed import Buffered

__all__ = ["MessageChooser"]


class MessageChooser(Protocol):
    """Holds at most one envelope per lane (an SSP as one task reads it) and says which the loop handles next.

    ``update`` is called with an SSP's next envelope only after the previous one from that SSP was
    chosen and taken for processing; ``choose`` returns None when it holds nothing.
    """

    def update(self, ssp: Lane, message: Buffered) -> None:
        """Offer ``ssp``'s next envelope."""

    def choose(self) -> tuple[Lane, Buffered] | None:
        """Take the envelope to handle next, or None."""

    def remove(self, ssp: Lane) -> None:
        """Drop the envelope held for ``ssp``, if any: ``choose`` never returns one of ``ssp`` after
        this (until ``update`` offers a new one)."""

    def __len__(self) -> int:
        """How many messages the envelopes it holds carry (a packed run counts each of its messages)."""
