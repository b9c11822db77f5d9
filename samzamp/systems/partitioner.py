"""Where a keyed message goes: Kafka's default partitioner (the Java client's murmur2, which
librdkafka's ``murmur2_random`` matches), so every system of samzamp places a key where Kafka would,
and an application's intermediate streams place keys the same on the broker and in memory."""

from __future__ import annotations

__all__ = ["murmur2_partition"]


def _murmur2(data: bytes) -> int:
    """Kafka's murmur2 (the Java client's default partitioner), so keyed outputs land where Kafka's would."""
    length = len(data)
    seed = 0x9747B28C
    m = 0x5BD1E995
    h = (seed ^ length) & 0xFFFFFFFF
    n4 = length // 4
    for i in range(n4):
        k = int.from_bytes(data[4 * i : 4 * i + 4], "little")
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> 24
        k = (k * m) & 0xFFFFFFFF
        h = (h * m) & 0xFFFFFFFF
        h ^= k
    rest = length & 3
    tail = 4 * n4
    if rest == 3:
        h ^= data[tail + 2] << 16
    if rest >= 2:
        h ^= data[tail + 1] << 8
    if rest >= 1:
        h ^= data[tail]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h


def murmur2_partition(key: bytes, partitions: int) -> int:
    return (_murmur2(key) & 0x7FFFFFFF) % partitions
