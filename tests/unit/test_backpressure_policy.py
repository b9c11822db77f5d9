"""The back-pressure policy on its own (``samzamp.consume.backpressure``): fed buffer sizes per partition
and which partitions run dry, it decides whether to poll and what to pause or resume. No consumer, no
thread: the fan-in around it is tested in test_backpressure.py."""

from __future__ import annotations

from collections.abc import Iterable

from samzamp.api.envelope import SystemStreamPartition
from samzamp.consume.backpressure import HOLD, POLL, Backpressure, Decision

A = SystemStreamPartition("s", "in", 0)
B = SystemStreamPartition("s", "in", 1)
C = SystemStreamPartition("t", "in", 0)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def policy(threshold: int = 400, partitions: int = 2, clock: Clock | None = None) -> Backpressure:
    return Backpressure(threshold, 0.05, clock or Clock(), partitions)


def dry(*partitions: SystemStreamPartition) -> Iterable[SystemStreamPartition]:
    return partitions


def test_each_partition_gets_an_equal_share_of_the_threshold_but_never_under_64() -> None:
    bp = policy(threshold=400, partitions=2)
    assert bp.share == 200
    bp.resize(4)
    assert bp.share == 100
    bp.resize(0)
    assert bp.share == 400
    bp.resize(100)
    assert bp.share == 64


def test_under_the_threshold_it_polls_and_pauses_nothing_whatever_one_partition_holds() -> None:
    bp = policy()
    asked: list[bool] = []

    def starving() -> Iterable[SystemStreamPartition]:
        asked.append(True)
        return [A]

    assert bp.decide({A: 0, B: 399}, starving) is POLL
    assert asked == []  # the dry lanes are looked at only when the buffers are full
    assert bp.paused == set()


def test_full_buffers_with_nothing_dry_hold_the_poll_and_pause_nothing() -> None:
    clock = Clock()
    bp = policy(clock=clock)
    assert bp.decide({A: 200, B: 200}, dry) is HOLD
    clock.now = 10.0
    assert bp.decide({A: 200, B: 200}, dry) is HOLD
    assert bp.paused == set()


def test_a_dry_partition_lets_the_polls_go_on_up_to_twice_the_threshold_pausing_nothing() -> None:
    clock = Clock()
    bp = policy(clock=clock)  # threshold 400
    # What A needs is most likely in the consumer's queue, behind what it fetched for B.
    assert bp.decide({A: 0, B: 448}, lambda: dry(A)) is POLL
    clock.now = 10.0
    assert bp.decide({A: 0, B: 799}, lambda: dry(A)) is POLL
    assert bp.paused == set()


def test_a_dry_partition_pauses_the_full_ones_only_after_a_whole_poll_interval_at_twice_the_threshold() -> None:
    clock = Clock()
    bp = policy(clock=clock)
    sizes = {A: 0, B: 848}
    assert bp.decide(sizes, lambda: dry(A)) is HOLD
    clock.now = 0.049
    assert bp.decide(sizes, lambda: dry(A)) is HOLD
    clock.now = 0.05
    assert bp.decide(sizes, lambda: dry(A)) == Decision(True, pause=(B,))
    assert bp.paused == {B}


def test_only_partitions_holding_their_share_or_more_are_paused() -> None:
    clock = Clock()
    bp = policy(threshold=600, partitions=3, clock=clock)  # a share of 200
    sizes = {A: 0, B: 1001, C: 199}  # 1,200 in all: at twice the threshold
    bp.decide(sizes, lambda: dry(A))
    clock.now = 0.05
    assert bp.decide(sizes, lambda: dry(A)) == Decision(True, pause=(B,))


def test_a_dry_spell_broken_by_room_in_the_buffers_starts_over() -> None:
    clock = Clock()
    bp = policy(clock=clock)
    bp.decide({A: 0, B: 848}, lambda: dry(A))
    clock.now = 0.04
    assert bp.decide({A: 0, B: 100}, lambda: dry(A)) is POLL
    clock.now = 0.06
    assert bp.decide({A: 0, B: 848}, lambda: dry(A)) is HOLD  # dry again since 0.06, not since 0
    clock.now = 0.11
    assert bp.decide({A: 0, B: 848}, lambda: dry(A)) == Decision(True, pause=(B,))


def test_a_dry_spell_counts_from_when_the_buffers_passed_the_threshold() -> None:
    clock = Clock()
    bp = policy(clock=clock)
    assert bp.decide({A: 0, B: 448}, lambda: dry(A)) is POLL  # dry since 0, the polls go on
    clock.now = 0.05
    # The polls filled the buffers to the limit and A is still dry: a whole interval has passed.
    assert bp.decide({A: 0, B: 848}, lambda: dry(A)) == Decision(True, pause=(B,))


def test_a_paused_partition_resumes_once_it_drained_to_half_its_share() -> None:
    clock = Clock()
    bp = policy(clock=clock)
    bp.decide({A: 0, B: 848}, lambda: dry(A))
    clock.now = 0.05
    bp.decide({A: 0, B: 848}, lambda: dry(A))
    assert bp.decide({A: 0, B: 101}, dry) is POLL
    assert bp.paused == {B}
    assert bp.decide({A: 0, B: 100}, dry) == Decision(True, resume=(B,))
    assert bp.paused == set()


def test_a_resume_is_decided_even_when_the_poll_is_held() -> None:
    clock = Clock()
    bp = policy(threshold=600, partitions=3, clock=clock)  # a share of 200
    bp.decide({A: 0, B: 1200, C: 0}, lambda: dry(A))
    clock.now = 0.05
    bp.decide({A: 0, B: 1200, C: 0}, lambda: dry(A))
    assert bp.paused == {B}
    # B drained to half its share, but A and C now fill the buffers and nothing is dry.
    assert bp.decide({A: 300, B: 100, C: 300}, dry) == Decision(False, resume=(B,))


def test_a_paused_partitions_buffers_do_not_count_against_the_threshold() -> None:
    clock = Clock()
    bp = policy(clock=clock)
    bp.decide({A: 0, B: 848}, lambda: dry(A))
    clock.now = 0.05
    bp.decide({A: 0, B: 848}, lambda: dry(A))
    # B still holds 848 (a slow task): A alone is under the threshold, so the poll goes on.
    assert bp.decide({A: 0, B: 848}, lambda: dry(A)) is POLL


def test_a_paused_partition_running_dry_is_not_a_reason_to_pause_more() -> None:
    clock = Clock()
    bp = policy(threshold=600, partitions=3, clock=clock)
    bp.decide({A: 0, B: 1200, C: 0}, lambda: dry(A))
    clock.now = 0.05
    bp.decide({A: 0, B: 1200, C: 0}, lambda: dry(A))
    assert bp.paused == {B}
    clock.now = 1.0
    # A and C fill the buffers; only B's lanes wait with nothing buffered, and B is paused.
    assert bp.decide({A: 300, B: 150, C: 300}, lambda: dry(B)) is HOLD
    clock.now = 2.0
    assert bp.decide({A: 300, B: 150, C: 300}, lambda: dry(B)) is HOLD


def test_a_forgotten_partition_is_no_longer_paused() -> None:
    clock = Clock()
    bp = policy(clock=clock)
    bp.decide({A: 0, B: 848}, lambda: dry(A))
    clock.now = 0.05
    bp.decide({A: 0, B: 848}, lambda: dry(A))
    bp.forget([B])
    assert bp.paused == set()
    assert bp.decide({A: 0}, dry) is POLL
