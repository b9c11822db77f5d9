"""The commit of one task, as numbered steps (Samza's TaskInstance.commit, SAMZA-1065 order).

Invariant: everything a checkpoint covers is durable before the checkpoint is written. So:

1. ``before_commit``: the task's CheckpointListenerTask hook (may write to stores);
2. ``snapshot_offsets``: the last processed offsets (the low watermark of completed messages);
3. ``flush_producers``: wait until every output and changelog record the task sent is acknowledged;
4. ``flush_stores``: flush the task's stores and read their newest changelog offsets (issue 4);
5. ``write_checkpoint``: the checkpoint record, acknowledged by the broker;
6. ``on_checkpoint``: tell the task.

Steps 1-2 run on the event loop while the task is idle (no process, window or other commit in flight),
so the snapshot is exact. Steps 3-5 block and run on a thread; the task stays blocked meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from samzamp.api.errors import SystemFailureError
from samzamp.api.task import CheckpointListenerTask

if TYPE_CHECKING:
    from samzamp.api.envelope import SystemStreamPartition
    from samzamp.commit.topic_checkpoint import TopicCheckpointManager
    from samzamp.container.task_instance import TaskInstance

__all__ = ["commit_task"]

log = logging.getLogger(__name__)

FLUSH_TIMEOUT_S = 300.0


def before_commit(ti: TaskInstance) -> None:
    if isinstance(ti.task, CheckpointListenerTask):
        ti.task.before_commit()


def snapshot_offsets(ti: TaskInstance) -> dict[SystemStreamPartition, int]:
    return dict(ti.last_processed)


def flush_producers(ti: TaskInstance) -> None:
    # Runs on the event loop thread on purpose: librdkafka's flush waits until the whole queue is
    # empty, including messages sent while it waits. Blocking the loop (a few ms) stops the loop's
    # tasks from sending meanwhile, so the flush is a barrier that ends.
    for producer in ti.collector.producers_used:
        remaining = producer.flush(FLUSH_TIMEOUT_S)
        if remaining:
            raise SystemFailureError(
                f"task {ti.name!r}: {remaining} outputs not acknowledged within {FLUSH_TIMEOUT_S:.0f} s; not checkpointing"
            )
        errors = producer.take_errors()
        if errors and ti.drop_producer_errors:
            log.warning(
                "task %r: %d sends failed (task.drop.producer.errors=true): %s", ti.name, len(errors), errors[0]
            )
        elif errors:
            raise SystemFailureError(
                f"task {ti.name!r}: {len(errors)} outputs could not be delivered (first: {errors[0]}); not checkpointing "
                "(set task.drop.producer.errors=true to ignore)"
            )


def flush_stores(ti: TaskInstance) -> dict[str, str]:
    return {}  # issue 4: flush LMDB, return each store's newest changelog offset


def write_checkpoint(
    ti: TaskInstance,
    manager: TopicCheckpointManager,
    offsets: dict[SystemStreamPartition, int],
    markers: dict[str, str],
) -> None:
    manager.write_checkpoint(ti.name, offsets, markers)


def on_checkpoint(ti: TaskInstance, offsets: dict[SystemStreamPartition, int]) -> None:
    if isinstance(ti.task, CheckpointListenerTask):
        ti.task.on_checkpoint(offsets)


async def commit_task(ti: TaskInstance, manager: TopicCheckpointManager) -> bool:
    """Run the pipeline for ``ti``; True if a checkpoint was written (False: nothing new to record)."""
    before_commit(ti)
    offsets = snapshot_offsets(ti)
    flush_producers(ti)
    markers = await asyncio.to_thread(flush_stores, ti)
    if offsets == ti.checkpointed and not markers:
        return False
    await asyncio.to_thread(write_checkpoint, ti, manager, offsets, markers)
    ti.checkpointed = offsets
    for ssp, offset in offsets.items():
        ti.checkpointed_gauges[ssp].set(offset)
    on_checkpoint(ti, offsets)
    return True
