"""The buffered-message counts that back-pressure reads with packed runs (``SystemConsumers``): kept
as messages come and go, never summed at a poll, they must equal a count of the buffers themselves
after any mix of polls, takes, lanes leaving and joining (a rewind), end-of-stream and drain
markers. And the policy decides the same from the kept total as from a sum of its own."""

from __future__ import annotations

import copy
import random
from array import array
from collections.abc import Callable, Mapping
from typing import TypeVar

import pytest
from fake_kafka_message import pack_polled

from samzamp.api.envelope import SystemStream, SystemStreamPartition
from samzamp.choose.round_robin import RoundRobinChooser
from samzamp.consume.backpressure import Backpressure
from samzamp.consume.lane import BroadcastLane, Lane, partition_of
from samzamp.consume.system_consumers import SystemConsumers
from samzamp.metrics.registry import MetricsRegistry
from samzamp.systems.base import END_OF_STREAM, RawMessage, StartOffset

FACTOR = 3
PLAIN = [SystemStreamPartition("s", "plain", p) for p in range(3)]
KEYED = [SystemStreamPartition("s", "keyed", p) for p in range(3)]
BROADCAST = SystemStreamPartition("s", "bc", 0)
INTERMEDIATE = SystemStreamPartition("s", "mid", 0)


class RandomConsumer:
    """Each poll hands out a random batch of each partition registered and not paused, in offset
    order from where it was registered; a partition may end (an end-of-stream marker last)."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.position: dict[SystemStreamPartition, int] = {}
        self.ended: set[SystemStreamPartition] = set()
        self.paused: set[SystemStreamPartition] = set()

    def register(self, ssp: SystemStreamPartition, start: StartOffset) -> None:
        self.position[ssp] = start if isinstance(start, int) else 0

    def unregister(self, ssps: list[SystemStreamPartition]) -> None:
        for s in ssps:
            self.position.pop(s, None)
            self.paused.discard(s)

    def start(self) -> None: ...

    def poll(self, timeout_s: float) -> dict[SystemStreamPartition, list[RawMessage]]:
        out: dict[SystemStreamPartition, list[RawMessage]] = {}
        for ssp, first in self.position.items():
            if ssp in self.paused or ssp in self.ended or self.rng.random() < 0.3:
                continue
            n = self.rng.randrange(0, 40)
            msgs: list[RawMessage] = [(o, f"k{o % 23}".encode(), b"v", 0) for o in range(first, first + n)]
            self.position[ssp] = first + n
            if ssp.stream != "mid" and self.rng.random() < 0.01:
                msgs.append((END_OF_STREAM, None, None, 0))
                self.ended.add(ssp)
            out[ssp] = msgs
        return out

    def pause(self, ssps: list[SystemStreamPartition]) -> None:
        self.paused.update(ssps)

    def resume(self, ssps: list[SystemStreamPartition]) -> None:
        self.paused.difference_update(ssps)

    def high_watermark(self, ssp: SystemStreamPartition) -> int | None:
        return None

    def stop(self) -> None: ...


_R = TypeVar("_R")


class PackingRandomConsumer(RandomConsumer):
    """``RandomConsumer`` packing its polls in C as the Kafka consumer does (``poll_packed``), so the
    counts are kept on that path too. A Kafka partition carries no end-of-stream marker."""

    def poll(self, timeout_s: float) -> dict[SystemStreamPartition, list[RawMessage]]:
        polled = super().poll(timeout_s)
        return {s: [m for m in msgs if m[0] >= 0] for s, msgs in polled.items()}

    def poll_packed(
        self,
        timeout_s: float,
        size: int,
        split: Mapping[SystemStreamPartition, tuple[int, bool]],
        run: Callable[[int, array[int], bytes], _R],
    ) -> dict[SystemStreamPartition, tuple[int, list[list[_R]]]]:
        out = pack_polled(self.poll(timeout_s), size, split, run)
        return out


def all_lanes() -> list[Lane]:
    lanes: list[Lane] = list(PLAIN)
    lanes += [s._replace(key_bucket=b) for s in KEYED for b in range(FACTOR)]
    lanes += [BroadcastLane(BROADCAST, t) for t in ("t0", "t1")]
    lanes += [INTERMEDIATE._replace(key_bucket=b) for b in range(FACTOR)]
    return lanes


def check(sc: SystemConsumers) -> None:
    """The kept counts against the buffers counted one by one."""
    recount = sc._held_per_partition()
    assert dict(sc._held) == recount
    assert sc._held_total() == sum(recount.values())


@pytest.mark.parametrize("packing", [False, True], ids=["poller-packs", "consumer-packs"])
@pytest.mark.parametrize("seed", range(8))
def test_kept_counts_equal_a_recount_after_random_polls_takes_leaves_joins_and_markers(
    seed: int, packing: bool
) -> None:
    rng = random.Random(seed)
    consumer = PackingRandomConsumer(rng) if packing else RandomConsumer(rng)
    sc = SystemConsumers(
        {"s": consumer},
        [],
        RoundRobinChooser(),
        MetricsRegistry(),
        fetch_threshold=rng.choice([200, 2_000, 100_000]),
        poll_interval_ms=0,  # a partition dry at a full poll pauses the full ones at once
        elasticity_factor=FACTOR,
        pack_runs=rng.choice([1, 4, 16]),
        intermediate=frozenset({SystemStream("s", "mid")}) if seed % 2 else frozenset(),
    )
    lanes = all_lanes()
    read = set(rng.sample(lanes, len(lanes) // 2))
    sc.add(dict.fromkeys(read, 0))
    check(sc)
    drained = False
    for step in range(600):
        op = rng.random()
        if op < 0.4:
            got = sc._poll_all(0)
            if got:
                sc._on_fetched(got)
        elif op < 0.8:
            chosen = sc.choose()
            if chosen is not None:
                sc.try_update(chosen[0])
        elif op < 0.9 and read:
            gone = rng.sample(sorted(read, key=str), rng.randrange(1, min(4, len(read)) + 1))
            sc.remove(gone)
            read.difference_update(gone)
        elif not drained or seed % 2:
            # Lanes join, some before their partition's position: it is read again from there.
            new = [lane for lane in lanes if lane not in read and partition_of(lane) not in consumer.ended]
            if new:
                join = rng.sample(new, rng.randrange(1, min(3, len(new)) + 1))
                try:
                    sc.add({lane: rng.randrange(0, 50) for lane in join})
                except RuntimeError:  # fetching stopped (a drain of a job without intermediate streams)
                    pass
                else:
                    read.update(join)
        if step == 400 and rng.random() < 0.7:
            sc.drain()
            drained = True
        check(sc)
    # Everything taken: nothing counted.
    while (chosen := sc.choose()) is not None:
        sc.try_update(chosen[0])
        check(sc)
    assert sc._held_total() == 0 or sc.fetching


def test_the_policy_decides_the_same_from_a_kept_total_as_from_its_own_sum() -> None:
    rng = random.Random(7)
    parts = [SystemStreamPartition("s", "in", p) for p in range(6)]
    for _ in range(2_000):
        bp = Backpressure(rng.choice([100, 600, 3_000]), 0.05, lambda: 1.0, len(parts))
        bp.paused = set(rng.sample(parts, rng.randrange(0, 4)))
        if rng.random() < 0.5:
            bp._starved_since = 0.0
        held = {p: rng.randrange(0, 1_200) for p in parts}
        dry = rng.sample(parts, rng.randrange(0, 3))
        other = copy.deepcopy(bp)
        a, b = bp.decide(held, dry.copy), other.decide(held, dry.copy, sum(held.values()))
        # The same partitions (a copied set may iterate in another order).
        assert (a.poll, set(a.pause), set(a.resume)) == (b.poll, set(b.pause), set(b.resume))
        assert bp.paused == other.paused
        assert bp._starved_since == other._starved_since
