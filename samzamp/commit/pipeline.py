"""The commit of one task, as numbered steps (Samza's TaskInstance.commit, SAMZA-1065 order).

Invariant: everything a checkpoint covers is durable before the checkpoint is written. So:

1. ``before_commit``: the task's CheckpointListenerTask hook (may write to stores);
2. ``snapshot_offsets``: the last processed offsets (the low watermark of completed messages);
3. ``flush_producers``: wait until every output and changelog record the task sent is acknowledged;
4. ``commit_stores``: apply the task's stores' writes and read their newest changelog offsets;
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

from samzamp.commit.flush_policy import require_markers

if TYPE_CHECKING:
    from collections.abc import Mapping

    from samzamp.api.envelope import SystemStreamPartition
    from samzamp.commit.topic_checkpoint import TopicCheckpointManager

__all__ = ["CommittableTask", "LocalCommitTask", "commit_task", "prepare_local_commit"]


class CommittableTask(Protocol):
    """What the pipeline needs of a task, wherever it runs."""

    name: str
    logged_stores: frozenset[str]  # stores whose changelog markers every checkpoint must carry
    checkpointed: dict[SystemStreamPartition, int]

    async def prepare_commit(self) -> tuple[dict[SystemStreamPartition, int], dict[str, str]]: ...

    def checkpoint_written(self, offsets: dict[SystemStreamPartition, int]) -> None: ...


class LocalCommitTask(Protocol):
    """Steps 1, 3, 4 and 6 as a task that runs in this process implements them (the task runtime
    does; the commit stage never imports it)."""

    @property
    def name(self) -> str: ...

    def before_commit(self) -> None:
        """Step 1: the task's CheckpointListenerTask hook (may write to stores)."""

    def flush_producers(self) -> None:
        """Step 3: raise unless every output and changelog record the task sent is acknowledged
        (``flush_policy.commit_failure``'s rule)."""

    def commit_stores(self) -> dict[str, str]:
        """Step 4: apply every store's writes at the newest acknowledged changelog offset; the markers."""

    def on_checkpoint(self, offsets: dict[SystemStreamPartition, int]) -> None:
        """Step 6: tell the task."""


def write_checkpoint(
    ti: CommittableTask,
    manager: TopicCheckpointManager,
    offsets: dict[SystemStreamPartition, int],
    markers: dict[str, str],
) -> None:
    manager.write_checkpoint(ti.name, offsets, markers)


async def prepare_local_commit(
    task: LocalCommitTask, last_processed: Mapping[SystemStreamPartition, int]
) -> tuple[dict[SystemStreamPartition, int], dict[str, str]]:
    """Steps 1-4 for a task that runs in this process; ``last_processed`` is its low watermark."""
    task.before_commit()
    offsets = dict(last_processed)  # step 2: the task is idle, so this is exact
    # Step 3 runs on the event loop thread on purpose: librdkafka's flush waits until the whole
    # queue is empty, including messages sent while it waits. Blocking the loop (a few ms) stops
    # the loop's tasks from sending meanwhile, so the flush is a barrier that ends.
    task.flush_producers()
    markers = await asyncio.to_thread(task.commit_stores)
    return offsets, markers


async def commit_task(ti: CommittableTask, manager: TopicCheckpointManager) -> bool:
    """Run the pipeline for ``ti``; True if a checkpoint was written (False: nothing new to record)."""
    offsets, markers = await ti.prepare_commit()
    require_markers(ti.name, ti.logged_stores, markers)
    if offsets == ti.checkpointed and not markers:
        return False
    await asyncio.to_thread(write_checkpoint, ti, manager, offsets, markers)
    ti.checkpointed = offsets
    ti.checkpoint_written(offsets)
    return True
