"""The raw LMDB engine under a store: bytes keys to bytes values, plus the changelog offset the data is at.

The only module that imports ``lmdb``. One LMDB environment per task and store, in the store
directory, with two databases: ``data`` (the store's entries, in key-byte order) and ``meta``
(``changelog-offset``: the newest changelog offset the data contains, ASCII; ``dirty``: present
while the data holds writes that no commit covers yet).

Writes arrive in batches (``apply``), each one LMDB transaction: the data and the meta keys change
together or not at all, so after a crash the environment is exactly some committed batch. A full
map grows (doubles) instead of failing.

Readers (``reader()``) hold one read transaction each: a snapshot of the data as it was when the
reader opened, whatever is written after (LMDB's MVCC; a write transaction may run beside them in
this thread). While open, a reader keeps the pages of its snapshot from being reused, so readers
must be closed. LMDB can only grow its map with no transaction open in the process: a batch that
finds the map full while readers are open either fails with ``MapFullWhileReadingError`` (the
caller may retry after closing them) or, with ``invalidate_readers``, closes them first (their next
use says why) and grows.
"""

from __future__ import annotations

import shutil
import weakref
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import cast

import lmdb

__all__ = ["DEFAULT_MAP_SIZE", "LmdbEngine", "LmdbReader", "MapFullWhileReadingError", "ReaderClosedError"]

DEFAULT_MAP_SIZE = 64 << 20
_OFFSET = b"changelog-offset"
_DIRTY = b"dirty"


class MapFullWhileReadingError(Exception):
    """A batch needs a bigger map, and readers are open (LMDB cannot grow under them); nothing was written."""


class ReaderClosedError(ValueError):
    """A reader was used after it was closed (the message says by whom)."""


class LmdbReader:
    """A snapshot of the data: one LMDB read transaction, opened by ``LmdbEngine.reader``.

    Used from the thread that opened it. ``close`` is idempotent; the engine closes it too before it
    grows the map under it (``apply(..., invalidate_readers=True)``), and then says so on next use.
    """

    __slots__ = ("__weakref__", "_closed_why", "_on_close", "_txn")

    def __init__(self, txn: lmdb.Transaction, on_close: Callable[[LmdbReader], None]) -> None:
        self._on_close = on_close
        self._txn: lmdb.Transaction | None = txn
        self._closed_why = "it was closed"

    @property
    def open(self) -> bool:
        return self._txn is not None

    def why_closed(self) -> str:
        return self._closed_why

    def entries(self, start: bytes | None, stop: bytes | None) -> Iterator[tuple[bytes, bytes]]:
        """Entries with ``start <= key < stop`` (None: unbounded), in key order, one at a time.

        The caller must not resume it once the reader is closed (``open`` says): the cursor is gone.
        """
        if self._txn is None:
            raise ReaderClosedError(self._closed_why)
        cursor = self._txn.cursor()
        positioned = cursor.set_range(start) if start is not None else cursor.first()
        if not positioned:
            return
        # buffers=False (see ``reader``): keys and values are bytes.
        pairs = cast("Iterator[tuple[bytes, bytes]]", cursor.iternext(keys=True, values=True))
        if stop is None:
            yield from pairs
            return
        for key, value in pairs:
            if key >= stop:
                return
            yield key, value

    def close(self, why: str | None = None) -> None:
        txn, self._txn = self._txn, None
        if txn is None:
            return
        if why is not None:
            self._closed_why = why
        self._on_close(self)
        txn.abort()


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
        # Open readers (a forgotten one is aborted by the garbage collector, and leaves this set).
        self._readers: weakref.WeakSet[LmdbReader] = weakref.WeakSet()

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

    def reader(self) -> LmdbReader:
        """A snapshot of the data as of now; close it when done."""
        r = LmdbReader(self._env.begin(db=self._data, buffers=False), self._readers.discard)
        self._readers.add(r)
        return r

    def readers_open(self) -> int:
        return len(self._readers)

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
    def apply(
        self,
        writes: Iterable[tuple[bytes, bytes | None]],
        changelog_offset: int | None,
        *,
        invalidate_readers: bool = False,
    ) -> None:
        """Write a batch in one transaction (None value: delete). ``changelog_offset`` None marks the
        data dirty (it holds writes no commit covers); an int records it as the data's offset.

        A full map grows. With readers open it raises ``MapFullWhileReadingError`` (nothing written),
        unless ``invalidate_readers``: then it closes them first."""
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
                self._grow(invalidate_readers)

    def _grow(self, invalidate_readers: bool) -> None:
        size = int(self._env.info()["map_size"]) * 2
        readers = list(self._readers)
        if readers and not invalidate_readers:
            raise MapFullWhileReadingError(
                f"LMDB map of {self.path} is full ({size // 2} bytes) and {len(readers)} reader(s) are open"
            )
        for r in readers:
            r.close(
                f"it was closed because the store's LMDB map ({self.path}) had to grow to {size} bytes at a "
                "commit while it was open (LMDB cannot grow under an open read transaction); close iterators "
                "(use `with`) before process() or window() returns"
            )
        self._env.set_mapsize(size)

    def sync(self) -> None:
        self._env.sync(True)

    def close(self) -> None:
        for r in list(self._readers):
            r.close("it was closed because its store was closed")
        self._env.close()

    @staticmethod
    def wipe(path: Path) -> None:
        """Delete a store directory (before a full restore)."""
        shutil.rmtree(path, ignore_errors=True)
