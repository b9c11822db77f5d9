"""Which changelog partition belongs to which task (Samza's rule, JobModelCalculator): the task names
sorted, the n-th task gets partition n. (Samza also keeps the mapping in its coordinator stream so that
new tasks never move old ones; samzamp will once it has one.) A changelog has one partition per task."""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["changelog_partitions"]


def changelog_partitions(task_names: Iterable[str]) -> dict[str, int]:
    return {name: i for i, name in enumerate(sorted(task_names))}
