"""The job model: which tasks a job has, and what each task reads.

A coordinator publishes a ``JobModel``; a container applies it (``SamzaContainer.apply``). The
model says what a task is, independent of where it runs, so it is also what a worker process is
handed to take a task on (``dispatch.process.frames.AddTask``).
"""

from __future__ import annotations

from collections.abc import Iterable

import msgspec

from samzamp.api.envelope import SystemStreamPartition
from samzamp.coordinator.grouper import group

__all__ = ["JobModel", "TaskModel", "changelog_partitions", "job_model"]


class TaskModel(msgspec.Struct, frozen=True):
    """One task of a job model. ``ssps`` is ordered: a message's SSP is named by its index in it
    (how a worker's frames name them). ``changelog_partition`` is the partition of each store's
    changelog that holds this task's state. ``markers`` are the state markers of the task's last
    checkpoint (store -> changelog offset), from which its stores are restored: filled in by the
    container that starts the task, as only the checkpoint knows them."""

    name: str
    ssps: tuple[SystemStreamPartition, ...]
    changelog_partition: int = 0
    markers: dict[str, str] = {}


class JobModel(msgspec.Struct, frozen=True):
    """The tasks of a job, by name. ``generation`` grows with each model a coordinator publishes,
    so a container can tell a newer model from an older one."""

    generation: int
    tasks: dict[str, TaskModel]

    def only(self, names: Iterable[str], generation: int) -> JobModel:
        """This model with only the tasks named, as generation ``generation``."""
        keep = set(names)
        return JobModel(generation, {n: t for n, t in self.tasks.items() if n in keep})


def changelog_partitions(task_names: Iterable[str]) -> dict[str, int]:
    """Which changelog partition holds which task's state (Samza's rule, JobModelCalculator): the
    task names sorted, the n-th task gets partition n; a changelog has one partition per task.
    (Samza also keeps the mapping in its coordinator stream, so that new tasks never move old ones.)"""
    return {name: i for i, name in enumerate(sorted(task_names))}


def job_model(grouper: str, ssps: Iterable[SystemStreamPartition], generation: int = 1) -> JobModel:
    """The job model of one processor that owns every task: ``grouper``'s tasks over ``ssps``, each
    task's SSPs in sorted order, changelog partitions by sorted task name."""
    grouped = group(grouper, ssps)
    tasks = {
        name: TaskModel(name, tuple(sorted(grouped[name])), partition) for partition, name in enumerate(sorted(grouped))
    }
    return JobModel(generation, tasks)
