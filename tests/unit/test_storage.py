"""The store layer without Kafka: the LMDB engine, the OFFSET file, the KeyValueStore over a write buffer."""

from __future__ import annotations

from pathlib import Path

import pytest

from samzamp.serde.registry import SerdeRegistry
from samzamp.storage.dirs import StoreLockedError, lock_store_dir, store_dir, unlock_store_dir
from samzamp.storage.lmdb import LmdbEngine
from samzamp.storage.offset_file import OFFSET_FILE, read_offset_file, write_offset_file
from samzamp.storage.store import LmdbKeyValueStore

SERDES = SerdeRegistry({})


def _store(path: Path, changelog: list | None = None) -> LmdbKeyValueStore:
    send = None if changelog is None else (lambda k, v: changelog.append((k, v)))
    return LmdbKeyValueStore("s", LmdbEngine(path), SERDES.get("string", "k"), SERDES.get("long", "v"), send)


def test_engine_grows_its_map_instead_of_failing(tmp_path: Path) -> None:
    engine = LmdbEngine(tmp_path, map_size=64 * 1024)
    big = [(f"k{i:05d}".encode(), b"x" * 1000) for i in range(2000)]  # ~2 MB into a 64 KiB map
    engine.apply(big, 7)
    assert engine.count() == 2000
    assert engine.changelog_offset() == 7
    engine.close()


def test_engine_batches_are_atomic_with_their_offset_and_dirty_flag(tmp_path: Path) -> None:
    engine = LmdbEngine(tmp_path)
    engine.apply([(b"a", b"1")], 3)
    assert (engine.changelog_offset(), engine.dirty()) == (3, False)
    engine.apply([(b"b", b"2")], None)  # written before a commit covers it
    assert engine.changelog_offset() is None
    assert engine.dirty()
    engine.apply([(b"a", None)], 9)
    assert (engine.changelog_offset(), engine.dirty()) == (9, False)
    assert list(engine.items()) == [(b"b", b"2")]
    engine.close()
    reopened = LmdbEngine(tmp_path)
    assert reopened.changelog_offset() == 9
    reopened.close()


def test_engine_items_respects_bounds(tmp_path: Path) -> None:
    engine = LmdbEngine(tmp_path)
    engine.apply([(k, k) for k in (b"a", b"b", b"c", b"d")], 1)
    assert [k for k, _ in engine.items(b"b", b"d")] == [b"b", b"c"]
    assert [k for k, _ in engine.items(b"bb", None)] == [b"c", b"d"]
    assert list(engine.items(b"z", None)) == []
    engine.close()


def test_offset_file_round_trip_and_corruption(tmp_path: Path) -> None:
    assert read_offset_file(tmp_path) is None
    write_offset_file(tmp_path, "kafka.log.3", 41)
    got = read_offset_file(tmp_path)
    assert got is not None
    assert (got.changelog, got.offset) == ("kafka.log.3", 41)
    data = bytearray((tmp_path / OFFSET_FILE).read_bytes())
    data[-3] ^= 0x01  # one flipped bit: the checksum catches it
    (tmp_path / OFFSET_FILE).write_bytes(bytes(data))
    assert read_offset_file(tmp_path) is None
    (tmp_path / OFFSET_FILE).write_bytes(b"\x00")
    assert read_offset_file(tmp_path) is None


def test_store_reads_its_own_writes_and_changelogs_them_first(tmp_path: Path) -> None:
    log: list = []
    s = _store(tmp_path, log)
    s.put("a", 1)
    s.put("b", 2)
    s.delete("a")
    assert s.get("a") is None
    assert s.get("b") == 2
    assert s.engine.count() == 0  # nothing reaches LMDB before a commit
    assert log == [(b"a", (1).to_bytes(8, "big")), (b"b", (2).to_bytes(8, "big")), (b"a", None)]
    s.commit(2)
    assert s.engine.changelog_offset() == 2
    assert [k for k, _ in s.engine.items()] == [b"b"]
    s.close()


def test_store_range_and_all_merge_the_buffer_in_key_order(tmp_path: Path) -> None:
    s = _store(tmp_path)
    s.put_all([("a", 1), ("c", 3), ("e", 5)])
    s.commit(-1)
    s.put("b", 2)
    s.delete("c")
    s.put("e", 50)
    with s.all() as it:
        assert list(it) == [("a", 1), ("b", 2), ("e", 50)]
    with s.range("b", "e") as it:
        assert list(it) == [("b", 2)]
    assert s.get_all(["a", "c", "e"]) == {"a": 1, "e": 50}
    it = s.all()
    it.close()
    with pytest.raises(ValueError, match="closed"):
        list(it)
    s.close()


def test_store_refuses_none(tmp_path: Path) -> None:
    s = _store(tmp_path)
    with pytest.raises(ValueError, match="keys may not be None"):
        s.put(None, 1)
    with pytest.raises(ValueError, match="values may not be None"):
        s.put("a", None)
    s.close()


def test_store_dir_layout_and_lock(tmp_path: Path) -> None:
    d = store_dir(tmp_path, "counts", "Partition 3")
    assert d == tmp_path / "counts" / "Partition_3"
    fd = lock_store_dir(d)
    with pytest.raises(StoreLockedError, match="held by a live process"):
        lock_store_dir(d)
    unlock_store_dir(fd)
    unlock_store_dir(lock_store_dir(d))
