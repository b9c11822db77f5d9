"""The job model: which tasks a job has, and what each task reads.

A coordinator publishes a ``JobModel``; a container applies it (``SamzaContainer.apply``). The
model says what a task is, independent of where it runs, so it is also what a worker process is
handed to take a task on (``dispatch.process.frames.AddTask``).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

import msgspec

from samzamp.api.envelope import SystemStreamPartition
from samzamp.coordinator.grouper import expand, group, task_order
from samzamp.coordinator.task_history import TaskHistory, assign_changelog_partitions

__all__ = ["ContainerModel", "JobModel", "TaskModel", "job_model"]


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


class ContainerModel(msgspec.Struct, frozen=True):
    """The tasks one processor of a standalone job runs (Samza's ContainerModel), where it runs,
    and ``node``: the registration (ZooKeeper node) the model was computed for."""

    processor_id: str
    location_id: str
    tasks: tuple[str, ...]
    node: str = ""


class JobModel(msgspec.Struct, frozen=True):
    """The tasks of a job, by name. ``generation`` grows with each model a coordinator publishes,
    so a container can tell a newer model from an older one. ``containers``: which processor runs
    which tasks, by processor id (standalone mode; empty when one processor runs them all)."""

    generation: int
    tasks: dict[str, TaskModel]
    containers: dict[str, ContainerModel] = {}

    def only(self, names: Iterable[str], generation: int) -> JobModel:
        """This model with only the tasks named, as generation ``generation`` (no containers)."""
        keep = set(names)
        return JobModel(generation, {n: t for n, t in self.tasks.items() if n in keep})

    def of_processor(self, processor_id: str, generation: int) -> JobModel:
        """What processor ``processor_id`` runs (nothing when the model has no container for it)."""
        container = self.containers.get(processor_id)
        return self.only(container.tasks if container is not None else (), generation)

    def owners(self) -> dict[str, str]:
        """Task name -> the processor id that runs it."""
        return {task: pid for pid, c in self.containers.items() for task in c.tasks}


def job_model(
    grouper: str,
    ssps: Iterable[SystemStreamPartition],
    history: TaskHistory | None = None,
    *,
    expansion: bool = True,
    generation: int = 1,
    factor: int = 1,
    broadcast: Collection[SystemStreamPartition] = (),
) -> tuple[JobModel, TaskHistory]:
    """The job model of one processor that owns every task, and the task history it implies.

    ``grouper``'s tasks over ``ssps`` (with ``factor`` > 1, ``factor`` virtual tasks per task, each
    reading one key bucket of its partitions; with ``expansion``, a stream's new partitions join the
    tasks ``history`` says its old ones had: ``grouper.expand``), each task's SSPs in sorted order,
    each task's changelog partition as ``history`` recorded it, new tasks on the next free
    partitions. The ``broadcast`` SSPs among ``ssps`` are in no group: every task reads them whole.
    The history returned is ``history`` plus the new tasks and SSPs: record it (``task_history``)
    before anything is written to a changelog partition it assigns.
    """
    history = history or TaskHistory()
    everywhere = sorted(s for s in ssps if s in broadcast)
    grouped_ssps = [s for s in ssps if s not in broadcast]
    if expansion:
        grouped = expand(grouper, grouped_ssps, history.ssp_tasks, factor)
    else:
        grouped = group(grouper, grouped_ssps, factor)
    changelog = assign_changelog_partitions(history.changelog, grouped)
    owners = {ssp: name for name, members in grouped.items() for ssp in members}
    owners.update(history.ssp_tasks)  # an SSP's first task is the one recorded, whatever comes after
    tasks = {
        name: TaskModel(name, tuple(sorted(grouped[name])) + tuple(everywhere), changelog[name])
        for name in sorted(grouped, key=task_order)
    }
    return JobModel(generation, tasks), TaskHistory(owners, changelog)
