"""Starting offsets with the checkpoints indexed by base task: the same as scanning every checkpoint
for a task's relatives, over random jobs of several partitions and factors."""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping

from samzamp.api.envelope import SystemStreamPartition
from samzamp.commit import elasticity
from samzamp.commit.checkpoint import Checkpoint, CheckpointV1, SSPOffset
from samzamp.model.grouper import parse_task_name, virtual_task_name
from samzamp.model.job_model import TaskModel


def _scanned(tasks: list[TaskModel], last: Mapping[str, Checkpoint]) -> dict[str, dict[SystemStreamPartition, int]]:
    """The reference: every checkpoint looked at for each task."""
    parsed = {name: parse_task_name(name) for name in last}
    out = {}
    for task in tasks:
        me = parse_task_name(task.name)
        relatives = [(parsed[n], last[n]) for n in last if parsed[n].base == me.base]
        if task.name not in last:
            elasticity._refuse_incompatible(task, me, relatives, ())
        offsets = {}
        for ssp in task.ssps:
            offset = elasticity._derived(me, elasticity._partition(ssp), relatives)
            if offset is not None:
                offsets[ssp] = offset
        out[task.name] = offsets
    return out


def test_indexed_relatives_give_what_a_scan_of_every_checkpoint_gives() -> None:
    rng = random.Random(11)
    for _job in range(50):
        partitions = rng.randrange(1, 6)
        last: dict[str, Checkpoint] = {}
        for factor in rng.sample([1, 2, 3, 4, 8], rng.randrange(1, 4)):
            for p in range(partitions):
                for kb in range(factor):
                    if rng.random() < 0.6:
                        name = virtual_task_name(f"Partition {p}", kb, factor)
                        ssp = SystemStreamPartition("kafka", "in", p, kb if factor > 1 else -1)
                        entry = SSPOffset(ssp.system, ssp.stream, ssp.partition, rng.randrange(100), ssp.key_bucket)
                        last[name] = CheckpointV1("1-000000", name, [entry], {})
        factor = rng.choice([1, 2, 3, 4, 8])
        tasks = [
            TaskModel(
                virtual_task_name(f"Partition {p}", kb, factor),
                (SystemStreamPartition("kafka", "in", p, kb if factor > 1 else -1),),
            )
            for p in range(partitions)
            for kb in range(factor)
        ]
        assert _outcome(elasticity.starting_checkpoints, tasks, last) == _outcome(_scanned, tasks, last)


def _outcome(call: Callable[..., object], *args: object) -> object:
    """What ``call(*args)`` returns, or the type and text of what it raises."""
    try:
        return call(*args)
    except Exception as e:
        return (type(e), str(e))
