"""SSPs that come and go while SystemConsumers runs (``add`` / ``remove``), on the in-memory system:
an added SSP is read from the offset it is given, a removed one is never chosen again (neither what
was buffered for it nor the envelope the chooser held), and the other SSPs read on, in order."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from fan_in import Reader, append, fan_in, seeded

from samzamp.api.envelope import SystemStreamPartition
from samzamp.choose.round_robin import RoundRobinChooser
from samzamp.consume.system_consumers import SystemConsumers
from samzamp.metrics.registry import MetricsRegistry
from samzamp.systems.base import DRAIN, END_OF_STREAM, OLDEST, UPCOMING, WATERMARK_MAX, RawMessage, StartOffset
from samzamp.systems.inmemory.system import InMemoryStreams, InMemorySystemConsumer

A = SystemStreamPartition("mem", "in", 0)
B = SystemStreamPartition("mem", "in", 1)
C = SystemStreamPartition("mem", "in", 2)


def test_an_ssp_added_while_fetching_is_read_from_the_offset_given_and_the_others_read_on() -> None:
    streams = seeded(20)
    sc, _, _ = fan_in(streams, {A: 0})

    async def main() -> Reader:
        r = Reader(sc)
        r.start()
        await r.read_until(lambda: len(r.offsets(A)) == 20, "A's first 20")
        sc.add({B: 7, C: OLDEST})  # the loop is idle: the fetch thread is polling
        append(streams, 0, 5)
        append(streams, 1, 5)
        await r.read_until(
            lambda: len(r.offsets(A)) == 25 and len(r.offsets(B)) == 18 and len(r.offsets(C)) == 20, "all 3"
        )
        sc.stop()
        return r

    r = asyncio.run(main())
    assert r.offsets(A) == list(range(25))
    assert r.offsets(B) == list(range(7, 25))
    assert r.offsets(C) == list(range(20))


def test_a_removed_ssp_is_never_chosen_again_neither_buffered_nor_held_by_the_chooser() -> None:
    streams = seeded(50)
    sc, consumer, chooser = fan_in(streams, {A: 0, B: 0})

    async def main() -> Reader:
        r = Reader(sc)
        r.start()
        await r.read_until(lambda: len(r.offsets(B)) == 3, "B's first 3")
        # B's 50 messages came in one poll: the chooser holds B's next one and the rest is buffered.
        assert any(ssp == B for ssp, _ in chooser._queue)
        assert len(sc.buffer(B)) > 0
        sc.remove([B])
        assert all(ssp != B for ssp, _ in chooser._queue)
        sc.try_update(B)  # B's task finishing the envelope it took: ignored
        # If B were still read, the poll that brings A's new messages would bring B's too.
        append(streams, 1, 10)
        append(streams, 0, 10)
        await r.read_until(lambda: len(r.offsets(A)) == 60, "all of A")
        sc.stop_fetching()
        assert B not in consumer.poll(0)  # the fetch thread is gone: the test may call the consumer
        return r

    r = asyncio.run(main())
    assert r.offsets(B) == [0, 1, 2]
    assert r.offsets(A) == list(range(60))
    assert sc.buffered() == 0


def test_an_ssp_removed_and_added_again_is_read_from_its_new_start() -> None:
    streams = seeded(30)
    sc, _, _ = fan_in(streams, {A: 0, B: 0})

    async def main() -> Reader:
        r = Reader(sc)
        r.start()
        await r.read_until(lambda: len(r.offsets(B)) == 5, "B's first 5")
        sc.remove([B])
        sc.add({B: 12})
        await r.read_until(lambda: len(r.offsets(A)) == 30 and len(r.offsets(B)) == 5 + 18, "A and B to the end")
        sc.stop()
        return r

    r = asyncio.run(main())
    assert r.offsets(B) == [*range(5), *range(12, 30)]
    assert r.offsets(A) == list(range(30))


def test_removing_every_ssp_then_adding_one_reads_it() -> None:
    streams = seeded(10)
    sc, _, _ = fan_in(streams, {A: 0})

    async def main() -> Reader:
        r = Reader(sc)
        r.start()
        await r.read_until(lambda: len(r.offsets(A)) == 10, "A")
        sc.remove([A])
        assert sc.buffered() == 0
        sc.add({C: 4})
        await r.read_until(lambda: len(r.offsets(C)) == 6, "C")
        sc.stop()
        return r

    r = asyncio.run(main())
    assert r.offsets(C) == list(range(4, 10))


def test_an_ssp_added_before_start_joins_the_first_read() -> None:
    streams = seeded(10)
    sc, _, _ = fan_in(streams, {A: 0})
    sc.add({B: 3})

    async def main() -> Reader:
        r = Reader(sc)
        r.start()
        await r.read_until(lambda: len(r.offsets(A)) == 10 and len(r.offsets(B)) == 7, "A and B")
        sc.stop()
        return r

    r = asyncio.run(main())
    assert r.offsets(B) == list(range(3, 10))


def test_each_ssps_share_of_the_fetch_threshold_follows_the_ssps_read() -> None:
    sc, _, _ = fan_in(seeded(0, partitions=4), {A: 0}, threshold=4000)
    assert sc._high == 4000
    sc.add({B: 0, C: 0, SystemStreamPartition("mem", "in", 3): 0})
    assert sc._high == 1000
    sc.remove([B, C])
    assert sc._high == 2000


def test_adding_an_ssp_read_already_or_of_a_system_without_consumer_names_it() -> None:
    sc, _, _ = fan_in(seeded(0), {A: 0})
    with pytest.raises(ValueError, match="read already") as e:
        sc.add({B: 0, A: 0})
    assert str(A) in str(e.value)
    assert str(B) not in str(e.value)
    other = SystemStreamPartition("kafka", "in", 0)
    with pytest.raises(ValueError, match="no consumer") as e:
        sc.add({other: 0})
    assert str(other) in str(e.value)
    sc.add({B: 0})  # nothing of the refused calls was kept


def test_removing_an_ssp_not_read_names_it_and_removes_nothing() -> None:
    sc, _, _ = fan_in(seeded(0), {A: 0, B: 0})
    with pytest.raises(ValueError, match="not read here") as e:
        sc.remove([A, C])
    assert str(C) in str(e.value)
    assert str(A) not in str(e.value)
    sc.remove([A])  # A was not removed by the refused call


def test_a_consumer_refusing_an_ssp_leaves_nothing_of_the_call_registered() -> None:
    streams = seeded(0)
    sc, consumer, _ = fan_in(streams, {A: 0})
    refuse = SystemStreamPartition("mem", "missing", 0)  # no such stream: the consumer raises
    with pytest.raises(KeyError):
        sc.add({B: 0, refuse: UPCOMING, C: 0})
    sc.add({B: 0, C: 0})  # B, registered before the refusal, was unregistered again
    consumer.unregister([A, B, C])


def test_a_source_added_to_a_draining_fan_in_drains_where_it_starts() -> None:
    streams = seeded(5)
    sc, _, _ = fan_in(streams, {A: 0})

    async def main() -> Reader:
        r = Reader(sc)
        r.start()
        await r.read_until(lambda: len(r.offsets(A)) == 5, "A")
        sc.drain()
        assert sc.add({B: 2}) == {B}  # a task taken over during the drain: only its markers
        await r.read_until(lambda: len(r.offsets(A)) == 7 and len(r.offsets(B)) == 2, "the markers")
        sc.stop()
        return r

    r = asyncio.run(main())
    assert r.offsets(A) == [*range(5), WATERMARK_MAX, DRAIN]
    assert r.offsets(B) == [WATERMARK_MAX, DRAIN]  # nothing of B was fetched


class RecordingConsumer(InMemorySystemConsumer):
    """Counts the polls begun, and notes at which poll count each register came."""

    def __init__(self, streams: InMemoryStreams) -> None:
        super().__init__(streams)
        self.polls = 0
        self.registered_at: list[int] = []
        self.polling = threading.Event()

    def poll(self, timeout_s: float) -> dict[SystemStreamPartition, list[RawMessage]]:
        self.polls += 1
        self.polling.set()
        return super().poll(timeout_s)

    def register(self, ssp: SystemStreamPartition, start: StartOffset) -> None:
        self.registered_at.append(self.polls)
        super().register(ssp, start)


def test_add_waits_for_the_poll_under_way_only() -> None:
    """On idle input the fetch thread polls back to back; ``add`` must get in after the poll under
    way (or the next one, when it came just as that began), not wait several polls for its turn."""
    streams = seeded(0, partitions=12)
    consumer = RecordingConsumer(streams)
    consumer.register(A, 0)
    sc = SystemConsumers({"mem": consumer}, [A], RoundRobinChooser(), MetricsRegistry(), 10_000, 20)

    async def main() -> list[int]:
        Reader(sc).start()
        sc.idle()
        waited = []
        for p in range(1, 12):
            consumer.polling.clear()
            await asyncio.to_thread(consumer.polling.wait, 5)  # a poll is under way
            before = consumer.polls
            sc.add({SystemStreamPartition("mem", "in", p): 0})
            waited.append(consumer.registered_at[-1] - before)
        sc.stop()
        return waited

    waited = asyncio.run(main())
    assert max(waited) <= 1, f"polls begun while add waited: {waited}"


@contextmanager
def started(consumer: InMemorySystemConsumer) -> Iterator[InMemorySystemConsumer]:
    consumer.start()
    try:
        yield consumer
    finally:
        consumer.stop()


def test_in_memory_consumer_forgets_an_unregistered_ssps_pause_and_end() -> None:
    streams = seeded(5, bounded=True)
    with started(InMemorySystemConsumer(streams)) as c:
        c.register(A, 0)
        c.register(B, 0)
        first = c.poll(0)
        assert first[A][-1][0] == END_OF_STREAM
        assert first[B][-1][0] == END_OF_STREAM
        c.pause([A])
        c.unregister([A, B])
        assert c.poll(0) == {}
        c.register(A, 3)  # paused and ended before: read again from 3
        assert [m[0] for m in c.poll(0)[A]] == [3, 4, END_OF_STREAM]
        with pytest.raises(ValueError, match="already registered"):
            c.register(A, 0)
        with pytest.raises(ValueError, match="not registered") as e:
            c.unregister([B])
        assert str(B) in str(e.value)


def test_round_robin_chooser_remove_keeps_the_others_in_order() -> None:
    chooser = RoundRobinChooser()
    for ssp in (A, B, C):
        chooser.update(ssp, (0, None, None, 0))
    chooser.remove(B)
    chooser.remove(B)  # nothing held for it: no-op
    assert len(chooser) == 2
    assert [chooser.choose(), chooser.choose(), chooser.choose()] == [
        (A, (0, None, None, 0)),
        (C, (0, None, None, 0)),
        None,
    ]


def test_a_drain_stops_the_sources_and_reads_intermediate_streams_on() -> None:
    streams = seeded(20, partitions=2)
    streams.create("mid", 1)
    mid = SystemStreamPartition("mem", "mid", 0)
    for _ in range(5):
        streams.append("mid", 0, None, b"m")
    consumer = InMemorySystemConsumer(streams)
    for ssp in (A, B, mid):
        consumer.register(ssp, 0)
    sc = SystemConsumers(
        {"mem": consumer},
        [A, B, mid],
        RoundRobinChooser(),
        MetricsRegistry(),
        10_000,
        20,
        intermediate=frozenset({mid.system_stream}),
    )

    async def main() -> tuple[Reader, dict[SystemStreamPartition, int | None]]:
        r = Reader(sc)
        r.start()
        await r.read_until(lambda: len(r.offsets(A)) == 20 and len(r.offsets(mid)) == 5, "the first records")
        point, marked = sc.drain()
        assert marked == {A, B}  # the markers go to the sources only
        append(streams, 0, 10)  # past the drain point: never read in this run
        for _ in range(10):
            streams.append("mid", 0, None, b"m")  # the intermediate stream is read on
        await r.read_until(lambda: len(r.offsets(mid)) == 15 and len(r.offsets(B)) == 22, "the rest")
        assert sc.add({C: 3}) == {C}  # drains where it starts: markers, no fetch
        await r.read_until(lambda: len(r.offsets(C)) == 2, "C's markers")
        sc.stop()
        return r, point

    r, point = asyncio.run(main())
    assert point == {A: 19, B: 19}
    assert r.offsets(A) == [*range(20), WATERMARK_MAX, DRAIN]
    assert r.offsets(B) == [*range(20), WATERMARK_MAX, DRAIN]
    assert r.offsets(mid) == list(range(15))
    assert r.offsets(C) == [WATERMARK_MAX, DRAIN]


def test_a_bounded_partition_is_read_to_its_end_then_ends_and_one_read_from_its_end_ends_at_once() -> None:
    streams = seeded(10)
    sc, _, _ = fan_in(streams, {})

    async def main() -> Reader:
        r = Reader(sc)
        r.start()
        sc.add({A: 0, B: 4, C: 10}, ends={A: 10, B: 10, C: 10})
        await r.read_until(lambda: END_OF_STREAM in r.offsets(A) and END_OF_STREAM in r.offsets(B), "A's and B's end")
        append(streams, 0, 5)  # past A's end: not read
        append(streams, 2, 5)  # past C's end: not read
        await r.read_until(lambda: END_OF_STREAM in r.offsets(C), "C's end")
        polls = sc._polls.count
        deadline = time.monotonic() + 10
        while sc._polls.count < polls + 3:  # polls that fetched what lies past the ends
            assert time.monotonic() < deadline, "no polls"
            sc.refill()
            sc.idle()
            await asyncio.sleep(0.01)
        assert sc.choose() is None
        sc.stop()
        return r

    r = asyncio.run(main())
    assert r.offsets(A) == [*range(10), END_OF_STREAM]
    assert r.offsets(B) == [*range(4, 10), END_OF_STREAM]
    assert r.offsets(C) == [END_OF_STREAM]
