"""SSP groupers: Samza's GroupByPartition and GroupBySystemStreamPartition, with Samza's task names.

Task names are part of the checkpoint key, so they must stay exactly as Samza writes them.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from samzamp.api.envelope import SystemStreamPartition

__all__ = ["group"]


def group(grouper: str, ssps: Iterable[SystemStreamPartition]) -> dict[str, frozenset[SystemStreamPartition]]:
    """Map task name -> its SSPs. GroupByPartition co-partitions: partition n of every input is one task."""
    tasks: dict[str, set[SystemStreamPartition]] = defaultdict(set)
    for ssp in ssps:
        if grouper == "GroupByPartition":
            tasks[f"Partition {ssp.partition}"].add(ssp)
        elif grouper == "GroupBySystemStreamPartition":
            tasks[str(ssp)].add(ssp)
        else:
            raise ValueError(f"unknown grouper {grouper!r}")
    return {name: frozenset(s) for name, s in tasks.items()}
