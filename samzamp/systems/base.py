"""The protocols the container sees; each system (kafka, inmemory) implements them.

Threading contract: ``SystemConsumer.poll``, ``pause`` and ``resume`` are called only from the
container's one fetch thread. ``SystemProducer.send`` is called only from the thread that runs the
task (the event loop); delivery acknowledgements arrive on the producer's own thread and are counted
into the ``DeliveryTracker`` given with the send.
"""

from __future__ import annotations

import threading
from typing import Protocol

from samzamp.api.envelope import SystemStreamPartition

__all__ = [
    "OLDEST",
    "UPCOMING",
    "DeliveryTracker",
    "RawMessage",
    "StartOffset",
    "SystemAdmin",
    "SystemConsumer",
    "SystemProducer",
]

# One message as it came off the wire: (offset, key bytes, value bytes, timestamp ms).
RawMessage = tuple[int, bytes | None, bytes | None, int]

OLDEST = "oldest"
UPCOMING = "upcoming"
StartOffset = int | str  # an exact offset to read next, or OLDEST / UPCOMING


class SystemConsumer(Protocol):
    def register(self, ssp: SystemStreamPartition, start: StartOffset) -> None:
        """Read ``ssp`` starting at ``start``; called before ``start()``."""

    def start(self) -> None: ...

    def poll(self, timeout_s: float) -> dict[SystemStreamPartition, list[RawMessage]]:
        """Block up to ``timeout_s`` for messages; return them grouped by SSP, in offset order."""

    def pause(self, ssps: list[SystemStreamPartition]) -> None: ...

    def resume(self, ssps: list[SystemStreamPartition]) -> None: ...

    def high_watermark(self, ssp: SystemStreamPartition) -> int | None:
        """The next offset the system will write for ``ssp``, as last seen by a fetch (None if unknown)."""

    def stop(self) -> None: ...


class DeliveryTracker:
    """Counts the sends of one task and their acknowledgements, so a commit can wait for exactly those.

    ``sent`` is written only by the sending thread and ``acked`` only by the producer's delivery
    thread, so neither needs a lock; the condition is used only while someone waits.
    """

    __slots__ = ("_cond", "_waiting", "acked", "errors", "first_error", "sent")

    def __init__(self) -> None:
        self.sent = 0
        self.acked = 0
        self.errors = 0
        self.first_error: str | None = None
        self._waiting = False
        self._cond = threading.Condition()

    def on_ack(self, error: str | None) -> None:
        """Called on the producer's delivery thread for every send."""
        if error is not None:
            self.errors += 1
            if self.first_error is None:
                self.first_error = error
        self.acked += 1
        if self._waiting:
            with self._cond:
                self._cond.notify_all()

    def wait_all_acked(self, timeout_s: float) -> bool:
        """Block until every send so far is acknowledged (True) or ``timeout_s`` passes (False)."""
        target = self.sent
        if self.acked >= target:
            return True
        with self._cond:
            self._waiting = True
            try:
                return self._cond.wait_for(lambda: self.acked >= target, timeout_s)
            finally:
                self._waiting = False


class SystemProducer(Protocol):
    def send(
        self,
        stream: str,
        key: bytes | None,
        value: bytes | None,
        partition: int | None,
        partition_key: bytes | None,
        tracker: DeliveryTracker,
    ) -> None:
        """Queue one message; ``tracker.on_ack`` is called once it is acknowledged or has failed."""

    def flush(self, timeout_s: float) -> int:
        """Wait for every queued message; return how many are still queued."""

    def stop(self) -> None: ...


class SystemAdmin(Protocol):
    def partition_counts(self, streams: list[str]) -> dict[str, int]:
        """Partition count of each stream that exists (missing streams are absent)."""

    def create_stream(self, stream: str, partitions: int, replication_factor: int, configs: dict[str, str]) -> bool:
        """Create ``stream`` unless it exists; True if it was created."""

    def end_offsets(self, ssps: list[SystemStreamPartition]) -> dict[SystemStreamPartition, int]:
        """The exact next offset to be written for each SSP (its high watermark)."""

    def read_all(self, stream: str, partition: int) -> list[RawMessage]:
        """Every message of one partition from the oldest to the end, in offset order."""

    def stop(self) -> None: ...
