"""New checkpoints written from outside a running job (``samzamp checkpoints set``, ``samzamp
reset-offsets``): which SSP of the job model each new offset is for, and the checkpoints that say it.

An edited task's new checkpoint is its last one with the named offsets replaced: the SSPs not named
keep theirs, and its stores' changelog markers are kept (as Samza's checkpoint tool keeps the state
checkpoint markers), so its stores restore as they were; stores are not reset. Its control state
(an application's progress through drain and end-of-stream messages) is dropped: it described the
old offsets. A task whose offsets do not change is not written at all. The checkpoints are written
outside any run (``run_id`` empty), through the job's ``TopicCheckpointManager``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from samzamp.api.envelope import SystemStreamPartition
from samzamp.api.errors import SamzampError
from samzamp.commit.checkpoint import Checkpoint
from samzamp.commit.checkpoint_file import NewOffsets
from samzamp.commit.topic_checkpoint import TopicCheckpointManager
from samzamp.model.job_model import JobModel

__all__ = ["UnknownTargetError", "changed", "partition_of", "reset_offsets", "resolve", "write_new_offsets"]

Edits = dict[str, dict[SystemStreamPartition, int]]  # task -> SSP of the model -> last processed offset


class UnknownTargetError(SamzampError):
    """A new offset names a task, or a partition of a task, that the job model does not have."""


def partition_of(ssp: SystemStreamPartition) -> SystemStreamPartition:
    """The partition ``ssp`` reads (without its key bucket)."""
    return SystemStreamPartition(ssp.system, ssp.stream, ssp.partition)


def resolve(model: JobModel, new: NewOffsets) -> Edits:
    """Each new offset (task -> partition -> offset) on the task's SSP in ``model``, key bucket
    included. UnknownTargetError naming the first task or partition the model lacks."""
    out: Edits = {}
    for task, offsets in sorted(new.items()):
        tm = model.tasks.get(task)
        if tm is None:
            known = ", ".join(repr(t) for t in list(model.tasks)[:5]) or "none"
            raise UnknownTargetError(
                f"task {task!r} is not in the job model (its tasks: {known}{', ...' if len(model.tasks) > 5 else ''}); "
                "name the tasks `samzamp checkpoints show` prints"
            )
        by_partition = {partition_of(s): s for s in tm.ssps}
        for partition, offset in sorted(offsets.items()):
            ssp = by_partition.get(partition)
            if ssp is None:
                reads = ", ".join(str(partition_of(s)) for s in tm.ssps) or "nothing"
                raise UnknownTargetError(f"task {task!r} does not read {partition} (it reads {reads})")
            out.setdefault(task, {})[ssp] = offset
    return out


def reset_offsets(
    model: JobModel,
    selected: Callable[[SystemStreamPartition], bool],
    next_offsets: Mapping[SystemStreamPartition, int],
) -> Edits:
    """For every task's SSP whose partition is ``selected``: the checkpoint offset that makes the
    task read ``next_offsets[partition]`` next (that offset - 1: a checkpoint holds the last
    processed offset). Every key bucket and every task of a broadcast partition alike."""
    out: Edits = {}
    for task, tm in model.tasks.items():
        for ssp in tm.ssps:
            partition = partition_of(ssp)
            if selected(partition):
                out.setdefault(task, {})[ssp] = next_offsets[partition] - 1
    return out


def changed(last: Mapping[str, Checkpoint], edits: Edits) -> Edits:
    """The tasks of ``edits`` whose checkpoint they change (all of each one's new offsets)."""
    out: Edits = {}
    for task, offsets in edits.items():
        before = last[task].offsets() if task in last else {}
        if any(before.get(ssp) != offset for ssp, offset in offsets.items()):
            out[task] = offsets
    return out


def write_new_offsets(manager: TopicCheckpointManager, last: Mapping[str, Checkpoint], edits: Edits) -> list[str]:
    """Write the new checkpoint of every task that ``edits`` changes (module docstring); the tasks
    written, in order. Blocking: each waits for the broker's acknowledgement."""
    written = []
    for task, offsets in sorted(changed(last, edits).items()):
        previous = last.get(task)
        merged = dict(previous.offsets()) if previous is not None else {}
        merged.update(offsets)
        markers = dict(previous.state_markers) if previous is not None else {}
        manager.write_checkpoint(task, merged, markers)
        written.append(task)
    return written
