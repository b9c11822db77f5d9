"""Several tasks reading one partition (``SystemConsumers`` lanes), on the in-memory system: key
buckets split a partition's messages by the hash of their key bytes, a broadcast partition goes to
every task's lane, each lane from its own start, the partition fetched once."""

from __future__ import annotations

import asyncio

import pytest
from fan_in import Reader

from samzamp.api.envelope import SystemStreamPartition
from samzamp.choose.round_robin import RoundRobinChooser
from samzamp.consume.backpressure import DRY_LANE_LIMIT
from samzamp.consume.key_bucket import key_bucket
from samzamp.consume.lane import BroadcastLane
from samzamp.consume.system_consumers import SystemConsumers
from samzamp.metrics.registry import MetricsRegistry
from samzamp.systems.base import DRAIN, END_OF_STREAM, OLDEST, WATERMARK_MAX, RawMessage, StartOffset
from samzamp.systems.inmemory.system import InMemoryStreams, InMemorySystemConsumer

P0 = SystemStreamPartition("mem", "in", 0)


def bucket(kb: int) -> SystemStreamPartition:
    return P0._replace(key_bucket=kb)


class CountingConsumer(InMemorySystemConsumer):
    """Counts registrations, so a test sees a partition fetched once and rewound when it must be."""

    def __init__(self, streams: InMemoryStreams) -> None:
        super().__init__(streams)
        self.registered: list[tuple[SystemStreamPartition, StartOffset]] = []

    def register(self, ssp: SystemStreamPartition, start: StartOffset) -> None:
        self.registered.append((ssp, start))
        super().register(ssp, start)


def keyed(n: int, bounded: bool = False) -> InMemoryStreams:
    streams = InMemoryStreams()
    streams.create("in", 1, bounded=bounded)
    for i in range(n):
        streams.append("in", 0, f"k{i % 37}".encode(), b"v")
    return streams


def expected(n: int, factor: int, kb: int, after: int = -1) -> list[int]:
    return [o for o in range(n) if o > after and key_bucket(f"k{o % 37}".encode(), o, factor) == kb]


def lanes(
    streams: InMemoryStreams, factor: int = 1, pack_runs: int = 0
) -> tuple[SystemConsumers, CountingConsumer, MetricsRegistry]:
    consumer = CountingConsumer(streams)
    metrics = MetricsRegistry()
    sc = SystemConsumers(
        {"mem": consumer}, [], RoundRobinChooser(), metrics, 10_000, 20, elasticity_factor=factor, pack_runs=pack_runs
    )
    return sc, consumer, metrics


def read(sc: SystemConsumers, done_when: dict[object, int]) -> Reader:
    async def main() -> Reader:
        r = Reader(sc)
        r.start()
        await r.read_until(lambda: all(len(r.offsets(k)) >= n for k, n in done_when.items()), str(done_when))  # type: ignore[arg-type]
        sc.stop()
        return r

    return asyncio.run(main())


def test_key_buckets_split_a_partition_fetched_once_each_lane_from_its_own_start() -> None:
    n = 300
    sc, consumer, metrics = lanes(keyed(n), factor=2)
    sc.add({bucket(0): 0, bucket(1): 100})
    want0, want1 = expected(n, 2, 0), expected(n, 2, 1, after=99)
    r = read(sc, {bucket(0): len(want0), bucket(1): len(want1)})
    assert consumer.registered == [(P0, 0)]  # one registration, at the lower start
    assert r.offsets(bucket(0)) == want0
    assert r.offsets(bucket(1)) == want1
    assert sc.skipped(bucket(1)) == len(expected(100, 2, 1))  # its messages at or below its start
    assert sc.skipped(bucket(0)) == 0
    assert metrics.timer("SystemConsumersMetrics", "keyhash-ns").count > 0


@pytest.mark.parametrize("pack_runs", [0, 8], ids=["messages", "packed"])
def test_every_bucket_gets_its_own_messages_when_every_lane_skips_to_its_own_start(pack_runs: int) -> None:
    # A restart after checkpoints of one partition's buckets went their own ways: each lane filters
    # the same fetched batch to its own list. Packed once per list, one lane's runs must never be
    # taken for another's (a lane that did so processed a sibling's keys and checkpointed past its own).
    # Odd buckets start past the first fetched batch (the in-memory consumer fetches 1000 at a time),
    # so their lanes filter it to nothing in between: the pattern that made a freed list's id() reused.
    n, factor = 1500, 4
    starts = {bucket(kb): 10 + 7 * kb if kb % 2 == 0 else 1100 + kb for kb in range(factor)}
    sc, consumer, _ = lanes(keyed(n), factor=factor, pack_runs=pack_runs)
    sc.add(dict(starts))
    want = {lane: expected(n, factor, lane.key_bucket, after=start - 1) for lane, start in starts.items()}

    async def main() -> Reader:
        r = Reader(sc)
        r.start()
        # Until each lane read its last message: a lane given another's messages still gets there.
        await r.read_until(lambda: all(r.offsets(k)[-1:] == w[-1:] for k, w in want.items()), "every last message")
        sc.stop()
        return r

    r = asyncio.run(main())
    assert consumer.registered == [(P0, 10)]
    for lane, offsets in want.items():
        assert r.offsets(lane) == offsets, f"bucket {lane.key_bucket}"


def test_buckets_no_task_here_reads_are_counted_and_dropped() -> None:
    n = 200
    sc, _, metrics = lanes(keyed(n), factor=4)
    sc.add({bucket(0): OLDEST, bucket(2): OLDEST})
    r = read(sc, {bucket(0): len(expected(n, 4, 0)), bucket(2): len(expected(n, 4, 2))})
    assert set(r.seen) == {bucket(0), bucket(2)}
    unowned = len(expected(n, 4, 1)) + len(expected(n, 4, 3))
    assert metrics.counter("SystemConsumersMetrics", "skipped-envelopes").count == unowned


def test_a_lane_joining_behind_the_partitions_position_rewinds_it_and_the_others_repeat_nothing() -> None:
    n = 200
    streams = keyed(n)
    sc, consumer, _ = lanes(streams, factor=2)
    sc.add({bucket(0): 0})
    want0 = expected(n, 2, 0)

    async def main() -> Reader:
        r = Reader(sc)
        r.start()
        await r.read_until(lambda: len(r.offsets(bucket(0))) == len(want0), "bucket 0")
        sc.add({bucket(1): 50})  # behind where the partition was read to
        for i in range(n, n + 40):
            streams.append("in", 0, f"k{i % 37}".encode(), b"v")
        await r.read_until(
            lambda: (
                len(r.offsets(bucket(1))) == len(expected(n + 40, 2, 1, after=49))
                and len(r.offsets(bucket(0))) == len(expected(n + 40, 2, 0))
            ),
            "both buckets",
        )
        sc.stop()
        return r

    r = asyncio.run(main())
    assert consumer.registered == [(P0, 0), (P0, 50)]
    assert r.offsets(bucket(0)) == expected(n + 40, 2, 0)  # nothing twice after the rewind
    assert r.offsets(bucket(1)) == expected(n + 40, 2, 1, after=49)


def test_a_broadcast_partition_reaches_every_tasks_lane_from_its_own_start() -> None:
    n = 60
    sc, consumer, _ = lanes(keyed(n), factor=2)  # broadcast partitions are read whole at any factor
    a, b = BroadcastLane(P0, "Partition 0_0_2"), BroadcastLane(P0, "Partition 0_1_2")
    sc.add({a: 10, b: 0})
    r = read(sc, {a: n - 10, b: n})
    assert consumer.registered == [(P0, 0)]
    assert r.offsets(a) == list(range(10, n))
    assert r.offsets(b) == list(range(n))


def test_removing_one_lane_leaves_the_partition_to_the_others_and_the_last_unregisters_it() -> None:
    sc, consumer, _ = lanes(keyed(10), factor=2)
    sc.add({bucket(0): 0, bucket(1): 0})
    sc.remove([bucket(0)])
    assert P0 in consumer._next  # still read for bucket 1
    sc.remove([bucket(1)])
    assert P0 not in consumer._next
    with pytest.raises(ValueError, match="not read here"):
        sc.remove([bucket(1)])


def test_markers_reach_every_lane() -> None:
    n = 20
    sc, _, _ = lanes(keyed(n, bounded=True), factor=2)
    sc.add({bucket(0): 0, bucket(1): 0})
    got: dict[SystemStreamPartition, list[RawMessage]] = {bucket(0): [], bucket(1): []}

    async def main() -> None:
        r = Reader(sc)
        r.start()
        await r.read_until(lambda: sum(len(v) for v in r.seen.values()) == n + 2, "data and both ends")
        for lane, offsets in r.seen.items():
            got[lane] = offsets  # type: ignore[index, assignment]
        sc.stop()

    asyncio.run(main())
    for kb in (0, 1):
        assert got[bucket(kb)] == [*expected(n, 2, kb), END_OF_STREAM]


def test_a_drain_marks_every_lane_and_reports_partitions() -> None:
    sc, _, _ = lanes(keyed(10), factor=2)
    sc.add({bucket(0): 0, bucket(1): 0})
    point, marked = sc.drain()
    assert marked == {bucket(0), bucket(1)}
    assert list(point) == [P0]
    got: dict[object, list[int]] = {}
    while (chosen := sc.choose()) is not None:
        got.setdefault(chosen[0], []).append(chosen[1][0])
        sc.try_update(chosen[0])
    assert got == {bucket(0): [WATERMARK_MAX, DRAIN], bucket(1): [WATERMARK_MAX, DRAIN]}


def test_a_partition_is_not_read_whole_and_by_bucket_at_once() -> None:
    sc, _, _ = lanes(keyed(10), factor=2)
    sc.add({bucket(0): 0})
    with pytest.raises(ValueError, match="by key bucket and as a whole"):
        sc.add({P0: 0})


def test_a_slow_bucket_holds_its_partition_back_but_never_lets_the_buffers_grow_past_their_limit() -> None:
    threshold, batch = 200, 100
    streams = keyed(5000)
    now = [0.0]
    consumer = InMemorySystemConsumer(streams, batch=batch)
    sc = SystemConsumers(
        {"mem": consumer},
        [],
        RoundRobinChooser(),
        MetricsRegistry(),
        threshold,
        20,
        lambda: now[0],
        elasticity_factor=2,
    )
    sc.add({bucket(0): 0, bucket(1): 0})
    fast: list[int] = []
    for _ in range(500):
        sc.refill()
        while (chosen := sc.choose()) is not None:
            lane, raw = chosen
            if lane == bucket(0):  # bucket 1's task never takes its next message: a stuck task
                fast.append(raw[0])
                sc.try_update(lane)
        # The fast bucket running dry lets the polls go on up to the limit, never past it.
        assert sc.buffered() <= DRY_LANE_LIMIT * threshold + batch
        now[0] += 0.01
    assert fast == expected(len(fast) + 1000, 2, 0)[: len(fast)]  # in order, none skipped
    assert fast, "the fast bucket read nothing"
    assert P0 in sc._paused  # the partition waits for its slow bucket, as Samza's virtual tasks do


def test_a_lane_is_caught_up_to_its_partitions_fetched_offset_once_it_took_everything_fetched() -> None:
    n = 200
    sc, _, _ = lanes(keyed(n), factor=4)
    sc.add({bucket(kb): OLDEST for kb in range(4)})
    assert sc.caught_up_to(bucket(0)) is None  # nothing fetched yet
    want = {bucket(kb): len(expected(n, 4, kb)) for kb in range(4)}
    r = Reader(sc)

    async def main() -> list[int | None]:
        r.start()
        await r.read_until(lambda: sum(map(len, r.seen.values())) > 0, "a first message")
        fetched_not_taken = [sc.caught_up_to(bucket(kb)) for kb in range(4)]
        await r.read_until(lambda: all(len(r.offsets(b)) >= k for b, k in want.items()), "everything")
        sc.stop()
        return fetched_not_taken

    assert asyncio.run(main()) == [None] * 4  # each had messages buffered or held by the chooser
    assert [sc.caught_up_to(bucket(kb)) for kb in range(4)] == [n - 1] * 4
