"""SSP groupers: Samza's GroupByPartition and GroupBySystemStreamPartition, with Samza's task names,
and Samza's input expansion (SSPGrouperProxy) on top of them.

Task names are part of the checkpoint key, so they must stay exactly as Samza writes them. Where
an order of tasks matters, ``task_order`` sorts them by their numbers ("Partition 2" before
"Partition 10"), not as strings as Samza does.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Mapping

from samzamp.api.envelope import SystemStreamPartition

__all__ = ["expand", "group", "task_order"]

_NUMBER = re.compile(r"(\d+)")


def task_order(name: str) -> tuple[tuple[int, int | str], ...]:
    """Sort key of a task name that compares its numbers as numbers: ``Partition 2`` sorts before
    ``Partition 10``, ``SystemStreamPartition [kafka, in, 9]`` before ``[kafka, in, 10]``."""
    return tuple((1, int(part)) if part.isdigit() else (0, part) for part in _NUMBER.split(name) if part)


def group(grouper: str, ssps: Iterable[SystemStreamPartition]) -> dict[str, frozenset[SystemStreamPartition]]:
    """Map task name -> its SSPs. GroupByPartition co-partitions: partition n of every input is one task."""
    tasks: dict[str, set[SystemStreamPartition]] = defaultdict(set)
    for ssp in ssps:
        tasks[_task_of(grouper, ssp)].add(ssp)
    return {name: frozenset(s) for name, s in tasks.items()}


def _task_of(grouper: str, ssp: SystemStreamPartition) -> str:
    if grouper == "GroupByPartition":
        return f"Partition {ssp.partition}"
    if grouper == "GroupBySystemStreamPartition":
        return str(ssp)
    raise ValueError(f"unknown grouper {grouper!r}")


def expand(
    grouper: str, ssps: Iterable[SystemStreamPartition], previous: Mapping[SystemStreamPartition, str]
) -> dict[str, frozenset[SystemStreamPartition]]:
    """Group ``ssps`` so that a stream with more partitions than before keeps its tasks (Samza's
    SSPGrouperProxy with its hash mapper, job.systemstreampartition.input.expansion.enabled).

    ``previous``: the task each SSP belonged to in earlier job models. An SSP stays in its task; a
    new partition ``p`` of a stream the job read before with ``n`` partitions joins the task of
    partition ``p % n``; any other SSP (a new stream, or a partition below ``n`` never seen) goes
    where ``grouper`` puts it. Unlike Samza, ``p`` need not come from a multiple of ``n``.
    """
    counts: dict[tuple[str, str], int] = defaultdict(int)
    for old in previous:
        key = (old.system, old.stream)
        counts[key] = max(counts[key], old.partition + 1)
    tasks: dict[str, set[SystemStreamPartition]] = defaultdict(set)
    for ssp in ssps:
        task = previous.get(ssp)
        n = counts.get((ssp.system, ssp.stream), 0)
        if task is None and n and ssp.partition >= n:
            task = previous.get(ssp._replace(partition=ssp.partition % n))
        tasks[task if task is not None else _task_of(grouper, ssp)].add(ssp)
    return {name: frozenset(s) for name, s in tasks.items()}
