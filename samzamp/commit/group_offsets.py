"""Input offsets for lag tools: after a checkpoint, commit each input partition's next offset to
the consumer group (``task.checkpoint.commit.group.offsets``).

Kafka Streams, Quix and Faust commit their input offsets to their consumer group, and the tools
operators run (``kafka-consumer-groups``, Burrow, kafka-lag-exporter) read lag from there. samzamp
keeps its offsets in the checkpoint topic only, so this writes a copy for them; samzamp never reads
it back.

What is committed for a partition is where a restart reads it from: the checkpointed offset + 1 (a
checkpoint holds the last *processed* offset, ``samzamp.commit.checkpoint``). The invariant: a
partition's group offset is never ahead of what its checkpoints say will be read next. Hence:

- it is committed only after the checkpoint is acknowledged (``Commits`` calls ``checkpointed``
  once ``commit_task`` returned), for inline and worker tasks alike;
- a partition split into key buckets (job.elasticity.factor > 1) gets the minimum over its buckets
  (the partition is read again from the lowest), committed only by the processor that runs bucket
  0, so that one processor speaks for it; in standalone mode, where buckets may run on several
  processors, that is the minimum over the buckets this processor runs: exact progress per bucket
  stays in the checkpoints and the lag gauges;
- a broadcast partition (task.broadcast.inputs), read whole by every task, gets the minimum over
  them; in standalone mode no processor knows every reader's checkpoint, so none commits one;
- a partition a reader here has no checkpoint for (it never processed anything) is left alone.

Commits are asynchronous and never stop the job: a failure is counted (``OffsetManagerMetrics``
``group-commit-failures``) and logged at most once a minute, and the next commit sends the offsets
again. Event loop thread, except the committers' callbacks (any thread).
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Protocol

from samzamp.api.envelope import SystemStreamPartition
from samzamp.consume.lane import partition_of
from samzamp.metrics.registry import MetricsRegistry
from samzamp.systems.base import GroupOffsetCommitter

__all__ = ["LOG_EVERY_S", "CheckpointedTask", "GroupOffsets", "PartitionReaders"]

log = logging.getLogger(__name__)

LOG_EVERY_S = 60.0  # a failing commit is logged at most this often


class CheckpointedTask(Protocol):
    """What the group offsets need of a task: the SSPs it reads and their checkpointed offsets."""

    @property
    def name(self) -> str: ...

    @property
    def ssps(self) -> frozenset[SystemStreamPartition]: ...

    @property
    def checkpointed(self) -> Mapping[SystemStreamPartition, int]:
        """The last processed offsets of the task's last checkpoint (or the one it started from)."""


class PartitionReaders:
    """Which tasks read each input partition, and through which SSP: the index a task's checkpoint
    is looked up in, kept as tasks come and go, so that one task's commit costs what that task reads,
    not what the processor runs (a processor of thousands of tasks commits each of them in turn)."""

    def __init__(self, tasks: Iterable[CheckpointedTask] = ()) -> None:
        self._readers: dict[SystemStreamPartition, list[tuple[CheckpointedTask, SystemStreamPartition]]] = {}
        for t in tasks:
            self.add(t)

    def add(self, task: CheckpointedTask) -> None:
        for s in task.ssps:
            self._readers.setdefault(partition_of(s), []).append((task, s))

    def remove(self, task: CheckpointedTask) -> None:
        for s in task.ssps:
            p = partition_of(s)
            rs = [r for r in self._readers.get(p, ()) if r[0] is not task]
            if rs:
                self._readers[p] = rs
            else:
                self._readers.pop(p, None)

    def of(self, partition: SystemStreamPartition) -> list[tuple[CheckpointedTask, SystemStreamPartition]]:
        """The (task, SSP) pairs reading ``partition``, in the order the tasks were added."""
        return self._readers.get(partition, [])


class GroupOffsets:
    """Commits the next offset of each input partition to its system's consumer group (see the
    module docstring)."""

    def __init__(
        self,
        committers: Mapping[str, GroupOffsetCommitter],
        metrics: MetricsRegistry,
        *,
        broadcast: Collection[SystemStreamPartition] = frozenset(),
        sole_processor: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``committers``: by system, for the input systems that have consumer groups.
        ``sole_processor``: this processor runs every task of the job (not standalone mode)."""
        self._committers = dict(committers)
        self._broadcast = frozenset(broadcast)
        self._sole = sole_processor
        self._clock = clock
        self._failures = metrics.counter("OffsetManagerMetrics", "group-commit-failures")
        self._lock = threading.Lock()
        # What was last handed to a committer per partition: sent again only when it changed, or
        # after a failure (which forgets it).
        self._sent: dict[SystemStreamPartition, int] = {}
        self._logged_at: float | None = None
        self._unlogged = 0  # failures since the last one logged

    def checkpointed(self, task: CheckpointedTask, tasks: PartitionReaders | Iterable[CheckpointedTask]) -> None:
        """``task``'s checkpoint is written (acknowledged); ``tasks``: every task of this processor
        (``task`` among them), best as their ``PartitionReaders`` index (a plain iterable is indexed
        on each call). Commits its partitions' offsets that changed; never raises."""
        try:
            self._commit(task, tasks)
        except Exception as e:  # never the job's failure
            self._failed(f"task {task.name!r}: {type(e).__name__}: {e}")

    def offsets(
        self, task: CheckpointedTask, tasks: PartitionReaders | Iterable[CheckpointedTask]
    ) -> dict[SystemStreamPartition, int]:
        """The next offset of each partition ``task`` reads that this processor commits (module docstring)."""
        mine = {partition_of(s) for s in task.ssps if s.system in self._committers}
        if not mine:
            return {}
        index = tasks if isinstance(tasks, PartitionReaders) else PartitionReaders(tasks)
        out: dict[SystemStreamPartition, int] = {}
        for p in mine:
            rs = index.of(p)
            if p in self._broadcast and not self._sole:
                continue
            if any(s.key_bucket != -1 for _, s in rs) and not any(s.key_bucket == 0 for _, s in rs):
                continue  # bucket 0's processor speaks for the partition
            checkpointed = [t.checkpointed.get(s) for t, s in rs]
            if not checkpointed or None in checkpointed:
                continue
            out[p] = min(o for o in checkpointed if o is not None) + 1
        return out

    def _commit(self, task: CheckpointedTask, tasks: PartitionReaders | Iterable[CheckpointedTask]) -> None:
        by_system: dict[str, dict[SystemStreamPartition, int]] = {}
        with self._lock:
            for p, offset in self.offsets(task, tasks).items():
                if self._sent.get(p) != offset:
                    self._sent[p] = offset
                    by_system.setdefault(p.system, {})[p] = offset
        for system, offsets in by_system.items():
            committer = self._committers[system]
            committer.commit(offsets, functools.partial(self._done, committer, offsets))

    def _done(
        self, committer: GroupOffsetCommitter, offsets: dict[SystemStreamPartition, int], error: str | None
    ) -> None:
        """A commit ended (any thread)."""
        if error is None:
            return
        with self._lock:
            for p, o in offsets.items():
                if self._sent.get(p) == o:
                    del self._sent[p]  # sent again with the next commit of a reader
        self._failed(
            f"{', '.join(f'{p.system}.{p.stream}[{p.partition}]' for p in sorted(offsets))} to group "
            f"{committer.group!r}: {error}"
        )

    def _failed(self, what: str) -> None:
        now = self._clock()
        with self._lock:
            self._failures.count += 1
            if self._logged_at is not None and now - self._logged_at < LOG_EVERY_S:
                self._unlogged += 1
                return
            self._logged_at, unlogged, self._unlogged = now, self._unlogged, 0
        log.warning(
            "input offsets not committed to the consumer group (for lag tools; the job goes on, its checkpoints "
            "are intact): %s%s",
            what,
            f" ({unlogged} more failure(s) since the last such line)" if unlogged else "",
        )
