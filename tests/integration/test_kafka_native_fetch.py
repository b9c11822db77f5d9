"""KafkaSystemConsumer.poll_packed reading batches from librdkafka in C (samzamp._kafkafetch) against the
same consumer reading them through confluent-kafka's consume() (SAMZAMP_KAFKA_NATIVE_FETCH=0), on the
real broker: the same runs to the byte, per partition and key bucket, over keys, null keys, empty and
null values, control records and two topics; librdkafka's log lines served from inside the native read
reach the ``librdkafka`` logger, and one that raises there fails the poll as it fails consume()."""

from __future__ import annotations

import logging
import time
from array import array
from typing import Any

import msgspec
import pytest
from confluent_kafka import Producer
from kafka_util import create_topic

from samzamp.api.envelope import SystemStreamPartition
from samzamp.consume.packed import PackedRun
from samzamp.systems.base import OLDEST
from samzamp.systems.kafka import EmbeddedBroker, KafkaClientSettings, KafkaSystemConsumer
from samzamp.systems.kafka.client_config import LIBRDKAFKA_LOG
from samzamp.systems.kafka.codes import PARTITION_EOF
from samzamp.systems.kafka.consumer import NATIVE_FETCH_ENV

pytestmark = pytest.mark.integration

Runs = dict[SystemStreamPartition, list[list[tuple[int, list[int], bytes]]]]


def make_consumer(broker: EmbeddedBroker, native: bool, monkeypatch: pytest.MonkeyPatch, **consumer: Any) -> Any:
    monkeypatch.setenv(NATIVE_FETCH_ENV, "1" if native else "0")
    c = KafkaSystemConsumer(
        KafkaClientSettings("kafka", broker.bootstrap_servers, "test-native", consumer=consumer), "test-native"
    )
    assert c.reads_natively is native
    return c


def read_packed(
    c: KafkaSystemConsumer, ssps: list[SystemStreamPartition], total: int, split: dict[Any, tuple[int, bool]]
) -> Runs:
    """Every run ``poll_packed`` gives until ``total`` messages came, per SSP and bucket, in order (a
    control record sent to every bucket counts once)."""
    for s in ssps:
        c.register(s, OLDEST)
    c.start()
    got: Runs = {}
    offsets: dict[SystemStreamPartition, set[int]] = {}
    deadline = time.monotonic() + 30
    while sum(map(len, offsets.values())) < total:
        assert time.monotonic() < deadline, f"read {sum(map(len, offsets.values()))} of {total}"
        for ssp, (last, buckets) in c.poll_packed(0.05, 7, split, PackedRun).items():
            into = got.setdefault(ssp, [[] for _ in buckets])
            for b, runs in enumerate(buckets):
                for r in runs:
                    into[b].append((r.first, list(r.offsets), r.encoded))
                    offsets.setdefault(ssp, set()).update(r.offsets)
            assert last == max(offsets[ssp])
    return got


def produce_mixed(bootstrap: str, topic: str, partitions: int, count: int) -> None:
    """Keys, null keys, empty and null values, control records (null key, type byte 1-3), big values."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(count):
        key = None if i % 5 == 0 else (b"" if i % 17 == 0 else str(i % 97).encode())
        if i % 11 == 0:
            value: bytes | None = None
        elif i % 13 == 0:
            value = b""
        elif i % 5 == 0 and i % 3 == 0:
            value = bytes([1 + i % 3]) + b"control"
        elif i % 29 == 0:
            value = b"v" * 70_000
        else:
            value = f"value-{i}".encode()
        p.produce(topic, value, key, partition=i % partitions, timestamp=1_700_000_000_000 + i)
    assert p.flush(30) == 0


@pytest.fixture
def mixed_topics(broker: EmbeddedBroker, unique: str) -> tuple[str, str]:
    a, b = f"native-a-{unique}", f"native-b-{unique}"
    create_topic(broker.bootstrap_servers, a, 2)
    create_topic(broker.bootstrap_servers, b, 1)
    produce_mixed(broker.bootstrap_servers, a, 2, 3000)
    produce_mixed(broker.bootstrap_servers, b, 1, 1000)
    return a, b


def test_native_reads_give_the_runs_consume_gives(
    broker: EmbeddedBroker, mixed_topics: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = mixed_topics
    a0, a1, b0 = (
        SystemStreamPartition("kafka", a, 0),
        SystemStreamPartition("kafka", a, 1),
        SystemStreamPartition("kafka", b, 0),
    )
    for ssps, split, total in (
        ([a0, a1], {}, 3000),  # one topic: the SSP by partition
        ([a0, a1], {a1: (3, True)}, 3000),  # a partition by key bucket, control records to every bucket
        ([a0, a1, b0], {b0: (2, False)}, 4000),  # two topics: the SSP by (topic, partition)
    ):
        runs = {}
        for native in (True, False):
            c = make_consumer(broker, native, monkeypatch)
            try:
                runs[native] = read_packed(c, ssps, total, split)
            finally:
                c.stop()
        assert runs[True].keys() == set(ssps)
        # runs may be cut where batches ended: compare the messages of each bucket, then the bytes
        for ssp in ssps:
            for nat, py in zip(runs[True][ssp], runs[False][ssp], strict=True):
                assert [o for (_f, offs, _e) in nat for o in offs] == [o for (_f, offs, _e) in py for o in offs]
                assert [f for (f, _o, _e) in nat] == [offs[0] for (_f, offs, _e) in nat]
            assert _records(runs[True][ssp]) == _records(runs[False][ssp])


def _records(buckets: list[list[tuple[int, list[int], bytes]]]) -> list[list[Any]]:
    return [[rec for (_f, _o, enc) in bucket for rec in msgspec.msgpack.decode(enc)] for bucket in buckets]


def poll_for(c: KafkaSystemConsumer, seconds: float) -> None:
    """Poll for ``seconds`` (librdkafka logs each fetch while debug=fetch: something to serve)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        c.poll_packed(0.1, 7, {}, PackedRun)


class _Raise(logging.Filter):
    def __init__(self) -> None:
        super().__init__()
        self.raised = 0

    def filter(self, record: logging.LogRecord) -> bool:
        self.raised += 1
        raise ValueError("a logger that fails")


@pytest.mark.parametrize("native", [True, False])
def test_librdkafka_log_lines_served_in_a_read(
    broker: EmbeddedBroker, unique: str, native: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With debug=fetch librdkafka logs from every fetch, served to the logger from inside the read:
    logged, the GIL taken again; a logger that raises fails the poll with its exception."""
    topic = f"native-log-{unique}"
    create_topic(broker.bootstrap_servers, topic, 1)
    produce_mixed(broker.bootstrap_servers, topic, 1, 200)
    ssp = SystemStreamPartition("kafka", topic, 0)
    lines: list[str] = []
    handler = logging.Handler(logging.DEBUG)
    handler.emit = lambda record: lines.append(record.getMessage())  # type: ignore[method-assign]
    LIBRDKAFKA_LOG.addHandler(handler)
    old_level = LIBRDKAFKA_LOG.level
    LIBRDKAFKA_LOG.setLevel(logging.DEBUG)
    c = make_consumer(broker, native, monkeypatch, debug="fetch")
    try:
        read_packed(c, [ssp], 200, {})
        assert any("fetch" in line.lower() for line in lines), lines[:5]
        failing = _Raise()
        LIBRDKAFKA_LOG.addFilter(failing)
        try:
            with pytest.raises(ValueError, match="a logger that fails"):
                poll_for(c, 10)
        finally:
            LIBRDKAFKA_LOG.removeFilter(failing)
        assert failing.raised >= 1
        # the consumer reads on after a failed poll
        c.poll_packed(0.1, 7, {}, PackedRun)
    finally:
        LIBRDKAFKA_LOG.removeHandler(handler)
        LIBRDKAFKA_LOG.setLevel(old_level)
        c.stop()


def test_a_closed_consumer_refuses_a_native_read(broker: EmbeddedBroker, monkeypatch: pytest.MonkeyPatch) -> None:
    c = make_consumer(broker, True, monkeypatch)
    c.stop()
    with pytest.raises(RuntimeError, match="closed"):
        c.poll_packed(0.01, 7, {}, PackedRun)


def test_partition_eof_comes_back_as_consume_gives_it(
    broker: EmbeddedBroker, unique: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An error event of the batch (here the end of a partition, with enable.partition.eof) is
    handed back as the (code, reason) Message.error() carries, and the poll ignores it as before."""
    topic = f"native-eof-{unique}"
    create_topic(broker.bootstrap_servers, topic, 1)
    produce_mixed(broker.bootstrap_servers, topic, 1, 50)
    ssp = SystemStreamPartition("kafka", topic, 0)
    c = make_consumer(broker, True, monkeypatch, **{"enable.partition.eof": True})
    try:
        read_packed(c, [ssp], 50, {})
        reader = c._native
        assert reader is not None
        deadline = time.monotonic() + 10
        codes: list[tuple[int, str]] = []
        while not codes:
            assert time.monotonic() < deadline, "no partition EOF"
            out, codes, dropped = reader.read_batch(100, 0.1, {0: ssp}, True, {}, 7, PackedRun, array)
            assert (out, dropped) == ({}, 0)
        assert [code for code, _reason in codes] == [PARTITION_EOF]
        assert c.poll_packed(0.1, 7, {}, PackedRun) == {}  # ignored, as through consume()
    finally:
        c.stop()


def test_positions_across_register_unregister_and_pause_read_natively(
    broker: EmbeddedBroker, unique: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The positions librdkafka keeps move as under consume(): a partition added after start is read
    from exactly its start, one unregistered with messages fetched returns none of them, one paused
    returns nothing until resumed, then from where it stopped."""
    topic = f"native-moves-{unique}"
    create_topic(broker.bootstrap_servers, topic, 2)
    produce_mixed(broker.bootstrap_servers, topic, 2, 4000)  # offsets 0..1999 in each partition
    p0, p1 = SystemStreamPartition("kafka", topic, 0), SystemStreamPartition("kafka", topic, 1)
    monkeypatch.setenv(NATIVE_FETCH_ENV, "1")
    c = KafkaSystemConsumer(
        KafkaClientSettings("kafka", broker.bootstrap_servers, "test-native"), "test-native", batch=10
    )
    assert c.reads_natively
    seen: dict[SystemStreamPartition, list[int]] = {p0: [], p1: []}

    def poll_until(ssp: SystemStreamPartition, n: int) -> None:
        deadline = time.monotonic() + 30
        while len(seen[ssp]) < n:
            assert time.monotonic() < deadline, f"{ssp}: read {len(seen[ssp])} of {n}"
            for s, (_last, buckets) in c.poll_packed(0.05, 3, {}, PackedRun).items():
                seen[s].extend(o for r in buckets[0] for o in r.offsets)

    try:
        c.register(p0, OLDEST)
        c.start()
        poll_until(p0, 100)
        c.register(p1, 1500)
        poll_until(p1, 20)
        assert seen[p1][:20] == list(range(1500, 1520))
        c.unregister([p1])
        before = len(seen[p1])
        c.pause([p0])
        time.sleep(0.3)
        paused_at = len(seen[p0])
        for _ in range(20):
            for s, (_last, buckets) in c.poll_packed(0.01, 3, {}, PackedRun).items():
                seen[s].extend(o for r in buckets[0] for o in r.offsets)
        # what librdkafka had queued for p0 before the pause may still come, never more than a batch
        assert len(seen[p0]) <= paused_at + 10 * 20
        c.resume([p0])
        poll_until(p0, 2000)
        assert seen[p0] == list(range(2000))
        assert len(seen[p1]) == before
        assert seen[p1] == list(range(1500, 1500 + before))
    finally:
        c.stop()
