"""The job model: which tasks a job has, and what each task reads.

A coordinator publishes a ``JobModel`` (computed by ``coordinator.job_model_calculator``); a
container applies it (``SamzaContainer.apply``). The model says what a task is, independent of
where it runs, so it is also what a worker process is handed to take a task on
(``dispatch.process.frames.AddTask``), and what the commit stage reads a task's inputs from.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping

import msgspec

from samzamp.api.envelope import SystemStream, SystemStreamPartition
from samzamp.model.control_state import ControlState

__all__ = ["ContainerModel", "IntermediateStreamModel", "JobModel", "TaskModel", "intermediate_streams"]


class IntermediateStreamModel(msgspec.Struct, frozen=True):
    """An intermediate stream in a job model: its partitions, and how many tasks of the whole job
    send to it (virtual tasks included): the count of named control messages (end of stream,
    drain) its aggregate partition waits for, Samza's producer task count."""

    partitions: int
    producers: int


class TaskModel(msgspec.Struct, frozen=True):
    """One task of a job model. ``ssps`` is ordered: a message's SSP is named by its index in it
    (how a worker's frames name them). ``changelog_partition`` is the partition of each store's
    changelog that holds this task's state. ``markers`` are the state markers of the task's last
    checkpoint (store -> changelog offset), from which its stores are restored: filled in by the
    container that starts the task, as only the checkpoint knows them. ``intermediate``: each
    intermediate stream of an application (``system.stream``) as the whole job sees it."""

    name: str
    ssps: tuple[SystemStreamPartition, ...]
    changelog_partition: int = 0
    markers: dict[str, str] = {}
    intermediate: dict[str, IntermediateStreamModel] = {}
    # Filled in like ``markers``: the job's run (app.run.id) the task starts in, and the control
    # state of its last checkpoint (whatever run wrote it; the task keeps it only for its own run).
    run_id: str = ""
    control: ControlState | None = None


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


def intermediate_streams(
    tasks: Mapping[str, TaskModel], feeds: Mapping[SystemStream, Collection[SystemStream]]
) -> dict[str, IntermediateStreamModel]:
    """Each intermediate stream (``system.stream``) of ``feeds`` (intermediate stream -> the
    streams whose messages reach it) over ``tasks``: its partitions (as the tasks read them) and
    its producers, the tasks that read any stream feeding it."""
    out: dict[str, IntermediateStreamModel] = {}
    for target, sources in feeds.items():
        wanted = set(sources)
        producers = sum(1 for t in tasks.values() if any(s.system_stream in wanted for s in t.ssps))
        partitions = 1 + max(
            (s.partition for t in tasks.values() for s in t.ssps if s.system_stream == target), default=-1
        )
        out[f"{target.system}.{target.stream}"] = IntermediateStreamModel(partitions, producers)
    return out
