"""Back-pressure in SystemConsumers (task.fetch.threshold): polling stops while the buffers are full,
and an SSP is paused only when another one that could take data has been dry for a poll interval
(a pause makes librdkafka drop and fetch again what it had prefetched for the partition)."""

from __future__ import annotations

from samzamp.api.envelope import SystemStreamPartition
from samzamp.choose.round_robin import RoundRobinChooser
from samzamp.consume.system_consumers import SystemConsumers
from samzamp.metrics.registry import MetricsRegistry
from samzamp.systems.base import RawMessage, StartOffset

A = SystemStreamPartition("s", "in", 0)
B = SystemStreamPartition("s", "in", 1)


class ScriptedConsumer:
    """Each poll hands out the next planned batch per SSP, and records every call."""

    def __init__(self) -> None:
        self.plan: list[dict[SystemStreamPartition, int]] = []
        self.next_offset = {A: 0, B: 0}
        self.polls = 0
        self.paused: list[list[SystemStreamPartition]] = []
        self.resumed: list[list[SystemStreamPartition]] = []

    def register(self, ssp: SystemStreamPartition, start: StartOffset) -> None: ...

    def start(self) -> None: ...

    def poll(self, timeout_s: float) -> dict[SystemStreamPartition, list[RawMessage]]:
        self.polls += 1
        counts = self.plan.pop(0) if self.plan else {}
        out = {}
        for ssp, n in counts.items():
            first = self.next_offset[ssp]
            out[ssp] = [(o, None, b"v", 0) for o in range(first, first + n)]
            self.next_offset[ssp] = first + n
        return out

    def pause(self, ssps: list[SystemStreamPartition]) -> None:
        self.paused.append(sorted(ssps))

    def resume(self, ssps: list[SystemStreamPartition]) -> None:
        self.resumed.append(sorted(ssps))

    def high_watermark(self, ssp: SystemStreamPartition) -> int | None:
        return None

    def stop(self) -> None: ...


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def consumers(
    threshold: int, clock: Clock | None = None, pack_runs: int = 0, metrics: MetricsRegistry | None = None
) -> tuple[SystemConsumers, ScriptedConsumer]:
    c = ScriptedConsumer()
    sc = SystemConsumers(
        {"s": c},
        [A, B],
        RoundRobinChooser(),
        metrics or MetricsRegistry(),
        threshold,
        50,
        clock=clock or Clock(),
        pack_runs=pack_runs,
    )
    return sc, c


def take(sc: SystemConsumers, ssp: SystemStreamPartition, n: int) -> None:
    """What the loop does when a task takes ``n`` messages of ``ssp``: pop them from its buffer."""
    buf = sc.buffer(ssp)
    for _ in range(n):
        buf.popleft()


def test_an_ssp_over_its_share_is_not_paused_while_the_total_is_under_the_threshold() -> None:
    sc, c = consumers(threshold=400)  # a share of 200 per SSP
    c.plan = [{B: 300}, {A: 10}]
    sc.refill()
    sc.choose()
    sc.try_update(B)
    assert len(sc.buffer(B)) > 200
    sc.refill()  # A is needed: 299 buffered in all is under the threshold, so poll, pausing nothing
    assert c.polls == 2
    assert c.paused == []
    assert len(sc.buffer(A)) == 9


def test_no_poll_and_no_pause_when_the_buffers_are_full_and_nothing_ran_dry() -> None:
    sc, c = consumers(threshold=400)
    c.plan = [{A: 300, B: 300}]
    sc.refill()
    assert c.polls == 1
    # Nothing is needed by the chooser (both SSPs have an envelope there): a poll would only
    # grow the buffers. The fetch thread's poll (the loop idle, its tasks busy) is skipped.
    assert sc._poll_all(0) is None
    assert c.polls == 1
    assert c.paused == []


def test_with_packed_runs_the_threshold_still_counts_messages() -> None:
    sc, c = consumers(threshold=400, pack_runs=64)
    c.plan = [{A: 300, B: 300}]
    sc.refill()
    assert c.polls == 1
    assert len(sc.buffer(A)) == 4  # runs of 64 (the chooser holds the first): 299 messages
    assert sc.buffered() == 600
    assert sc._poll_all(0) is None  # 600 messages buffered, in a dozen runs: full
    assert c.polls == 1


def b_full_a_dry(
    clock: Clock, metrics: MetricsRegistry | None = None, b: int = 850
) -> tuple[SystemConsumers, ScriptedConsumer]:
    """Threshold 400 (a share of 200): B holds ``b`` - 2 buffered (the chooser holds one, its task
    took one), A is needed by the chooser and empty."""
    sc, c = consumers(threshold=400, clock=clock, metrics=metrics)
    c.plan = [{B: b}]
    sc.refill()
    sc.choose()
    sc.try_update(B)
    return sc, c


def test_an_ssp_dry_for_a_poll_interval_pauses_the_full_ones_and_resumes_them_at_half_their_share() -> None:
    clock = Clock()
    metrics = MetricsRegistry()
    sc, c = b_full_a_dry(clock, metrics)

    def counts() -> tuple[int, int, int]:
        group = metrics.snapshot()["SystemConsumersMetrics"]
        return group["polls-held"], group["partition-pauses"], group["paused-partitions"]

    # A is needed and empty, B holds 848: twice the threshold. A dry spell shorter than the poll
    # interval (50 ms) neither polls nor pauses: the buffered messages keep the tasks busy meanwhile.
    c.plan = [{A: 5}]
    sc.refill()
    clock.now = 0.049
    sc.refill()
    assert (c.polls, c.paused) == (1, [])
    assert counts() == (2, 0, 0)  # operators see the held polls
    # Dry for the whole interval: B is paused and the poll goes on for A.
    clock.now = 0.050
    sc.refill()
    assert c.paused == [[B]]
    assert c.polls == 2
    assert counts() == (2, 1, 1)
    take(sc, B, len(sc.buffer(B)) - 150)  # 150 left: more than half of the share of 200
    sc.choose()
    take(sc, A, len(sc.buffer(A)))
    sc.try_update(A)
    sc.refill()
    assert c.resumed == []
    take(sc, B, 50)  # 100 left: half the share
    sc.choose()
    sc.try_update(A)
    sc.refill()
    assert c.resumed == [[B]]
    assert counts()[1:] == (1, 0)


def test_a_dry_ssp_lets_the_polls_go_on_past_the_threshold_without_a_pause() -> None:
    metrics = MetricsRegistry()
    sc, c = b_full_a_dry(Clock(), metrics, b=450)
    # B holds 448, over the threshold of 400; A is dry. A's messages are likely queued in the
    # consumer behind B's: the poll goes on at once, and nothing is paused (a pause refetches).
    c.plan = [{A: 5}]
    sc.refill()
    assert c.polls == 2
    assert len(sc.buffer(A)) == 4  # the chooser holds the fifth
    assert c.paused == []
    assert metrics.snapshot()["SystemConsumersMetrics"]["polls-held"] == 0
    # With A fed, nothing is dry: the poll is held again.
    assert sc._poll_all(0) is None
    assert c.polls == 2


def test_a_paused_ssp_does_not_hold_back_the_others_while_it_drains() -> None:
    clock = Clock()
    sc, c = b_full_a_dry(clock)
    c.plan = [{A: 100}, {A: 100}]
    sc.refill()
    clock.now = 0.05
    sc.refill()  # A dry for a poll interval: B (a slow task's SSP, 848 buffered) is paused
    assert c.paused == [[B]]
    assert c.polls == 2
    # B still holds 848 (its task is slow), A ran dry again: the poll goes on at once, as B's
    # frozen buffer no longer counts against the threshold.
    sc.choose()
    take(sc, A, len(sc.buffer(A)))
    sc.try_update(A)
    sc.refill()
    assert c.polls == 3
    assert c.paused == [[B]]
