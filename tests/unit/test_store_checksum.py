"""Every value of a store carries a CRC32C on disk, checked on each read: a value whose bytes changed
is never served, the store is marked damaged and its next start starts over; existing stores are
converted between format 1 (plain values) and 2 (checksummed)."""

from __future__ import annotations

import errno
import logging
import os
import random
from pathlib import Path

import lmdb
import pytest

from samzamp import _checksum
from samzamp.api.errors import StoreError
from samzamp.api.serde import Serde
from samzamp.config import Config, validate
from samzamp.config.settings import JobSettings
from samzamp.serde.registry import SerdeRegistry
from samzamp.storage.checksum import (
    CHECKSUMMED,
    PLAIN,
    crc32c,
    crc32c_reference,
    seal,
    seal_reference,
    unseal,
    verify_lmdb,
)
from samzamp.storage.lmdb import (
    DAMAGED_FILE,
    DATA_FILE,
    RESTORING_FILE,
    LmdbEngine,
    LmdbSnapshot,
    check_env,
    remove_env,
)
from samzamp.storage.manager import TaskStorage
from samzamp.storage.store import LmdbKeyValueStore

# -- the checksum --------------------------------------------------------------------------------


def test_crc32c_is_castagnolis_and_the_native_code_matches_the_reference() -> None:
    assert crc32c(b"123456789") == crc32c_reference(b"123456789") == 0xE3069283  # the standard check value
    rng = random.Random(7)
    data = bytes(rng.getrandbits(8) for _ in range(300))
    for start in range(9):  # every alignment of the 8-byte steps
        for n in (0, 1, 3, 7, 8, 9, 15, 16, 17, 64, 100, 291 - start):
            chunk = data[start : start + n]
            assert crc32c(memoryview(data)[start : start + n]) == crc32c_reference(chunk), (start, n)
    assert crc32c(data[100:], crc32c(data[:100])) == crc32c(data)  # it continues, as zlib.crc32 does


def test_a_sealed_value_opens_only_under_its_key_and_with_its_bytes() -> None:
    for key, value in [(b"k", b"value"), (b"", b""), (b"key" * 40, bytes(range(256)) * 3)]:
        sealed = seal(key, value)
        assert sealed == seal_reference(key, value)
        assert unseal(key, sealed) == value
        assert unseal(key, memoryview(sealed)) == value
        assert unseal(key + b"x", sealed) is None  # under another key
        for i in range(len(sealed)):
            flipped = bytearray(sealed)
            flipped[i] ^= 0x10
            assert unseal(key, bytes(flipped)) is None, i  # any one byte changed
    assert unseal(b"k", b"abc") is None  # shorter than a checksum


def test_the_stub_names_what_the_module_has() -> None:
    stub = (Path(_checksum.__file__).parent / "_checksum.pyi").read_text()
    names = {n for n in dir(_checksum) if not n.startswith("_")}
    declared = {line.split("(")[0][4:] for line in stub.splitlines() if line.startswith("def ")}
    assert names == declared


# -- the engine ----------------------------------------------------------------------------------


def _raw(path: Path) -> dict[bytes, bytes]:
    """The store's data and meta as LMDB holds them (no engine in between)."""
    env = lmdb.open(str(path), readonly=True, lock=False, max_dbs=2)
    try:
        out: dict[bytes, bytes] = {}
        for name in (b"data", b"meta"):
            db = env.open_db(name, create=False)
            with env.begin(db=db) as txn:
                out.update((name + b":" + bytes(k), bytes(v)) for k, v in txn.cursor())
        return out
    finally:
        env.close()


def _flip_value(path: Path, value: bytes) -> int:
    """Change one byte of ``value`` wherever data.mdb holds it (as a bad sector would); how many."""
    data = (path / DATA_FILE).read_bytes()
    n, at = 0, data.find(value)
    fd = os.open(path / DATA_FILE, os.O_RDWR)
    try:
        while at >= 0:
            os.pwrite(fd, bytes([data[at + len(value) // 2] ^ 0x01]), at + len(value) // 2)
            n += 1
            at = data.find(value, at + 1)
    finally:
        os.close(fd)
    return n


def test_values_are_sealed_on_disk_in_format_2(tmp_path: Path) -> None:
    engine = LmdbEngine(tmp_path)
    engine.apply([(b"a", b"apple"), (b"b", b"banana")], 5)
    engine.close()
    raw = _raw(tmp_path)
    assert raw[b"data:a"] == seal(b"a", b"apple")
    assert raw[b"meta:format"] == b"2"
    engine = LmdbEngine(tmp_path)
    assert engine.format == CHECKSUMMED
    assert engine.get(b"a") == b"apple"
    assert list(engine.items()) == [(b"a", b"apple"), (b"b", b"banana")]
    assert engine.verify() is None
    engine.close()


def test_a_value_changed_while_closed_fails_verify_and_marks_the_store(tmp_path: Path) -> None:
    engine = LmdbEngine(tmp_path)
    engine.apply([(f"k{i:04d}".encode(), f"value-{i:04d}-{'x' * 30}".encode()) for i in range(2000)], 1)
    engine.close()
    assert _flip_value(tmp_path, b"value-1234-") >= 1
    assert check_env(tmp_path) is None  # LMDB's own structure is sound: only the checksum tells

    engine = LmdbEngine(tmp_path)
    problem = engine.verify()
    engine.close()
    assert problem is not None
    assert f"the value of key b'k1234' in {tmp_path / DATA_FILE} fails its checksum" in problem
    mark = check_env(tmp_path)
    assert mark is not None
    assert mark.startswith("it was marked damaged: the value of key b'k1234'"), mark
    assert (tmp_path / DAMAGED_FILE).exists()


def test_a_value_changed_under_a_running_engine_is_never_returned(tmp_path: Path) -> None:
    engine = LmdbEngine(tmp_path)
    engine.apply([(b"good", b"good-value-0000000"), (b"hit", b"target-value-0000000")], 1)
    assert _flip_value(tmp_path, b"target-value") >= 1  # LMDB reads through its map: it sees the change
    assert engine.get(b"good") == b"good-value-0000000"
    with pytest.raises(StoreError, match=r"the value of key b'hit' in .*data.mdb fails its checksum"):
        engine.get(b"hit")
    with pytest.raises(StoreError, match="fails its checksum"):
        list(engine.items())
    r = engine.reader()
    entries = r.entries(None, None)
    assert next(entries) == (b"good", b"good-value-0000000")
    with pytest.raises(StoreError, match="fails its checksum"):
        next(entries)
    r.close()
    engine.close()
    assert check_env(tmp_path) is not None


class _Changelog:
    def __init__(self) -> None:
        self.sent: list[tuple[bytes, bytes | None]] = []

    def __call__(self, key: bytes, value: bytes | None) -> None:
        self.sent.append((key, value))


def test_a_store_fails_the_read_names_itself_once_and_refuses_writes_and_commits(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    serdes = SerdeRegistry({})
    string: Serde = serdes.get("string", "k")
    changelog = _Changelog()
    store = LmdbKeyValueStore("counts", LmdbEngine(tmp_path), string, string, changelog, "Partition 2")
    store.put("a", "alpha-alpha-alpha")
    store.put("b", "bravo-bravo-bravo")
    store.commit(1)
    assert _flip_value(tmp_path, b"bravo-bravo") >= 1
    sent = len(changelog.sent)
    with caplog.at_level(logging.WARNING, logger="samzamp.storage.store"):
        assert store.get("a") == "alpha-alpha-alpha"
        with pytest.raises(StoreError) as e:
            store.get("b")
        assert str(e.value).startswith(f"store 'counts' of task 'Partition 2' in {tmp_path}: the value of key b'b'")
        with pytest.raises(StoreError, match="fails its checksum"), store.all() as it:
            list(it)
        with pytest.raises(StoreError, match="fails its checksum"):
            store.put("c", "charlie")  # a task that caught the error cannot write on
        with pytest.raises(StoreError, match="fails its checksum"):
            store.delete("a")
        with pytest.raises(StoreError, match="fails its checksum"):
            store.commit(2)
    assert len(changelog.sent) == sent  # nothing reached the changelog after the damage
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings
    assert "store 'counts' of task 'Partition 2'" in warnings[0]
    assert "b'b'" in warnings[0]
    assert "data.mdb" in warnings[0]
    store.close()


# -- formats --------------------------------------------------------------------------------------


def _plain_store(path: Path, entries: list[tuple[bytes, bytes]]) -> None:
    """A store as samzamp wrote it before checksums: no format key, plain values."""
    path.mkdir(parents=True, exist_ok=True)
    env = lmdb.open(str(path), max_dbs=2)
    data, meta = env.open_db(b"data"), env.open_db(b"meta")
    with env.begin(write=True) as txn:
        for k, v in entries:
            txn.put(k, v, db=data)
        txn.put(b"changelog-offset", b"41", db=meta)
    env.close()


def test_a_store_of_format_1_is_converted_in_place_and_back(tmp_path: Path) -> None:
    entries = [(f"k{i:05d}".encode(), f"v{i}".encode()) for i in range(25_000)]  # several batches
    _plain_store(tmp_path, entries)
    engine = LmdbEngine(tmp_path)
    assert engine.format == CHECKSUMMED
    assert list(engine.items()) == entries
    assert engine.changelog_offset() == 41
    engine.close()
    raw = _raw(tmp_path)
    assert raw[b"meta:format"] == b"2"
    assert raw[b"data:k00007"] == seal(b"k00007", b"v7")

    engine = LmdbEngine(tmp_path, checksums=False)
    assert engine.format == PLAIN
    assert list(engine.items()) == entries
    engine.apply([(b"new", b"plain")], 42)
    engine.close()
    raw = _raw(tmp_path)
    assert raw[b"meta:format"] == b"1"
    assert raw[b"data:k00007"] == b"v7"
    assert raw[b"data:new"] == b"plain"


def test_a_conversion_cut_short_is_refused_and_a_newer_format_is_not_touched(tmp_path: Path) -> None:
    for marker, refused in ((b"converting", True), (b"3", False)):
        path = tmp_path / marker.decode()
        _plain_store(path, [(b"k", b"v")])
        env = lmdb.open(str(path), max_dbs=2)
        with env.begin(write=True) as txn:
            txn.put(b"format", marker, db=env.open_db(b"meta", txn=txn))
        env.close()
        problem = check_env(path)
        if refused:
            assert problem is not None
            assert "conversion of its store format" in problem
            assert "cut short" in problem
        else:
            assert problem is None  # a later samzamp's store: never removed, only refused
        with pytest.raises(StoreError, match="cut short" if refused else "its store format is '3'"):
            LmdbEngine(path)
        assert _raw(path)[b"data:k"] == b"v"


# -- a task's storage ------------------------------------------------------------------------------


def _settings(tmp_path: Path, checksums: bool = True) -> JobSettings:
    return validate(
        Config(
            {
                "job.name": "checksums",
                "task.class": "samzamp.examples.word_count:WordCountTask",
                "task.inputs": ["kafka.lines"],
                "systems.kafka.samza.factory": "kafka",
                "job.non-logged.store.base.dir": str(tmp_path / "state"),
                "stores.scratch.factory": "lmdb",
                "stores.scratch.key.serde": "string",
                "stores.scratch.msg.serde": "string",
                "stores.scratch.lmdb.checksums": checksums,
            }
        )
    )


def test_a_task_storage_verifies_a_kept_store_and_starts_over_from_a_damaged_one(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings = _settings(tmp_path)
    storage = TaskStorage("Partition 1", settings, 1, {}, {})
    storage.open({})
    storage.stores["scratch"].put("kept", "a-value-to-damage")
    storage.commit()
    storage.close()
    path = tmp_path / "state" / "scratch" / "Partition_1"
    assert _flip_value(path, b"a-value-to-damage") >= 1

    with caplog.at_level(logging.WARNING):
        storage = TaskStorage("Partition 1", settings, 1, {}, {})
        storage.open({})
    try:
        assert storage.stores["scratch"].get("kept") is None  # a non-logged store starts empty
    finally:
        storage.close()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings
    assert warnings[0].startswith(f"store 'scratch' of task 'Partition 1': the LMDB files in {path} cannot be used")
    assert f"the value of key b'kept' in {path / DATA_FILE} fails its checksum" in warnings[0]
    assert not (path / DAMAGED_FILE).exists()


def test_the_checksums_key_picks_the_format_of_a_task_storage(tmp_path: Path) -> None:
    """Off, on, off again: the store is converted each time, its value kept."""
    runs = ((False, b"1", b"v"), (True, b"2", seal(b"k", b"v")), (False, b"1", b"v"))
    for run, (checksums, fmt, stored) in enumerate(runs):
        storage = TaskStorage("Partition 0", _settings(tmp_path, checksums), 0, {}, {})
        storage.open({})
        if run == 0:
            storage.stores["scratch"].put("k", "v")
        assert storage.stores["scratch"].get("k") == "v"
        storage.commit()
        storage.close()
        raw = _raw(tmp_path / "state" / "scratch" / "Partition_0")
        assert raw[b"meta:format"] == fmt
        assert raw[b"data:k"] == stored


# -- verify over the raw pages ---------------------------------------------------------------------


def _lmdb_scan(path: Path) -> tuple[int, bytes | None]:
    """What a scan through LMDB itself finds: (entries, the first key whose value fails)."""
    env = lmdb.open(str(path), readonly=True, lock=False, max_dbs=2)
    try:
        db = env.open_db(b"data", create=False)
        n, failed = 0, None
        with env.begin(db=db, buffers=True) as txn:
            for k, v in txn.cursor().iternext(keys=True, values=True):
                n += 1
                if failed is None and unseal(k, v) is None:
                    failed = bytes(k)
        return n, failed
    finally:
        env.close()


def _walk(path: Path) -> tuple[int, bytes | None]:
    return verify_lmdb((path / DATA_FILE).read_bytes(), b"data")


def test_the_page_walk_checks_every_value_lmdb_holds_and_names_the_first_that_fails(tmp_path: Path) -> None:
    """Values on their leaf page and on overflow pages, a tree of several levels, deletes: the walk
    counts what LMDB counts, and names the key that LMDB's own scan finds first."""
    rng = random.Random(5)
    engine = LmdbEngine(tmp_path)
    for batch in range(6):
        writes: list[tuple[bytes, bytes | None]] = []
        for _ in range(2000):
            key = f"k{rng.randrange(20_000)}".encode() * rng.choice((1, 1, 4))
            value = os.urandom(rng.choice((0, 3, 30, 200, 3000, 9000))) if rng.random() < 0.97 else None
            writes.append((key, value))
        engine.apply(writes, batch)
    entries = engine.count()
    engine.close()
    assert _walk(tmp_path) == _lmdb_scan(tmp_path) == (entries, None)
    data = (tmp_path / DATA_FILE).read_bytes()
    env = lmdb.open(str(tmp_path), readonly=True, lock=False, max_dbs=2)
    with env.begin(db=env.open_db(b"data", create=False)) as txn:
        stored = [(bytes(k), bytes(v)) for k, v in txn.cursor()]
    env.close()
    flipped = 0
    for key, value in rng.sample(stored, 30):
        at = data.find(value)
        if len(value) < 12 or at < 0 or data.find(value, at + 1) >= 0:
            continue  # a value too short to find alone, or found twice
        damaged = bytearray(data)
        damaged[at + len(value) - 1] ^= 0x01
        (tmp_path / DATA_FILE).write_bytes(damaged)
        assert _walk(tmp_path)[1] == _lmdb_scan(tmp_path)[1] == key  # the walk stops at it
        flipped += 1
    assert flipped >= 10
    (tmp_path / DATA_FILE).write_bytes(data)
    assert _walk(tmp_path) == (entries, None)


def test_the_page_walk_never_crashes_on_damaged_pages_and_verify_still_decides(tmp_path: Path) -> None:
    """Bytes changed anywhere (headers, node offsets, page numbers): the walk answers or raises
    ValueError, never reads outside the file; ``verify`` then scans through LMDB."""
    engine = LmdbEngine(tmp_path)
    engine.apply([(f"k{i:06d}".encode(), f"v{i}".encode() * (1 + i % 700)) for i in range(3000)], 1)
    engine.close()
    data = (tmp_path / DATA_FILE).read_bytes()
    rng = random.Random(11)
    for _ in range(300):
        damaged = bytearray(data)
        for _ in range(rng.choice((1, 4, 40))):
            damaged[rng.randrange(len(damaged))] ^= rng.randrange(1, 256)
        try:
            _ = verify_lmdb(damaged, b"data")
        except ValueError:
            pass
    with pytest.raises(ValueError, match="cannot walk the LMDB file: no database of that name"):
        verify_lmdb(data, b"nothing")
    with pytest.raises(ValueError, match="no LMDB meta page"):
        verify_lmdb(b"\0" * 100, b"data")


def test_verify_falls_back_to_lmdb_where_the_walk_cannot_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    engine = LmdbEngine(tmp_path)
    engine.apply([(f"k{i:04d}".encode(), f"value-{i:04d}-{'x' * 30}".encode()) for i in range(2000)], 1)
    engine.close()
    assert _flip_value(tmp_path, b"value-0777-") >= 1

    def unreadable(data: object, name: bytes) -> tuple[int, bytes | None]:
        raise ValueError("cannot walk the LMDB file: as a test says")

    monkeypatch.setattr("samzamp.storage.lmdb.verify_lmdb", unreadable)
    engine = LmdbEngine(tmp_path)
    problem = engine.verify()
    engine.close()
    assert problem is not None
    assert "the value of key b'k0777'" in problem

    def wrong(data: object, name: bytes) -> tuple[int, bytes | None]:
        return 2000, b"k0001"  # a key whose value holds: LMDB is asked, and scans

    (tmp_path / DAMAGED_FILE).unlink()
    monkeypatch.setattr("samzamp.storage.lmdb.verify_lmdb", wrong)
    engine = LmdbEngine(tmp_path)
    problem = engine.verify()
    engine.close()
    assert problem is not None
    assert "the value of key b'k0777'" in problem


# -- a restore's one sync ----------------------------------------------------------------------------


def test_a_restore_cut_short_leaves_a_mark_that_check_env_refuses_before_mapping(tmp_path: Path) -> None:
    engine = LmdbEngine(tmp_path)
    engine.apply([(b"before", b"x")], 3)
    engine.start_restore()
    assert (tmp_path / RESTORING_FILE).exists()
    engine.apply([(f"k{i}".encode(), b"v") for i in range(1000)], None)
    assert engine.get(b"k999") == b"v"
    engine.close()  # cut short: no finish_restore
    problem = check_env(tmp_path)
    assert problem is not None
    assert "a restore from its changelog did not finish" in problem
    with pytest.raises(StoreError, match="a restore from its changelog did not finish"):
        LmdbSnapshot(tmp_path)
    remove_env(tmp_path)
    assert not (tmp_path / RESTORING_FILE).exists()


def test_a_restore_finished_syncs_once_and_commits_sync_again(tmp_path: Path) -> None:
    engine = LmdbEngine(tmp_path, map_size=1 << 20)
    engine.start_restore()
    assert not engine._env.flags()["sync"]
    for batch in range(5):  # the map grows under it, ahead of the batches
        engine.apply([(f"k{batch}-{i}".encode(), b"v" * 100) for i in range(5000)], None)
    engine.apply([], 41)
    engine.finish_restore()
    assert engine._env.flags()["sync"]
    assert not (tmp_path / RESTORING_FILE).exists()
    assert engine.changelog_offset() == 41
    assert engine.count() == 25_000
    engine.close()
    assert check_env(tmp_path) is None
    engine = LmdbEngine(tmp_path)
    assert engine.get(b"k4-4999") == b"v" * 100
    assert engine.verify() is None
    engine.close()


def test_a_restore_writes_through_an_allocated_map_and_trims_the_file_after(tmp_path: Path) -> None:
    engine = LmdbEngine(tmp_path, map_size=1 << 20)
    engine.start_restore()
    assert engine._env.flags()["writemap"]
    engine.apply([(f"k{i:05d}".encode(), b"v" * 50) for i in range(20_000)], None)
    size = int(engine._env.info()["map_size"])
    data = os.stat(tmp_path / DATA_FILE)
    assert data.st_size == size
    assert data.st_blocks * 512 >= size
    engine.apply([], 7)
    engine.finish_restore()
    assert not engine._env.flags()["writemap"]
    used = (int(engine._env.info()["last_pgno"]) + 1) * int(engine._env.stat()["psize"])
    assert os.stat(tmp_path / DATA_FILE).st_size == used < size
    engine.apply([(b"after", b"a commit after the restore")], 8)
    engine.close()
    assert check_env(tmp_path) is None
    engine = LmdbEngine(tmp_path)
    assert engine.count() == 20_001
    assert engine.changelog_offset() == 8
    assert engine.verify() is None
    engine.close()


def test_a_filesystem_that_cannot_allocate_ahead_restores_without_writemap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def unsupported(fd: int, offset: int, length: int) -> None:
        raise OSError(errno.EOPNOTSUPP, "Operation not supported")

    engine = LmdbEngine(tmp_path, map_size=1 << 20)
    monkeypatch.setattr(os, "posix_fallocate", unsupported)  # lock.mdb's own allocation went before
    engine.start_restore()
    assert not engine._env.flags()["writemap"]
    assert not engine._env.flags()["sync"]
    engine.apply([(f"k{i:05d}".encode(), b"v" * 50) for i in range(20_000)], 3)
    engine.finish_restore()
    assert engine.count() == 20_000
    engine.close()

    def full(fd: int, offset: int, length: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.undo()
    engine = LmdbEngine(tmp_path / "full", map_size=1 << 20)
    monkeypatch.setattr(os, "posix_fallocate", full)
    with pytest.raises(StoreError, match="no space left"):
        engine.start_restore()
    assert not engine._env.flags()["writemap"]
    engine.close()
    assert check_env(tmp_path / "full") is not None  # the mark stays: the next start restores in full
