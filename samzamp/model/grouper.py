"""SSP groupers: Samza's GroupByPartition and GroupBySystemStreamPartition, with Samza's task names,
virtual tasks (job.elasticity.factor), and Samza's input expansion (SSPGrouperProxy) on top of them.

Task names are part of the checkpoint key, so they must stay exactly as Samza writes them. With an
elasticity factor F > 1 each partition is split into F key buckets, each its own (virtual) task,
named as Samza's virtual-task design named them: ``Partition <p>_<kb>_<F>`` and
``SystemStreamPartition [<system>, <stream>, <p>, <kb>]_<F>``. With F = 1 the names are the plain
ones, so a job's checkpoints from before stay its own.

Where an order of tasks matters, ``task_order`` sorts them by their numbers ("Partition 2" before
"Partition 10"), not as strings as Samza does.
"""

from __future__ import annotations

import functools
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import NamedTuple

from samzamp.api.envelope import SystemStreamPartition

__all__ = ["TaskName", "expand", "group", "parse_task_name", "task_order", "virtual_task_name"]

_NUMBER = re.compile(r"(\d+)")
_SSP_VIRTUAL = re.compile(r"(SystemStreamPartition \[.*), (\d+)\]_(\d+)")
_PARTITION_VIRTUAL = re.compile(r"(.*)_(\d+)_(\d+)")


# Cached: a job of thousands of tasks sorts its task names again at every model computed and every
# rebalance, and the key is a pure function of the name.
@functools.lru_cache(maxsize=1 << 16)
def task_order(name: str) -> tuple[tuple[int, int | str], ...]:
    """Sort key of a task name that compares its numbers as numbers: ``Partition 2`` sorts before
    ``Partition 10``, ``SystemStreamPartition [kafka, in, 9]`` before ``[kafka, in, 10]``, and the
    key buckets of a partition in bucket order (``Partition 0_1_4`` before ``Partition 0_2_4``)."""
    return tuple((1, int(part)) if part.isdigit() else (0, part) for part in _NUMBER.split(name) if part)


class TaskName(NamedTuple):
    """A task name taken apart: the plain (factor 1) name of the task it is a key bucket of, the
    bucket, and the factor. A plain name is bucket 0 of factor 1."""

    base: str
    key_bucket: int
    factor: int

    def is_ancestor_of(self, other: TaskName) -> bool:
        """Whether every message of ``other`` belongs to this task too (a task is its own ancestor):
        the same base, a factor dividing ``other``'s, and ``other``'s bucket within this one."""
        return (
            self.base == other.base
            and other.factor % self.factor == 0
            and other.key_bucket % self.factor == self.key_bucket
        )


def virtual_task_name(base: str, key_bucket: int, factor: int) -> str:
    """The name of key bucket ``key_bucket`` of ``factor`` of the task named ``base`` (F = 1: ``base``)."""
    if factor == 1:
        return base
    if base.startswith("SystemStreamPartition [") and base.endswith("]"):
        return f"{base[:-1]}, {key_bucket}]_{factor}"
    return f"{base}_{key_bucket}_{factor}"


def parse_task_name(name: str) -> TaskName:
    """The inverse of ``virtual_task_name``; any other name is a plain one (bucket 0 of factor 1)."""
    m = _SSP_VIRTUAL.fullmatch(name) or _PARTITION_VIRTUAL.fullmatch(name)
    if m is None:
        return TaskName(name, 0, 1)
    base = m.group(1) + "]" if m.re is _SSP_VIRTUAL else m.group(1)
    return TaskName(base, int(m.group(2)), int(m.group(3)))


def group(
    grouper: str, ssps: Iterable[SystemStreamPartition], factor: int = 1
) -> dict[str, frozenset[SystemStreamPartition]]:
    """Map task name -> its SSPs. GroupByPartition co-partitions: partition n of every input is one
    task (with ``factor`` F > 1: bucket b of partition n of every input is one task)."""
    return _bucketed(((ssp, _base_of(grouper, ssp)) for ssp in ssps), factor)


def _base_of(grouper: str, ssp: SystemStreamPartition) -> str:
    if grouper == "GroupByPartition":
        return f"Partition {ssp.partition}"
    if grouper == "GroupBySystemStreamPartition":
        return str(ssp._replace(key_bucket=-1))
    raise ValueError(f"unknown grouper {grouper!r}")


def _bucketed(
    bases: Iterable[tuple[SystemStreamPartition, str]], factor: int
) -> dict[str, frozenset[SystemStreamPartition]]:
    """Each (partition, base task) as ``factor`` key-bucket SSPs in their virtual tasks (F = 1: as is)."""
    tasks: dict[str, set[SystemStreamPartition]] = defaultdict(set)
    for ssp, base in bases:
        if factor == 1:
            tasks[base].add(ssp)
        else:
            for kb in range(factor):
                tasks[virtual_task_name(base, kb, factor)].add(ssp._replace(key_bucket=kb))
    return {name: frozenset(s) for name, s in tasks.items()}


def expand(
    grouper: str,
    ssps: Iterable[SystemStreamPartition],
    previous: Mapping[SystemStreamPartition, str],
    factor: int = 1,
) -> dict[str, frozenset[SystemStreamPartition]]:
    """Group ``ssps`` (partitions, no key bucket) so that a stream with more partitions than before
    keeps its tasks (Samza's SSPGrouperProxy with its hash mapper,
    job.systemstreampartition.input.expansion.enabled).

    ``previous``: the task each SSP (of any factor) belonged to in earlier job models. A partition
    stays in its task; a new partition ``p`` of a stream the job read before with ``n`` partitions
    joins the task of partition ``p % n``; any other SSP (a new stream, or a partition below ``n``
    never seen) goes where ``grouper`` puts it. Tasks are kept by their plain name, whatever factor
    they had, so a partition's key buckets go to the buckets of the task it had. Unlike Samza,
    ``p`` need not come from a multiple of ``n``.
    """
    counts: dict[tuple[str, str], int] = defaultdict(int)
    base_of: dict[tuple[str, str, int], str] = {}
    for old in sorted(previous):
        key = (old.system, old.stream)
        counts[key] = max(counts[key], old.partition + 1)
        base_of.setdefault((old.system, old.stream, old.partition), parse_task_name(previous[old]).base)
    chosen: list[tuple[SystemStreamPartition, str]] = []
    for ssp in ssps:
        base = base_of.get((ssp.system, ssp.stream, ssp.partition))
        n = counts.get((ssp.system, ssp.stream), 0)
        if base is None and n and ssp.partition >= n:
            base = base_of.get((ssp.system, ssp.stream, ssp.partition % n))
        chosen.append((ssp, base if base is not None else _base_of(grouper, ssp)))
    return _bucketed(chosen, factor)
