"""The aggregation tables of control messages on intermediate streams (Samza's TestEndOfStreamStates,
TestWatermarkStates): a name counts once, an unnamed copy completes a partition, a drain of another
run is skipped, a watermark is the producers' minimum and never goes back."""

from __future__ import annotations

from samzamp import SystemStream, SystemStreamPartition
from samzamp.operators.control import DrainStates, WatermarkStates

S = SystemStream("kafka", "inter")
P0, P1 = SystemStreamPartition("kafka", "inter", 0), SystemStreamPartition("kafka", "inter", 1)


def test_drain_states_count_the_names_of_the_current_run_only() -> None:
    states = DrainStates([P0, P1], {S: 2}, "run-2")
    assert not states.update_drain(P0, "Partition 0", "run-1")  # an earlier run's drain: skipped
    assert states.foreign == 1
    assert states.seen(P0) == frozenset()
    assert not states.update_drain(P0, "Partition 0", "run-2")
    assert not states.update_drain(P0, "Partition 0", "run-2")  # counts once
    assert states.update_drain(P0, "Partition 1", "run-2")  # the last producer: done, broadcast
    assert not states.stream_done(S)
    assert not states.update_drain(P1, None, "run-1")  # a copy of another run does not complete it
    assert not states.is_done(P1)
    assert not states.update_drain(P1, None, "run-2")
    assert states.stream_done(S)
    assert states.foreign == 2


def test_a_watermark_is_the_minimum_once_every_producer_sent_one() -> None:
    states = WatermarkStates([P0, P1], {S: 2})
    assert not states.update(P0, "Partition 0", 100)
    assert states.watermark(P0) is None  # one of two producers
    assert states.update(P0, "Partition 1", 50)
    assert states.watermark(P0) == 50
    assert states.update(P0, "Partition 1", 120)  # min(100, 120)
    assert states.watermark(P0) == 100


def test_a_watermark_never_goes_back() -> None:
    states = WatermarkStates([P0], {S: 2})
    states.update(P0, "Partition 0", 100)
    states.update(P0, "Partition 1", 100)
    assert not states.update(P0, "Partition 0", 40)  # a producer's own watermark does not regress
    assert states.watermark(P0) == 100
    assert not states.update(P0, None, 90)  # nor does a copy move it back
    assert states.watermark(P0) == 100


def test_an_unnamed_watermark_sets_the_partition_and_the_stream_is_the_minimum_of_its_partitions() -> None:
    states = WatermarkStates([P0, P1], {S: 3})
    assert not states.update(P0, None, 70)  # a copy: set, and no broadcast of it again
    assert states.watermark(P0) == 70
    assert states.stream_watermark(S) is None  # P1 has none yet
    states.update(P1, None, 60)
    assert states.stream_watermark(S) == 60
