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

Existing files are checked before LMDB maps them (``check_env``): LMDB trusts its meta pages and
maps the file, so a ``data.mdb`` shorter than the pages its newest meta page counts (a truncated
copy, a torn restore) kills the process with SIGBUS at the first read of a missing page. The check
reads both meta pages with plain file reads (LMDB's ``mdb_env_read_header``: page 0 gives the page
size, the meta page with the higher txnid is current) and refuses a bad magic, version or page size,
and a file shorter than ``(last page + 1) * page size``; then it opens the environment read-only and
reads its meta data, so that any error LMDB reports about the files is found there too. Pages past
the meta page's last page are never read (LMDB refuses page numbers past it), so a file that passes
cannot be read past its end. LMDB keeps no checksums of its pages.

Values carry their own (``storage.checksum``): in a store of format 2 each value is sealed with the
CRC32C of its key and bytes, checked on every read, iteration and ``verify``. A value that fails it
is never returned: the engine writes a ``DAMAGED`` file into the directory saying which key failed
(``check_env`` then refuses the directory, so the next start removes it and restores the store from
its changelog) and raises ``StoreError``. The format is the ``format`` key of the ``meta`` database
(absent: format 1, plain values, which a store written before checksums has). Opening a store in the
other format than asked converts it in place, in batches, with ``format`` set to ``converting`` until
the last one commits: a conversion cut short leaves a directory ``check_env`` refuses.

Tools read a store through ``LmdbSnapshot``: read-only, never created, never converted, and a value
that fails its checksum is reported as such (no ``DAMAGED`` file is written: the tool changes
nothing; the task finds the value again at its next start, when it verifies its store).

Writes go through ``pwrite`` (``writemap=False``): a full disk or an I/O error at a commit fails the
transaction (LMDB reports a short write as EIO), which raises a ``StoreError``
(``storage.io_errors``) and leaves the environment at its last commit. With ``writemap`` LMDB would
write through the map into a file it grows sparse, and a full filesystem would deliver SIGBUS
instead of an error. A restore (``start_restore`` to ``finish_restore``) is the exception: it
writes through the map, unsynced, with every block of ``data.mdb`` up to the map's size allocated
first (``posix_fallocate``: no room is an error there), under a ``RESTORING`` mark that makes a
restore cut short a full restore at the next start; the file is cut back to its used pages after.
The one file LMDB writes through a map otherwise is ``lock.mdb`` (its reader table), which it
extends with ``ftruncate``, so sparse: its blocks are allocated before LMDB opens it
(``posix_fallocate``), so that a full filesystem is an error at open, not a SIGBUS.
"""

from __future__ import annotations

import errno
import logging
import mmap
import os
import shutil
import stat
import struct
import weakref
from collections.abc import Callable, Iterable, Iterator
from functools import partial
from pathlib import Path
from typing import NamedTuple, cast

import lmdb

from samzamp.api.errors import StoreError
from samzamp.storage.checksum import CHECKSUMMED, FORMATS, PLAIN, seal, unseal, verify_lmdb
from samzamp.storage.io_errors import store_files, store_io_error
from samzamp.storage.offset_file import fsync_dir

__all__ = [
    "DAMAGED_FILE",
    "DATA_FILE",
    "DEFAULT_MAP_SIZE",
    "LMDB_LOCK_FILE",
    "RESTORING_FILE",
    "LmdbEngine",
    "LmdbReader",
    "LmdbSnapshot",
    "MapFullWhileReadingError",
    "ReaderClosedError",
    "StoredEntry",
    "check_env",
    "remove_env",
]

log = logging.getLogger(__name__)

DEFAULT_MAP_SIZE = 64 << 20
DATA_FILE = "data.mdb"
LMDB_LOCK_FILE = "lock.mdb"
DAMAGED_FILE = "DAMAGED"
RESTORING_FILE = "RESTORING"
_OFFSET = b"changelog-offset"
_DIRTY = b"dirty"
_FORMAT = b"format"
_CONVERTING = b"converting"
_CONVERT_BATCH = 10_000
_CONVERTING_WHAT = "converting its store format"
_CUT_SHORT = "a conversion of its store format (stores.<name>.lmdb.checksums) was cut short"
_RESTORE_CUT_SHORT = "a restore from its changelog did not finish (its writes were not synced to disk)"
_RESTORE_ADVICE = (
    "nothing to do: the task's next start removes the store's files and restores it in full from its "
    "changelog (a store without a changelog starts empty)"
)

# LMDB's meta page (mdb.c, 64-bit; LMDB writes it in the host's byte order): a page
# header (MDB_page: pgno 8, pad 2, flags 2, lower/upper 4) then MDB_meta: magic 4, version 4,
# address 8, mapsize 8, two MDB_db of 48 bytes (the first one's md_pad holds the page size), last
# page number 8, txnid 8.
_P_META = 0x08
_MAGIC = 0xBEEFC0DE
_DATA_VERSION = 1
_META_SIZE = 152  # through the txnid
_MIN_PAGE, _MAX_PAGE = 512, 1 << 16
# What LMDB makes of lock.mdb for its default 126 readers: (126 - 1) * 64 + 192 bytes.
_LOCK_FILE_BYTES = 8192


def _read_meta(data: bytes, at: int) -> tuple[int, int, int] | str:
    """(page size, last page, txnid) of the meta page at ``at`` in ``data``, or why it is not one."""
    page = data[at : at + _META_SIZE]
    if len(page) < _META_SIZE:
        return "it ends inside the meta page"
    (flags,) = struct.unpack_from("=H", page, 10)
    magic, version = struct.unpack_from("=II", page, 16)
    (psize,) = struct.unpack_from("=I", page, 40)
    last_pg, txnid = struct.unpack_from("=QQ", page, 136)
    if not flags & _P_META or magic != _MAGIC:
        return "it is not an LMDB file (no meta page)"
    if version != _DATA_VERSION:
        return f"its LMDB data version is {version}, not {_DATA_VERSION}"
    if psize & (psize - 1) or not _MIN_PAGE <= psize <= _MAX_PAGE:
        return f"its meta page gives a page size of {psize}"
    return psize, last_pg, txnid


def _file_problem(path: Path) -> str | None:
    """Why the files in ``path`` must not be mapped (plain file reads only), or None."""
    for name in (LMDB_LOCK_FILE, DATA_FILE):
        try:
            mode = (path / name).lstat().st_mode
        except FileNotFoundError:
            continue
        if not stat.S_ISREG(mode):
            return f"{name} is not a regular file"
    data_path = path / DATA_FILE
    try:
        with open(data_path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            head = f.read(_META_SIZE)
            if not head:
                return f"{DATA_FILE} is empty"
            first = _read_meta(head, 0)
            if isinstance(first, str):
                return f"{DATA_FILE}: {first}"
            f.seek(first[0])
            second = _read_meta(f.read(_META_SIZE), 0)
    except FileNotFoundError:
        return None
    if isinstance(second, str):
        return f"{DATA_FILE}: second meta page: {second}"
    psize, last_pg, _txnid = max(first, second, key=lambda m: m[2])
    if psize != first[0]:
        return f"{DATA_FILE}: its meta pages disagree on the page size ({first[0]}, {second[0]})"
    need = (last_pg + 1) * psize
    if size < need:
        return f"{DATA_FILE} is {size} bytes, shorter than the {need} bytes ({last_pg + 1} pages) its newest meta page uses"
    return None


def check_env(path: Path) -> str | None:
    """Why the LMDB environment in ``path`` cannot be opened safely or trusted, or None when it can
    (or when there is none). Never maps a file that failed the plain-read checks (see the module
    docstring). A ``DAMAGED`` file (a value failed its checksum) and a store format conversion cut
    short are reasons too."""
    try:
        damaged = (path / DAMAGED_FILE).read_text(errors="replace").strip()
    except FileNotFoundError:
        damaged = None
    except OSError as e:
        damaged = f"({DAMAGED_FILE} unreadable: {e})"
    if damaged is not None:
        return f"it was marked damaged: {damaged or 'no reason recorded'}"
    if (path / RESTORING_FILE).exists():
        return _RESTORE_CUT_SHORT
    problem = _file_problem(path)
    if problem is not None or not (path / DATA_FILE).exists():
        return problem
    fmt: bytes | None = None
    try:
        # Read-only and without the lock file: nothing is written, whoever holds the directory.
        env = lmdb.open(str(path), readonly=True, lock=False, max_dbs=2, create=False)
        try:
            with env.begin() as txn:
                for name in (b"data", b"meta"):
                    try:
                        db = env.open_db(name, txn=txn, create=False)
                    except lmdb.NotFoundError:
                        continue  # not created yet: the engine's first open creates it
                    txn.stat(db)
                    txn.get(_OFFSET, db=db)
                    txn.get(_DIRTY, db=db)
                    if name == b"meta":
                        raw = txn.get(_FORMAT, db=db)
                        fmt = None if raw is None else bytes(raw)
        finally:
            env.close()
    except lmdb.Error as e:
        return f"LMDB cannot read it: {type(e).__name__}: {e}"
    if fmt == _CONVERTING:
        return _CUT_SHORT
    return None


def remove_env(path: Path) -> None:
    """Delete the LMDB files of ``path`` (whatever they are) and its damage mark, so the next open
    starts empty."""
    for name in (DATA_FILE, LMDB_LOCK_FILE, DAMAGED_FILE, RESTORING_FILE):
        file = path / name
        if file.is_dir() and not file.is_symlink():
            shutil.rmtree(file)
        else:
            file.unlink(missing_ok=True)


def _lmdb_errno(error: lmdb.Error) -> int | None:
    """The errno behind an LMDB error (py-lmdb's exceptions carry only a message)."""
    if isinstance(error, lmdb.DiskError):
        return errno.ENOSPC
    if isinstance(error, lmdb.MemoryError):
        return errno.ENOMEM
    text = str(error)
    for code in (errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.ENOMEM):
        if os.strerror(code) in text:
            return code
    return None


class MapFullWhileReadingError(Exception):
    """A batch needs a bigger map, and readers are open (LMDB cannot grow under them); nothing was written."""


class ReaderClosedError(ValueError):
    """A reader was used after it was closed (the message says by whom)."""


class LmdbReader:
    """A snapshot of the data: one LMDB read transaction, opened by ``LmdbEngine.reader``.

    Used from the thread that opened it. ``close`` is idempotent; the engine closes it too before it
    grows the map under it (``apply(..., invalidate_readers=True)``), and then says so on next use.
    """

    __slots__ = ("__weakref__", "_closed_why", "_on_close", "_open_value", "_txn")

    def __init__(
        self,
        txn: lmdb.Transaction,
        on_close: Callable[[LmdbReader], None],
        open_value: Callable[[bytes, bytes], bytes] | None,
    ) -> None:
        self._on_close = on_close
        self._open_value = open_value  # checks and unseals a stored value (None: plain values)
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
        open_value = self._open_value
        if open_value is None:
            if stop is None:
                yield from pairs
                return
            for key, value in pairs:
                if key >= stop:
                    return
                yield key, value
            return
        for key, value in pairs:
            if stop is not None and key >= stop:
                return
            yield key, open_value(key, value)

    def close(self, why: str | None = None) -> None:
        txn, self._txn = self._txn, None
        if txn is None:
            return
        if why is not None:
            self._closed_why = why
        self._on_close(self)
        txn.abort()


class LmdbEngine:
    """One store's LMDB environment. Used by one thread of one process (the one running the task),
    except that while that thread only reads, one other thread may ``apply(..., grow=False)`` and
    ``sync`` (a commit's asynchronous phase): LMDB lets one writer run beside readers."""

    def __init__(self, path: Path, map_size: int = DEFAULT_MAP_SIZE, sync: bool = True, checksums: bool = True) -> None:
        """Open (or create) the environment in ``path``, in store format 2 (checksummed values) or,
        without ``checksums``, 1; a store in the other format is converted. Raises ``StoreError``
        when its files cannot be opened safely (``check_env``, checked first: never a crash), cannot
        be created, or are of a format this version does not know."""
        self.path = path
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise store_io_error(path, "creating the store directory", e) from e
        problem = _file_problem(path)
        if problem is not None:
            raise StoreError(
                str(path),
                f"its LMDB files cannot be opened safely: {problem}",
                "delete the directory: a changelogged store is then restored from its changelog",
            )
        try:
            fd = os.open(path / LMDB_LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            try:
                os.posix_fallocate(fd, 0, _LOCK_FILE_BYTES)  # allocated, never a sparse page (see above)
            finally:
                os.close(fd)
        except OSError as e:
            raise store_io_error(path, f"allocating its {LMDB_LOCK_FILE} file", e) from e
        self._sync = sync
        self._restoring = False  # between start_restore and finish_restore: commits are not synced
        self._writemap = False  # only while restoring, its map's blocks allocated
        self._open_env(map_size, sync)
        # Open readers (a forgotten one is aborted by the garbage collector, and leaves this set).
        self._readers: weakref.WeakSet[LmdbReader] = weakref.WeakSet()
        self.damage: str | None = None  # what failed its checksum, once something has
        try:
            self.format = self._stored_format()
            wanted = CHECKSUMMED if checksums else PLAIN
            if self.format != wanted:
                self._convert(wanted)
        except BaseException:
            self._env.close()
            raise
        self._sealed = self.format == CHECKSUMMED

    def _open_env(self, map_size: int, sync: bool, writemap: bool = False) -> None:
        try:
            # One process uses the environment: no locking between processes needed (lock=False would
            # be faster, but a second container on the same directory must fail, not corrupt it).
            self._env = lmdb.open(
                str(self.path), map_size=map_size, max_dbs=2, sync=sync, metasync=sync, writemap=writemap
            )
            self._data = self._env.open_db(b"data")
            self._meta = self._env.open_db(b"meta")
        except lmdb.Error as e:
            raise store_io_error(self.path, "opening its LMDB files", e, _lmdb_errno(e)) from e

    # -- restore: one sync for the whole of it ------------------------------------------------------
    def start_restore(self) -> None:
        """Write a restore's batches without syncing each (``apply`` then commits to the page cache
        only; ``finish_restore`` syncs once). Until then the directory carries a ``RESTORING`` mark,
        made durable before the first unsynced write: LMDB without sync keeps a process crash
        harmless but not a power loss, which may leave its meta page on disk pointing at pages that
        never reached it, so ``check_env`` refuses a directory with the mark before mapping it (the
        next start removes it and restores in full)."""
        if self._restoring:
            return
        with store_files(self.path, f"writing its {RESTORING_FILE} mark"):
            with open(self.path / RESTORING_FILE, "wb") as f:
                f.write(b"a restore from the changelog writes this store without syncing each batch\n")
                f.flush()
                os.fsync(f.fileno())
            fsync_dir(self.path)
        self._restoring = True
        # Through the map (writemap): a page is written where it lies, with no copy and no pwrite per
        # dirty page, which is most of a big store's restore. Only while every page of the map has its
        # blocks (``_allocate_map``): then a full filesystem is an error there, never a SIGBUS at a
        # write through the map.
        self._reopen(sync=False, writemap=True)
        if not self._allocate_map():
            self._reopen(sync=False)

    def finish_restore(self) -> None:
        """Sync every write since ``start_restore`` to disk, go back to syncing each commit, and
        remove the ``RESTORING`` mark (durably). ``StoreError`` when the filesystem fails it (the
        mark stays: the next start restores in full)."""
        if not self._restoring:
            return
        self.sync()
        used = (int(self._env.info()["last_pgno"]) + 1) * int(self._env.stat()["psize"])
        self._reopen(sync=self._sync, trim_to=used)
        self._restoring = False
        with store_files(self.path, f"removing its {RESTORING_FILE} mark"):
            (self.path / RESTORING_FILE).unlink(missing_ok=True)
            fsync_dir(self.path)

    def _reopen(self, sync: bool, writemap: bool = False, trim_to: int | None = None) -> None:
        """Close and open the environment again; ``trim_to``: first cut ``data.mdb`` to that many
        bytes, the pages the newest meta page counts (past them LMDB has written nothing: the
        blocks ``_allocate_map`` gave it)."""
        map_size = int(self._env.info()["map_size"])
        for r in list(self._readers):
            r.close("it was closed because its store was reopened for a restore")
        self._env.close()
        if trim_to is not None:
            with store_files(self.path, f"trimming its {DATA_FILE} file"):
                if os.stat(self.path / DATA_FILE).st_size > trim_to:
                    os.truncate(self.path / DATA_FILE, trim_to)
        self._writemap = writemap
        self._open_env(map_size, sync, writemap)

    def _allocate_map(self) -> bool:
        """Allocate the blocks of ``data.mdb`` up to the map's size (LMDB with writemap makes the
        file that long, sparse). False where the filesystem cannot allocate ahead (then writemap
        must not be used); ``StoreError`` where it has no room."""
        size = int(self._env.info()["map_size"])
        try:
            fd = os.open(self.path / DATA_FILE, os.O_RDWR | os.O_CLOEXEC)
            try:
                os.posix_fallocate(fd, 0, size)
            finally:
                os.close(fd)
        except OSError as e:
            if e.errno in (errno.ENOSPC, errno.EDQUOT, errno.EIO):
                self._reopen(sync=False)  # no write may go through the map's unallocated pages
                raise store_io_error(self.path, f"allocating {size} bytes of its {DATA_FILE} file", e) from e
            log.info("store in %s: cannot allocate its map ahead (%s); restoring without writemap", self.path, e)
            return False
        return True

    def _grow_ahead(self) -> None:
        """While restoring, double the map before a batch once it is three quarters used, so that
        a batch seldom finds it full (which aborts it and writes it again)."""
        info = self._env.info()
        map_size = int(info["map_size"])
        used = (int(info["last_pgno"]) + 1) * int(self._env.stat()["psize"])
        if used * 4 >= map_size * 3 and not self._readers:
            self._grow(False)

    # -- the store format -------------------------------------------------------------------------
    def _stored_format(self) -> int:
        """The format of the data: the meta key; without one, 1 when it holds data, else none yet (0)."""
        with self._env.begin() as txn:
            raw = txn.get(_FORMAT, db=self._meta)
            entries = int(txn.stat(self._data)["entries"])
        if raw is None:
            return PLAIN if entries else 0
        text = bytes(raw)
        if text == _CONVERTING:  # check_env refuses it; an engine opened without that check too
            raise StoreError(
                str(self.path),
                _CUT_SHORT,
                "delete the directory: a changelogged store is then restored from its changelog",
            )
        if not text.isdigit() or int(text) not in FORMATS:
            raise StoreError(
                str(self.path),
                f"its store format is {text.decode(errors='replace')!r}; this samzamp reads formats "
                f"{', '.join(map(str, FORMATS))}",
                "run the samzamp version that wrote it, or delete the directory: a changelogged store is then "
                "restored from its changelog",
            )
        return int(text)

    def _convert(self, to: int) -> None:
        """Rewrite every value into format ``to`` (sealing or checking and unsealing), in batches."""
        empty = self.format == 0
        if not empty:
            log.info(
                "store in %s: converting %d values from store format %d to %d", self.path, self.count(), self.format, to
            )
            self._transact(lambda txn: txn.put(_FORMAT, _CONVERTING, db=self._meta), _CONVERTING_WHAT)
            after: bytes | None = None
            while True:
                batch = self._convert_batch(after, to)
                if not batch:
                    break
                after = batch[-1][0]
                self._transact(partial(self._put_all, entries=batch), _CONVERTING_WHAT)
        self._transact(lambda txn: txn.put(_FORMAT, str(to).encode(), db=self._meta), _CONVERTING_WHAT)
        self.format = to

    def _put_all(self, txn: lmdb.Transaction, entries: list[tuple[bytes, bytes]]) -> None:
        for key, value in entries:
            txn.put(key, value, db=self._data)

    def _convert_batch(self, after: bytes | None, to: int) -> list[tuple[bytes, bytes]]:
        """The next values after key ``after`` in format ``to``."""
        out: list[tuple[bytes, bytes]] = []
        with self._env.begin(db=self._data, buffers=False) as txn:
            cursor = txn.cursor()
            if not (cursor.set_range(after) if after is not None else cursor.first()):
                return out
            for key, value in cursor.iternext(keys=True, values=True):
                if key == after:
                    continue
                out.append((key, seal(key, value) if to == CHECKSUMMED else self._open_value(key, value)))
                if len(out) >= _CONVERT_BATCH:
                    break
        return out

    # -- checksums ----------------------------------------------------------------------------
    def _open_value(self, key: bytes, stored: bytes | memoryview) -> bytes:
        """The value ``stored`` under ``key`` holds, once its checksum holds; else ``StoreError``."""
        value = unseal(key, stored)
        if value is None:
            raise self._damaged(key)
        return value

    def _damaged(self, key: bytes) -> StoreError:
        """Mark the store damaged (the ``DAMAGED`` file, read by ``check_env`` at the next start) and
        say so as a ``StoreError`` naming the key and the file."""
        shown = repr(key) if len(key) <= 64 else f"{key[:64]!r}... ({len(key)} bytes)"
        problem = f"the value of key {shown} in {self.path / DATA_FILE} fails its checksum (CRC32C): its bytes changed on disk"
        if self.damage is None:
            self.damage = problem
            try:
                with store_files(self.path, f"writing its {DAMAGED_FILE} mark"):
                    (self.path / DAMAGED_FILE).write_text(problem + "\n")
            except StoreError as e:  # the read still fails; the next start finds the value again
                log.warning("%s", e)
        return StoreError(str(self.path), problem, _RESTORE_ADVICE)

    def verify(self) -> str | None:
        """Check every value's checksum (format 2): None when all hold, else what failed (the store
        is then marked damaged, as a read that fails would).

        The values are read from ``data.mdb``'s pages directly (``verify_lmdb``, in C: what the
        scan through LMDB below does, ten times faster), the key it names checked again through
        LMDB; where that walk cannot read the file as LMDB wrote it, or disagrees with LMDB, the
        scan through LMDB decides."""
        if not self._sealed:
            return None
        walked = self._walk_pages()
        if walked is not None:
            entries, failed = walked
            if failed is None and entries == self.count():
                return None
            if failed is not None:
                with self._env.begin(db=self._data, buffers=True) as txn:
                    stored = txn.get(failed)
                    if stored is not None and unseal(failed, stored) is None:
                        return self._damaged(failed).problem
            log.info("store in %s: its pages read otherwise than LMDB reads them; checking through LMDB", self.path)
        with self._env.begin(db=self._data, buffers=True) as txn:
            for key, value in txn.cursor().iternext(keys=True, values=True):
                if unseal(key, value) is None:
                    return self._damaged(bytes(key)).problem
        return None

    def _walk_pages(self) -> tuple[int, bytes | None] | None:
        """``verify_lmdb`` over a read-only map of ``data.mdb``: (entries, the first key that fails or
        None), or None where it cannot read the file (then the scan through LMDB decides)."""
        try:
            with open(self.path / DATA_FILE, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
                return verify_lmdb(m, b"data")
        except (OSError, ValueError) as e:
            log.info("store in %s: %s; checking through LMDB", self.path, e)
            return None

    # -- reads ----------------------------------------------------------------------------------
    def get(self, key: bytes) -> bytes | None:
        """The value of ``key``, or None; ``StoreError`` when its checksum fails (never the value)."""
        if not self._sealed:
            with self._env.begin(db=self._data, buffers=False) as txn:
                return txn.get(key)
        with self._env.begin(db=self._data, buffers=True) as txn:
            stored = txn.get(key)
            # _open_value copies the value out of the map while the transaction lasts
            return None if stored is None else self._open_value(key, stored)

    def items(self, start: bytes | None = None, stop: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        """Entries with ``start <= key < stop`` (None: unbounded), in key order. Reads one snapshot;
        ``StoreError`` at a value whose checksum fails."""
        r = self.reader()
        try:
            yield from r.entries(start, stop)
        finally:
            r.close()

    def reader(self) -> LmdbReader:
        """A snapshot of the data as of now; close it when done."""
        r = LmdbReader(
            self._env.begin(db=self._data, buffers=False),
            self._readers.discard,
            self._open_value if self._sealed else None,
        )
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
        grow: bool = True,
    ) -> None:
        """Write a batch in one transaction (None value: delete). ``changelog_offset`` None marks the
        data dirty (it holds writes no commit covers); an int records it as the data's offset.

        A full map grows. With readers open it raises ``MapFullWhileReadingError`` (nothing written),
        unless ``invalidate_readers``: then it closes them first. Without ``grow`` a full map raises
        ``MapFullWhileReadingError`` whatever is open: a thread other than the task's writes so (LMDB
        grows a map only with no transaction open in the process, and the task's thread may be in one). A write the filesystem refuses (a
        full disk, an I/O error) raises ``StoreError``; nothing of the batch is written."""
        batch = list(writes)
        if self._restoring:
            self._grow_ahead()
        self._transact(partial(self._write, batch, changelog_offset), "writing to LMDB", invalidate_readers, grow)

    def _write(
        self, batch: list[tuple[bytes, bytes | None]], changelog_offset: int | None, txn: lmdb.Transaction
    ) -> None:
        sealed = self._sealed
        for key, value in batch:
            if value is None:
                txn.delete(key, db=self._data)
            else:
                txn.put(key, seal(key, value) if sealed else value, db=self._data)
        if changelog_offset is None:
            txn.put(_DIRTY, b"1", db=self._meta)
        else:
            txn.delete(_DIRTY, db=self._meta)
            txn.put(_OFFSET, str(changelog_offset).encode(), db=self._meta)

    def _transact(
        self,
        write: Callable[[lmdb.Transaction], object],
        doing: str,
        invalidate_readers: bool = False,
        grow: bool = True,
    ) -> None:
        """Run ``write`` in one write transaction; a full map grows (see ``apply`` for open readers)
        and the transaction runs again; an LMDB error is a ``StoreError`` saying what it was ``doing``."""
        while True:
            try:
                with self._env.begin(write=True) as txn:
                    write(txn)
                return
            except lmdb.MapFullError:
                if not grow:
                    raise MapFullWhileReadingError(f"LMDB map of {self.path} is full; it grows on the task's thread")
                self._grow(invalidate_readers)
            except lmdb.Error as e:
                raise store_io_error(self.path, doing, e, _lmdb_errno(e)) from e

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
        try:
            self._env.set_mapsize(size)
        except lmdb.Error as e:
            raise store_io_error(self.path, f"growing the LMDB map to {size} bytes", e, _lmdb_errno(e)) from e
        if self._writemap and not self._allocate_map():
            self._reopen(sync=False)  # no write went through the new part of the map yet

    def sync(self) -> None:
        """Make every committed write durable (fsync); ``StoreError`` when the filesystem fails it."""
        try:
            self._env.sync(True)
        except lmdb.Error as e:
            raise store_io_error(self.path, "syncing LMDB to disk", e, _lmdb_errno(e)) from e

    def close(self) -> None:
        for r in list(self._readers):
            r.close("it was closed because its store was closed")
        self._env.close()

    @staticmethod
    def wipe(path: Path) -> None:
        """Delete a store directory (before a full restore)."""
        shutil.rmtree(path, ignore_errors=True)


class StoredEntry(NamedTuple):
    """One entry of a store as a tool reads it: the key and the value, or ``None`` when the value
    fails its checksum (its bytes changed on disk; they are never returned)."""

    key: bytes
    value: bytes | None


class LmdbSnapshot:
    """A store's LMDB environment read without changing it, for tools (``samzamp stores inspect``).

    Opened read-only (``create=False``: a missing environment is an error, never made), in whatever
    store format it has (never converted), as one read transaction: a consistent snapshot of the
    data as of ``open``, however long the reading takes. Values are checked with ``unseal`` as the
    engine checks them; one that fails is an entry whose value is None, and nothing is marked.

    ``shared`` says whether another live process may write the environment meanwhile (the task that
    owns it runs). Then LMDB's lock file is used, so that the writer sees this reader in its reader
    table (``lock.mdb``, which LMDB itself writes to register it) and keeps the snapshot's pages
    from reuse; ``data.mdb`` is never written, but it may grow while the snapshot is open. Without
    ``shared`` nothing in the directory is written or locked: the caller must make sure that no
    process writes it meanwhile (``dirs.hold_store_dir_shared``).
    """

    def __init__(self, path: Path, *, shared: bool = False) -> None:
        """Open the environment in ``path``. ``StoreError`` when it was marked damaged, cannot be
        opened safely (``check_env``'s plain-read checks), has no ``data.mdb``, is in the middle of
        a format conversion, or is of a format this version does not know."""
        self.path = path
        try:
            damaged = (path / DAMAGED_FILE).read_text(errors="replace").strip()
        except FileNotFoundError:
            damaged = None
        except OSError as e:
            damaged = f"({DAMAGED_FILE} unreadable: {e})"
        if damaged is not None:
            raise StoreError(str(path), f"it was marked damaged: {damaged or 'no reason recorded'}", _RESTORE_ADVICE)
        if (path / RESTORING_FILE).exists():
            raise StoreError(str(path), _RESTORE_CUT_SHORT, _RESTORE_ADVICE)
        problem = _file_problem(path)
        if problem is None and not (path / DATA_FILE).is_file():
            problem = f"it has no {DATA_FILE}"
        if problem is not None:
            raise StoreError(str(path), f"its LMDB files cannot be read: {problem}", _RESTORE_ADVICE)
        try:
            self._env = lmdb.open(str(path), readonly=True, lock=shared, max_dbs=2, create=False)
        except lmdb.Error as e:
            raise store_io_error(path, "opening its LMDB files read-only", e, _lmdb_errno(e)) from e
        self._closed = False
        try:
            self._txn = self._env.begin(buffers=False)
            self._data = self._open_db(b"data")
            meta = self._open_db(b"meta")
            raw_format = self._get(meta, _FORMAT)
            self.dirty = self._get(meta, _DIRTY) is not None
            raw_offset = self._get(meta, _OFFSET)
        except BaseException:
            self._env.close()
            raise
        entries = self.count()
        self.changelog_offset: int | None = int(raw_offset) if raw_offset is not None and not self.dirty else None
        if raw_format is None:
            self.format = PLAIN if entries else 0
        elif raw_format == _CONVERTING:
            self.close()
            raise StoreError(str(path), _CUT_SHORT, _RESTORE_ADVICE)
        elif raw_format.isdigit() and int(raw_format) in FORMATS:
            self.format = int(raw_format)
        else:
            self.close()
            raise StoreError(
                str(path),
                f"its store format is {raw_format.decode(errors='replace')!r}; this samzamp reads formats "
                f"{', '.join(map(str, FORMATS))}",
                "inspect it with the samzamp version that wrote it",
            )

    def _open_db(self, name: bytes) -> lmdb._Database | None:
        try:
            return self._env.open_db(name, txn=self._txn, create=False)
        except lmdb.NotFoundError:
            return None  # not created yet: an environment nothing was ever written to
        except lmdb.Error as e:
            raise store_io_error(self.path, f"reading its LMDB database {name.decode()!r}", e, _lmdb_errno(e)) from e

    def _get(self, db: lmdb._Database | None, key: bytes) -> bytes | None:
        if db is None:
            return None
        raw = self._txn.get(key, db=db)
        return None if raw is None else bytes(raw)

    def count(self) -> int:
        """How many entries the snapshot holds."""
        return 0 if self._data is None else int(self._txn.stat(self._data)["entries"])

    def _entry(self, key: bytes, stored: bytes) -> StoredEntry:
        return StoredEntry(key, unseal(key, stored) if self.format == CHECKSUMMED else stored)

    def get(self, key: bytes) -> StoredEntry | None:
        """The entry of ``key`` (its value None when it fails its checksum), or None when absent."""
        stored = self._get(self._data, key)
        return None if stored is None else self._entry(key, stored)

    def entries(self) -> Iterator[StoredEntry]:
        """Every entry in key-byte order, one at a time (values None where they fail their checksum)."""
        if self._data is None:
            return
        cursor = self._txn.cursor(db=self._data)
        for key, stored in cursor.iternext(keys=True, values=True):
            yield self._entry(key, stored)

    def close(self) -> None:
        """End the read transaction and close the environment (idempotent)."""
        if not self._closed:
            self._closed = True
            self._txn.abort()
            self._env.close()

    def __enter__(self) -> LmdbSnapshot:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()
