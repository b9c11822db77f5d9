"""The commit of one task, as numbered steps (Samza's TaskInstance.commit, SAMZA-1065 order).

Invariant: everything a checkpoint covers is durable before the checkpoint is written. So:

1. ``before_commit``: the task's CheckpointListenerTask hook (may write to stores);
2. ``snapshot_offsets``: the last processed offsets (the low watermark of completed messages);
3. ``flush_producers``: wait until every output and changelog record the task sent is acknowledged;
4. ``flush_stores``: flush the task's stores and read their newest changelog offsets;
5. ``write_checkpoint``: the checkpoint record, acknowledged by the broker;
6. ``on_checkpoint``: tell the task.

Steps 1-2 run on the event loop while the task is idle (no process, window or other commit in flight),
so the snapshot is exact. Steps 3-5 block and run on a thread; the task stays blocked meanwhile.
Steps 1, 3, 4 and 6 run where the task runs: for a task in a worker process the loop takes the
snapshot (2) and writes the checkpoint (5), and the worker runs the others when asked (frames
``Commit`` and ``Checkpointed``), so its own producer is the one flushed.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Protocol

from samzamp.api.errors import SystemFailureError
from samzamp.api.task import CheckpointListenerTask
from samzamp.commit.flush_policy import commit_failure, flush_task_producers, require_markers

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from samzamp.api.envelope import SystemStreamPartition
    from samzamp.commit.topic_checkpoint import TopicCheckpointManager
    from samzamp.metrics.registry import Gauge
    from samzamp.systems.base import Flushable

__all__ = [
    "CommittableTask",
    "CommittedStores",
    "LocalCommitTask",
    "ProducersUsed",
    "commit_task",
    "prepare_local_commit",
]


class CommittableTask(Protocol):
    """What the pipeline needs of a task, wherever it runs."""

    name: str
    logged_stores: frozenset[str]  # stores whose changelog markers every checkpoint must carry
    checkpointed: dict[SystemStreamPartition, int]
    checkpointed_gauges: dict[SystemStreamPartition, Gauge]

    async def prepare_commit(self) -> tuple[dict[SystemStreamPartition, int], dict[str, str]]: ...

    def checkpoint_written(self, offsets: dict[SystemStreamPartition, int]) -> None: ...


class ProducersUsed(Protocol):
    """A task's collector, as step 3 sees it."""

    @property
    def producers_used(self) -> Iterable[Flushable]:
        """The producers the task sent through: the ones its commit must flush."""


class CommittedStores(Protocol):
    """A task's stores, as step 4 sees them."""

    def commit(self) -> dict[str, str]:
        """Apply every store's writes at the newest acknowledged changelog offset; the state markers."""

    def changelogs(self) -> Iterable[Flushable]:
        """The changelog producers of the task's stores: step 3 flushes them too."""


class LocalCommitTask(Protocol):
    """What steps 1-4 and 6 need of a task that runs in this process (the hosts implement it; the
    commit stage never imports them)."""

    @property
    def name(self) -> str: ...

    @property
    def task(self) -> object:
        """The user's task object (its CheckpointListenerTask hooks are called)."""

    @property
    def last_processed(self) -> Mapping[SystemStreamPartition, int]:
        """The low watermark of completed messages per SSP."""

    @property
    def collector(self) -> ProducersUsed: ...

    @property
    def storage(self) -> CommittedStores | None: ...

    @property
    def drop_producer_errors(self) -> bool: ...


def before_commit(ti: LocalCommitTask) -> None:
    if isinstance(ti.task, CheckpointListenerTask):
        ti.task.before_commit()


def snapshot_offsets(ti: LocalCommitTask) -> dict[SystemStreamPartition, int]:
    return dict(ti.last_processed)


def flush_producers(ti: LocalCommitTask) -> None:
    """Step 3: every output and changelog record of the task acknowledged, or the commit fails
    (the rule is ``flush_policy.commit_failure``, shared with the worker host)."""
    # Runs on the event loop thread on purpose: librdkafka's flush waits until the whole queue is
    # empty, including messages sent while it waits. Blocking the loop (a few ms) stops the loop's
    # tasks from sending meanwhile, so the flush is a barrier that ends.
    changelogs = ti.storage.changelogs() if ti.storage is not None else ()
    failure = commit_failure(
        ti.name, flush_task_producers(ti.collector.producers_used, changelogs), ti.drop_producer_errors
    )
    if failure is not None:
        raise SystemFailureError(failure)


def flush_stores(ti: LocalCommitTask) -> dict[str, str]:
    """Apply every store's writes with the newest changelog offset; those offsets are the markers."""
    return ti.storage.commit() if ti.storage is not None else {}


def write_checkpoint(
    ti: CommittableTask,
    manager: TopicCheckpointManager,
    offsets: dict[SystemStreamPartition, int],
    markers: dict[str, str],
) -> None:
    manager.write_checkpoint(ti.name, offsets, markers)


def on_checkpoint(ti: LocalCommitTask, offsets: dict[SystemStreamPartition, int]) -> None:
    if isinstance(ti.task, CheckpointListenerTask):
        ti.task.on_checkpoint(offsets)


async def prepare_local_commit(ti: LocalCommitTask) -> tuple[dict[SystemStreamPartition, int], dict[str, str]]:
    """Steps 1-4 for a task that runs in this process."""
    before_commit(ti)
    offsets = snapshot_offsets(ti)
    flush_producers(ti)
    markers = await asyncio.to_thread(flush_stores, ti)
    return offsets, markers


async def commit_task(ti: CommittableTask, manager: TopicCheckpointManager) -> bool:
    """Run the pipeline for ``ti``; True if a checkpoint was written (False: nothing new to record)."""
    offsets, markers = await ti.prepare_commit()
    require_markers(ti.name, ti.logged_stores, markers)
    if offsets == ti.checkpointed and not markers:
        return False
    await asyncio.to_thread(write_checkpoint, ti, manager, offsets, markers)
    ti.checkpointed = offsets
    for ssp, offset in offsets.items():
        ti.checkpointed_gauges[ssp].set(offset)
    ti.checkpoint_written(offsets)
    return True
