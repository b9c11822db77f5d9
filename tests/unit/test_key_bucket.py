"""The key-bucket hash of virtual tasks: pinned to exact values (a changed hash would move every key of
every job with job.elasticity.factor > 1 to another task, orphaning its checkpoints and state), the
native code equal to the pure-Python reference, and split_by_key_bucket's promises."""

from __future__ import annotations

import ast
import random
from pathlib import Path

import pytest

import samzamp
from samzamp import _keyhash
from samzamp.consume.key_bucket import (
    key_bucket,
    key_hash,
    key_hash_reference,
    split_by_key_bucket,
    split_by_key_bucket_reference,
)
from samzamp.systems.base import END_OF_STREAM, WATERMARK_MAX, RawMessage

MASK = (1 << 64) - 1

# Exact 64-bit hashes, forever: a key's bucket in a running job depends on them.
PINNED = [
    (b"", 0xEFD01F60BA992926),
    (b"\x00", 0xB9034AD37056F5FB),
    (b"a", 0x82A2A958A9BECE5B),
    (b"foobar", 0x2C22194922D1672B),
    (b"user-42", 0xA39532C7AB051E8D),
    ("ключ".encode(), 0x590520D718275ED5),
    (bytes(range(256)), 0x2067DB6DBD4EFA06),
]

# FNV-1a 64 of these, from the published FNV test vectors (not computed here): the hash is what
# key_bucket.py documents, FNV-1a 64 then fmix64, so a user can compute a bucket from the docs alone.
FNV1A64_PUBLISHED = [(b"", 0xCBF29CE484222325), (b"a", 0xAF63DC4C8601EC8C), (b"foobar", 0x85944171F73967E8)]


def fmix64(h: int) -> int:
    h ^= h >> 33
    h = (h * 0xFF51AFD7ED558CCD) & MASK
    h ^= h >> 33
    h = (h * 0xC4CEB9FE1A85EC53) & MASK
    h ^= h >> 33
    return h


@pytest.mark.parametrize(("key", "expected"), PINNED)
def test_pinned_hashes(key: bytes, expected: int) -> None:
    assert key_hash(key) == expected
    assert key_hash_reference(key) == expected
    assert _keyhash.key_hash(key) == expected


@pytest.mark.parametrize(("key", "fnv"), FNV1A64_PUBLISHED)
def test_hash_is_fmix64_of_published_fnv1a64(key: bytes, fnv: int) -> None:
    assert key_hash(key) == fmix64(fnv)


def test_native_equals_reference_on_random_keys() -> None:
    rng = random.Random(20240516)
    keys = [b"", bytes(range(256)), bytes(range(255, -1, -1)), b"\xff" * 4096]
    keys += [bytes([b]) for b in range(256)]
    keys += [rng.randbytes(rng.randrange(0, 64)) for _ in range(4000)]
    keys += [rng.randbytes(rng.randrange(64, 5000)) for _ in range(50)]
    for k in keys:
        assert key_hash(k) == key_hash_reference(k), k
        assert 0 <= key_hash(k) <= MASK


def test_bytes_like_keys_hash_as_their_bytes() -> None:
    k = b"some key bytes"
    assert key_hash(bytearray(k)) == key_hash(memoryview(k)) == key_hash(k)
    with pytest.raises(TypeError):
        key_hash("a str is not bytes")  # type: ignore[arg-type]


def test_key_bucket() -> None:
    for key, h in PINNED:
        for f in (1, 2, 3, 4, 7, 8, 64):
            assert key_bucket(key, 12345, f) == h % f
    assert key_bucket(None, 10, 4) == 2
    assert key_bucket(None, 10, 1) == 0


def _random_batch(rng: random.Random, n: int) -> list[RawMessage]:
    """Offsets in order, random keys (some null, some repeated), control markers mixed in."""
    repeated = [rng.randbytes(8) for _ in range(5)]
    out: list[RawMessage] = []
    offset = rng.randrange(0, 1 << 40)
    for _ in range(n):
        r = rng.random()
        if r < 0.03:
            out.append((rng.choice([END_OF_STREAM, WATERMARK_MAX]), None, None, 0))
            continue
        if r < 0.15:
            key: bytes | None = None
        elif r < 0.35:
            key = rng.choice(repeated)
        else:
            key = rng.randbytes(rng.randrange(0, 40))
        out.append((offset, key, rng.randbytes(10), offset * 2))
        offset += rng.randrange(1, 4)
    return out


@pytest.mark.parametrize("factor", [1, 2, 3, 4, 8, 13])
def test_split_native_equals_reference(factor: int) -> None:
    rng = random.Random(factor)
    for n in (0, 1, 2, 17, 500):
        batch = _random_batch(rng, n)
        native = split_by_key_bucket(batch, factor)
        reference = split_by_key_bucket_reference(batch, factor)
        assert native == reference
        # The very message objects, not copies.
        assert all(a is b for n, r in zip(native, reference, strict=True) for a, b in zip(n, r, strict=True))


def test_split_keeps_order_puts_markers_everywhere_and_null_keys_by_offset() -> None:
    batch = _random_batch(random.Random(7), 2000)
    factor = 4
    buckets = split_by_key_bucket(batch, factor)
    assert len(buckets) == factor
    markers = [m for m in batch if m[0] < 0]
    assert markers, "the batch must hold markers for this test to mean anything"
    for b, lst in enumerate(buckets):
        # In the order given: a subsequence of the batch (markers included, where they were).
        it = iter(batch)
        assert all(any(m is x for x in it) for m in lst)
        assert [m for m in lst if m[0] < 0] == markers
        for offset, key, _, _ in lst:
            if offset >= 0:
                assert b == (offset % factor if key is None else key_hash_reference(key) % factor)
    data = [m for m in batch if m[0] >= 0]
    assert sorted(m[0] for lst in buckets for m in lst if m[0] >= 0) == sorted(m[0] for m in data)


def test_one_key_one_bucket() -> None:
    batch: list[RawMessage] = [(i, b"k%d" % (i % 50), None, 0) for i in range(1000)]
    for lst_index, lst in enumerate(split_by_key_bucket(batch, 8)):
        for m in lst:
            assert m[1] is not None
            assert key_hash(m[1]) % 8 == lst_index


def test_factor_one_is_the_batch() -> None:
    batch = _random_batch(random.Random(3), 300)
    assert split_by_key_bucket(batch, 1) == [batch]


def test_accepts_any_sequence_of_tuples() -> None:
    batch = _random_batch(random.Random(11), 100)
    expected = split_by_key_bucket_reference(batch, 3)
    assert split_by_key_bucket(tuple(batch), 3) == expected
    assert split_by_key_bucket(batch[::-1][::-1], 3) == expected
    # Keys as other bytes-like objects go where their bytes go.
    as_bytearray = [(o, None if k is None else bytearray(k), v, t) for o, k, v, t in batch]
    assert [[m[0] for m in lst] for lst in split_by_key_bucket(as_bytearray, 3)] == [
        [m[0] for m in lst] for lst in expected
    ]
    # Messages as lists are read as m[0], m[1], as the reference does.
    as_lists = [list(m) for m in batch]
    assert split_by_key_bucket(as_lists, 3) == split_by_key_bucket_reference(as_lists, 3)  # type: ignore[arg-type]


def test_offsets_past_int64_keep_pythons_arithmetic() -> None:
    big = (1 << 70) + 5
    batch: list[RawMessage] = [(big, None, None, 0), (-(1 << 70), None, None, 0)]
    assert split_by_key_bucket(batch, 3) == split_by_key_bucket_reference(batch, 3)


@pytest.mark.parametrize("factor", [0, -1, -(1 << 40)])
def test_factor_below_one_is_refused(factor: int) -> None:
    with pytest.raises(ValueError, match=r"factor .* is not >= 1 \(job.elasticity.factor\)"):
        split_by_key_bucket([(0, b"k", None, 0)], factor)
    with pytest.raises(ValueError, match="job.elasticity.factor"):
        split_by_key_bucket_reference([], factor)


def test_bad_messages_are_named() -> None:
    with pytest.raises(TypeError, match=r"message 1 \(offset 5\): key is str, expected bytes or None"):
        split_by_key_bucket([(4, b"k", None, 0), (5, "k", None, 0)], 2)  # type: ignore[list-item]
    with pytest.raises(TypeError, match="message 0: offset is str, expected int"):
        split_by_key_bucket([("4", b"k", None, 0)], 2)  # type: ignore[list-item]
    with pytest.raises(TypeError, match="message 0 is int, expected a tuple"):
        split_by_key_bucket([4], 2)  # type: ignore[list-item]
    with pytest.raises(TypeError):
        split_by_key_bucket(None, 2)  # type: ignore[arg-type]


def test_split_property_bucket_of_f_is_union_of_its_buckets_of_kf() -> None:
    """Bucket b of F = the union of buckets b, b + F, ... of k * F, each in offset order (what the split
    and merge of virtual tasks rely on)."""
    batch = [m for m in _random_batch(random.Random(99), 3000) if m[0] >= 0]
    for f in (1, 2, 3, 4):
        coarse = split_by_key_bucket(batch, f)
        for k in (2, 3, 4):
            fine = split_by_key_bucket(batch, k * f)
            for b in range(f):
                union = sorted((m for j in range(b, k * f, f) for m in fine[j]), key=lambda m: m[0])
                assert union == coarse[b], (f, k, b)


def test_stub_matches_the_module() -> None:
    stub = ast.parse(Path(samzamp.__file__).with_name("_keyhash.pyi").read_text())
    names = {n.name for n in stub.body if isinstance(n, ast.FunctionDef)}
    assert names == {n for n in dir(_keyhash) if not n.startswith("_")}


def _with_control_records(rng: random.Random, n: int) -> list[RawMessage]:
    """A batch of an intermediate partition: null-keyed records of each type byte 0-3 mixed in."""
    out = []
    for offset, key, value, ts in _random_batch(rng, n):
        if offset >= 0 and key is None:
            value = bytes([rng.randrange(0, 5)]) + (value or b"")
        out.append((offset, key, value, ts))
    return out


@pytest.mark.parametrize("factor", [1, 2, 3, 8])
def test_split_with_control_to_all_native_equals_reference(factor: int) -> None:
    rng = random.Random(100 + factor)
    for n in (0, 1, 17, 500):
        batch = _with_control_records(rng, n)
        for control_to_all in (False, True):
            native = split_by_key_bucket(batch, factor, control_to_all)
            assert native == split_by_key_bucket_reference(batch, factor, control_to_all)


def test_control_records_of_an_intermediate_partition_reach_every_bucket() -> None:
    batch = _with_control_records(random.Random(3), 2000)
    control = [m for m in batch if m[0] >= 0 and m[1] is None and m[2] and 1 <= m[2][0] <= 3]
    user_null = [m for m in batch if m[0] >= 0 and m[1] is None and m not in control]
    assert control, "the batch must hold control records for this test to mean anything"
    assert user_null, "and null-keyed user records"
    buckets = split_by_key_bucket(batch, 4, True)
    for b, lst in enumerate(buckets):
        assert [m for m in lst if m in control] == control  # every control record, in order
        # A null-keyed user record (type byte 0, or anything but 1-3) still goes by its offset.
        assert [m for m in lst if m in user_null] == [m for m in user_null if m[0] % 4 == b]
    # Without the flag a control record is an ordinary null-keyed record: one bucket, by offset.
    plain = split_by_key_bucket(batch, 4)
    assert sum(1 for lst in plain for m in lst if m in control) == len(control)
