"""``LmdbKeyValueStore``: the KeyValueStore a task gets from ``context.get_store`` (Samza's store stack:
null-safe -> serialized -> logged -> engine), with a write buffer that only a commit applies.

- Every put/delete is kept in the write buffer; reads see the buffer first (read-your-writes), then
  LMDB. Its changelog record (a delete's is a null value) waits among the *unsent* writes, one per
  key, so a key written again before it goes is sent once, with its newest value (Samza's CachedStore
  with its write.batch.size, Kafka Streams' record cache): the unsent writes go to the changelog when
  ``write_batch_size`` keys wait, at each commit before the producer is flushed (``send_unsent``,
  commit step 3), and before a spill. So the changelog has every write LMDB or a checkpoint will
  hold before either holds it (SAMZA-1065's order); what was never sent was never applied either,
  and its input is processed again after a failure. ``write_batch_size`` 1 sends each write at once.
- ``commit(offset)`` applies the buffer to LMDB in one transaction that also records the changelog
  offset the data now contains. So LMDB on disk is always the state at some commit: never a state
  that no checkpoint covers, which is what lets restore trust it.
- A commit may also run in two halves (the commit's synchronous and asynchronous phases):
  ``freeze(offset)``, on the task's thread while the task is idle, sets the buffer aside as the
  *frozen* buffer and starts a fresh one; ``apply_frozen()`` writes the frozen buffer to LMDB in one
  transaction and syncs, on any one other thread while the task goes on; ``settle()``, on the task's
  thread again, drops the frozen buffer (its writes are in LMDB now). Meanwhile reads see the live
  buffer, then the frozen one, then LMDB, and iterators merge both buffers with their LMDB snapshot:
  since the apply is one transaction and the frozen buffer holds every key it changes, a snapshot
  from before the apply or after it gives the same view. The task's own thread never writes LMDB
  while a buffer is frozen (a spill waits for ``settle``), so the apply is its only writer.
- A buffer that grows past ``SPILL_AT`` entries is written early, marked *dirty* (a restart then
  rebuilds the store from the changelog); this bounds memory between commits. (Except while
  iterators are open and LMDB's map is full: LMDB cannot grow it under their read transactions, so
  the buffer keeps growing until they are closed or the next commit.)
- ``range``/``all`` stream from an LMDB cursor merged with the buffer (see ``StoreIterator``): each
  sees the store as of its opening; the task may write meanwhile. Close them: a commit that must
  grow the map closes iterators left open (their next use raises ValueError saying so).
- ``flush()`` does nothing: writes become durable at the next commit, which a task can ask for with
  ``coordinator.commit()``.
- A value read from LMDB whose checksum fails (``storage.checksum``) is never returned: the read
  raises ``StoreError`` naming the store, task, key and file, with one warning, and from then on the
  store refuses writes and commits, so nothing computed after the damage reaches the changelog or a
  checkpoint, even if the task caught the error. The engine has marked the directory damaged: the
  task's next start restores the store in full from its changelog.

One task uses a store, from the thread that runs the task.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Iterator
from typing import Any

from samzamp.api.errors import StoreError
from samzamp.api.serde import Serde
from samzamp.storage.lmdb import LmdbEngine, LmdbReader, MapFullWhileReadingError

__all__ = ["SPILL_AT", "LmdbKeyValueStore", "StoreIterator"]

log = logging.getLogger(__name__)

SPILL_AT = 200_000

ChangelogSend = Callable[[bytes, "bytes | None"], None]


class StoreIterator:
    """Entries in key-byte order, decoded, streamed from LMDB (bounded memory); a context manager.

    What it sees: the store as it was when ``range``/``all`` opened it -- LMDB's snapshot at that
    moment (one read transaction) merged with the write buffer as it was then, a commit's frozen
    writes under it (buffered puts appear, buffered deletes hide). Writes the task makes while it is open are allowed and not seen by it,
    as with a RocksDB iterator in Samza.

    One pass; use it from the task's thread. Close it (``with``, or ``close()``, idempotent) as soon
    as you are done: it holds an LMDB read transaction, whose pages LMDB cannot reuse meanwhile.
    Using it after ``close`` raises ValueError.
    """

    __slots__ = ("_buffered", "_entries", "_failed", "_key", "_msg", "_reader", "_start", "_stop", "_store")

    def __init__(
        self,
        store: str,
        reader: LmdbReader,
        start: bytes | None,
        stop: bytes | None,
        buffered: list[tuple[bytes, bytes | None]],
        key_serde: Serde,
        msg_serde: Serde,
        failed: Callable[[StoreError], StoreError],
    ) -> None:
        self._store = store
        self._failed = failed  # the store's own: a damaged value fails the store
        self._reader = reader
        self._start = start
        self._stop = stop
        self._buffered = buffered  # the buffer's entries in range at open, sorted by key bytes
        self._key = key_serde.from_bytes
        self._msg = msg_serde.from_bytes
        self._entries: Iterator[tuple[Any, Any]] | None = None

    def __iter__(self) -> Iterator[tuple[Any, Any]]:
        return self

    def __next__(self) -> tuple[Any, Any]:
        if self._entries is None:
            self._check_open()
            self._entries = self._merge()
        try:
            return next(self._entries)
        except StoreError as e:
            self.close()
            raise self._failed(e) from e

    def _check_open(self) -> None:
        if not self._reader.open:
            raise ValueError(f"store {self._store!r}: this iterator is closed: {self._reader.why_closed()}")

    def _merge(self) -> Iterator[tuple[Any, Any]]:
        """LMDB's entries and the buffered ones, in key order; the buffer's shadow LMDB's."""
        key, msg, check = self._key, self._msg, self._check_open
        reader = self._reader
        buffered = self._buffered
        bi, nb = 0, len(buffered)
        for kb, vb in reader.entries(self._start, self._stop):
            while bi < nb and buffered[bi][0] < kb:
                bk, bv = buffered[bi]
                bi += 1
                if bv is not None:
                    yield key(bk), msg(bv)
                    check()
            if bi < nb and buffered[bi][0] == kb:
                bv = buffered[bi][1]
                bi += 1
                if bv is None:
                    continue
                vb = bv
            yield key(kb), msg(vb)
            if not reader.open:  # the cursor went with the transaction: never resume it
                check()
        while bi < nb:
            bk, bv = buffered[bi]
            bi += 1
            if bv is not None:
                yield key(bk), msg(bv)
                check()
        self.close()

    def __enter__(self) -> StoreIterator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Release the read transaction; idempotent."""
        self._reader.close()
        self._buffered = []


class LmdbKeyValueStore:
    def __init__(
        self,
        name: str,
        engine: LmdbEngine,
        key_serde: Serde,
        msg_serde: Serde,
        changelog: ChangelogSend | None,
        task: str | None = None,
        write_batch_size: int = 1,
    ) -> None:
        self.name = name
        self.task = task
        self.engine = engine
        self.failure: StoreError | None = None  # set once a value failed its checksum
        self._key_to = key_serde.to_bytes
        self._msg_to = msg_serde.to_bytes
        self._key_from = key_serde.from_bytes
        self._msg_from = msg_serde.from_bytes
        self._key_serde = key_serde
        self._msg_serde = msg_serde
        self._changelog = changelog
        self._buffer: dict[bytes, bytes | None] = {}
        # Writes not yet sent to the changelog, the newest per key (None: there is no changelog, or
        # each write is sent at once).
        self._unsent: dict[bytes, bytes | None] | None = {} if changelog is not None and write_batch_size > 1 else None
        self._batch = write_batch_size
        # The writes of a commit under way (``freeze``), and the changelog offset they reach; read
        # by the task's thread and the applying thread, replaced only by the task's (``settle``).
        self._frozen: dict[bytes, bytes | None] | None = None
        self._frozen_offset = -1
        self._frozen_applied = False  # ``apply_frozen`` wrote it (set on the applying thread)
        self._spill_deferred = False  # a spill found the map full under open iterators

    def _kb(self, key: Any) -> bytes:
        if key is None:
            raise ValueError(f"store {self.name!r}: keys may not be None")
        return self._key_to(key)

    def _failed(self, error: StoreError) -> StoreError:
        """A value failed its checksum: warn once, and fail every later write and commit too."""
        named = error.of(self.name, self.task)
        if self.failure is None:
            self.failure = named
            log.warning("%s", named)
        return named

    # -- KeyValueStore ----------------------------------------------------------------------------
    def get(self, key: Any) -> Any:
        vb = self.current(self._kb(key))
        return None if vb is None else self._msg_from(vb)

    def get_all(self, keys: list[Any]) -> dict[Any, Any]:
        out = {}
        for k in keys:
            v = self.get(k)
            if v is not None:
                out[k] = v
        return out

    def put(self, key: Any, value: Any) -> None:
        if value is None:
            raise ValueError(f"store {self.name!r}: values may not be None (use delete)")
        kb = self._kb(key)
        vb = self._msg_to(value)
        if self.failure is not None:
            raise self.failure
        self._write(kb, vb)

    def put_all(self, entries: list[tuple[Any, Any]]) -> None:
        for k, v in entries:
            self.put(k, v)

    def delete(self, key: Any) -> None:
        kb = self._kb(key)
        if self.failure is not None:
            raise self.failure
        self._write(kb, None)

    def _write(self, kb: bytes, vb: bytes | None) -> None:
        """One write (``vb`` None: a delete) into the buffer, and its changelog record sent or left
        waiting. Every buffered write the changelog has not got waits in ``_unsent``."""
        unsent = self._unsent
        if unsent is None:
            if self._changelog is not None:
                self._changelog(kb, vb)  # the changelog first: a write it refused is not made
            self._buffer[kb] = vb
        else:
            self._buffer[kb] = vb
            unsent[kb] = vb  # a key keeps its place: a restore keeps each key's last record, whatever the order
            if len(unsent) >= self._batch:
                self.send_unsent()
        if len(self._buffer) >= SPILL_AT:
            self._spill()

    def send_unsent(self) -> None:
        """Send every unsent write to the changelog, oldest first (commit step 3, before the producer
        is flushed, and before a spill): after it, the changelog has every write the store holds.
        A send that raises leaves it and the writes after it waiting (a commit then refuses them)."""
        unsent = self._unsent
        if not unsent:
            return
        send = self._changelog
        assert send is not None
        sent = 0
        try:
            for kb, vb in unsent.items():
                send(kb, vb)
                sent += 1
        finally:
            self._unsent = {} if sent == len(unsent) else dict(itertools.islice(unsent.items(), sent, None))

    def delete_all(self, keys: list[Any]) -> None:
        for k in keys:
            self.delete(k)

    def range(self, from_key: Any, to_key: Any) -> StoreIterator:
        """Entries with from_key <= key < to_key (by serialized key bytes)."""
        return self._iterate(self._kb(from_key), self._kb(to_key))

    def all(self) -> StoreIterator:
        return self._iterate(None, None)

    def flush(self) -> None:
        """Nothing to do: writes are durable at the next commit (see the module docstring)."""

    # -- engine side ------------------------------------------------------------------------------
    def current(self, kb: bytes) -> bytes | None:
        """The serialized value the store holds for the serialized key ``kb`` now (the write
        buffer's, else LMDB's; None: none), as the changelog carries it."""
        if kb in self._buffer:
            return self._buffer[kb]
        frozen = self._frozen
        if frozen is not None and kb in frozen:
            return frozen[kb]
        try:
            return self.engine.get(kb)
        except StoreError as e:
            raise self._failed(e) from e

    def _iterate(self, start: bytes | None, stop: bytes | None) -> StoreIterator:
        # The buffer is bounded (SPILL_AT), so a sorted copy of its entries in range is too; its
        # values are the same objects, so later writes do not change what the iterator sees. A
        # frozen buffer is under the live one: the live one's entries shadow it.
        pending = self._buffer if self._frozen is None else {**self._frozen, **self._buffer}
        buffered = sorted(
            (kb, vb) for kb, vb in pending.items() if (start is None or kb >= start) and (stop is None or kb < stop)
        )
        return StoreIterator(
            self.name, self.engine.reader(), start, stop, buffered, self._key_serde, self._msg_serde, self._failed
        )

    def _spill(self) -> None:
        if self._frozen is not None:  # the apply is LMDB's only writer until ``settle``
            return
        if self._spill_deferred and self.engine.readers_open():
            return
        self.send_unsent()  # the changelog first, even for writes that only a restart would read
        try:
            self.engine.apply(self._buffer.items(), None)  # dirty until the next commit
        except StoreError as e:
            raise e.of(self.name) from e  # the buffer is kept: the next spill or commit tries again
        except MapFullWhileReadingError:
            # LMDB cannot grow its map under the open iterators' read transactions: keep buffering
            # (reads stay right) and spill once they are closed, or at the commit.
            self._spill_deferred = True
            log.info(
                "store %r: LMDB map full while iterators are open; buffering writes until they are closed", self.name
            )
            return
        self._spill_deferred = False
        self._buffer.clear()

    def commit(self, changelog_offset: int) -> None:
        """Apply the buffered writes with the changelog offset they reach (commit step 4), here
        and now: ``freeze``, then the write and sync of ``apply_frozen`` on this thread."""
        self.freeze(changelog_offset)
        try:
            self.settle()
        except StoreError:
            # Not written: the writes stay buffered, under any made since, for a later commit.
            frozen, self._frozen = self._frozen or {}, None
            self._buffer = {**frozen, **self._buffer}
            raise

    @property
    def frozen(self) -> bool:
        """A commit's writes are set aside and not yet settled (``freeze`` to ``settle``)."""
        return self._frozen is not None

    def freeze(self, changelog_offset: int) -> None:
        """The synchronous half of a commit, on the task's thread, the task idle: set the buffered
        writes aside with the changelog offset they reach, for ``apply_frozen``; new writes go to a
        fresh buffer. ``StoreError`` when a value failed its checksum (nothing after the damage is
        committed). At most one frozen buffer: the last one must be settled first."""
        if self.failure is not None:
            raise self.failure
        if self._frozen is not None:
            raise RuntimeError(f"store {self.name!r}: a commit froze its writes while the last one was not settled")
        if self._unsent:
            raise RuntimeError(
                f"store {self.name!r}: a commit froze {len(self._unsent)} writes not sent to the changelog "
                "(send_unsent comes before the producer's flush)"
            )
        open_readers = self.engine.readers_open()
        if open_readers:
            log.warning(
                "store %r: %d iterator(s) still open at a commit; they keep LMDB from reusing pages "
                "(and are closed if the map must grow): close iterators before process() or window() returns",
                self.name,
                open_readers,
            )
        self._frozen, self._buffer = self._buffer, {}
        self._frozen_offset = changelog_offset
        self._frozen_applied = False

    def apply_frozen(self) -> bool:
        """The asynchronous half of a commit, on one thread other than the task's (or on the task's
        own): write the frozen buffer to LMDB in one transaction with its changelog offset, and
        sync. False when LMDB's map is full: it can only grow with no transaction open in the
        process (the task may be reading), so ``settle`` writes it on the task's thread instead.
        ``StoreError`` (naming the store) when the filesystem refuses it: nothing of it is written."""
        frozen = self._frozen
        if frozen is None or self._frozen_applied:
            return True
        try:
            self.engine.apply(frozen.items(), self._frozen_offset, grow=False)
            self.engine.sync()
        except MapFullWhileReadingError:
            return False
        except StoreError as e:
            raise e.of(self.name) from e
        self._frozen_applied = True
        return True

    def settle(self) -> None:
        """On the task's thread, after ``apply_frozen`` (or instead of it): write the frozen buffer
        if it is not written yet (growing the map, closing iterators left open if it must), and
        drop it: LMDB holds its writes. ``StoreError`` (naming the store) when they cannot be
        written; the frozen buffer then stays (the task fails; its stores close unwritten)."""
        frozen = self._frozen
        if frozen is None:
            return
        if not self._frozen_applied:
            self._apply_here(frozen, self._frozen_offset)
        self._frozen = None
        self._frozen_applied = False
        self._spill_deferred = False

    def _apply_here(self, writes: dict[bytes, bytes | None], changelog_offset: int) -> None:
        try:
            self.engine.apply(writes.items(), changelog_offset, invalidate_readers=True)
            self.engine.sync()
        except StoreError as e:
            raise e.of(self.name) from e

    def close(self) -> None:
        self._buffer.clear()
        if self._unsent:
            self._unsent = {}  # never applied either: their input is processed again
        self._frozen = None
        self.engine.close()  # closes iterators still open
