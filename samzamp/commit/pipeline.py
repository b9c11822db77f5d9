"""The commit of one task, as numbered steps (Samza's TaskInstance.commit, SAMZA-1065 order).

Invariant: everything a checkpoint covers is durable before the checkpoint is written. So:

1. ``before_commit``: the task's CheckpointListenerTask hook (may write to stores);
2. ``snapshot_offsets``: the last processed offsets (the low watermark of completed messages);
3. ``flush_producers``: wait until every output and changelog record the task sent is acknowledged;
4. ``commit_stores``: set the task's stores' writes aside at their newest changelog offsets (the
   markers), then apply them to LMDB and make them durable;
5. ``write_checkpoint``: the checkpoint record, acknowledged by the broker;
6. ``on_checkpoint``: tell the task.

``commit_task`` is the one place this order is written; every host follows it step by step. The
task is idle (no process, window or other commit in flight) from step 1 until the stores' writes
are set aside, so the snapshot of offsets and the markers are exact. That is the commit's
synchronous phase. Where the caller asks for it (``resume``) and the task has changelogged stores,
the task then goes on processing during the asynchronous phase: the writes set aside are applied on
a thread while new writes go to a fresh buffer (``storage.store``), and only once they are durable
is the checkpoint written. A task with no changelogged store has nothing to set aside: its commit
stays synchronous, on_checkpoint included.
Steps 1, 3, 4 and 6 run where the task runs: on the event loop for a task of this process, in its
worker for a task in a worker process (frames ``BeforeCommit``, ``Commit``, ``StoresApplied`` and
``Checkpointed``, so its own producer is the one flushed); steps 2 and 5 run in the container.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from samzamp.commit.flush_policy import require_markers

if TYPE_CHECKING:
    from collections.abc import Mapping

    from samzamp.api.envelope import SystemStreamPartition
    from samzamp.commit.checkpoint_writes import CheckpointWrites
    from samzamp.model.control_state import ControlState

__all__ = ["CommittableTask", "commit_task"]


class CommittableTask(Protocol):
    """The steps a task offers the pipeline, wherever it runs."""

    @property
    def name(self) -> str: ...

    @property
    def logged_stores(self) -> frozenset[str]:
        """Stores whose changelog markers every checkpoint must carry."""

    @property
    def checkpointed(self) -> Mapping[SystemStreamPartition, int]:
        """The offsets of the last checkpoint written."""

    @property
    def checkpointed_control(self) -> ControlState | None:
        """The control state of the last checkpoint written."""

    async def before_commit(self) -> ControlState | None:
        """Step 1: the task's CheckpointListenerTask hook (may write to stores); the task's control
        state (an application's), which the checkpoint carries."""

    def snapshot_offsets(self) -> dict[SystemStreamPartition, int]:
        """Step 2: the low watermark of completed messages, per SSP."""

    async def flush_and_freeze_stores(self, *, asynchronous: bool) -> dict[str, str]:
        """Steps 3 then 4's first half: raise unless every output and changelog record the task sent
        is acknowledged (``flush_policy.commit_failure``'s rule); then set every store's writes
        aside at the newest acknowledged changelog offset; the markers. ``asynchronous``: the
        writes are applied in ``apply_stores`` while the task processes; else before this returns."""

    @property
    def applying_stores(self) -> bool:
        """After ``flush_and_freeze_stores(asynchronous=True)``: there are writes set aside for
        ``apply_stores`` (else it has nothing to do)."""

    async def apply_stores(self) -> None:
        """Step 4's second half: the writes set aside are in LMDB and durable. Raises
        ``StoreError`` naming the store and task when they cannot be written."""

    def checkpoint_written(self, offsets: dict[SystemStreamPartition, int], control: ControlState | None) -> None:
        """Step 6: record ``offsets`` (and ``control``) as checkpointed and tell the task."""


async def commit_task(
    ti: CommittableTask,
    checkpoints: CheckpointWrites,
    *,
    drained: bool = False,
    resume: Callable[[], None] | None = None,
) -> bool:
    """Run the pipeline for ``ti``; True if a checkpoint was written (False: nothing new to record).
    ``drained``: this is the task's final commit of a drain, which the checkpoint says. The
    checkpoint goes out with those of the other commits under way (``CheckpointWrites``).
    ``resume``: called once the synchronous phase is done (the task may process again), if the
    task's stores have writes set aside; None (or nothing set aside): the whole commit is synchronous."""
    control = await ti.before_commit()  # 1
    offsets = ti.snapshot_offsets()  # 2
    markers = await ti.flush_and_freeze_stores(asynchronous=resume is not None)  # 3, 4 (writes set aside)
    require_markers(ti.name, ti.logged_stores, markers)
    if resume is not None and ti.applying_stores:
        resume()  # the asynchronous phase: the task processes on
    await ti.apply_stores()  # 4 (durable): before any checkpoint that covers them
    # A drain's final checkpoint says so, even with nothing else new: the task is then drained in
    # its run wherever it lands (a drained flag outside a run means nothing).
    news_of_drain = drained and bool(checkpoints.run_id)
    if offsets == ti.checkpointed and not markers and not news_of_drain and control == ti.checkpointed_control:
        return False
    await checkpoints.write(ti.name, offsets, markers, control=control, drained=drained)  # 5
    ti.checkpoint_written(offsets, control)  # 6
    return True
