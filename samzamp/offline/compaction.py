"""Changelog compaction with Spark: the latest value of every live key of a store, as a Parquet snapshot.

One Spark task per changelog partition reads the partition from its oldest record to its end (the
PARTITION_EOF event, see ``samzamp.offline.changelog``), keeps the latest record per key (the
highest offset wins, as in Kafka's log compaction) and drops the keys whose latest record is a
tombstone. Memory per task: the live keys of one partition, i.e. one task's store.

The snapshot (``--output DIR``) is Parquet with the columns

    partition int, key binary, value binary, offset bigint

(one row per live key; ``offset`` is the changelog offset of the value), written one Spark
partition per changelog partition and ordered by offset. Beside it, ``_samzamp_snapshot.json``
(Spark readers skip ``_`` files) records the changelog topic and, per partition, ``end``: the
partition's end when it was read. The snapshot is the changelog's state at offsets < end, which is
more than its rows show: a key deleted just before the end has no row. ``restore`` needs ``end``
to know whether a snapshot is usable for a task's checkpointed cut.

With ``--to-topic NAME`` the live records are also written, in offset order and to the same
partition as in the source, to NAME, created fresh with cleanup.policy=compact. Its offsets are new:
checkpoints of the job name the old topic's offsets, so it is not a drop-in changelog for them.

Counts (one line, ``key=value`` words): ``records_read`` = ``keys_kept`` + ``tombstones_dropped``
(keys whose latest record is a tombstone) + ``superseded`` (records a later record of the same key
replaced).
"""

from __future__ import annotations

import functools
import shutil
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from samzamp.api.errors import ConfigError
from samzamp.offline.changelog import ChangelogError, ChangelogSource, PartitionReader, write_partition
from samzamp.offline.job import OfflineError, StoreJob

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "SNAPSHOT_META",
    "CompactionResult",
    "PartitionCompaction",
    "SnapshotMeta",
    "SnapshotPartition",
    "compact_changelog",
    "compact_partition",
    "read_snapshot_meta",
]

SNAPSHOT_META = "_samzamp_snapshot.json"

Row = tuple[int, bytes, bytes, int]  # (partition, key, value, offset)


class SnapshotPartition(msgspec.Struct, frozen=True):
    end: int  # the partition's end offset when it was read: the snapshot holds its state at offsets < end


class SnapshotMeta(msgspec.Struct, frozen=True, tag="1", tag_field="version"):
    """What a Parquet snapshot is a snapshot of (versioned: ``version`` "1")."""

    system: str
    topic: str
    partitions: dict[int, SnapshotPartition]


@dataclass(frozen=True)
class PartitionCompaction:
    partition: int
    end: int
    records_read: int
    keys_kept: int
    tombstones_dropped: int
    superseded: int


@dataclass(frozen=True)
class CompactionResult:
    store: str
    changelog: str  # system.stream
    partitions: tuple[PartitionCompaction, ...]
    to_topic: str | None = None
    records_written: int = 0

    @property
    def records_read(self) -> int:
        return sum(p.records_read for p in self.partitions)

    @property
    def keys_kept(self) -> int:
        return sum(p.keys_kept for p in self.partitions)

    @property
    def tombstones_dropped(self) -> int:
        return sum(p.tombstones_dropped for p in self.partitions)

    @property
    def superseded(self) -> int:
        return sum(p.superseded for p in self.partitions)

    def summary_line(self) -> str:
        line = (
            f"compacted store={self.store} changelog={self.changelog} partitions={len(self.partitions)} "
            f"records_read={self.records_read} keys_kept={self.keys_kept} "
            f"tombstones_dropped={self.tombstones_dropped} superseded={self.superseded}"
        )
        if self.to_topic is not None:
            line += f" to_topic={self.to_topic} records_written={self.records_written}"
        return line


def compact_partition(source: ChangelogSource, partition: int) -> tuple[list[Row], PartitionCompaction]:
    """Read one partition to its end; return its live rows (by offset) and its counts."""
    latest: dict[bytes, tuple[int, bytes | None]] = {}
    reader = PartitionReader(source, partition)
    read = 0
    for offset, key, value in reader:
        latest[key] = (offset, value)
        read += 1
    assert reader.end is not None  # a read without ``upto`` always ends at the partition's end
    rows = sorted(((partition, k, v, o) for k, (o, v) in latest.items() if v is not None), key=lambda r: r[3])
    dropped = len(latest) - len(rows)
    stats = PartitionCompaction(partition, reader.end, read, len(rows), dropped, read - len(latest))
    return rows, stats


def _compact_task(source: ChangelogSource, partitions: Iterable[int]) -> Iterator[tuple[str, Any]]:
    # Tagged output, so one read of Kafka feeds both the Parquet rows and the counts (or the error).
    for p in partitions:
        try:
            rows, stats = compact_partition(source, p)
        except ChangelogError as e:
            yield "error", str(e)
            continue
        for row in rows:
            yield "row", row
        yield "stats", stats


def _write_task(source: ChangelogSource, topic: str, rows: Iterable[Row]) -> Iterator[int]:
    by_partition: dict[int, list[tuple[bytes, bytes]]] = {}
    for partition, key, value, _offset in rows:
        by_partition.setdefault(partition, []).append((key, value))
    for partition, records in by_partition.items():
        yield write_partition(source, topic, partition, iter(records))


def read_snapshot_meta(snapshot: Path) -> SnapshotMeta:
    """The snapshot's metadata; ConfigError (naming ``--snapshot``) if it is missing or unreadable."""
    path = snapshot / SNAPSHOT_META
    try:
        return msgspec.json.decode(path.read_bytes(), type=SnapshotMeta)
    except OSError as e:
        raise ConfigError(
            "--snapshot", f"{snapshot} is not a samzamp changelog snapshot (cannot read {path.name}: {e.strerror})"
        ) from None
    except msgspec.DecodeError as e:
        raise ConfigError("--snapshot", f"{path} cannot be decoded ({e}); was it written by a newer samzamp?") from None


def check_output(output: Path, overwrite: bool) -> None:
    """Refuse (ConfigError) an output directory that holds anything, unless ``overwrite``."""
    if output.exists() and not output.is_dir():
        raise ConfigError("--output", f"{output} exists and is not a directory")
    if output.is_dir() and any(output.iterdir()) and not overwrite:
        raise ConfigError("--output", f"{output} is not empty; pick a new directory or pass --overwrite")


def check_to_topic(job: StoreJob, to_topic: str) -> None:
    if to_topic == job.source.topic:
        raise ConfigError("--to-topic", f"{to_topic!r} is the changelog itself; name a new topic")
    if to_topic in job.admin().partition_counts([to_topic]):
        raise ConfigError("--to-topic", f"topic {to_topic!r} already exists; name a new topic (it must start empty)")


def compact_changelog(
    spark: SparkSession, job: StoreJob, output: Path, to_topic: str | None = None, overwrite: bool = False
) -> CompactionResult:
    """Compact the store's changelog into a Parquet snapshot at ``output`` (and ``to_topic``)."""
    from pyspark import StorageLevel
    from pyspark.sql.types import BinaryType, IntegerType, LongType, StructField, StructType

    source = job.source
    n = job.changelog_partitions
    if n is None:
        raise OfflineError(f"changelog {source.system}.{source.topic} of store {job.store!r} does not exist")
    check_output(output, overwrite)
    if to_topic is not None:
        check_to_topic(job, to_topic)
    if output.is_dir() and not any(output.iterdir()):
        output.rmdir()  # Spark refuses an existing path, even an empty one
    elif output.exists():
        shutil.rmtree(output)  # --overwrite

    sc = spark.sparkContext
    tagged = sc.parallelize(range(n), n).mapPartitions(functools.partial(_compact_task, source))
    tagged.persist(StorageLevel.MEMORY_AND_DISK)  # Kafka is read once; the rows feed Parquet and the topic
    try:
        # First action: read Kafka (once, persisted), collect the counts and any partition's error.
        outcomes = tagged.filter(lambda t: t[0] != "row").collect()
        errors = sorted(str(msg) for tag, msg in outcomes if tag == "error")
        if errors:
            more = f" (and {len(errors) - 1} more partitions)" if len(errors) > 1 else ""
            raise OfflineError(f"compacting store {job.store!r}: {errors[0]}{more}")
        stats: list[PartitionCompaction] = sorted((msg for tag, msg in outcomes), key=lambda s: s.partition)
        rows = tagged.filter(lambda t: t[0] == "row").map(lambda t: t[1])
        schema = StructType(
            [
                StructField("partition", IntegerType(), False),
                StructField("key", BinaryType(), False),
                StructField("value", BinaryType(), False),
                StructField("offset", LongType(), False),
            ]
        )
        spark.createDataFrame(rows, schema).write.mode("errorifexists").parquet(str(output))
        meta = SnapshotMeta(source.system, source.topic, {s.partition: SnapshotPartition(s.end) for s in stats})
        (output / SNAPSHOT_META).write_bytes(msgspec.json.encode(meta))
        written = 0
        if to_topic is not None:
            topic_configs = {
                str(k): str(v) for k, v in job.settings.config.subset(f"stores.{job.store}.changelog.kafka.").items()
            }
            topic_configs["cleanup.policy"] = "compact"
            replication = job.settings.systems[source.system].replication_factor
            if not job.admin().create_stream(to_topic, n, replication, topic_configs):
                raise ConfigError("--to-topic", f"topic {to_topic!r} appeared while compacting; name a new topic")
            written = sum(rows.mapPartitions(functools.partial(_write_task, source, to_topic)).collect())
    finally:
        tagged.unpersist()
    return CompactionResult(job.store, f"{source.system}.{source.topic}", tuple(stats), to_topic, written)
