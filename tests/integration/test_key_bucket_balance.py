"""Key buckets are balanced inside every partition, whichever partitioner wrote the topic: 10,000
distinct keys over 4 partitions, produced once with librdkafka's default partitioner (CRC32-based,
``consistent_random``) and once with Java's (``murmur2_random``); read back from the real broker and
split by ``split_by_key_bucket`` as the fetch thread splits them, every bucket of every partition holds
between 0.8/F and 1.2/F of its partition's messages, for F = 2 and 4.

The check can fail: a bucket hash correlated with the partitioner (the partitioner's own hash modulo
F) puts each partition's keys into one bucket, and the same check says so.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable

import pytest
from confluent_kafka import Producer
from kafka_util import create_topic, read_all

from samzamp.consume.key_bucket import split_by_key_bucket
from samzamp.systems.base import RawMessage
from samzamp.systems.kafka import EmbeddedBroker

pytestmark = pytest.mark.integration

PARTITIONS = 4
KEYS = 10_000
FACTORS = (2, 4)
TOLERANCE = 0.2  # every bucket within [0.8/F, 1.2/F] of its partition


def java_murmur2(data: bytes) -> int:
    """Kafka's Utils.murmur2 (Java's default partitioner, librdkafka's ``murmur2``), as unsigned 32 bits."""
    m, mask = 0x5BD1E995, 0xFFFFFFFF
    h = (0x9747B28C ^ len(data)) & mask
    whole = len(data) & ~3
    for i in range(0, whole, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * m) & mask
        k ^= k >> 24
        k = (k * m) & mask
        h = ((h * m) & mask) ^ k
    tail = data[whole:]
    if tail:
        for j in range(len(tail) - 1, -1, -1):
            h ^= tail[j] << (8 * j)
        h = (h * m) & mask
    h ^= h >> 13
    h = (h * m) & mask
    h ^= h >> 15
    return h


# Where each partitioner puts a key among n partitions (librdkafka's rdkafka_msg.c).
PARTITIONERS: dict[str, Callable[[bytes, int], int]] = {
    "consistent_random": lambda key, n: zlib.crc32(key) % n,
    "murmur2_random": lambda key, n: (java_murmur2(key) & 0x7FFFFFFF) % n,
}


def _produce_and_read(bootstrap: str, topic: str, partitioner: str) -> dict[int, list[RawMessage]]:
    """KEYS messages with distinct keys, placed by ``partitioner``; read back, per partition in offset order."""
    create_topic(bootstrap, topic, PARTITIONS)
    p = Producer({"bootstrap.servers": bootstrap, "partitioner": partitioner, "linger.ms": 5})
    for i in range(KEYS):
        p.produce(topic, value=b"v", key=f"customer-{i:05d}".encode())
        if i % 2000 == 0:
            p.poll(0)
    assert p.flush(30) == 0
    per: dict[int, list[RawMessage]] = {n: [] for n in range(PARTITIONS)}
    for m in read_all(bootstrap, topic, list(range(PARTITIONS))):
        per[m.partition()].append((m.offset(), m.key(), m.value(), m.timestamp()[1]))
    for msgs in per.values():
        msgs.sort(key=lambda r: r[0])
    return per


def _unbalanced(
    per: dict[int, list[RawMessage]], factor: int, split: Callable[[list[RawMessage], int], list[list[RawMessage]]]
) -> list[str]:
    """Every (partition, bucket) whose share of its partition is outside [0.8/F, 1.2/F], described."""
    low, high = (1 - TOLERANCE) / factor, (1 + TOLERANCE) / factor
    bad = []
    for partition, msgs in per.items():
        for bucket, got in enumerate(split(msgs, factor)):
            share = len(got) / len(msgs)
            if not low <= share <= high:
                bad.append(f"partition {partition} bucket {bucket}/{factor}: {len(got)} of {len(msgs)} ({share:.3f})")
    return bad


def _split_by(hash_fn: Callable[[bytes], int]) -> Callable[[list[RawMessage], int], list[list[RawMessage]]]:
    """A split like split_by_key_bucket with another hash of the key bytes."""

    def split(msgs: list[RawMessage], factor: int) -> list[list[RawMessage]]:
        out: list[list[RawMessage]] = [[] for _ in range(factor)]
        for m in msgs:
            assert m[1] is not None
            out[hash_fn(m[1]) % factor].append(m)
        return out

    return split


@pytest.mark.parametrize("partitioner", sorted(PARTITIONERS))
def test_every_bucket_of_every_partition_gets_its_share(broker: EmbeddedBroker, unique: str, partitioner: str) -> None:
    per = _produce_and_read(broker.bootstrap_servers, f"balance-{partitioner}-{unique}", partitioner)

    # The topic is what the test claims: every key where this partitioner puts it, none lost.
    assert sum(len(msgs) for msgs in per.values()) == KEYS
    assert len({m[1] for msgs in per.values() for m in msgs}) == KEYS
    place = PARTITIONERS[partitioner]
    for partition, msgs in per.items():
        assert all(m[1] is not None and place(m[1], PARTITIONS) == partition for m in msgs), partition

    for factor in FACTORS:
        assert _unbalanced(per, factor, split_by_key_bucket) == [], (partitioner, factor)

    # The check has teeth: the partitioner's own hash as bucket hash leaves buckets empty or overfull.
    correlated = {
        "consistent_random": _split_by(zlib.crc32),
        "murmur2_random": _split_by(lambda k: java_murmur2(k) & 0x7FFFFFFF),
    }[partitioner]
    for factor in FACTORS:
        bad = _unbalanced(per, factor, correlated)
        # With F dividing the partition count, each partition's keys all land in one bucket.
        assert len(bad) == PARTITIONS * factor, bad
