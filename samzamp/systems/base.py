"""The protocols the container sees; each system (kafka, inmemory) implements them.

Threading contract: once a ``SystemConsumer`` started, one thread at a time calls into it (the
holder of ``SystemConsumers``' poll lock: the fetch thread, or the loop thread polling or changing
which SSPs are read); ``register`` and ``unregister`` are never called during a ``poll``. ``SystemProducer.send`` is called from the thread that runs the task
(the event loop, or a task's own thread for callback-style async tasks). Sends are asynchronous;
``flush`` is the barrier a commit uses, and delivery failures are collected for ``take_errors``.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Mapping
from typing import Protocol, TypeVar

from samzamp.api.envelope import SystemStreamPartition

__all__ = [
    "DRAIN",
    "END_OF_STREAM",
    "WATERMARK_MAX",
    "Flushable",
    "GroupOffsetCommitter",
    "KeyedSend",
    "OLDEST",
    "PackedPolling",
    "UPCOMING",
    "RawMessage",
    "ReadOnlyProducer",
    "StartOffset",
    "SystemAdmin",
    "SystemConsumer",
    "SystemProducer",
]

# One message as it came off the wire: (offset, key bytes, value bytes, timestamp ms).
RawMessage = tuple[int, bytes | None, bytes | None, int]

# Control markers: raw messages with a negative offset, travelling in order with the data.
# A bounded system (in-memory) ends a partition with END_OF_STREAM.
END_OF_STREAM = -1
# Appended by ``SystemConsumers.drain()`` after what each SSP had buffered: the watermark goes to infinity ...
WATERMARK_MAX = -2
# ... and the SSP is drained.
DRAIN = -3

OLDEST = "oldest"
UPCOMING = "upcoming"
StartOffset = int | str  # an exact offset to read next, or OLDEST / UPCOMING

# SystemProducer.keyed_sender's function: (value bytes, key bytes).
KeyedSend = Callable[[bytes | None, bytes | None], None]


class SystemConsumer(Protocol):
    def register(self, ssp: SystemStreamPartition, start: StartOffset) -> None:
        """Read ``ssp`` starting at ``start``, before or after ``start()``: after, the SSP is added to
        the running consumer, read from ``start``, and the others read on untouched. ``start`` is OLDEST
        or an exact offset (the caller resolves UPCOMING). ValueError if ``ssp`` is registered already."""

    def unregister(self, ssps: list[SystemStreamPartition]) -> None:
        """Stop reading ``ssps`` and forget them: no later ``poll`` returns a message of one (what the
        client fetched ahead is dropped), and the others read on untouched. A later ``register`` of
        one reads it again from its new start. ValueError naming any that is not registered."""

    def start(self) -> None: ...

    def poll(self, timeout_s: float) -> dict[SystemStreamPartition, list[RawMessage]]:
        """Block up to ``timeout_s`` for messages; return them grouped by SSP, in offset order."""

    def pause(self, ssps: list[SystemStreamPartition]) -> None: ...

    def resume(self, ssps: list[SystemStreamPartition]) -> None: ...

    def high_watermark(self, ssp: SystemStreamPartition) -> int | None:
        """The next offset the system will write for ``ssp``, as last seen by a fetch (None if unknown)."""

    def stop(self) -> None: ...


_Run = TypeVar("_Run")


class PackedPolling(Protocol):
    """What a consumer may offer besides ``poll`` (optional): a poll whose messages come packed into
    runs for the worker processes (``samzamp.consume.packed``), made without a Python tuple per
    message. A consumer without it is polled message by message and packed by the caller."""

    def poll_packed(
        self,
        timeout_s: float,
        size: int,
        split: Mapping[SystemStreamPartition, tuple[int, bool]],
        run: Callable[[int, array[int], bytes], _Run],
    ) -> dict[SystemStreamPartition, tuple[int, list[list[_Run]]]]:
        """``poll``, each SSP's messages as ``(newest offset, runs per key bucket)``: an SSP of
        ``split`` (``(factor, control_to_all)``, as ``samzamp.consume.key_bucket.split_by_key_bucket``
        takes them) in ``factor`` lists, one per key bucket, any other in one list. Each list holds
        runs of at most ``size`` messages, in offset order, each made by ``run(first offset,
        array('q') of the offsets, msgpack bytes of the [offset, key, value, timestamp] arrays)``.
        Never a control marker: the caller adds those."""


class Flushable(Protocol):
    """What a commit needs of a producer: a barrier and the failures behind it."""

    def flush(self, timeout_s: float) -> int:
        """Wait until every message sent so far is acknowledged or failed; return how many are still queued."""

    def take_errors(self) -> list[str]:
        """Delivery failures since the last call (each names the stream and the reason)."""


class SystemProducer(Flushable, Protocol):
    def send(
        self,
        stream: str,
        key: bytes | None,
        value: bytes | None,
        partition: int | None,
        partition_key: bytes | None,
    ) -> None:
        """Queue one message (``partition`` pins it; else ``partition_key``, else the key, chooses).

        A full local queue is back-pressure: wait for room, never raise. ``SystemFailureError`` when
        the system refuses this message (too large, a stream or partition that does not exist): it is
        not sent, and the caller decides (``samzamp.collect.output_failures``)."""

    def keyed_sender(self, stream: str) -> KeyedSend | None:
        """Optionally, a quicker ``send`` to ``stream`` for a message its key places: called as
        ``fn(value, key)``, it may raise on any failure, back-pressure included, and the caller then
        sends the message again through ``send``, which waits or reports. None: use ``send``."""

    def stop(self) -> None: ...


class SystemAdmin(Protocol):
    def partition_counts(self, streams: list[str]) -> dict[str, int]:
        """Partition count of each stream that exists (missing streams are absent)."""

    def create_stream(self, stream: str, partitions: int, replication_factor: int, configs: dict[str, str]) -> bool:
        """Create ``stream`` unless it exists; True if it was created."""

    def end_offsets(self, ssps: list[SystemStreamPartition]) -> dict[SystemStreamPartition, int]:
        """The exact next offset to be written for each SSP (its high watermark)."""

    def read_all(self, stream: str, partition: int, start: int = 0) -> list[RawMessage]:
        """Every message of one partition from offset ``start`` (0: the oldest) to the end, in
        offset order. A ``start`` past the end (the stream was recreated shorter) may read from the
        oldest."""

    def stop(self) -> None: ...


class GroupOffsetCommitter(Protocol):
    """Commits input offsets to a consumer group, for the tools outside samzamp that read them (lag
    monitors: ``kafka-consumer-groups``, Burrow, kafka-lag-exporter). samzamp never reads them back:
    its checkpoints are the only record of where a task resumes.

    ``commit`` is called by the event loop thread; ``done`` may run on any thread.
    """

    @property
    def group(self) -> str:
        """The consumer group the offsets go to."""

    def commit(self, offsets: Mapping[SystemStreamPartition, int], done: Callable[[str | None], None]) -> None:
        """Start committing ``offsets`` (per partition, without a key bucket: the next offset to read)
        and return at once. Commits reach the group in the order of the calls. ``done`` is called
        once, on any thread, with None, or with what failed."""

    def stop(self, timeout_s: float) -> None:
        """Wait up to ``timeout_s`` for the commits in flight, then let the client go."""


class ReadOnlyProducer:
    """The producer of a reader that must never write (a tool that reads checkpoints or the
    coordinator stream): every send raises, naming ``who``; the rest does nothing."""

    def __init__(self, who: str) -> None:
        self._who = who

    def send(
        self, stream: str, key: bytes | None, value: bytes | None, partition: int | None, partition_key: bytes | None
    ) -> None:
        raise RuntimeError(f"{self._who} only reads, yet wrote to {stream}")

    def keyed_sender(self, stream: str) -> None:
        return None

    def flush(self, timeout_s: float) -> int:
        return 0

    def take_errors(self) -> list[str]:
        return []

    def stop(self) -> None:
        pass
