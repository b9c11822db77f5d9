"""The raw LMDB engine under a store: bytes keys to bytes values, plus the changelog offset the data is at.

The only module that imports ``lmdb``. One LMDB environment per task and store, in the store
directory, with two databases: ``data`` (the store's entries, in key-byte order) and ``meta``
(``changelog-offset``: the newest changelog offset the data contains, ASCII; ``dirty``: present
while the data holds writes that no commit covers yet).

Writes arrive in batches (``apply``), each one LMDB transaction: the data and the meta keys change
together or not at all, so after a crash the environment is exactly some committed batch. A full
map grows (doubles) instead of failing.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterable, Iterator
from pathlib import Path

import lmdb

__all__ = ["DEFAULT_MAP_SIZE", "LmdbEngine"]

DEFAULT_MAP_SIZE = 64 << 20
_OFFSET = b"changelog-offset"
_DIRTY = b"dirty"


class LmdbEngine:
    """One store's LMDB environment. Used by one thread of one process (the one running the task)."""

    def __init__(self, path: Path, map_size: int = DEFAULT_MAP_SIZE, sync: bool = True) -> None:
        path.mkdir(parents=True, exist_ok=True)
        self.path = path
        # One process uses the environment: no locking between processes needed (lock=False would
        # be faster, but a second container on the same directory must fail, not corrupt it).
        self._env = lmdb.open(str(path), map_size=map_size, max_dbs=2, sync=sync, metasync=sync, writemap=False)
        self._data = self._env.open_db(b"data")
        self._meta = self._env.open_db(b"meta")

    # -- reads ----------------------------------------------------------------------------------
    def get(self, key: bytes) -> bytes | None:
        with self._env.begin(db=self._data, buffers=False) as txn:
            value = txn.get(key)
        return None if value is None else bytes(value)

    def items(self, start: bytes | None = None, stop: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        """Entries with ``start <= key < stop`` (None: unbounded), in key order. Reads one snapshot."""
        with self._env.begin(db=self._data) as txn:
            cursor = txn.cursor()
            positioned = cursor.set_range(start) if start is not None else cursor.first()
            if not positioned:
                return
            for key, value in cursor:
                if stop is not None and key >= stop:
                    return
                yield bytes(key), bytes(value)

    def count(self) -> int:
        with self._env.begin(db=self._data) as txn:
            return int(txn.stat(self._data)["entries"])

    def changelog_offset(self) -> int | None:
        """The newest changelog offset the data contains (None: never committed, or dirty)."""
        with self._env.begin(db=self._meta) as txn:
            if txn.get(_DIRTY) is not None:
                return None
            raw = txn.get(_OFFSET)
        return None if raw is None else int(bytes(raw))

    def dirty(self) -> bool:
        with self._env.begin(db=self._meta) as txn:
            return txn.get(_DIRTY) is not None

    # -- writes ---------------------------------------------------------------------------------
    def apply(self, writes: Iterable[tuple[bytes, bytes | None]], changelog_offset: int | None) -> None:
        """Write a batch in one transaction (None value: delete). ``changelog_offset`` None marks the
        data dirty (it holds writes no commit covers); an int records it as the data's offset."""
        batch = list(writes)
        while True:
            try:
                with self._env.begin(write=True) as txn:
                    for key, value in batch:
                        if value is None:
                            txn.delete(key, db=self._data)
                        else:
                            txn.put(key, value, db=self._data)
                    if changelog_offset is None:
                        txn.put(_DIRTY, b"1", db=self._meta)
                    else:
                        txn.delete(_DIRTY, db=self._meta)
                        txn.put(_OFFSET, str(changelog_offset).encode(), db=self._meta)
                return
            except lmdb.MapFullError:
                self._grow()

    def _grow(self) -> None:
        size = int(self._env.info()["map_size"]) * 2
        self._env.set_mapsize(size)

    def sync(self) -> None:
        self._env.sync(True)

    def close(self) -> None:
        self._env.close()

    @staticmethod
    def wipe(path: Path) -> None:
        """Delete a store directory (before a full restore)."""
        shutil.rmtree(path, ignore_errors=True)
