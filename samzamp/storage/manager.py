"""The stores of one task: open and restore them before the task sees a message, commit them, close them.

Restore of a changelogged store, transactional (task.transactional.state.restore.enabled, the default;
samzamp follows Samza's way, not Quix's offset headers):

1. ``C``: the changelog offset the task's last checkpoint records for the store (-1: the store was
   empty at the cut). A checkpoint without a marker for the store (none at all: a new task, a lost
   checkpoint topic, a changed job.id) records no cut, so nothing is reverted: the store keeps the
   state its changelog holds, as Samza's task.transactional.state.retain.existing.state (default
   true) does, with a warning; with that key false the store is erased (C = -1).
2. The local store directory is trusted (host affinity) when its LMDB data and its OFFSET file agree
   on an offset ``L`` with ``L <= C``, for this changelog partition. Then only the records in
   ``(L, C]`` are replayed; otherwise the directory is wiped and ``[oldest, C]`` is replayed.
3. Records after ``C`` were written by a run that crashed before its checkpoint: for every key among
   them, the restored value (or a tombstone) is written to the changelog again, so the changelog's
   latest value per key is the committed state and the next full restore cannot resurrect them.

The replay writes transactions of ``RESTORE_BATCH`` records and syncs once, at its end
(``LmdbEngine.start_restore``), before the OFFSET file records the restored offset; meanwhile a
``RESTORING`` mark, made durable before the first write, makes any restore cut short (a crash, a
power loss that LMDB without per-commit syncs does not survive whole) a full restore at the next
start, its files removed before anything maps them.

Local LMDB files that cannot be opened safely (``lmdb.check_env``: a truncated ``data.mdb``, a file
that is not LMDB's, a store marked damaged when a value failed its checksum) are removed with a
warning before anything maps them: a changelogged store then restores in full, a non-logged one
starts empty (as Samza wipes non-logged stores at every start). A local store that is kept is
verified first: every value's checksum is checked (``LmdbEngine.verify``), and one that fails is
removed and restored the same way, so a value damaged while the task was stopped is never served.

Without transactional restore the whole changelog (or its tail after ``L``) is replayed and nothing
is reverted, as Samza's non-transactional restore does.

Commit (step 4 of the commit pipeline, after the changelog producer was flushed): records in the
task's changelog partition since its restore that the task did not write (a processor that lost the
task while frozen delivers what its producer held when it runs again) have their keys written again
with the store's current values (``_revert_foreign``); then each store applies its write buffer to
LMDB together with the newest acknowledged changelog offset, and writes its OFFSET file (in two
halves where the commit has an asynchronous phase: ``freeze`` with the task idle, ``apply_frozen``
on another thread while the task goes on, ``settle`` back on the task's thread); the offsets
become the checkpoint's state markers.

A store's files that the filesystem refuses to write (a full disk, an I/O error) raise ``StoreError``
naming the store, the task and the directory; a commit that raises writes no checkpoint.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from samzamp.api.envelope import SystemStream
from samzamp.api.errors import StoreError, SystemFailureError
from samzamp.config.settings import JobSettings, StoreSettings
from samzamp.serde.registry import SerdeRegistry
from samzamp.storage.dirs import lock_store_dir, store_dir, unlock_store_dir
from samzamp.storage.io_errors import store_files
from samzamp.storage.lmdb import LmdbEngine, check_env, remove_env
from samzamp.storage.offset_file import OFFSET_FILE, read_offset_file, write_offset_file
from samzamp.storage.restore_progress import RestoreProgress, StoreProgress
from samzamp.storage.store import LmdbKeyValueStore

if TYPE_CHECKING:
    from samzamp.systems.base import Flushable
    from samzamp.systems.kafka.client_config import KafkaClientSettings

__all__ = ["RestoreReport", "TaskStorage"]

log = logging.getLogger(__name__)

_LMDB_FILES = ("data.mdb", "lock.mdb", "OFFSET")
# A container restarted right after a kill may find its predecessor's workers still dying.
LOCK_WAIT_S = 10.0
# Changelog records per LMDB transaction of a restore. A compacted changelog's keys come in no key
# order, so each record of a big store dirties a page of its own: a transaction of more records
# shares more of them (at 10 million keys, 100,000 records dirty about 80,000 pages, 10,000 records
# about 9,800). The restore writes through the map: the dirty pages are the page cache's, not copies.
RESTORE_BATCH = 100_000


class ChangelogSink(Protocol):
    """What the stores need of the process's changelog producer (systems.kafka.ChangelogProducer)."""

    def send(self, topic: str, partition: int, key: bytes, value: bytes | None) -> None: ...

    def flush(self, timeout_s: float) -> int: ...

    def take_errors(self, topic: str, partition: int) -> list[str]: ...

    def newest(self, topic: str, partition: int) -> int | None: ...

    def take_acked(self, topic: str, partition: int) -> list[tuple[int, int]]: ...


@dataclass(frozen=True)
class RestoreReport:
    store: str
    task: str
    replayed: int  # changelog records applied
    reverted: int  # keys written again to revert changes no checkpoint covers
    full: bool  # the local directory was not usable: restored from the oldest record
    local_offset: int | None  # where the local store was (host affinity), if it was usable
    offset: int  # where the store is now
    seconds: float


class TaskStorage:
    """Owns a task's stores in the process that runs the task."""

    def __init__(
        self,
        task_name: str,
        settings: JobSettings,
        changelog_partition: int,
        kafka: Mapping[str, KafkaClientSettings],
        changelog_producers: Mapping[str, ChangelogSink],
        progress: StoreProgress | None = None,
    ) -> None:
        """``progress``: where the restores report how far they got (the processor's one view of
        its restores); none, a view of this task's own."""
        self.task_name = task_name
        self._progress = progress if progress is not None else RestoreProgress().reporter(task_name)
        self._settings = settings
        self._partition = changelog_partition
        self._kafka = kafka  # by system: how the changelogs are read
        self._producers = changelog_producers  # by system
        self._serdes = SerdeRegistry(settings.serializers)
        self.stores: dict[str, LmdbKeyValueStore] = {}
        self._offsets: dict[str, int] = {}
        # Changelog -> the offset from which on every record in this task's partition must be this
        # task's own (see ``_revert_foreign``): the partition's end when the store was restored,
        # then past each record of its own acknowledged.
        self._own_from: dict[SystemStream, int] = {}
        self._locks: list[int] = []
        # A commit under way between ``freeze`` and ``settle``: the frozen stores and the changelog
        # offsets they reach; those ``apply_frozen`` wrote, with their OFFSET files.
        self._frozen: dict[str, int] = {}
        self._written: set[str] = set()

    def changelogs(self) -> list[Flushable]:
        """What this task's commit flushes for its stores (step 3): each changelog producer its
        stores write through, reporting the failures of this task's changelog partitions only."""
        topics: dict[str, list[str]] = {}
        for s in self._settings.stores.values():
            if s.changelog is not None:
                topics.setdefault(s.changelog.system, []).append(s.changelog.stream)
        return [_TaskChangelogs(self._producers[s], topics[s], self._partition) for s in sorted(topics)]

    def _changelog_name(self, cl: SystemStream) -> str:
        return f"{cl.system}.{cl.stream}.{self._partition}"

    # -- open + restore -----------------------------------------------------------------------------
    def open(self, markers: dict[str, str]) -> list[RestoreReport]:
        """Open (and restore) every configured store; ``markers``: the last checkpoint's state markers.
        ``StoreError`` (naming the store, this task and the directory) when a store's files fail."""
        reports = []
        for _, st in sorted(self._settings.stores.items()):
            try:
                reports.append(self._open_store(st, markers))
            except StoreError as e:
                raise e.of(st.name, self.task_name) from e
        return reports

    def _remove_unusable_files(self, st: StoreSettings, path: Path) -> None:
        """Remove the LMDB files of ``path`` if they cannot be opened safely (``check_env``), with a
        warning: opening them could crash the process, and their data is lost either way."""
        problem = check_env(path)
        if problem is not None:
            self._remove_files(st, path, problem)

    def _remove_files(self, st: StoreSettings, path: Path, problem: str) -> None:
        log.warning(
            "store %r of task %r: the LMDB files in %s cannot be used (%s); removing them: %s",
            st.name,
            self.task_name,
            path,
            problem,
            "full restore from the changelog" if st.changelog else "the store starts empty (it has no changelog)",
        )
        with store_files(path, "removing its unusable LMDB files"):
            (path / OFFSET_FILE).unlink(missing_ok=True)
            remove_env(path)

    def _open_store(self, st: StoreSettings, markers: dict[str, str]) -> RestoreReport:
        started = time.monotonic()
        base = Path(self._settings.logged_store_base_dir if st.changelog else self._settings.non_logged_store_base_dir)
        path = store_dir(base, st.name, self.task_name)
        self._locks.append(lock_store_dir(path, wait_s=LOCK_WAIT_S))
        self._remove_unusable_files(st, path)
        key_serde = self._serdes.get(st.key_serde, f"stores.{st.name}.key.serde")
        msg_serde = self._serdes.get(st.msg_serde, f"stores.{st.name}.msg.serde")
        if st.changelog is None:
            engine = self._verified_engine(st, path)
            self.stores[st.name] = LmdbKeyValueStore(st.name, engine, key_serde, msg_serde, None, self.task_name)
            return RestoreReport(st.name, self.task_name, 0, 0, False, None, -1, 0.0)

        cl = st.changelog
        cut, retained = self._cut(st.name, markers)
        cl_name = self._changelog_name(cl)
        engine = self._verified_engine(st, path)
        local = engine.changelog_offset()
        recorded = read_offset_file(path)
        usable = (
            local is not None
            and recorded is not None
            and recorded.offset == local
            and recorded.changelog == cl_name
            and (cut is None or local <= cut)
        )
        if not usable:
            engine.close()
            for f in _LMDB_FILES:
                (path / f).unlink(missing_ok=True)
            engine = LmdbEngine(path, st.map_size, st.sync, st.checksums)
            local = None
        start = -2 if local is None else local + 1
        offset = -1 if local is None else local
        replayed = 0
        end: int | None = None  # the partition's end, once a read reached it
        from samzamp.systems.kafka.changelog import ChangelogReader

        self._producers[cl.system].take_acked(cl.stream, self._partition)  # a former tenure's, if any
        if cut is None or (cut >= 0 and start <= cut):
            expected = None if cut is None or start < 0 else cut - start + 1
            self._progress(st.name, 0, expected, False)
            batch: list[tuple[bytes, bytes | None]] = []
            first = None if start < 0 else start
            reader = ChangelogReader(self._kafka[cl.system], cl.stream, self._partition, first, cut)
            for off, key, value in reader:
                if not replayed:
                    engine.start_restore()  # one sync for the whole restore, not one per batch
                batch.append((key, value))
                offset = off
                replayed += 1
                if len(batch) >= RESTORE_BATCH:
                    engine.apply(batch, None)  # dirty until the restore is complete
                    batch.clear()
                    self._progress(st.name, replayed, expected, False)
            if cut is not None:
                offset = cut
            engine.apply(batch, offset)
            engine.finish_restore()
            self._progress(st.name, replayed, expected, True)
            end = reader.end
        else:
            engine.apply([], offset)
        reverted = 0
        if cut is not None:
            reverted, end = self._revert_uncommitted(engine, cl, cut)
        assert end is not None  # a read without a cut, and the revert's, go to the partition's end
        self._own_from[cl] = end
        if retained and offset >= 0:
            log.warning(
                "store %r of task %r: no checkpoint records its changelog offset (a new task, a lost checkpoint "
                "topic or a changed job.id); kept its state as the changelog %s holds it, to offset %d, and "
                "reverted nothing (task.transactional.state.retain.existing.state = false would erase it)",
                st.name,
                self.task_name,
                cl_name,
                offset,
            )
        engine.sync()
        write_offset_file(path, cl_name, offset)
        self._offsets[st.name] = offset
        self.stores[st.name] = LmdbKeyValueStore(
            st.name, engine, key_serde, msg_serde, self._sender(cl), self.task_name, st.write_batch_size
        )
        report = RestoreReport(
            st.name, self.task_name, replayed, reverted, local is None, local, offset, time.monotonic() - started
        )
        rate = replayed / report.seconds if report.seconds > 0 else 0.0
        log.info(
            "store %r of task %r: %s; replayed %d changelog records in %.2f s (%.0f records/s) to offset %d; "
            "reverted %d uncommitted writes",
            st.name,
            self.task_name,
            "full restore" if local is None else f"local store at offset {local} (host affinity)",
            replayed,
            report.seconds,
            rate,
            offset,
            reverted,
        )
        return report

    def _verified_engine(self, st: StoreSettings, path: Path) -> LmdbEngine:
        """The store's engine, its local values' checksums checked; a store that fails them is
        removed (with the warning of unusable files) and opened empty."""
        try:
            engine = LmdbEngine(path, st.map_size, st.sync, st.checksums)
        except StoreError:
            problem = check_env(path)  # a value failed its checksum while its format was converted
            if problem is None:
                raise
            self._remove_files(st, path, problem)
            return LmdbEngine(path, st.map_size, st.sync, st.checksums)
        started = time.monotonic()
        entries = engine.count()
        damage = engine.verify()
        if entries:
            log.info(
                "store %r of task %r: checked the checksums of its %d local values in %.2f s",
                st.name,
                self.task_name,
                entries,
                time.monotonic() - started,
            )
        if damage is None:
            return engine
        engine.close()
        self._remove_files(st, path, f"it was found damaged: {damage}")
        return LmdbEngine(path, st.map_size, st.sync, st.checksums)

    def _cut(self, store: str, markers: dict[str, str]) -> tuple[int | None, bool]:
        """The changelog offset to restore the store to (None: the changelog's end, reverting
        nothing), and whether that is because the checkpoint has no marker for the store and its
        existing state is retained. A missing marker is not an empty store: only a marker of -1
        says the store was empty at the cut."""
        if not self._settings.transactional_restore:
            return None, False
        marker = markers.get(store)
        if marker is not None:
            return int(marker), False
        if self._settings.retain_existing_state:
            return None, True
        return -1, False

    def _revert_uncommitted(self, engine: LmdbEngine, cl: SystemStream, cut: int) -> tuple[int, int]:
        """Write the restored value of every key written after ``cut`` again; how many keys, and
        the partition's end before these writes."""
        from samzamp.systems.kafka.changelog import ChangelogReader

        reader = ChangelogReader(self._kafka[cl.system], cl.stream, self._partition, cut + 1)
        keys = {key for _, key, _ in reader}
        assert reader.end is not None  # read to the end
        if not keys:
            return 0, reader.end
        send = self._sender(cl)
        for key in sorted(keys):
            send(key, engine.get(key))
        producer = self._producers[cl.system]
        if producer.flush(60) != 0 or producer.take_errors(cl.stream, self._partition):
            raise SystemFailureError(
                f"task {self.task_name!r}: could not revert uncommitted writes in changelog {cl.system}.{cl.stream}"
            )
        return len(keys), reader.end

    def _revert_foreign(self, cl: SystemStream, stores: list[LmdbKeyValueStore]) -> None:
        """Commit step 4, before the marker is taken: write again, with the values the store holds
        now, every key of a record in this task's changelog partition that this task did not write.

        Only this task writes its partition, but a process that ran it before and lost it without
        knowing yet (frozen past its ZooKeeper session, then continued) still holds records in its
        producer's queue, and its producer delivers them the moment it runs again, before anything
        can stop it: they land after this task's own records, with values this task never had. A
        checkpoint whose marker covered them would restore those values; writing the keys again
        after them makes the changelog up to the marker this task's state again. They are the
        offsets past the partition's end at restore that this task's own records did not get (every
        record it sent is acknowledged by now: step 3 flushed them). Records past the newest of its
        own are outside the marker: a later commit finds them, or the next restore reverts them."""
        from samzamp.systems.kafka.changelog import read_changelog

        producer = self._producers[cl.system]
        while True:
            expected = self._own_from[cl]
            foreign: list[tuple[int, int]] = []
            for first, last in producer.take_acked(cl.stream, self._partition):
                if first > expected:
                    foreign.append((expected, first - 1))
                expected = max(expected, last + 1)
            self._own_from[cl] = expected
            if not foreign:
                return
            keys: set[bytes] = set()
            for first, last in foreign:
                keys.update(
                    k for _, k, _ in read_changelog(self._kafka[cl.system], cl.stream, self._partition, first, last)
                )
            log.warning(
                "task %r: changelog %s holds %d record(s) it did not write, at offsets %s (a process that ran "
                "the task before wrote them after it lost the task); writing the current values of their %d "
                "keys again",
                self.task_name,
                self._changelog_name(cl),
                sum(last - first + 1 for first, last in foreign),
                ", ".join(f"{a}-{b}" if a < b else str(a) for a, b in foreign),
                len(keys),
            )
            send = self._sender(cl)
            for key in sorted(keys):
                send(key, next((v for v in (s.current(key) for s in stores) if v is not None), None))
            if producer.flush(60) != 0 or producer.take_errors(cl.stream, self._partition):
                raise SystemFailureError(
                    f"task {self.task_name!r}: could not write over records it did not write in changelog "
                    f"{self._changelog_name(cl)}"
                )

    def _sender(self, cl: SystemStream) -> Callable[[bytes, bytes | None], None]:
        topic, partition = cl.stream, self._partition
        send = self._producers[cl.system].send

        def to_changelog(key: bytes, value: bytes | None) -> None:
            send(topic, partition, key, value)

        return to_changelog

    # -- commit + close ---------------------------------------------------------------------------
    def send_unsent(self) -> None:
        """Commit step 3, before the changelog producer is flushed: every store's writes that wait
        to be sent (``stores.<name>.write.batch.size``) go to its changelog."""
        for store in self.stores.values():
            store.send_unsent()

    def commit(self) -> dict[str, str]:
        """Commit step 4 (the changelog producer is flushed), here and now: ``freeze``, then
        ``apply_frozen`` and ``settle`` on this thread; returns the checkpoint's state markers."""
        markers = self.freeze()
        self.apply_frozen()
        self.settle()
        return markers

    @property
    def frozen(self) -> bool:
        """Some store's writes are frozen and not yet settled (``freeze`` to ``settle``)."""
        return bool(self._frozen)

    def freeze(self) -> dict[str, str]:
        """Commit step 4, its synchronous half, on the task's thread with the task idle (the
        changelog producer is flushed): set every changelogged store's writes aside at the newest
        acknowledged changelog offset, for ``apply_frozen``; returns the checkpoint's state markers.
        A store without a changelog has no other copy of its state: it is committed here in full."""
        markers: dict[str, str] = {}
        writers: dict[SystemStream, list[LmdbKeyValueStore]] = {}
        for name, store in self.stores.items():
            cl = self._settings.stores[name].changelog
            if cl is not None:
                writers.setdefault(cl, []).append(store)
        for cl, stores in writers.items():
            try:
                self._revert_foreign(cl, stores)
            except StoreError as e:
                raise e.of(stores[0].name, self.task_name) from e
        for name, store in self.stores.items():
            st = self._settings.stores[name]
            try:
                if st.changelog is None:
                    store.commit(-1)
                    continue
                newest = self._producers[st.changelog.system].newest(st.changelog.stream, self._partition)
                offset = max(self._offsets[name], -1 if newest is None else newest)
                store.freeze(offset)
            except StoreError as e:
                raise e.of(name, self.task_name) from e
            self._frozen[name] = offset
            self._offsets[name] = offset
            markers[name] = str(offset)
        return markers

    def apply_frozen(self) -> None:
        """Commit step 4, its asynchronous half, on one thread other than the task's (which may
        read the stores meanwhile, never write LMDB) or on the task's own: write each frozen store to
        LMDB and sync it, then its OFFSET file. A store whose map must grow is left to ``settle``.
        ``StoreError`` naming the store and task when the filesystem refuses a write."""
        for name, offset in self._frozen.items():
            if name in self._written:
                continue
            store = self.stores[name]
            cl = self._settings.stores[name].changelog
            assert cl is not None
            try:
                if not store.apply_frozen():
                    continue
                write_offset_file(store.engine.path, self._changelog_name(cl), offset)
            except StoreError as e:
                raise e.of(name, self.task_name) from e
            self._written.add(name)

    def settle(self) -> None:
        """After ``apply_frozen``, on the task's thread: write what it left (a map that must grow),
        then drop the frozen writes (LMDB holds them). ``StoreError`` as ``apply_frozen``."""
        for name, offset in self._frozen.items():
            store = self.stores[name]
            cl = self._settings.stores[name].changelog
            assert cl is not None
            try:
                store.settle()
                if name not in self._written:
                    write_offset_file(store.engine.path, self._changelog_name(cl), offset)
            except StoreError as e:
                raise e.of(name, self.task_name) from e
        self._frozen.clear()
        self._written.clear()

    def close(self) -> None:
        for store in self.stores.values():
            store.close()
        self.stores.clear()
        for fd in self._locks:
            unlock_store_dir(fd)
        self._locks.clear()


class _TaskChangelogs:
    """A shared changelog producer as one task's commit sees it: flushing flushes the producer,
    failures are those of the task's own changelog partitions."""

    def __init__(self, producer: ChangelogSink, topics: list[str], partition: int) -> None:
        self._producer = producer
        self._topics = topics
        self._partition = partition

    def flush(self, timeout_s: float) -> int:
        return self._producer.flush(timeout_s)

    def take_errors(self) -> list[str]:
        return [e for t in self._topics for e in self._producer.take_errors(t, self._partition)]
