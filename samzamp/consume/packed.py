"""Packed runs: a lane's messages encoded once, on the fetch thread, for a task in a worker process.

A task in a worker gets its messages as msgpack in ``Process`` frames (samzamp.dispatch.process.frames).
Built message by message on the loop thread, that costs the loop about a microsecond and a half per
message (taking the messages, encoding them, then freeing them when the worker reports them done), on
a core it shares with the workers: the largest part of what a pool of workers pays over running the
task inline. So when every task runs in a worker, the fetch thread packs each lane's messages, right
after it fetched them, into runs of up to task.consumer.batch.size messages, already encoded the way a
``Process`` frame carries them, and frees the messages there. The loop then hands whole runs on: its
cost is per run, not per message.

A ``PackedRun`` takes a ``RawMessage``'s place in a lane's buffer, in the chooser and in a task's
pending queue. Its first item is its first message's offset, so ``entry[0] >= 0`` tells data from a
control marker (which is never packed) as it does for a message. Only a worker's proxy opens one:
``unpack`` gives the messages back, for the rare paths that need them one by one (messages taken back
from a worker after a commit or shutdown request).
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from operator import attrgetter
from typing import NamedTuple

import msgspec

from samzamp.systems.base import RawMessage

__all__ = ["Buffered", "PackedRun", "messages_held", "messages_in", "pack", "unpack"]

_encode = msgspec.msgpack.Encoder().encode
_decode = msgspec.msgpack.Decoder(list[tuple[int, bytes | None, bytes | None, int]]).decode


class PackedRun(NamedTuple):
    """Consecutive data messages of one lane, in offset order, encoded as the msgpack array of
    ``[offset, key, value, timestamp]`` arrays that a ``Process`` frame carries for a run."""

    first: int  # the first message's offset: where a RawMessage has its offset
    offsets: array[int]  # every message's offset, in order ('q')
    encoded: bytes


# What a lane's buffer, the chooser and a task's pending queue hold: a message or a packed run.
Buffered = RawMessage | PackedRun


def pack(msgs: list[RawMessage], size: int) -> list[Buffered]:
    """``msgs`` (one lane's, in order) as runs of at most ``size`` data messages each; a control
    marker (negative offset) stays itself, between the runs, where it was."""
    out: list[Buffered] = []
    for start in range(0, len(msgs), size):
        chunk = msgs[start : start + size]
        offsets = [m[0] for m in chunk]
        if min(offsets) >= 0:
            out.append(_packed(chunk, offsets))
            continue
        run: list[RawMessage] = []
        for m in chunk:  # a control marker among them (rare: the end of a bounded input)
            if m[0] >= 0:
                run.append(m)
                continue
            if run:
                out.append(_packed(run, [m[0] for m in run]))
                run = []
            out.append(m)
        if run:
            out.append(_packed(run, [m[0] for m in run]))
    return out


def _packed(run: list[RawMessage], offsets: list[int]) -> PackedRun:
    return PackedRun(offsets[0], array("q", offsets), _encode(run))


def messages_in(entry: Buffered) -> int:
    """How many messages a buffer entry holds (a control marker counts as one)."""
    return len(entry.offsets) if type(entry) is PackedRun else 1


_offsets = attrgetter("offsets")


def messages_held(entries: Sequence[Buffered]) -> int:
    """How many messages ``entries`` hold (a control marker counts as one). The fetch thread counts
    a whole buffer at each poll, hundreds of runs: the common case, runs only, is counted in C."""
    try:
        return sum(map(len, map(_offsets, entries)))
    except AttributeError:  # a control marker among them (the end of a bounded input, a drain)
        return sum(map(messages_in, entries))


def unpack(entry: PackedRun) -> list[RawMessage]:
    """The messages of a packed run, as they were fetched."""
    return _decode(entry.encoded)
