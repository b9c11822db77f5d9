"""A consumed Kafka batch packed in C (samzamp._fetchpack, via KafkaSystemConsumer.poll_packed) against
the Python path it replaces: the tuples ``poll`` builds, split by key bucket, then ``pack``. The runs
must match to the byte (a worker decodes them as msgspec encoded them), and errors, unregistered
partitions and key buckets must come out as the Python path has them. Fake messages stand in for
confluent-kafka's: the C code reads them through their methods only. Also PartitionLanes.take_runs
against fan_out, the lane and skip semantics on runs."""

from __future__ import annotations

import gc
import random
from array import array
from collections import deque
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError
from fake_kafka_message import FakeMessage

from samzamp import _fetchpack
from samzamp.api.envelope import SystemStreamPartition
from samzamp.consume.key_bucket import split_by_key_bucket_reference
from samzamp.consume.lane import BroadcastLane, Lane
from samzamp.consume.packed import Buffered, PackedRun, pack, unpack
from samzamp.consume.partition_lanes import PartitionLanes
from samzamp.metrics.registry import MetricsRegistry
from samzamp.systems.base import OLDEST, RawMessage
from samzamp.systems.kafka.codes import PARTITION_EOF
from samzamp.systems.kafka.consumer import _gc_paused

P0 = SystemStreamPartition("kafka", "in", 0)
P1 = SystemStreamPartition("kafka", "in", 1)
Q0 = SystemStreamPartition("kafka", "other", 0)


def run_pack(
    msgs: list[Any],
    lookup: dict[Any, SystemStreamPartition],
    size: int,
    split: dict[SystemStreamPartition, tuple[int, bool]] | None = None,
    single_topic: bool = True,
) -> tuple[dict[SystemStreamPartition, tuple[int, list[list[PackedRun]]]], list[Any], int]:
    return _fetchpack.pack_consumed(msgs, lookup, single_topic, split or {}, size, PackedRun, array)


def reference(
    msgs: list[FakeMessage], ssp_of: dict[Any, SystemStreamPartition]
) -> dict[SystemStreamPartition, list[RawMessage]]:
    out: dict[SystemStreamPartition, list[RawMessage]] = {}
    for m in msgs:
        if m.error() is None and m._p in ssp_of:
            out.setdefault(ssp_of[m._p], []).append(m.raw())
    return out


def same_runs(got: list[PackedRun], want: list[Buffered]) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert type(g) is PackedRun
        assert type(w) is PackedRun
        assert g.first == w.first
        assert g.offsets.typecode == "q"
        assert list(g.offsets) == list(w.offsets)
        assert g.encoded == w.encoded  # byte for byte what msgspec encodes


def test_the_stub_names_exactly_what_the_module_has() -> None:
    stub = (Path(_fetchpack.__file__).parent / "_fetchpack.pyi").read_text()
    names = {n for n in dir(_fetchpack) if not n.startswith("_")}
    assert names == {"pack_consumed"}
    for name in names:
        assert f"def {name}(" in stub


EDGE_INTS = [0, 1, 127, 128, 255, 256, 65535, 65536, 2**32 - 1, 2**32, 2**63 - 1]
EDGE_TS = [0, 1, 127, 128, -1, -32, -33, -128, -129, -32768, -32769, -(2**31), -(2**31) - 1, -(2**63), 2**40]
EDGE_BYTES: list[bytes | None] = [None, b"", b"x", b"y" * 255, b"z" * 256, b"w" * 65535, b"v" * 65536]


@pytest.mark.parametrize("size", [1, 3, 15, 16, 17, 64, 70000])
def test_runs_are_byte_for_byte_what_pack_makes_of_the_tuples(size: int) -> None:
    rnd = random.Random(size)
    msgs = []
    for i, off in enumerate(EDGE_INTS + list(range(1000, 1000 + 40))):
        ts = (0, 123) if i % 5 == 0 else (1, rnd.choice(EDGE_TS))
        msgs.append(FakeMessage("in", 0, off, rnd.choice(EDGE_BYTES), rnd.choice(EDGE_BYTES), ts))
    msgs.append(FakeMessage("in", 0, None, b"k", b"v"))  # an offset of None is 0, as poll makes it
    out, errors, dropped = run_pack(msgs, {0: P0}, size)
    assert (errors, dropped) == ([], 0)
    last, runs = out[P0]
    assert last == 0
    assert len(runs) == 1
    same_runs(runs[0], pack([m.raw() for m in msgs], size))
    assert [m for r in runs[0] for m in unpack(r)] == [m.raw() for m in msgs]


def test_partitions_come_apart_in_order_errors_are_returned_and_unregistered_ones_dropped() -> None:
    eof = KafkaError(PARTITION_EOF)
    other = KafkaError(KafkaError._TRANSPORT)
    msgs: list[FakeMessage] = []
    for o in range(30):
        msgs.append(FakeMessage("in", o % 3, o, f"k{o}".encode(), b"v"))
        if o == 10:
            msgs.append(FakeMessage("in", 0, None, None, None, error=eof))
        if o == 20:
            msgs.append(FakeMessage("in", 1, None, None, None, error=other))
    ssp_of = {0: P0, 1: P1}  # partition 2 is not registered
    out, errors, dropped = run_pack(msgs, ssp_of, 4)
    assert errors == [eof, other]
    assert dropped == 10
    want = reference(msgs, ssp_of)
    assert set(out) == set(want)
    for ssp, msgs_of in want.items():
        last, runs = out[ssp]
        assert last == msgs_of[-1][0]
        same_runs(runs[0], pack(msgs_of, 4))


def test_a_consumer_of_several_topics_looks_up_topic_and_partition() -> None:
    msgs = [FakeMessage("in" if o % 2 else "other", 0, o, b"k", b"v") for o in range(10)]
    msgs.append(FakeMessage("gone", 0, 99, b"k", b"v"))
    out, _, dropped = run_pack(msgs, {("in", 0): P0, ("other", 0): Q0}, 64, single_topic=False)
    assert dropped == 1
    assert list(out[P0][1][0][0].offsets) == [1, 3, 5, 7, 9]
    assert list(out[Q0][1][0][0].offsets) == [0, 2, 4, 6, 8]


@pytest.mark.parametrize("control_to_all", [False, True])
def test_key_buckets_split_as_the_reference_split_does(control_to_all: bool) -> None:
    rnd = random.Random(7)
    msgs = []
    for o in range(500):
        key = None if o % 7 == 0 else f"key-{rnd.randrange(1000)}".encode()
        value = bytes([rnd.choice([1, 2, 3, 4])]) + b"payload" if key is None else b"v"
        msgs.append(FakeMessage("in", o % 2, o, key, value))
    split = {P0: (5, control_to_all)}  # P1 is read whole
    out, _, _ = run_pack(msgs, {0: P0, 1: P1}, 16, split=split)
    want = reference(msgs, {0: P0, 1: P1})
    last, buckets = out[P0]
    assert last == want[P0][-1][0]
    parts = split_by_key_bucket_reference(want[P0], 5, control_to_all)
    assert len(buckets) == 5
    for b in range(5):
        same_runs(buckets[b], pack(parts[b], 16))
    assert len(out[P1][1]) == 1
    same_runs(out[P1][1][0], pack(want[P1], 16))


def test_a_key_or_value_that_is_not_bytes_is_refused() -> None:
    with pytest.raises(TypeError, match="key"):
        run_pack([FakeMessage("in", 0, 1, "str", b"v")], {0: P0}, 8)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="value"):
        run_pack([FakeMessage("in", 0, 1, b"k", 5)], {0: P0}, 8)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="run size"):
        run_pack([], {0: P0}, 0)


def test_an_empty_batch_packs_to_nothing() -> None:
    assert run_pack([], {0: P0}, 8) == ({}, [], 0)


# -- PartitionLanes.take_runs against fan_out -------------------------------------------------------


def lanes_reader(factor: int, size: int) -> tuple[PartitionLanes, MetricsRegistry]:
    metrics = MetricsRegistry()
    keyhash = metrics.timer("SystemConsumersMetrics", "keyhash-ns")
    unowned = metrics.counter("SystemConsumersMetrics", "skipped-envelopes")
    return PartitionLanes(P0, OLDEST, factor, size, keyhash, unowned), metrics


def contents(buffers: dict[Lane, deque[Buffered]]) -> dict[Lane, list[RawMessage]]:
    return {
        lane: [m for e in buf for m in (unpack(e) if type(e) is PackedRun else [e])]  # type: ignore[misc]
        for lane, buf in buffers.items()
    }


def both_ways(
    joins: list[tuple[Lane, int | str]], factor: int, polls: list[list[RawMessage]]
) -> tuple[dict[Lane, list[RawMessage]], dict[Lane, list[RawMessage]], list[int], list[int]]:
    """What fan_out and take_runs buffer, poll by poll, and the skipped counts and unowned counts."""
    results = []
    for packed_by_consumer in (False, True):
        r, metrics = lanes_reader(factor, 4)
        for lane, start in joins:
            r.join(lane, start)
        buffers: dict[Lane, deque[Buffered]] = {lane: deque() for lane, _ in joins}
        for msgs in polls:
            got: list[Lane] = []
            if packed_by_consumer:
                fakes = [FakeMessage("in", 0, m[0], m[1], m[2], (1, m[3])) for m in msgs]
                split = {P0: (factor, False)} if factor > 1 else {}
                out, _, _ = run_pack(fakes, {0: P0}, 4, split=split)
                assert r.take_runs(out[P0][1], buffers, got)
            else:
                r.fan_out(msgs, buffers, got)
            r.fetched, r.position = msgs[-1][0], msgs[-1][0] + 1
        skipped = [r.skipped.get(lane, 0) for lane, _ in joins]
        unowned = [metrics.counter("SystemConsumersMetrics", "skipped-envelopes").count]
        results.append((contents(buffers), skipped + unowned))
    (a, ca), (b, cb) = results
    return a, b, ca, cb


def msgs_at(first: int, n: int) -> list[RawMessage]:
    return [(o, f"k{o % 11}".encode(), b"v", 1000 + o) for o in range(first, first + n)]


def test_take_runs_buffers_what_fan_out_buffers_for_key_buckets_and_skips() -> None:
    joins: list[tuple[Lane, int | str]] = [(P0._replace(key_bucket=0), 13), (P0._replace(key_bucket=2), OLDEST)]
    a, b, ca, cb = both_ways(joins, 3, [msgs_at(0, 10), msgs_at(10, 10), msgs_at(20, 10)])
    assert a == b
    assert ca == cb
    assert ca[0] > 0
    assert ca[2] > 0


def test_take_runs_buffers_what_fan_out_buffers_for_broadcast_lanes() -> None:
    joins: list[tuple[Lane, int | str]] = [(BroadcastLane(P0, "a"), OLDEST), (BroadcastLane(P0, "b"), 6)]
    a, b, ca, cb = both_ways(joins, 1, [msgs_at(0, 9), msgs_at(9, 9)])
    assert a == b
    assert ca == cb == [0, 6, 0]  # start 6: offsets 0-5 skipped


def test_take_runs_leaves_a_bounded_partition_to_fan_out() -> None:
    r, _ = lanes_reader(1, 4)
    r.join(P0, OLDEST)
    r.end = 100
    out, _, _ = run_pack([FakeMessage("in", 0, 0, b"k", b"v")], {0: P0}, 4)
    buffers: dict[Lane, deque[Buffered]] = {P0: deque()}
    assert not r.take_runs(out[P0][1], buffers, [])
    assert not buffers[P0]


def test_collections_pause_while_a_batch_is_packed_and_resume_after_even_on_error() -> None:
    assert gc.isenabled()
    with _gc_paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(RuntimeError), _gc_paused():
        raise RuntimeError("poll failed")
    assert gc.isenabled()
    gc.disable()  # turned off by someone else: left off
    try:
        with _gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()
