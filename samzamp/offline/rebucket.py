"""Re-bucketing with Spark: a job's changelogged state moved from the tasks of job.elasticity.factor
F1 to those of F2, with their changelog partitions and checkpoints, so the job restarts at F2 with
every key's state where its messages now go.

The job must be stopped. For every changelogged store:

1. one Spark task per old task (factor F1) reads its changelog partition up to its last checkpoint's
   cut (the state marker: the records a restore would apply), keeps the last value per key (a
   tombstone deletes) and routes each key to the new task of the same base and bucket
   ``key_hash(key) % F2`` (``rebucket_plan``);
2. once every old task was read (and every key routed; none is written if a store is not keyed by
   its messages' keys), the new tasks' changelog partitions are recorded in the task history;
3. one Spark task per new task reads its changelog partition to its end (a reused partition holds
   another task's records, and a restore reads a partition from its oldest record), writes a
   tombstone for each key live there that its state lacks, then its state, waits for every
   acknowledgement, and checks that the partition grew by exactly what it wrote (no other writer);
   the new task's marker is the partition's last offset.

Then each new task's checkpoint is written: input offsets by the split and merge rules
(``commit.elasticity.starting_checkpoints``), state markers at the new changelog ends. With
``build_local`` the new tasks' store directories are restored at those markers
(``restore.restore_stores``), so the restart replays nothing.

Re-running after a failure is safe until the checkpoints are written: the old tasks' records up to
their cuts are never overwritten (writes append), and a new task's partition is written again.
"""

from __future__ import annotations

import functools
import shlex
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from samzamp.api.envelope import SystemStreamPartition
from samzamp.api.errors import ConfigError
from samzamp.model.grouper import parse_task_name, task_order
from samzamp.offline.changelog import ChangelogError, ChangelogSource, PartitionReader, write_partition
from samzamp.offline.job import OfflineError
from samzamp.offline.rebucket_job import (
    RebucketPlan,
    StorePlan,
    record_history,
    store_job,
    write_checkpoints,
)
from samzamp.offline.rebucket_plan import NewTask, OldTask, live_keys, route_key, stale_keys
from samzamp.offline.restore import RestoreResult, restore_stores
from samzamp.systems.kafka import KafkaSystemAdmin

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["NewWritten", "OldRead", "RebucketResult", "StoreResult", "rebucket_stores"]


@dataclass(frozen=True)
class OldRead:
    """What one old task's changelog held at its cut."""

    task: str
    partition: int
    cut: int
    records_read: int
    keys: int
    misplaced: bytes | None = None  # a key whose bucket at the old factor is not the task's


@dataclass(frozen=True)
class NewWritten:
    """What was written for one new task."""

    task: str
    partition: int
    keys: int
    tombstones: int
    marker: int  # the partition's last offset after the write (-1: empty)


@dataclass(frozen=True)
class StoreResult:
    store: str
    changelog: str
    read: tuple[OldRead, ...]
    written: tuple[NewWritten, ...]
    restored: RestoreResult | None = None

    def lines(self) -> list[str]:
        """One line per old task read and per new task written, then a summary (``key=value`` words)."""
        out = [
            f"read store={self.store} task={shlex.quote(r.task)} partition={r.partition} cut={r.cut} "
            f"records_read={r.records_read} keys={r.keys}"
            for r in self.read
        ]
        out += [
            f"wrote store={self.store} task={shlex.quote(w.task)} partition={w.partition} keys={w.keys} "
            f"tombstones={w.tombstones} marker={w.marker}"
            for w in self.written
        ]
        if self.restored is not None:
            out += [t.line() for t in self.restored.tasks]
        out.append(
            f"rebucketed store={self.store} changelog={self.changelog} old_tasks={len(self.read)} "
            f"new_tasks={len(self.written)} records_read={sum(r.records_read for r in self.read)} "
            f"keys={sum(w.keys for w in self.written)} tombstones={sum(w.tombstones for w in self.written)}"
        )
        return out


@dataclass(frozen=True)
class RebucketResult:
    from_factor: int
    to_factor: int
    stores: tuple[StoreResult, ...]
    grown: tuple[str, ...]  # "<topic> <from>-><to>" for each changelog topic given more partitions
    history_entries: int  # entries the task history gained

    def lines(self) -> list[str]:
        out = [f"grew changelog {g}" for g in self.grown]
        for s in self.stores:
            out += s.lines()
        out.append(
            f"rebucketed from_factor={self.from_factor} to_factor={self.to_factor} stores={len(self.stores)} "
            f"history_entries={self.history_entries}"
        )
        return out


def _read_old(source: ChangelogSource, to_factor: int, olds: Iterable[OldTask]) -> Iterator[tuple[str, Any]]:
    # Tagged output: one read of Kafka feeds both the routed records and the counts (or the error).
    for old in olds:
        try:
            reader = PartitionReader(source, old.partition, upto=old.cut)
            state, n = live_keys(reader) if old.cut >= 0 else ({}, 0)
        except ChangelogError as e:
            yield "error", f"task {old.name!r}: {e}"
            continue
        me = parse_task_name(old.name)
        misplaced = None
        for key, value in state.items():
            dest = route_key(me, key, to_factor)
            if dest is None:
                misplaced = key
                break
            yield "record", (dest, (key, value))
        yield "read", OldRead(old.name, old.partition, old.cut, n, len(state), misplaced)


def _write_new(
    source: ChangelogSource, new: dict[int, NewTask], index: int, records: Iterable[tuple[str, tuple[bytes, bytes]]]
) -> Iterator[NewWritten | str]:
    # Spark partition ``index`` holds the records of new task ``new[index]`` (partitionBy below).
    task = new[index]
    try:
        state = {key: value for _name, (key, value) in records}
        reader = PartitionReader(source, task.partition)
        present, _ = live_keys(reader)
        assert reader.end is not None  # a read without ``upto`` always ends at the partition's end
        stale = stale_keys(present, state)
        out: list[tuple[bytes, bytes | None]] = [(k, None) for k in stale]
        out += sorted(state.items())
        n = write_partition(source, source.topic, task.partition, iter(out))
        ssp = SystemStreamPartition(source.system, source.topic, task.partition)
        end = KafkaSystemAdmin(source.kafka).end_offsets([ssp])[ssp]
        if end != reader.end + n:
            raise ChangelogError(
                f"partition {task.partition} grew from {reader.end} to {end} while {n} records were written to it: "
                "another process writes to it (is a container of the job running?)"
            )
    except Exception as e:  # reported to the driver, which names the task; the other tasks go on
        yield f"task {task.name!r}: {type(e).__name__}: {e}"
        return
    yield NewWritten(task.name, task.partition, len(state), len(stale), end - 1)


def _read_store(spark: SparkSession, plan: RebucketPlan, sp: StorePlan) -> tuple[Any, list[OldRead]]:
    """Stage 1 for one store: the routed records (persisted: the caller unpersists) and the reads."""
    from pyspark import StorageLevel

    sc = spark.sparkContext
    tagged = sc.parallelize(sp.old, len(sp.old)).mapPartitions(functools.partial(_read_old, sp.source, plan.to_factor))
    tagged.persist(StorageLevel.MEMORY_AND_DISK)
    outcomes = tagged.filter(lambda t: t[0] != "record").collect()
    errors = sorted(str(msg) for tag, msg in outcomes if tag == "error")
    if errors:
        tagged.unpersist()
        more = f" (and {len(errors) - 1} more tasks)" if len(errors) > 1 else ""
        raise OfflineError(f"reading store {sp.store!r}: {errors[0]}{more}")
    reads: list[OldRead] = sorted((msg for _tag, msg in outcomes), key=lambda r: task_order(r.task))
    for r in reads:
        if r.misplaced is not None:
            tagged.unpersist()
            raise ConfigError(
                f"stores.{sp.store}",
                f"task {r.task!r} holds key {r.misplaced!r}, whose key bucket at factor {plan.from_factor} is not "
                f"the task's: store {sp.store!r} is not keyed by its input messages' serialized key bytes, so its "
                "state cannot follow them to new key buckets; nothing was written",
            )
    return tagged.filter(lambda t: t[0] == "record").map(lambda t: t[1]), reads


def _write_store(sp: StorePlan, plan: RebucketPlan, records: Any) -> list[NewWritten]:
    """Stage 3 for one store: every new task's changelog partition written; their results."""
    index = {t.name: i for i, t in enumerate(plan.new)}
    by_index = dict(enumerate(plan.new))
    results = (
        records.partitionBy(len(plan.new), lambda name: index[name])
        .mapPartitionsWithIndex(functools.partial(_write_new, sp.source, by_index))
        .collect()
    )
    errors = sorted(r for r in results if isinstance(r, str))
    if errors:
        more = f" (and {len(errors) - 1} more tasks)" if len(errors) > 1 else ""
        raise OfflineError(f"writing store {sp.store!r}: {errors[0]}{more}")
    return sorted((r for r in results if isinstance(r, NewWritten)), key=lambda w: task_order(w.task))


def rebucket_stores(
    spark: SparkSession, plan: RebucketPlan, build_local: bool = False, grown: Iterable[str] = ()
) -> RebucketResult:
    """Carry out ``plan`` (module docstring) once ``rebucket_job.prepare`` passed (``grown``: what it
    grew); raises OfflineError, ConfigError (a store not keyed by its messages' keys) or StoreLockedError."""
    staged: list[tuple[StorePlan, Any, list[OldRead]]] = []
    try:
        for sp in plan.stores:
            staged.append((sp, *_read_store(spark, plan, sp)))
        entries = record_history(plan)
        written = {sp.store: _write_store(sp, plan, records) for sp, records, _ in staged}
    finally:
        for _sp, records, _reads in staged:
            records.unpersist()
    markers: dict[str, dict[str, str]] = {t.name: {} for t in plan.new}
    for store, done in written.items():
        for w in done:
            markers[w.task][store] = str(w.marker)
    write_checkpoints(plan, markers)
    results: list[StoreResult] = []
    for sp, _records, reads in staged:
        restored = None
        if build_local:
            cuts = {w.task: w.marker for w in written[sp.store]}
            restored = restore_stores(spark, store_job(plan, sp), cuts)
        source = sp.source
        changelog = f"{source.system}.{source.topic}"
        results.append(StoreResult(sp.store, changelog, tuple(reads), tuple(written[sp.store]), restored))
    return RebucketResult(plan.from_factor, plan.to_factor, tuple(results), tuple(grown), entries)
