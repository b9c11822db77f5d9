"""Bulk restore with Spark: every task's store directory rebuilt at its checkpointed cut, in parallel.

The cut of a task is the changelog offset C its last checkpoint covers for the store
(``state_markers[store]``; no checkpoint or no marker: C = -1, an empty store, on which the
container, keeping existing state (task.transactional.state.retain.existing.state), replays the
whole changelog). A restored store
holds exactly the changelog records with offset <= C (latest per key wins, a tombstone deletes):
records after C are writes no checkpoint covers, which the container reverts itself. The LMDB data
records C (``LmdbEngine.apply(..., changelog_offset=C)``) and so does the OFFSET file, so the
container's next start trusts the store and replays only the changelog after C.

One Spark task per job task: it takes the store directory's lock (``storage.dirs``) and holds it
while it wipes the directory (all but the lock file, the OFFSET file first), writes LMDB in batches
and finally writes the OFFSET file. A task that fails midway leaves no OFFSET file, so the container
rebuilds that store from the changelog. Before Spark starts, every existing target directory is
checked and the restore refuses (StoreLockedError) if a live process holds any of them.

With a snapshot (``compaction``'s Parquet output) a task starts from the snapshot's rows of its
partition and reads the changelog only after the snapshot's end. A snapshot keeps one row per live
key, so it cannot give back the value a key had at C if the key changed (or was deleted) between C
and the snapshot's end: a snapshot whose end lies past a task's cut (end - 1 > C) is refused.

Reading up to C relies on the changelog still holding every record <= C that no record <= C
superseded; a compacted changelog keeps that only while its min.compaction.lag.ms covers the time
since the checkpoint (Samza's default for transactional state: 4 h).
"""

from __future__ import annotations

import functools
import shlex
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from samzamp.api.errors import ConfigError
from samzamp.offline.changelog import ChangelogSource, PartitionReader
from samzamp.offline.compaction import SnapshotMeta, read_snapshot_meta
from samzamp.offline.job import OfflineError, StoreJob
from samzamp.storage.dirs import LOCK_FILE, StoreLockedError, lock_store_dir, unlock_store_dir
from samzamp.storage.lmdb import DEFAULT_MAP_SIZE, LmdbEngine
from samzamp.storage.offset_file import OFFSET_FILE, write_offset_file

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "RestoreResult",
    "TaskRestore",
    "TaskRestored",
    "check_unlocked",
    "plan_restore",
    "restore_stores",
    "restore_task",
]

_BATCH = 10_000  # records per LMDB transaction

SnapshotRow = tuple[bytes, bytes, int]  # (key, value, offset)


@dataclass(frozen=True)
class TaskRestore:
    """What one Spark task restores (picklable: crosses to the Spark worker)."""

    task_name: str
    partition: int
    cut: int  # C: restore the changelog records with offset <= C
    store_dir: str
    snapshot_end: int | None = None  # with a snapshot: it holds the state at offsets < snapshot_end (<= C + 1)
    map_size: int = DEFAULT_MAP_SIZE  # stores.<name>.lmdb.map.size (LMDB grows it when full)
    checksums: bool = True  # stores.<name>.lmdb.checksums: the store format written


@dataclass(frozen=True)
class TaskRestored:
    """What one Spark task did (or why it could not)."""

    task_name: str
    partition: int
    cut: int
    store_dir: str
    snapshot_records: int = 0
    changelog_records: int = 0
    tombstones: int = 0
    keys: int = 0
    error: str | None = None
    locked: bool = False

    def line(self) -> str:
        return (
            f"restored task={shlex.quote(self.task_name)} partition={self.partition} cut={self.cut} keys={self.keys} "
            f"snapshot_records={self.snapshot_records} changelog_records={self.changelog_records} "
            f"tombstones={self.tombstones} dir={shlex.quote(self.store_dir)}"
        )


@dataclass(frozen=True)
class RestoreResult:
    store: str
    changelog: str
    tasks: tuple[TaskRestored, ...]

    def summary_line(self) -> str:
        t = self.tasks
        return (
            f"restored store={self.store} changelog={self.changelog} tasks={len(t)} keys={sum(x.keys for x in t)} "
            f"snapshot_records={sum(x.snapshot_records for x in t)} "
            f"changelog_records={sum(x.changelog_records for x in t)} tombstones={sum(x.tombstones for x in t)}"
        )


def plan_restore(job: StoreJob, cuts: dict[str, int], snapshot: SnapshotMeta | None = None) -> list[TaskRestore]:
    """One TaskRestore per task. With a snapshot, ConfigError (``--snapshot``) if it is of another
    changelog, lacks a task's partition, or ends past a task's cut."""
    where = f"{job.source.system}.{job.source.topic}"
    if snapshot is not None and (snapshot.system, snapshot.topic) != (job.source.system, job.source.topic):
        raise ConfigError(
            "--snapshot",
            f"the snapshot is of changelog {snapshot.system}.{snapshot.topic}, but store {job.store!r} uses {where}",
        )
    if job.changelog_partitions is None and any(cuts[t.task_name] >= 0 for t in job.tasks):
        raise OfflineError(
            f"changelog {where} of store {job.store!r} does not exist, but checkpoints cover records in it"
        )
    plans = []
    for t in job.tasks:
        cut = cuts[t.task_name]
        end = None
        if snapshot is not None:
            part = snapshot.partitions.get(t.partition)
            if part is None:
                raise ConfigError(
                    "--snapshot", f"the snapshot has no partition {t.partition} of {where} (task {t.task_name!r})"
                )
            if part.end - 1 > cut:
                raise ConfigError(
                    "--snapshot",
                    f"the snapshot holds {where} partition {t.partition} up to offset {part.end - 1}, past task "
                    f"{t.task_name!r}'s checkpointed cut {cut}: it lacks the values keys had at the cut; use a "
                    "snapshot taken at or before the cut, or restore from the changelog alone",
                )
            end = part.end
        st = job.settings.stores[job.store]
        plans.append(TaskRestore(t.task_name, t.partition, cut, str(t.store_dir), end, st.map_size, st.checksums))
    return plans


def check_unlocked(plans: Iterable[TaskRestore]) -> None:
    """Raise StoreLockedError if a live process holds any existing target directory (each lock is taken
    and released at once; nothing else is touched)."""
    for plan in plans:
        path = Path(plan.store_dir)
        if (path / LOCK_FILE).exists():
            unlock_store_dir(lock_store_dir(path))


def _wipe(path: Path) -> None:
    """Empty a store directory except its lock file (which the caller holds); the OFFSET file goes first."""
    (path / OFFSET_FILE).unlink(missing_ok=True)
    for entry in path.iterdir():
        if entry.name == LOCK_FILE:
            continue
        if entry.is_dir() and not entry.is_symlink():
            LmdbEngine.wipe(entry)
        else:
            entry.unlink()


def restore_task(source: ChangelogSource, plan: TaskRestore, snapshot_rows: Iterable[SnapshotRow] = ()) -> TaskRestored:
    """Rebuild one task's store directory at its cut. Runs in a Spark task; reports failures in the result."""
    path = Path(plan.store_dir)
    try:
        fd = lock_store_dir(path)
    except StoreLockedError as e:
        return TaskRestored(plan.task_name, plan.partition, plan.cut, plan.store_dir, error=str(e), locked=True)
    try:
        _wipe(path)
        engine = LmdbEngine(path, plan.map_size, sync=False, checksums=plan.checksums)  # one sync at the end
        counts = [0, 0, 0]  # snapshot rows, changelog records, tombstones
        try:
            batch: list[tuple[bytes, bytes | None]] = []
            for key, value, offset in snapshot_rows:
                if plan.snapshot_end is None or offset >= plan.snapshot_end:
                    raise OfflineError(
                        f"snapshot row at offset {offset} lies past the snapshot's end {plan.snapshot_end}"
                    )
                batch.append((key, value))
                counts[0] += 1
                if len(batch) >= _BATCH:
                    engine.apply(batch, None)
                    batch = []
            start = plan.snapshot_end  # None: from the oldest record
            if plan.cut >= 0 and (start is None or start <= plan.cut):
                for _offset, ckey, cvalue in PartitionReader(source, plan.partition, start=start, upto=plan.cut):
                    batch.append((ckey, cvalue))
                    counts[1] += 1
                    counts[2] += cvalue is None
                    if len(batch) >= _BATCH:
                        engine.apply(batch, None)
                        batch = []
            engine.apply(batch, changelog_offset=plan.cut)
            engine.sync()
            keys = engine.count()
        finally:
            engine.close()
        write_offset_file(path, source.ssp_name(plan.partition), plan.cut)
    except Exception as e:  # reported to the driver, which names the task; the other tasks go on
        return TaskRestored(plan.task_name, plan.partition, plan.cut, plan.store_dir, error=f"{type(e).__name__}: {e}")
    finally:
        unlock_store_dir(fd)
    return TaskRestored(
        plan.task_name,
        plan.partition,
        plan.cut,
        plan.store_dir,
        snapshot_records=counts[0],
        changelog_records=counts[1],
        tombstones=counts[2],
        keys=keys,
    )


def _restore_plans(source: ChangelogSource, plans: Iterable[TaskRestore]) -> Iterator[TaskRestored]:
    for plan in plans:
        yield restore_task(source, plan)


def _restore_with_snapshot(
    source: ChangelogSource, plans: dict[int, TaskRestore], index: int, rows: Iterable[tuple[int, SnapshotRow]]
) -> Iterator[TaskRestored]:
    # Spark partition ``index`` holds the snapshot rows of changelog partition ``index`` (partitionBy
    # below); a partition of a task the job no longer has is not restored.
    plan = plans.get(index)
    if plan is not None:
        yield restore_task(source, plan, (row for _p, row in rows))


def restore_stores(
    spark: SparkSession, job: StoreJob, cuts: dict[str, int], snapshot: Path | None = None
) -> RestoreResult:
    """Restore every task's store directory at its cut; raise StoreLockedError or OfflineError on failure."""
    meta = read_snapshot_meta(snapshot) if snapshot is not None else None
    plans = plan_restore(job, cuts, meta)
    check_unlocked(plans)
    sc = spark.sparkContext
    source = job.source
    n = len(plans)
    if snapshot is None:
        results = sc.parallelize(plans, n).mapPartitions(functools.partial(_restore_plans, source)).collect()
    else:
        by_partition = {p.partition: p for p in plans}
        width = max(by_partition) + 1
        rows = (
            spark.read.parquet(str(snapshot))
            .rdd.filter(lambda r: r["partition"] < width)
            .map(lambda r: (int(r["partition"]), (bytes(r["key"]), bytes(r["value"]), int(r["offset"]))))
            .partitionBy(width, lambda p: p)
        )
        results = rows.mapPartitionsWithIndex(functools.partial(_restore_with_snapshot, source, by_partition)).collect()
    results.sort(key=lambda r: r.partition)
    locked = [r for r in results if r.locked]
    if locked:
        raise StoreLockedError(
            f"{locked[0].error} (taken while the restore ran; restored {len(results) - len(locked)} other tasks)"
        )
    failed = [r for r in results if r.error is not None]
    if failed:
        more = f" (and {len(failed) - 1} more tasks)" if len(failed) > 1 else ""
        raise OfflineError(f"restoring task {failed[0].task_name!r} of store {job.store!r}: {failed[0].error}{more}")
    return RestoreResult(job.store, f"{source.system}.{source.topic}", tuple(results))
