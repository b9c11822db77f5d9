"""Key buckets: which virtual task of a partition a message belongs to (job.elasticity.factor).

A message's key bucket is a hash of its **serialized key bytes**, as they came from the broker,
modulo the factor F; a message with a null key goes by its offset modulo F. The bucket is computed
before anything is deserialized, so a container never decodes a message of a bucket it does not own.

The hash is samzamp's own and stable forever (a checkpoint, a changelog re-bucketing and every
container of a job must agree on it): 64-bit FNV-1a over the bytes, then MurmurHash3's 64-bit
finalizer (fmix64), taken modulo F. It is chosen to be unrelated to both Kafka partitioners, Java's
murmur2 and librdkafka's CRC32-based default: a hash correlated with the partitioner would put the
keys of one partition into a few of its buckets. Because every factor takes the same 64-bit hash
modulo F, a bucket ``b`` of factor F splits into buckets ``b``, ``b + F``, ... of factor ``k * F``
(the split and merge of virtual tasks rely on it).

The work is done by the native extension ``samzamp._keyhash`` (native/keyhash.c), 60 to 110
times faster than Python on a fetched batch (bench/keyhash.py); ``key_hash_reference`` and
``split_by_key_bucket_reference`` are the definition in Python, which the native code must match
bit for bit (tests/unit/test_key_bucket.py).
"""

from __future__ import annotations

from collections.abc import Sequence

from samzamp import _keyhash
from samzamp.systems.base import RawMessage

__all__ = [
    "key_bucket",
    "key_hash",
    "key_hash_reference",
    "split_by_key_bucket",
    "split_by_key_bucket_reference",
]

_FNV_OFFSET = 0xCBF29CE484222325
_FNV_PRIME = 0x100000001B3
_MASK = 0xFFFFFFFFFFFFFFFF


def key_hash(key: bytes) -> int:
    """The 64-bit key hash of ``key`` (unsigned): FNV-1a 64, then fmix64."""
    return _keyhash.key_hash(key)


def key_bucket(key: bytes | None, offset: int, factor: int) -> int:
    """The bucket (0 .. factor - 1) of a message with serialized ``key`` at ``offset``."""
    if key is None:
        return offset % factor
    return _keyhash.key_hash(key) % factor


def split_by_key_bucket(
    msgs: Sequence[RawMessage], factor: int, control_to_all: bool = False
) -> list[list[RawMessage]]:
    """``msgs`` (one partition's, in offset order) split into ``factor`` lists by key bucket, each in
    the order given. A control marker (negative offset) goes into every list, where it was; with
    ``control_to_all`` (a partition of an application's intermediate stream) so does a control
    record: a null key and a value whose type byte is 1-3 (``serde.intermediate``), which every
    virtual task of the partition must count. ``factor`` < 1 raises ValueError; a message whose key
    is neither bytes nor None raises TypeError."""
    return _keyhash.split_by_key_bucket(msgs, factor, control_to_all)


def _is_control(m: RawMessage) -> bool:
    value = m[2] if len(m) > 2 else None
    return isinstance(value, bytes) and len(value) > 0 and 1 <= value[0] <= 3


def key_hash_reference(key: bytes) -> int:
    """``key_hash`` in pure Python: the definition the native code is tested against."""
    h = _FNV_OFFSET
    for byte in key:
        h = ((h ^ byte) * _FNV_PRIME) & _MASK
    h ^= h >> 33
    h = (h * 0xFF51AFD7ED558CCD) & _MASK
    h ^= h >> 33
    h = (h * 0xC4CEB9FE1A85EC53) & _MASK
    h ^= h >> 33
    return h


def split_by_key_bucket_reference(
    msgs: Sequence[RawMessage], factor: int, control_to_all: bool = False
) -> list[list[RawMessage]]:
    """``split_by_key_bucket`` in pure Python: the definition the native code is tested against."""
    if factor < 1:
        raise ValueError(f"split_by_key_bucket: factor {factor} is not >= 1 (job.elasticity.factor)")
    out: list[list[RawMessage]] = [[] for _ in range(factor)]
    for m in msgs:
        offset, key = m[0], m[1]
        if offset < 0 or (control_to_all and key is None and _is_control(m)):
            for bucket in out:
                bucket.append(m)
        elif key is None:
            out[offset % factor].append(m)
        else:
            out[key_hash_reference(key) % factor].append(m)
    return out
