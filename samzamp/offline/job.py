"""What an offline job needs to know about one store of a job, read from the job's config and Kafka.

``resolve_store`` turns (config, store name) into a ``StoreJob``: the changelog topic and how to
reach it, the job's tasks with their changelog partitions (as the container finds them: from the
task history its runs recorded in the coordinator stream) and their store directories. ``read_cuts`` reads each task's restore
cut from the checkpoint topic.

Nothing here starts the embedded broker: it is memory-only, so a fresh one never holds a changelog.
The config is checked (unknown keys, types) but the task class is not imported: an offline job
does not run the job's code.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from samzamp.api.errors import ConfigError, SamzampError
from samzamp.commit.checkpoint import Checkpoint
from samzamp.commit.topic_checkpoint import TopicCheckpointManager
from samzamp.config.config import Config
from samzamp.config.schema import check_keys
from samzamp.config.settings import JobSettings
from samzamp.config.system_kinds import system_kind_names
from samzamp.coordinator.job_model_calculator import tasks_over_inputs
from samzamp.coordinator.metadata_store import CoordinatorStreamStore
from samzamp.coordinator.task_history import CHANGELOG_NAMESPACE, SSP_NAMESPACE, TaskHistory, read_task_history
from samzamp.model.job_model import JobModel
from samzamp.offline.changelog import ChangelogSource
from samzamp.storage.dirs import store_dir
from samzamp.systems.base import ReadOnlyProducer, SystemAdmin
from samzamp.systems.kafka import KafkaClientSettings, KafkaSystemAdmin

if TYPE_CHECKING:
    pass

__all__ = [
    "OfflineError",
    "StoreJob",
    "TaskStore",
    "changelog_source",
    "kafka_clients",
    "read_cuts",
    "read_last_checkpoints",
    "resolve_model",
    "resolve_store",
    "state_cut",
]


class OfflineError(SamzampError):
    """An offline job cannot go on: the message names the store, task or partition and why."""


@dataclass(frozen=True)
class TaskStore:
    """One task's share of a store: its changelog partition and its store directory."""

    task_name: str
    partition: int
    store_dir: Path


@dataclass(frozen=True)
class StoreJob:
    """One changelogged store of a job, resolved against the broker."""

    settings: JobSettings
    store: str
    source: ChangelogSource
    tasks: tuple[TaskStore, ...]  # ordered by changelog partition
    changelog_partitions: int | None  # partitions of the changelog topic; None: it does not exist

    def admin(self) -> KafkaSystemAdmin:
        """An admin client on the changelog's system."""
        return KafkaSystemAdmin(self.source.kafka)


def _offline_kinds() -> str:
    return system_kind_names(lambda k: k.offline)


def kafka_clients(settings: JobSettings, system: str, why: str) -> KafkaClientSettings:
    """How the offline job's clients (driver and Spark tasks) reach ``system``."""
    s = settings.systems[system]
    if not s.bootstrap_servers:
        raise ConfigError(
            f"systems.{system}.bootstrap.servers",
            f"is required to {why}: an offline job never starts the embedded broker (it is memory-only, so a "
            "fresh one holds no changelog); name the brokers the job wrote to",
        )
    return KafkaClientSettings.of(settings.name, settings.id, s, s.bootstrap_servers, "offline")


def resolve_store(config: Config, store: str) -> StoreJob:
    """Check the config and find the store's changelog, the job's tasks and their directories.

    Raises ConfigError (bad config) or SamzampError (Kafka unreachable, an input missing).
    """
    check_keys(config)
    settings = JobSettings.from_config(config)
    source = changelog_source(settings, store)
    system, topic = source.system, source.topic
    model, _, _ = resolve_model(settings)
    base = Path(settings.logged_store_base_dir)
    tasks = tuple(
        sorted(
            (TaskStore(t.name, t.changelog_partition, store_dir(base, store, t.name)) for t in model.tasks.values()),
            key=lambda t: t.partition,
        )
    )
    counts = KafkaSystemAdmin(source.kafka).partition_counts([topic])
    n = counts.get(topic)
    needs = tasks[-1].partition + 1 if tasks else 0
    if n is not None and n < needs:
        raise OfflineError(
            f"changelog {system}.{topic} of store {store!r} has {n} partitions, but task {tasks[-1].task_name!r} "
            f"keeps its state in partition {needs - 1}; is this the right changelog?"
        )
    return StoreJob(settings, store, source, tasks, n)


def changelog_source(settings: JobSettings, store: str) -> ChangelogSource:
    """The Kafka changelog of ``store``; ConfigError if the store is not configured or has none."""
    st = settings.stores.get(store)
    if st is None:
        known = ", ".join(sorted(settings.stores)) or "none"
        raise ConfigError(
            f"stores.{store}", f"store {store!r} is not configured (stores.{store}.factory); stores: {known}"
        )
    if st.changelog is None:
        raise ConfigError(f"stores.{store}.changelog", f"is not set: store {store!r} has no changelog to read")
    system, topic = st.changelog.system, st.changelog.stream
    kind = settings.systems[system].kind
    if not kind.offline:
        raise ConfigError(
            f"stores.{store}.changelog",
            f"system {system!r} is {kind}; offline jobs read the changelogs of {_offline_kinds()} systems",
        )
    return ChangelogSource(system, topic, kafka_clients(settings, system, f"read the changelog of store {store!r}"))


def resolve_model(settings: JobSettings, factor: int | None = None) -> tuple[JobModel, TaskHistory, TaskHistory]:
    """The job model a container would build now from the job's inputs and its recorded task history
    (at elasticity factor ``factor``, default job.elasticity.factor): the model, the history read and
    the history the model implies."""
    admins: dict[str, SystemAdmin] = {}
    for ss in settings.task.inputs:
        kind = settings.systems[ss.system].kind
        if not kind.offline:
            raise ConfigError(
                "task.inputs",
                f"{ss} is on a {kind} system; offline jobs need the job's real inputs, on {_offline_kinds()} systems",
            )
        admin = admins.setdefault(
            ss.system, KafkaSystemAdmin(kafka_clients(settings, ss.system, "find the job's tasks"))
        )
        if ss.stream not in admin.partition_counts([ss.stream]):
            raise OfflineError(f"input stream {ss} does not exist, so the job's tasks cannot be known")
    known = _task_history(settings)
    model, implied = tasks_over_inputs(settings, admins, known, factor)
    return model, known, implied


def _task_history(settings: JobSettings) -> TaskHistory:
    """The task history the job's containers recorded (empty if none ran yet), read, never written."""
    system = settings.coordinator_system
    if not settings.systems[system].kind.offline:
        return TaskHistory()
    admin = KafkaSystemAdmin(kafka_clients(settings, system, "read the job's task history"))
    metadata = CoordinatorStreamStore(admin, ReadOnlyProducer("an offline job"), settings.coordinator_topic)
    if not metadata.exists():
        return TaskHistory()
    return read_task_history(metadata.namespace(CHANGELOG_NAMESPACE), metadata.namespace(SSP_NAMESPACE))


def read_last_checkpoints(s: JobSettings) -> dict[str, Checkpoint]:
    """The newest checkpoint of every task in the job's checkpoint topic (none if it does not exist)."""
    kind = s.systems[s.checkpoint_system].kind
    if not kind.offline:
        raise ConfigError(
            "task.checkpoint.system",
            f"{s.checkpoint_system!r} is {kind}; offline jobs read the checkpoints of {_offline_kinds()} systems",
        )
    admin = KafkaSystemAdmin(kafka_clients(s, s.checkpoint_system, "read the job's checkpoints"))
    if s.checkpoint_topic not in admin.partition_counts([s.checkpoint_topic]):
        return {}
    manager = TopicCheckpointManager(
        admin,
        ReadOnlyProducer("an offline job"),
        s.checkpoint_topic,
        s.grouper,
        validate_grouper=s.checkpoint_validation,
    )
    return manager.read_last_checkpoints()


def read_cuts(job: StoreJob) -> dict[str, int]:
    """Each task's restore cut: the changelog offset its last checkpoint covers for the store (-1: none)."""
    cuts = {t.task_name: -1 for t in job.tasks}
    for task, checkpoint in read_last_checkpoints(job.settings).items():
        if task in cuts:  # else a task the job no longer has
            cuts[task] = state_cut(checkpoint, job.store)
    return cuts


def state_cut(checkpoint: Checkpoint, store: str) -> int:
    """The changelog offset ``checkpoint`` covers for ``store`` (-1: no marker); OfflineError if the
    marker is not an offset."""
    marker = checkpoint.state_markers.get(store)
    if marker is None:
        return -1
    task = checkpoint.task_name
    try:
        cut = int(marker)
    except ValueError:
        raise OfflineError(
            f"checkpoint {checkpoint.checkpoint_id} of task {task!r} has state marker {marker!r} for store "
            f"{store!r}; expected a changelog offset"
        ) from None
    if cut < -1:
        raise OfflineError(f"checkpoint of task {task!r} has a negative state marker {marker!r} for {store!r}")
    return cut
