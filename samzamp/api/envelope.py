"""Messages and stream names: what a task receives and what it sends.

These are plain value types. They are created on the hot path (one or two per message), so they
are tuples, or msgspec Structs: a Struct is built in C, in about a third of the time a ``__slots__``
class's ``__init__`` takes (bench/noop.py's profile).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import msgspec

__all__ = [
    "IncomingMessageEnvelope",
    "OutgoingMessageEnvelope",
    "SystemStream",
    "SystemStreamPartition",
]


class SystemStream(NamedTuple):
    """A stream in a system, e.g. ``SystemStream("kafka", "words")``."""

    system: str
    stream: str

    def __str__(self) -> str:
        return f"{self.system}.{self.stream}"


class SystemStreamPartition(NamedTuple):
    """One partition of a stream: the unit a task consumes and checkpoints.

    ``key_bucket`` is -1 unless the job uses virtual tasks (job.elasticity.factor > 1), in which
    case one partition is split into key buckets, each owned by one task.
    """

    system: str
    stream: str
    partition: int
    key_bucket: int = -1

    @property
    def system_stream(self) -> SystemStream:
        return SystemStream(self.system, self.stream)

    def __str__(self) -> str:
        # Samza's SystemStreamPartition.toString, which also names tasks of GroupBySystemStreamPartition.
        if self.key_bucket == -1:
            return f"SystemStreamPartition [{self.system}, {self.stream}, {self.partition}]"
        return f"SystemStreamPartition [{self.system}, {self.stream}, {self.partition}, {self.key_bucket}]"


class IncomingMessageEnvelope(msgspec.Struct, eq=False):
    """One message handed to a task: its SSP, offset, deserialized key and message.

    ``size`` is the number of bytes the key and message had on the wire. ``timestamp`` is the
    record's timestamp in milliseconds since the epoch (0 when the system has none). Envelopes
    compare and hash by identity, as plain objects do.
    """

    system_stream_partition: SystemStreamPartition
    offset: int
    key: Any
    message: Any
    size: int = 0
    timestamp: int = 0

    def __repr__(self) -> str:
        return (
            f"IncomingMessageEnvelope({self.system_stream_partition}, offset={self.offset}, "
            f"key={self.key!r}, message={self.message!r})"
        )


class OutgoingMessageEnvelope(msgspec.Struct, eq=False):
    """A message a task sends through its MessageCollector.

    ``partition_key`` (default: ``key``) chooses the partition by hash; ``partition`` pins it.
    Key and message are serialized with the destination stream's serdes.
    """

    system_stream: SystemStream
    message: Any
    key: Any = None
    partition_key: Any = None
    partition: int | None = None

    def __repr__(self) -> str:
        return f"OutgoingMessageEnvelope({self.system_stream}, key={self.key!r}, message={self.message!r})"
