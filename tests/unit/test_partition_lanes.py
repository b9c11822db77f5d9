"""One partition and the lanes it feeds (``samzamp.consume.partition_lanes``), on its own: which lane
takes which message, what a lane skips, and what a rewind makes the other lanes skip. No consumer,
no thread: SystemConsumers around it is tested in test_lanes.py."""

from __future__ import annotations

from collections import deque

import pytest

from samzamp.api.envelope import SystemStreamPartition
from samzamp.consume.key_bucket import key_bucket
from samzamp.consume.lane import BroadcastLane, Lane
from samzamp.consume.packed import Buffered
from samzamp.consume.partition_lanes import PartitionLanes, earlier, earliest
from samzamp.metrics.registry import MetricsRegistry
from samzamp.systems.base import END_OF_STREAM, OLDEST, RawMessage, StartOffset

P = SystemStreamPartition("mem", "in", 0)


def bucket(kb: int) -> SystemStreamPartition:
    return P._replace(key_bucket=kb)


def messages(first: int, n: int) -> list[RawMessage]:
    return [(o, f"k{o % 37}".encode(), b"v", 0) for o in range(first, first + n)]


def reader(start: StartOffset = OLDEST, factor: int = 1) -> tuple[PartitionLanes, MetricsRegistry]:
    metrics = MetricsRegistry()
    keyhash = metrics.timer("SystemConsumersMetrics", "keyhash-ns")
    unowned = metrics.counter("SystemConsumersMetrics", "skipped-envelopes")
    return PartitionLanes(P, start, factor, 0, keyhash, unowned), metrics


def fan_out(r: PartitionLanes, msgs: list[RawMessage]) -> tuple[dict[Lane, list[int]], list[Lane]]:
    buffers: dict[Lane, deque[Buffered]] = {lane: deque() for lane in r.lanes}
    got: list[Lane] = []
    r.fan_out(msgs, buffers, got)
    return {lane: [m[0] for m in buf] for lane, buf in buffers.items()}, got


def polled(r: PartitionLanes, last: int) -> None:
    """What the poller moves after a poll whose last message was at ``last``."""
    r.fetched, r.position = last, last + 1


def test_starts_compare_with_oldest_before_every_offset() -> None:
    assert [earlier(OLDEST, 0), earlier(0, OLDEST), earlier(OLDEST, OLDEST)] == [True, False, False]
    assert [earlier(3, 4), earlier(4, 4)] == [True, False]
    assert earliest([5, OLDEST, 2]) == OLDEST
    assert earliest([5, 2, 9]) == 2


def test_only_the_partition_itself_as_its_one_lane_is_plain() -> None:
    r, _ = reader()
    r.join(P, OLDEST)
    assert r.plain
    r.join(BroadcastLane(P, "t1"), OLDEST)
    assert not r.plain
    r.leave(BroadcastLane(P, "t1"))
    assert r.plain


def test_each_key_bucket_lane_gets_its_buckets_messages_and_the_unread_buckets_are_counted() -> None:
    r, metrics = reader(factor=3)
    r.join(bucket(0), OLDEST)
    r.join(bucket(2), OLDEST)
    got, lanes = fan_out(r, [*messages(0, 50), (END_OF_STREAM, None, None, 0)])
    for kb in (0, 2):
        want = [o for o in range(50) if key_bucket(f"k{o % 37}".encode(), o, 3) == kb]
        assert got[bucket(kb)] == [*want, END_OF_STREAM]  # a control marker goes to every lane
    assert lanes == [bucket(0), bucket(2)]
    unread = sum(1 for o in range(50) if key_bucket(f"k{o % 37}".encode(), o, 3) == 1)
    assert metrics.counter("SystemConsumersMetrics", "skipped-envelopes").count == unread


def test_a_lane_skips_what_is_at_or_below_its_start_and_counts_it() -> None:
    r, _ = reader()
    ahead, behind = BroadcastLane(P, "ahead"), BroadcastLane(P, "behind")
    r.join(behind, OLDEST)
    r.join(ahead, 5)
    got, lanes = fan_out(r, messages(0, 8))
    assert got == {behind: list(range(8)), ahead: [5, 6, 7]}
    assert lanes == [behind, ahead]
    assert (r.skipped.get(behind, 0), r.skipped[ahead]) == (0, 5)
    got, _ = fan_out(r, messages(8, 2))
    assert got[ahead] == [8, 9]


def test_a_rewind_makes_the_lanes_there_skip_what_they_had() -> None:
    r, _ = reader(start=10)
    first = BroadcastLane(P, "first")
    r.join(first, 10)
    fan_out(r, messages(10, 5))
    polled(r, 14)
    late = BroadcastLane(P, "late")
    r.rewind(3)
    r.join(late, 3)
    assert (r.position, r.fetched) == (3, None)
    got, _ = fan_out(r, messages(3, 15))
    assert got == {first: [15, 16, 17], late: list(range(3, 18))}


def test_a_partition_is_read_by_key_bucket_or_whole_never_both() -> None:
    r, _ = reader(factor=2)
    r.join(bucket(0), OLDEST)
    with pytest.raises(ValueError, match="by key bucket and as a whole"):
        r.join(P, OLDEST)
