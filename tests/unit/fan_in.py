"""What the unit tests of the fan-in share: an in-memory input and a reader that drives
SystemConsumers as the run loop does."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from samzamp.api.envelope import SystemStreamPartition
from samzamp.choose.round_robin import RoundRobinChooser
from samzamp.consume.lane import Lane
from samzamp.consume.packed import PackedRun
from samzamp.consume.system_consumers import SystemConsumers
from samzamp.metrics.registry import MetricsRegistry
from samzamp.systems.base import StartOffset
from samzamp.systems.inmemory.system import InMemoryStreams, InMemorySystemConsumer


def seeded(per_partition: int, partitions: int = 3, bounded: bool = False) -> InMemoryStreams:
    streams = InMemoryStreams()
    streams.create("in", partitions, bounded=bounded)
    for p in range(partitions):
        append(streams, p, per_partition)
    return streams


def append(streams: InMemoryStreams, partition: int, n: int) -> None:
    for _ in range(n):
        streams.append("in", partition, None, b"v")


def fan_in(
    streams: InMemoryStreams, starts: dict[SystemStreamPartition, StartOffset], threshold: int = 10_000
) -> tuple[SystemConsumers, InMemorySystemConsumer, RoundRobinChooser]:
    consumer = InMemorySystemConsumer(streams)
    for ssp, start in starts.items():
        consumer.register(ssp, start)
    chooser = RoundRobinChooser()
    return (
        SystemConsumers({"mem": consumer}, list(starts), chooser, MetricsRegistry(), threshold, 20),
        consumer,
        chooser,
    )


class Reader:
    """What the run loop does with SystemConsumers: choose, let the chosen SSP's next envelope in,
    and when there is nothing to choose, let the fetch thread wait for data."""

    def __init__(self, sc: SystemConsumers) -> None:
        self.sc = sc
        self.seen: dict[Lane, list[int]] = {}
        self._data = asyncio.Event()
        self.errors: list[BaseException] = []

    def start(self) -> None:
        self.sc.start(asyncio.get_running_loop(), self._data.set, self.errors.append)

    def offsets(self, ssp: Lane) -> list[int]:
        return self.seen.get(ssp, [])

    async def read_until(self, done: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + 10
        while not done():
            assert not self.errors, self.errors
            self.sc.refill()
            chosen = self.sc.choose()
            if chosen is None:
                # Only callbacks run while this coroutine waits: whatever fed the chooser before
                # this point was chosen above, so clearing loses no wake-up.
                self._data.clear()
                self.sc.idle()
                try:
                    await asyncio.wait_for(self._data.wait(), max(0.0, deadline - time.monotonic()))
                except TimeoutError:
                    raise AssertionError(f"timed out waiting for {what}; read {self.seen}") from None
                continue
            ssp, raw = chosen
            self.seen.setdefault(ssp, []).extend(raw.offsets if type(raw) is PackedRun else [raw[0]])
            self.sc.try_update(ssp)
            await asyncio.sleep(0)  # the fetch thread's hand-offs run in between, as in the loop
