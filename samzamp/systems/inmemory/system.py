"""The in-memory system: every stream is a list of partitions, each a list of raw messages.

A partition can be *bounded*: once its consumer has read every message it gets an end-of-stream
marker, so a job over bounded inputs ends by itself (what ``TestRunner`` relies on). Streams live
in an ``InMemoryStreams`` object shared by reference, so a test can seed inputs and read outputs.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from samzamp.api.envelope import SystemStreamPartition
from samzamp.systems.base import END_OF_STREAM, OLDEST, UPCOMING, RawMessage, StartOffset
from samzamp.systems.partitioner import murmur2_partition

__all__ = ["InMemoryStreams", "InMemorySystemAdmin", "InMemorySystemConsumer", "InMemorySystemProducer"]


class InMemoryStreams:
    """The data of one in-memory system. Thread-safe."""

    def __init__(self) -> None:
        self.partitions: dict[str, list[list[RawMessage]]] = {}
        self.bounded: set[str] = set()
        self.lock = threading.Condition()

    def create(self, stream: str, partitions: int, bounded: bool = False) -> bool:
        with self.lock:
            if stream in self.partitions:
                return False
            self.partitions[stream] = [[] for _ in range(partitions)]
            if bounded:
                self.bounded.add(stream)
            return True

    def append(
        self, stream: str, partition: int, key: bytes | None, value: bytes | None, timestamp: int | None = None
    ) -> int:
        """Add a message; ``timestamp`` in ms since the epoch (None: now). Returns its offset."""
        with self.lock:
            log = self.partitions[stream][partition]
            offset = len(log)
            log.append((offset, key, value, int(time.time() * 1000) if timestamp is None else timestamp))
            self.lock.notify_all()
            return offset


class InMemorySystemAdmin:
    def __init__(self, streams: InMemoryStreams) -> None:
        self._streams = streams

    def partition_counts(self, streams: list[str]) -> dict[str, int]:
        return {s: len(self._streams.partitions[s]) for s in streams if s in self._streams.partitions}

    def create_stream(self, stream: str, partitions: int, replication_factor: int, configs: dict[str, str]) -> bool:
        return self._streams.create(stream, partitions)

    def end_offsets(self, ssps: list[SystemStreamPartition]) -> dict[SystemStreamPartition, int]:
        with self._streams.lock:
            return {s: len(self._streams.partitions[s.stream][s.partition]) for s in ssps}

    def read_all(self, stream: str, partition: int, start: int = 0) -> list[RawMessage]:
        with self._streams.lock:
            return list(self._streams.partitions[stream][partition][max(0, start) :])

    def stop(self) -> None:
        pass


class InMemorySystemConsumer:
    def __init__(self, streams: InMemoryStreams, batch: int = 1000) -> None:
        self._streams = streams
        self._next: dict[SystemStreamPartition, int] = {}
        self._paused: set[SystemStreamPartition] = set()
        self._ended: set[SystemStreamPartition] = set()
        self._batch = batch

    def register(self, ssp: SystemStreamPartition, start: StartOffset) -> None:
        """Read ``ssp`` from ``start``, before or after ``start()``. ValueError if registered already."""
        if ssp in self._next:
            raise ValueError(f"{ssp} is already registered with this in-memory consumer")
        if start == OLDEST:
            self._next[ssp] = 0
        elif start == UPCOMING:
            self._next[ssp] = len(self._streams.partitions[ssp.stream][ssp.partition])
        else:
            assert isinstance(start, int)
            self._next[ssp] = start

    def unregister(self, ssps: list[SystemStreamPartition]) -> None:
        """Stop reading ``ssps`` and forget them. ValueError naming any that is not registered."""
        unknown = [s for s in ssps if s not in self._next]
        if unknown:
            raise ValueError(f"{', '.join(map(str, unknown))}: not registered with this in-memory consumer")
        for s in ssps:
            del self._next[s]
            self._paused.discard(s)
            self._ended.discard(s)

    def start(self) -> None:
        pass

    def poll(self, timeout_s: float) -> dict[SystemStreamPartition, list[RawMessage]]:
        out: dict[SystemStreamPartition, list[RawMessage]] = {}
        with self._streams.lock:
            for _ in range(2):
                for ssp, nxt in self._next.items():
                    if ssp in self._paused or ssp in self._ended:
                        continue
                    log = self._streams.partitions[ssp.stream][ssp.partition]
                    if nxt < len(log):
                        chunk = log[nxt : nxt + self._batch]
                        self._next[ssp] = nxt + len(chunk)
                        if self._next[ssp] == len(log) and ssp.stream in self._streams.bounded:
                            # The end comes with the last messages: the loop handles both in one
                            # slice, so a window timer hardly ever runs between them.
                            self._ended.add(ssp)
                            chunk = [*chunk, (END_OF_STREAM, None, None, 0)]
                        out[ssp] = chunk
                    elif ssp.stream in self._streams.bounded:
                        self._ended.add(ssp)
                        out[ssp] = [(END_OF_STREAM, None, None, 0)]
                if out:
                    return out
                self._streams.lock.wait(timeout_s)
        return out

    def pause(self, ssps: list[SystemStreamPartition]) -> None:
        self._paused.update(ssps)

    def resume(self, ssps: list[SystemStreamPartition]) -> None:
        self._paused.difference_update(ssps)

    def high_watermark(self, ssp: SystemStreamPartition) -> int | None:
        return len(self._streams.partitions[ssp.stream][ssp.partition])

    def stop(self) -> None:
        pass


class InMemorySystemProducer:
    def __init__(self, streams: InMemoryStreams) -> None:
        self._streams = streams

    def send(
        self,
        stream: str,
        key: bytes | None,
        value: bytes | None,
        partition: int | None,
        partition_key: bytes | None,
    ) -> None:
        if stream not in self._streams.partitions:
            self._streams.create(stream, 1)
        n = len(self._streams.partitions[stream])
        if partition is None:
            pk: Any = partition_key if partition_key is not None else key
            partition = 0 if pk is None else murmur2_partition(pk, n)
        self._streams.append(stream, partition, key, value)

    def keyed_sender(self, stream: str) -> None:
        return None

    def flush(self, timeout_s: float) -> int:
        return 0

    def take_errors(self) -> list[str]:
        return []

    def stop(self) -> None:
        pass
