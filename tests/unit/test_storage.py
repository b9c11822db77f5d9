"""The store layer without Kafka: the LMDB engine, the OFFSET file, the KeyValueStore over a write buffer."""

from __future__ import annotations

import gc
import os
import stat
from pathlib import Path

import psutil
import pytest

from samzamp.serde.registry import SerdeRegistry
from samzamp.storage import store as store_module
from samzamp.storage.dirs import StoreLockedError, lock_store_dir, store_dir, unlock_store_dir
from samzamp.storage.lmdb import LmdbEngine, MapFullWhileReadingError
from samzamp.storage.offset_file import OFFSET_FILE, read_offset_file, write_offset_file
from samzamp.storage.store import LmdbKeyValueStore

SERDES = SerdeRegistry({})


def _store(path: Path, changelog: list | None = None, write_batch_size: int = 1) -> LmdbKeyValueStore:
    send = None if changelog is None else (lambda k, v: changelog.append((k, v)))
    return LmdbKeyValueStore(
        "s", LmdbEngine(path), SERDES.get("string", "k"), SERDES.get("long", "v"), send, None, write_batch_size
    )


def _long(n: int) -> bytes:
    return n.to_bytes(8, "big")


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


def test_a_batch_sends_each_keys_newest_write_once_when_it_fills_and_the_rest_before_a_commit(
    tmp_path: Path,
) -> None:
    log: list = []
    s = _store(tmp_path, log, write_batch_size=3)
    s.put("a", 1)
    s.put("a", 2)
    s.put("b", 1)
    s.delete("a")
    assert log == []  # two keys wait: a (deleted) and b
    assert s.get("a") is None  # reads see every write meanwhile
    assert s.get("b") == 1
    s.put("c", 5)  # the third key fills the batch: each key's newest write goes, once
    assert log == [(b"a", None), (b"b", _long(1)), (b"c", _long(5))]
    s.put("b", 9)
    with pytest.raises(RuntimeError, match="not sent to the changelog"):
        s.commit(3)  # a commit never applies a write the changelog has not got
    s.send_unsent()  # what commit step 3 does before the producer's flush
    assert log[3:] == [(b"b", _long(9))]
    s.send_unsent()  # nothing waits: nothing is sent
    assert len(log) == 4
    s.commit(3)
    assert dict(s.engine.items()) == {b"b": _long(9), b"c": _long(5)}
    s.close()


def test_a_spill_sends_the_waiting_writes_to_the_changelog_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store_module, "SPILL_AT", 4)
    log: list = []
    s = _store(tmp_path, log, write_batch_size=100)
    for i in range(4):
        s.put(f"k{i}", i)
    # The buffer spilled to LMDB (dirty until the next commit), and the changelog got it before.
    assert s.engine.count() == 4
    assert sorted(log) == [(f"k{i}".encode(), _long(i)) for i in range(4)]
    s.close()


def test_a_send_that_fails_leaves_it_and_the_rest_waiting_and_a_commit_refuses_them(tmp_path: Path) -> None:
    log: list = []
    refuse = {b"b"}

    def send(k: bytes, v: bytes | None) -> None:
        if k in refuse:
            raise RuntimeError("the producer refused it")
        log.append((k, v))

    s = LmdbKeyValueStore("s", LmdbEngine(tmp_path), SERDES.get("string", "k"), SERDES.get("long", "v"), send, None, 3)
    s.put("a", 1)
    s.put("b", 2)
    with pytest.raises(RuntimeError, match="refused"):
        s.put("c", 3)  # fills the batch; b's record fails
    assert log == [(b"a", _long(1))]
    assert s.get("c") == 3  # the write itself is made: its record waits
    with pytest.raises(RuntimeError, match="2 writes not sent"):
        s.commit(0)  # never applied without their records
    refuse.clear()
    s.send_unsent()  # the commit's next try
    assert log[1:] == [(b"b", _long(2)), (b"c", _long(3))]
    s.commit(2)
    assert dict(s.engine.items()) == {b"a": _long(1), b"b": _long(2), b"c": _long(3)}
    s.close()


def test_closing_a_store_drops_its_unsent_writes_with_the_buffer(tmp_path: Path) -> None:
    log: list = []
    s = _store(tmp_path, log, write_batch_size=10)
    s.put("a", 1)
    s.close()  # a failure's close: neither the changelog nor LMDB has the write; its input runs again
    assert log == []
    assert LmdbEngine(tmp_path).count() == 0


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


def test_offset_file_rename_is_made_durable_by_an_fsync_of_its_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[os.stat_result] = []
    real_fsync = os.fsync

    def recording_fsync(fd: int) -> None:
        synced.append(os.fstat(fd))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", recording_fsync)
    write_offset_file(tmp_path, "kafka.log.0", 5)
    here = tmp_path.stat()
    assert [(s.st_dev, s.st_ino) for s in synced if stat.S_ISDIR(s.st_mode)] == [(here.st_dev, here.st_ino)]
    assert synced[-1].st_ino == here.st_ino  # after the file's own fsync and the rename


# -- streaming iterators ---------------------------------------------------------------------------


def _filled(path: Path, n: int, map_size: int = 64 << 20) -> LmdbKeyValueStore:
    engine = LmdbEngine(path, map_size=map_size, sync=False)
    engine.apply([(f"k{i:05d}".encode(), i.to_bytes(8, "big")) for i in range(n)], 0)
    return LmdbKeyValueStore("s", engine, SERDES.get("string", "k"), SERDES.get("long", "v"), None)


def test_an_open_iterator_sees_the_store_as_of_its_opening_while_the_task_writes(tmp_path: Path) -> None:
    s = _filled(tmp_path, 6)
    s.put("k00002", 200)  # buffered before the iterator opens: seen
    s.delete("k00003")
    seen = []
    with s.all() as it:
        for k, v in it:
            seen.append((k, v))
            # Writes while iterating (ahead of and behind the cursor) are allowed and not seen by it.
            s.put("k00004", -4)
            s.delete("k00005")
            s.put("k00000", -1)
            s.put("k00009", 9)
    assert seen == [("k00000", 0), ("k00001", 1), ("k00002", 200), ("k00004", 4), ("k00005", 5)]
    with s.all() as it:
        assert list(it) == [("k00000", -1), ("k00001", 1), ("k00002", 200), ("k00004", -4), ("k00009", 9)]
    s.close()


def test_an_iterator_keeps_its_snapshot_across_a_spill(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(store_module, "SPILL_AT", 10)
    s = _filled(tmp_path, 20)
    s.put("k00001", 100)  # in the iterator's buffer copy; the spill then moves it into LMDB
    with s.range("k00000", "k00010") as it:
        first = next(it)
        for i in range(30):  # three spills while the iterator is open
            s.put(f"k{i:05d}", -i)
        assert s.engine.dirty()  # the spills reached LMDB
        rest = list(it)
    assert [first, *rest] == [("k00000", 0), ("k00001", 100), *((f"k{i:05d}", i) for i in range(2, 10))]
    assert s.get("k00007") == -7
    s.close()


def test_iterator_close_is_idempotent_and_use_after_close_says_so(tmp_path: Path) -> None:
    s = _filled(tmp_path, 5)
    it = s.all()
    assert next(it) == ("k00000", 0)
    it.close()
    it.close()
    with pytest.raises(ValueError, match="store 's': this iterator is closed"):
        next(it)
    assert s.engine.readers_open() == 0
    with s.range("k00003", "k00099") as it:
        assert list(it) == [("k00003", 3), ("k00004", 4)]
    assert s.engine.readers_open() == 0  # a fully read iterator releases its transaction at once
    s.close()


def test_engine_refuses_to_grow_its_map_under_an_open_reader_unless_told_to_close_it(tmp_path: Path) -> None:
    engine = LmdbEngine(tmp_path, map_size=64 * 1024)
    reader = engine.reader()
    big = [(f"k{i:05d}".encode(), b"x" * 1000) for i in range(200)]
    with pytest.raises(MapFullWhileReadingError):
        engine.apply(big, None)
    assert engine.count() == 0  # nothing of the batch was written
    engine.apply(big, 1, invalidate_readers=True)
    assert engine.count() == 200
    assert not reader.open
    with pytest.raises(ValueError, match="had to grow"):
        list(reader.entries(None, None))
    engine.close()


def test_a_spill_that_needs_a_bigger_map_waits_for_open_iterators(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store_module, "SPILL_AT", 50)
    s = _filled(tmp_path, 10, map_size=64 * 1024)
    blob = "x" * 2000
    strings = LmdbKeyValueStore("t", s.engine, SERDES.get("string", "k"), SERDES.get("string", "v"), None)
    with strings.all() as it:
        assert next(it)[0] == "k00000"
        for i in range(200):  # ~400 KB into a 64 KiB map: the spill must wait
            strings.put(f"b{i:05d}", blob)
        assert len(list(it)) == 9  # still its snapshot, still readable
    assert s.engine.count() == 10  # nothing spilled while the iterator was open
    strings.put("b99999", blob)  # the next write spills (and grows the map)
    assert s.engine.count() == 211
    assert strings.get("b00123") == blob
    s.close()


def test_a_commit_that_must_grow_the_map_closes_iterators_left_open(tmp_path: Path) -> None:
    s = _filled(tmp_path, 10, map_size=64 * 1024)
    leaked = s.all()
    assert next(leaked) == ("k00000", 0)
    for i in range(200):
        s.put(f"z{i:05d}", i)
    s.put_all([(f"y{i:05d}-{'p' * 500}", i) for i in range(200)])
    s.commit(3)
    assert s.engine.count() == 410
    with pytest.raises(ValueError, match="had to grow .* at a commit while it was open"):
        next(leaked)
    s.close()


def _memory() -> tuple[int, int]:
    """(RSS, anonymous resident memory) of this process in bytes; the second is 0 where unknown."""
    anon = 0
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("RssAnon:"):
                    anon = int(line.split()[1]) * 1024
    except OSError:
        pass
    return psutil.Process().memory_info().rss, anon


def test_all_over_two_million_keys_streams_in_bounded_memory(tmp_path: Path) -> None:
    n = 2_000_000
    engine = LmdbEngine(tmp_path, sync=False)
    for b in range(0, n, 200_000):
        engine.apply([(i.to_bytes(4, "big"), i.to_bytes(4, "big")) for i in range(b, b + 200_000)], 0)
    s = LmdbKeyValueStore("big", engine, SERDES.get("integer", "k"), SERDES.get("integer", "v"), None)
    s.put(n, n)  # one buffered entry, merged at the end
    gc.collect()
    rss0, anon0 = _memory()
    peak_rss, peak_anon = rss0, anon0
    count = 0
    total = 0
    last = None
    with s.all() as it:
        for k, v in it:
            last = k
            count += 1
            total += v
            if not count & 0x3FFFF:  # sample every 262144 entries
                rss, anon = _memory()
                peak_rss, peak_anon = max(peak_rss, rss), max(peak_anon, anon)
        rss, anon = _memory()
        peak_rss, peak_anon = max(peak_rss, rss), max(peak_anon, anon)
    assert (count, total, last) == (n + 1, n * (n + 1) // 2, n)
    # RSS includes the data file's pages as they are mapped in (~35 MB here: page cache, not heap);
    # anonymous memory is what the iteration itself allocates.
    assert peak_rss - rss0 < 50 << 20, f"RSS grew by {(peak_rss - rss0) >> 20} MB"
    if anon0:
        assert peak_anon - anon0 < 10 << 20, f"anonymous memory grew by {(peak_anon - anon0) >> 20} MB"
    s.close()
