"""Where a virtual task starts after job.elasticity.factor changed: Samza's split and merge rules.

A task reads key bucket ``kb`` of factor ``F`` of its partitions (``Partition 0_1_2``). Its checkpoint
is its own, but when the factor changes, the new tasks have none, and their offsets come from the
tasks of the old factor that read the same messages:

- an **ancestor** (a factor dividing ``F``, and ``kb`` within its bucket: ``Partition 0_1_2`` of
  ``Partition 0_3_4``; a task is its own ancestor) processed every message of the task up to its
  offset, so the task may start after the largest ancestor offset (a split loses nothing and
  repeats nothing after a clean stop);
- **descendants** (a factor that ``F`` divides, with buckets within ``kb``: ``Partition 0_1_4``
  and ``Partition 0_3_4`` of ``Partition 0_1_2``) each processed their share, so the task may
  start after the *smallest* offset of one whole factor's descendants (a merge repeats what the
  faster ones processed past it: at-least-once);
- the task starts after the larger of the two.

Offsets are matched by (system, stream, partition), so a broadcast partition, which every task
reads whole, follows the same rules. A factor that neither divides nor is divided by the old one
has no such relation: such a change is refused unless the inputs' offsets are reset.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping

from samzamp.api.envelope import SystemStream, SystemStreamPartition
from samzamp.api.errors import ConfigError
from samzamp.commit.checkpoint import Checkpoint
from samzamp.model.grouper import TaskName, parse_task_name
from samzamp.model.job_model import TaskModel

__all__ = ["check_state_factor", "starting_checkpoints", "written_at"]

_Partition = tuple[str, str, int]


def _partition(ssp: SystemStreamPartition) -> _Partition:
    return (ssp.system, ssp.stream, ssp.partition)


def _compatible(a: int, b: int) -> bool:
    return a % b == 0 or b % a == 0


def starting_checkpoints(
    tasks: Iterable[TaskModel], last: Mapping[str, Checkpoint], reset: Collection[SystemStream] = ()
) -> dict[str, dict[SystemStreamPartition, int]]:
    """Task name -> the last processed offset of each of its SSPs that has one: its own checkpoint,
    or what its ancestors and descendants of other factors in ``last`` imply (module docstring).

    ConfigError naming job.elasticity.factor when a task has no checkpoint of its own while tasks of
    an incompatible factor checkpointed its partitions (streams in ``reset`` do not count: their
    offsets are reset anyway).
    """
    parsed, by_base = _by_base(last)
    out: dict[str, dict[SystemStreamPartition, int]] = {}
    for task in tasks:
        me = parse_task_name(task.name)
        relatives = [(parsed[n], last[n]) for n in by_base.get(me.base, ())]
        if task.name not in last:
            _refuse_incompatible(task, me, relatives, reset)
        offsets: dict[SystemStreamPartition, int] = {}
        for ssp in task.ssps:
            offset = _derived(me, _partition(ssp), relatives)
            if offset is not None:
                offsets[ssp] = offset
        out[task.name] = offsets
    return out


def _by_base(last: Mapping[str, Checkpoint]) -> tuple[dict[str, TaskName], dict[str, list[str]]]:
    """Each task name of ``last`` parsed, and the names by their base task (every factor of one
    partition together), in ``last``'s order: a task looks its relatives up instead of scanning
    every checkpoint, which made a start of thousands of tasks cost tasks squared."""
    parsed = {name: parse_task_name(name) for name in last}
    by_base: dict[str, list[str]] = defaultdict(list)
    for name, task in parsed.items():
        by_base[task.base].append(name)
    return parsed, by_base


def _derived(me: TaskName, partition: _Partition, relatives: list[tuple[TaskName, Checkpoint]]) -> int | None:
    ancestors: list[int] = []
    by_factor: dict[int, dict[int, int]] = defaultdict(dict)  # descendants: factor -> bucket -> offset
    for other, checkpoint in relatives:
        offset = _offset_of(checkpoint, partition)
        if offset is None or not _compatible(other.factor, me.factor):
            continue
        if other.is_ancestor_of(me):
            ancestors.append(offset)
        elif me.is_ancestor_of(other):
            by_factor[other.factor][other.key_bucket] = offset
    candidates = ancestors
    for factor, buckets in by_factor.items():
        # A descendant that never checkpointed started at its ancestors' offset at most: then the
        # group says nothing beyond the ancestors.
        if len(buckets) == factor // me.factor:
            candidates.append(min(buckets.values()))
    return max(candidates, default=None)


def _offset_of(checkpoint: Checkpoint, partition: _Partition) -> int | None:
    for entry in checkpoint.input_offsets:
        if (entry.system, entry.stream, entry.partition) == partition:
            return entry.offset
    return None


def _refuse_incompatible(
    task: TaskModel, me: TaskName, relatives: list[tuple[TaskName, Checkpoint]], reset: Collection[SystemStream]
) -> None:
    partitions = {_partition(s) for s in task.ssps if s.system_stream not in reset}
    for other, checkpoint in relatives:
        if _compatible(other.factor, me.factor):
            continue
        if any((e.system, e.stream, e.partition) in partitions for e in checkpoint.input_offsets):
            raise ConfigError(
                "job.elasticity.factor",
                f"is {me.factor}, but the job's checkpoints were written with factor {other.factor} (task "
                f"{checkpoint.task_name!r}), and neither divides the other, so task {task.name!r} cannot know where "
                f"its key bucket stands; use a multiple or a divisor of {other.factor}, or reset the inputs' "
                "offsets (streams.<id>.samza.reset.offset = true)",
            )


def check_state_factor(
    tasks: Iterable[TaskModel], last: Mapping[str, Checkpoint], logged_stores: Collection[str]
) -> None:
    """ConfigError naming job.elasticity.factor if a task with changelogged stores would not find its
    state: tasks of another factor checkpointed state for its partitions after its own last
    checkpoint (or it has none). Its stores would start empty, or as they were before the other
    factor ran. The state must be re-bucketed first (samzamp rebucket-stores)."""
    if not logged_stores:
        return
    parsed, by_base = _by_base(last)
    for task in tasks:
        me = parse_task_name(task.name)
        own = last.get(task.name)
        since = written_at(own) if own is not None and own.state_markers else None
        for name in by_base.get(me.base, ()):
            other, theirs = parsed[name], last[name]
            if other.factor == me.factor or not theirs.state_markers:
                continue
            if since is None or written_at(theirs) > since:
                raise ConfigError(
                    "job.elasticity.factor",
                    f"is {me.factor}, but the job's changelogged stores were last written by tasks of factor "
                    f"{other.factor} (task {name!r} holds state that task {task.name!r} needs); re-bucket the "
                    f"state first: samzamp rebucket-stores job.toml --from-factor {other.factor}",
                )


def written_at(checkpoint: Checkpoint) -> tuple[int, ...]:
    """When a checkpoint was written: its id is ``<millis>-<sub-millisecond>`` (``new_checkpoint_id``)."""
    try:
        return tuple(int(part) for part in checkpoint.checkpoint_id.split("-"))
    except ValueError:
        return (0,)
