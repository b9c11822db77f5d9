"""Re-bucketing, the driver's side: the plan read from the job's config, inputs, task history and
checkpoints (``plan_rebucket``, writes nothing), the checks that refuse a job that is running or
whose changelog is too small, and the writes to the job's metadata: the task history before any
changelog partition is written, the new tasks' checkpoints after.

``rebucket.py`` runs the plan on Spark; ``rebucket_plan.py`` is what goes where.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from samzamp.api.envelope import SystemStreamPartition
from samzamp.api.errors import ConfigError, SamzampError, SystemFailureError
from samzamp.commit.checkpoint import Checkpoint
from samzamp.commit.elasticity import starting_checkpoints
from samzamp.commit.topic_checkpoint import TopicCheckpointManager
from samzamp.config.config import Config
from samzamp.config.schema import check_keys
from samzamp.config.settings import JobSettings
from samzamp.coordinator.factory import job_coordinator_factory
from samzamp.coordinator.metadata_store import CoordinatorStreamStore
from samzamp.coordinator.run_id import StreamRunView
from samzamp.coordinator.task_history import CHANGELOG_NAMESPACE, SSP_NAMESPACE, TaskHistory, record_task_history
from samzamp.drain.deployment import read_deployment
from samzamp.model.grouper import task_order
from samzamp.offline.changelog import ChangelogSource
from samzamp.offline.job import (
    OfflineError,
    StoreJob,
    TaskStore,
    changelog_source,
    kafka_clients,
    read_last_checkpoints,
    resolve_model,
    state_cut,
)
from samzamp.offline.rebucket_plan import NewTask, OldTask, assign_partitions, check_bases, check_latest_factor
from samzamp.offline.restore import check_unlocked, plan_restore
from samzamp.storage.dirs import store_dir
from samzamp.systems.kafka import KafkaSystemAdmin, KafkaSystemProducer

__all__ = [
    "JobRunningError",
    "RebucketPlan",
    "StorePlan",
    "check_local_dirs",
    "check_not_running",
    "ensure_partitions",
    "plan_rebucket",
    "prepare",
    "record_history",
    "store_job",
    "write_checkpoints",
]


class JobRunningError(SamzampError):
    """A container of the job may be running: its coordinator stream says so."""


@dataclass(frozen=True)
class StorePlan:
    """One changelogged store: its changelog, the old tasks' state in it and its partition counts."""

    store: str
    source: ChangelogSource
    old: tuple[OldTask, ...]  # in task order
    partitions: int  # the changelog topic's partitions
    needs: int  # partitions the new tasks need


@dataclass(frozen=True)
class RebucketPlan:
    """Everything decided before anything is written (``plan_rebucket``)."""

    settings: JobSettings
    from_factor: int
    to_factor: int
    stores: tuple[StorePlan, ...]
    new: tuple[NewTask, ...]  # in task order
    known: TaskHistory  # the task history as read
    history: TaskHistory  # the task history to record: ``known`` plus the new tasks
    offsets: dict[str, dict[SystemStreamPartition, int]]  # new task -> its starting checkpoint's input offsets


def plan_rebucket(config: Config, from_factor: int) -> RebucketPlan:
    """Check the job and decide what goes where; writes nothing. ConfigError (a refusal: same
    factors, checkpoints of another factor, a store not keyed for it), JobRunningError, or
    SamzampError (Kafka unreachable)."""
    check_keys(config)
    settings = JobSettings.from_config(config)
    to_factor = settings.elasticity_factor
    if from_factor < 1:
        raise ConfigError("--from-factor", f"is {from_factor}; a factor is >= 1")
    if from_factor == to_factor:
        raise ConfigError(
            "--from-factor", f"is {from_factor}, the same as job.elasticity.factor: there is nothing to re-bucket"
        )
    stores = sorted(settings.logged_stores)
    if not stores:
        raise ConfigError("stores", "the job has no store with a changelog: there is no state to re-bucket")
    check_not_running(settings)
    old_model, known, _ = resolve_model(settings, from_factor)
    new_model, _, implied = resolve_model(settings, to_factor)
    check_bases(old_model.tasks, new_model.tasks, to_factor)
    last = read_last_checkpoints(settings)
    check_latest_factor(old_model.tasks, last, from_factor, stores)
    # Refuses a change between factors that neither divides (job.elasticity.factor) before anything is written.
    offsets = starting_checkpoints(new_model.tasks.values(), last)
    try:
        partitions = assign_partitions(new_model.tasks, known.changelog)
    except ValueError as e:
        raise OfflineError(f"{e}; the job's coordinator stream was written by something else?") from None
    new = tuple(NewTask(n, partitions[n]) for n in sorted(partitions, key=task_order))
    history = TaskHistory(implied.ssp_tasks, {**known.changelog, **partitions})
    needs = max(t.partition for t in new) + 1
    plans = []
    for store in stores:
        source = changelog_source(settings, store)
        old = tuple(_old_task(name, known, last, store) for name in sorted(old_model.tasks, key=task_order))
        have = KafkaSystemAdmin(source.kafka).partition_counts([source.topic]).get(source.topic)
        if have is None:
            raise OfflineError(f"changelog {source.system}.{source.topic} of store {store!r} does not exist")
        plans.append(StorePlan(store, source, old, have, needs))
    return RebucketPlan(settings, from_factor, to_factor, tuple(plans), new, known, history, offsets)


def _old_task(name: str, known: TaskHistory, last: dict[str, Checkpoint], store: str) -> OldTask:
    checkpoint = last.get(name)
    cut = state_cut(checkpoint, store) if checkpoint is not None else -1
    partition = known.changelog.get(name)
    if partition is None:
        if cut >= 0:
            raise OfflineError(
                f"task {name!r} checkpointed state of store {store!r}, but the job's task history records no "
                "changelog partition for it; was the coordinator stream deleted?"
            )
        partition = -1  # never ran: nothing to read
    return OldTask(name, partition, cut)


def check_not_running(settings: JobSettings) -> None:
    """JobRunningError if a process of the job runs, as ``samzamp.drain.deployment`` knows it: a
    standalone job's members of its run on ZooKeeper; a container whose record says running, on this
    host with a live pid, or on another host (which cannot be checked from here). A container that
    died without saying so (its pid is gone) does not count."""
    # Where the run is kept is the job's coordinator factory's choice: a standalone job's on ZooKeeper.
    view = job_coordinator_factory(settings).run_view(lambda: _coordinator_stream(settings))
    if view is None:
        return
    try:
        deployment = read_deployment(view)
        members = view.members()
    finally:
        view.close()
    if not deployment.runs:
        return
    if members is not None:
        where = f"{members} processor(s) registered in {view.where}"
    else:
        run = deployment.record
        assert run is not None
        here = (
            f"pid {run.pid} on this host"
            if deployment.checked
            else f"pid {run.pid} on host {run.host}, which cannot be checked from here"
        )
        where = f"run {run.run_id}, {here}"
    raise JobRunningError(
        f"job {settings.name}-{settings.id} is running ({where}); stop it (SIGTERM) and run this again: a "
        "processor writing while its state is re-bucketed would lose that state"
    )


def _coordinator_stream(settings: JobSettings) -> StreamRunView | None:
    """The job's coordinator stream, None when there is none to read (in memory, or never created)."""
    system = settings.coordinator_system
    if not settings.systems[system].kind.offline:
        return None
    admin = KafkaSystemAdmin(kafka_clients(settings, system, "read the job's coordinator stream"))
    if settings.coordinator_topic not in admin.partition_counts([settings.coordinator_topic]):
        return None
    producer = KafkaSystemProducer(kafka_clients(settings, system, "read the job's coordinator stream"))
    return StreamRunView(CoordinatorStreamStore(admin, producer, settings.coordinator_topic), producer.stop)


def ensure_partitions(plan: RebucketPlan) -> list[str]:
    """Give each changelog topic the partitions the new tasks need (CreatePartitions); ConfigError
    naming the store, the topic and the count if the broker cannot. Returns what was grown."""
    grown = []
    for sp in plan.stores:
        if sp.partitions >= sp.needs:
            continue
        src = sp.source
        try:
            KafkaSystemAdmin(src.kafka).add_partitions(src.topic, sp.needs)
        except SystemFailureError as e:
            raise ConfigError(
                f"stores.{sp.store}.changelog",
                f"changelog topic {src.system}.{src.topic} of store {sp.store!r} has {sp.partitions} partitions, but "
                f"the {len(plan.new)} tasks of factor {plan.to_factor} need {sp.needs} (one per task), and the broker "
                f"did not add them ({e}); add partitions to the topic (to {sp.needs}) and run this again",
            ) from None
        grown.append(f"{src.system}.{src.topic} {sp.partitions}->{sp.needs}")
    return grown


def prepare(plan: RebucketPlan, build_local: bool) -> list[str]:
    """What must hold before Spark starts: with ``build_local``, no new task's store directory held by
    a live process (StoreLockedError); every changelog with a partition per new task (grown if the
    broker can: ``ensure_partitions``). Returns what was grown."""
    if build_local:
        check_local_dirs(plan)
    return ensure_partitions(plan)


def check_local_dirs(plan: RebucketPlan) -> None:
    """StoreLockedError if a live process holds a new task's store directory (for ``build_local``)."""
    for sp in plan.stores:
        check_unlocked(plan_restore(store_job(plan, sp), {t.name: -1 for t in plan.new}))


def store_job(plan: RebucketPlan, sp: StorePlan) -> StoreJob:
    """``sp``'s store as a StoreJob of the new tasks (for ``restore``)."""
    base = Path(plan.settings.logged_store_base_dir)
    tasks = tuple(TaskStore(t.name, t.partition, store_dir(base, sp.store, t.name)) for t in plan.new)
    return StoreJob(plan.settings, sp.store, sp.source, tasks, max(sp.partitions, sp.needs))


def record_history(plan: RebucketPlan) -> int:
    """Record the new tasks' changelog partitions before anything is written to them."""
    s = plan.settings
    clients = kafka_clients(s, s.coordinator_system, "record the job's task history")
    producer = KafkaSystemProducer(clients)
    try:
        metadata = CoordinatorStreamStore(
            KafkaSystemAdmin(clients), producer, s.coordinator_topic, s.coordinator_replication_factor
        )
        metadata.create_topic()
        return record_task_history(
            metadata.namespace(CHANGELOG_NAMESPACE), metadata.namespace(SSP_NAMESPACE), plan.known, plan.history
        )
    finally:
        producer.stop()


def write_checkpoints(plan: RebucketPlan, markers: dict[str, dict[str, str]]) -> None:
    """Each new task's checkpoint: its starting input offsets and ``markers[task]`` (store -> marker)."""
    s = plan.settings
    clients = kafka_clients(s, s.checkpoint_system, "write the new tasks' checkpoints")
    producer = KafkaSystemProducer(clients, "checkpoint-producer")
    try:
        manager = TopicCheckpointManager(
            KafkaSystemAdmin(clients),
            producer,
            s.checkpoint_topic,
            s.grouper,
            s.checkpoint_replication_factor,
            s.checkpoint_segment_bytes,
            s.checkpoint_validation,
        )
        for t in plan.new:
            manager.write_checkpoint(t.name, plan.offsets.get(t.name, {}), markers.get(t.name, {}))
    finally:
        producer.stop()
