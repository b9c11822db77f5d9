"""Reading a small topic partition again and again, each read from where the last one stopped.

The checkpoint topic and the coordinator stream are read at every rebalance, and they grow by
thousands of records a commit interval at thousands of tasks; reading each from its oldest record
every time costs a start squared in tasks. ``read_since`` reads one partition from a
``ReadPosition`` to its end and returns the records with the position the next read starts at.

Two things make a read from the middle safe:

- **Holes.** A reader can pass a batch of another producer that the broker makes visible only after
  later ones (ARCHITECTURE.md, the skipped-records quirk). A read that meets a hole among its last
  ``RECENT`` offsets (a write that may still be in flight) starts the next read at that hole; the
  records after it are then read again, in their order, which leaves the same newest record of each
  key. A hole that is still there when a read starts at it is not in flight (compaction made it), so
  that read passes it. A hole right where a read starts counts too: a batch just past where the last
  read stopped can be held back as well as one in the middle.
- **A recreated topic.** Should the first record of a read come from before where it asked to start
  (the broker answered a read past the end from the oldest record: the topic was recreated shorter),
  the read is the whole topic again: ``whole`` tells the caller to drop what earlier reads gave.

The caller keeps the position beside what it built from the records, and replaces both only when
its read succeeded, so a read that fails leaves the last one as it was.
"""

from __future__ import annotations

from typing import NamedTuple

from samzamp.systems.base import RawMessage, SystemAdmin

__all__ = ["RECENT", "ReadPosition", "TopicRead", "read_since"]

# The offsets before the end of a read in which a hole is taken for a write still in flight (read
# again next time) rather than a compacted record.
RECENT = 10_000


class ReadPosition(NamedTuple):
    """Where the next read of a partition starts, and whether that offset is a hole the last read met
    (a hole still there when read from it is passed, not waited for)."""

    next_offset: int = 0
    at_hole: bool = False


class TopicRead(NamedTuple):
    """What one ``read_since`` read."""

    records: list[RawMessage]  # in offset order
    whole: bool  # the topic was found recreated: ``records`` are all of it; drop what earlier reads gave
    next: ReadPosition  # where the next read starts


def read_since(admin: SystemAdmin, topic: str, partition: int, since: ReadPosition) -> TopicRead:
    """The records of ``topic``/``partition`` from ``since`` to the end, and where to read next."""
    start, at_hole = since
    records = admin.read_all(topic, partition, start)
    whole = bool(records) and records[0][0] < start
    if whole:
        start, at_hole = 0, False
    previous, holes = start - 1, []
    for offset, _key, _value, _ts in records:
        if offset > previous + 1 and (previous >= start or not at_hole):
            holes.append(previous + 1)
        previous = offset
    next_offset = previous + 1 if records else start
    recent = [h for h in holes if h >= next_offset - RECENT]
    return TopicRead(records, whole, ReadPosition(recent[0], True) if recent else ReadPosition(next_offset))
