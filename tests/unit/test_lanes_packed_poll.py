"""SystemConsumers with a consumer that packs its own runs (``samzamp.systems.base.PackedPolling``,
as the Kafka consumer does in C): the lanes get what they get from a consumer polled message by
message and packed by the poller (test_lanes.py), key buckets, starts, rewinds, broadcast lanes and
a bounded partition (``ends``) included. The in-memory consumer stands in, its polls handed through
samzamp._fetchpack as confluent-kafka-like messages."""

from __future__ import annotations

import asyncio
from array import array
from collections.abc import Callable, Mapping
from typing import TypeVar

import pytest
from fake_kafka_message import pack_polled
from fan_in import Reader

from samzamp.api.envelope import SystemStreamPartition
from samzamp.choose.round_robin import RoundRobinChooser
from samzamp.consume.key_bucket import key_bucket
from samzamp.consume.lane import BroadcastLane, Lane
from samzamp.consume.system_consumers import SystemConsumers
from samzamp.metrics.registry import MetricsRegistry
from samzamp.systems.base import END_OF_STREAM, OLDEST, StartOffset
from samzamp.systems.inmemory.system import InMemoryStreams, InMemorySystemConsumer

P0 = SystemStreamPartition("mem", "in", 0)
_R = TypeVar("_R")


class PackingConsumer(InMemorySystemConsumer):
    """The in-memory consumer with ``poll_packed``: its unbounded partitions' polls packed in C."""

    def __init__(self, streams: InMemoryStreams) -> None:
        super().__init__(streams)
        self.packed_polls = 0
        self.registered: list[tuple[SystemStreamPartition, StartOffset]] = []

    def register(self, ssp: SystemStreamPartition, start: StartOffset) -> None:
        self.registered.append((ssp, start))
        super().register(ssp, start)

    def poll_packed(
        self,
        timeout_s: float,
        size: int,
        split: Mapping[SystemStreamPartition, tuple[int, bool]],
        run: Callable[[int, array[int], bytes], _R],
    ) -> dict[SystemStreamPartition, tuple[int, list[list[_R]]]]:
        out = pack_polled(self.poll(timeout_s), size, split, run)
        self.packed_polls += 1
        return out


def keyed(n: int) -> InMemoryStreams:
    streams = InMemoryStreams()
    streams.create("in", 1)
    for i in range(n):
        streams.append("in", 0, f"k{i % 37}".encode(), b"v")
    return streams


def expected(n: int, factor: int, kb: int, after: int = -1) -> list[int]:
    return [o for o in range(n) if o > after and key_bucket(f"k{o % 37}".encode(), o, factor) == kb]


def read(sc: SystemConsumers, want: dict[Lane, list[int]]) -> Reader:
    async def main() -> Reader:
        r = Reader(sc)
        r.start()
        await r.read_until(lambda: all(r.offsets(k)[-1:] == w[-1:] for k, w in want.items()), "every last message")
        sc.stop()
        return r

    return asyncio.run(main())


def lanes(streams: InMemoryStreams, factor: int) -> tuple[SystemConsumers, PackingConsumer, MetricsRegistry]:
    consumer = PackingConsumer(streams)
    metrics = MetricsRegistry()
    sc = SystemConsumers(
        {"mem": consumer}, [], RoundRobinChooser(), metrics, 10_000, 20, elasticity_factor=factor, pack_runs=8
    )
    return sc, consumer, metrics


def test_key_buckets_each_from_its_own_start_and_the_unread_bucket_counted() -> None:
    n, factor = 1500, 4
    starts: dict[Lane, StartOffset] = {
        P0._replace(key_bucket=kb): 10 + 7 * kb if kb < 2 else 1100 + kb for kb in (0, 1, 3)
    }
    sc, consumer, metrics = lanes(keyed(n), factor)
    sc.add(dict(starts))
    want = {lane: expected(n, factor, lane.key_bucket, after=int(s) - 1) for lane, s in starts.items()}  # type: ignore[union-attr]
    r = read(sc, want)
    assert consumer.packed_polls > 0
    assert consumer.registered == [(P0, 10)]
    for lane, offsets in want.items():
        assert r.offsets(lane) == offsets
    unread = len(expected(n, factor, 2, after=9))
    assert metrics.counter("SystemConsumersMetrics", "skipped-envelopes").count == unread
    assert sc.skipped(P0._replace(key_bucket=3)) == len(expected(n, factor, 3, after=9)) - len(
        want[P0._replace(key_bucket=3)]
    )


def test_a_broadcast_partition_reaches_every_lane_from_its_own_start() -> None:
    n = 300
    sc, _, _ = lanes(keyed(n), 1)
    a, b = BroadcastLane(P0, "a"), BroadcastLane(P0, "b")
    sc.add({a: OLDEST, b: 120})
    r = read(sc, {a: list(range(n)), b: list(range(120, n))})
    assert r.offsets(a) == list(range(n))
    assert r.offsets(b) == list(range(120, n))


@pytest.mark.parametrize("factor", [1, 2])
def test_a_bounded_partition_is_cut_at_its_end_and_ends(factor: int) -> None:
    n, end = 300, 123
    sc, consumer, _ = lanes(keyed(n), factor)
    lanes_: list[Lane] = [P0] if factor == 1 else [P0._replace(key_bucket=kb) for kb in range(factor)]
    sc.add(dict.fromkeys(lanes_, OLDEST), ends={P0: end})

    async def main() -> Reader:
        r = Reader(sc)
        r.start()
        await r.read_until(lambda: all(r.offsets(lane)[-1:] == [END_OF_STREAM] for lane in lanes_), "every end")
        sc.stop()
        return r

    r = asyncio.run(main())
    assert consumer.packed_polls > 0  # packed, then unpacked to be cut one by one
    for lane in lanes_:
        want = list(range(end)) if factor == 1 else expected(end, factor, lane.key_bucket)  # type: ignore[union-attr]
        assert r.offsets(lane) == [*want, END_OF_STREAM]
