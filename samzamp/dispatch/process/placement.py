"""Which worker a task runs in: balanced by input partitions (SSPs), and stable.

A task's load is its number of SSPs. Tasks that arrive go, largest first (then in task order:
"Partition 2" before "Partition 10"), each to the least loaded worker (ties to the lowest index);
tasks already placed never move, as a task's move costs a close, a final commit and a restore.
Placing a whole job on an empty pool is the same rule from zero loads, so the same tasks on the same
pool size land where they did on every start (where their local stores are).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from samzamp.model.grouper import task_order

__all__ = ["assign_tasks", "place_task", "place_tasks"]


def place_task(loads: Sequence[int]) -> int:
    """The worker one arriving task goes to, given ``loads`` (per worker, the SSP count of the tasks
    it holds): the least loaded one, ties to the lowest index."""
    if not loads:
        raise ValueError("tasks cannot be placed on a pool of no workers")
    return min(range(len(loads)), key=lambda w: (loads[w], w))


def place_tasks(arriving: Mapping[str, int], loads: Sequence[int]) -> dict[str, int]:
    """Task name -> worker index for the ``arriving`` tasks (name -> SSP count), given ``loads``: the
    SSP count of the tasks each worker holds already, which stay where they are."""
    load = list(loads)
    out: dict[str, int] = {}
    for name in sorted(arriving, key=lambda n: (-arriving[n], task_order(n))):
        i = out[name] = place_task(load)
        load[i] += arriving[name]
    return out


def assign_tasks(tasks: Mapping[str, Collection[object]], workers: int) -> dict[str, int]:
    """Task name -> worker index for a whole job (task name -> its SSPs) on an empty pool of
    ``workers``: the same for the same tasks and pool size on every start."""
    return place_tasks({name: len(ssps) for name, ssps in tasks.items()}, [0] * workers)
