"""A job's model as a tool sees it (``samzamp job-model show``): its tasks, what each reads, where each
keeps its state, and in standalone mode which processor runs which task. Read only: nothing is
created, recorded or joined.

- A standalone job (job.coordinator.factory = zk): the model its leader published on ZooKeeper,
  the current version (``coordinator.zk.view``), with the live processors. Before any processor
  published one, the model is computed as below.
- Any other job: the model a container would compute if it started now, with the code it uses
  (``job_model_calculator.preview_job_model``): the grouper over the inputs' partitions on their
  brokers, the task history from the job's coordinator stream (read, never created).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from samzamp.api.envelope import SystemStream
from samzamp.api.errors import ConfigError
from samzamp.config.settings import JobSettings
from samzamp.config.system_kinds import system_kind_names
from samzamp.coordinator.factory import job_coordinator_factory
from samzamp.coordinator.job_model_calculator import preview_job_model
from samzamp.coordinator.metadata_store import CoordinatorStreamStore
from samzamp.model.job_model import JobModel
from samzamp.systems.base import ReadOnlyProducer, SystemAdmin
from samzamp.systems.factory import Place
from samzamp.systems.registry import open_system

__all__ = ["JobModelView", "LiveProcessor", "job_model_view"]

PLACE = "job-model"


@dataclass(frozen=True)
class LiveProcessor:
    """A processor of a standalone job registered on ZooKeeper now."""

    processor_id: str
    location_id: str
    host: str
    pid: int


@dataclass(frozen=True)
class JobModelView:
    """A job's model and where it comes from.

    ``source``: ``zookeeper`` (published; ``version`` is the one shown, ``active`` and ``latest``
    as recorded) or ``computed`` (``history_found``: whether the job's task history was read; False
    for a job that never started). ``changelogs``: each store's changelog stream (the tasks'
    ``changelog_partition`` is their partition of each). ``processors``: the live processors of a
    standalone job, by processor id. ``missing_inputs``: inputs the broker does not have (no task
    reads them).
    """

    job: str
    coordinator: str
    source: str
    model: JobModel
    changelogs: dict[str, SystemStream]
    where: str = ""
    version: int | None = None
    active: int | None = None
    latest: int | None = None
    history_found: bool | None = None
    processors: dict[str, LiveProcessor] = field(default_factory=dict)
    missing_inputs: list[str] = field(default_factory=list)


def _changelogs(settings: JobSettings) -> dict[str, SystemStream]:
    return {name: st.changelog for name, st in sorted(settings.stores.items()) if st.changelog is not None}


def _shared_system(settings: JobSettings, system: str, key: str) -> None:
    s = settings.systems[system]
    if not s.kind.shared:
        raise ConfigError(
            key,
            f"system {system!r} is {s.kind}, in its container's process only: a tool reaches only "
            f"{system_kind_names(lambda k: k.shared)} systems",
        )


def _computed(settings: JobSettings) -> tuple[JobModel, bool, list[str]]:
    """The model a container would compute now, whether the task history was found, and the inputs missing."""
    coordinator = settings.coordinator_system
    _shared_system(settings, coordinator, "job.coordinator.system")
    systems = sorted({ss.system for ss in settings.task.inputs} | {coordinator})
    for name in systems:
        _shared_system(settings, name, "task.inputs")
    place = Place(process=PLACE)
    admins: dict[str, SystemAdmin] = {}
    try:
        for name in systems:
            admins[name] = open_system(settings, name, place).admin()
        metadata = CoordinatorStreamStore(
            admins[coordinator], ReadOnlyProducer("job-model show"), settings.coordinator_topic
        )
        model, found = preview_job_model(settings, admins, metadata)
        missing = []
        for ss in settings.task.inputs:
            if ss.stream not in admins[ss.system].partition_counts([ss.stream]):
                missing.append(f"{ss.system}.{ss.stream}")
        return model, found, missing
    finally:
        for admin in admins.values():
            admin.stop()
        place.stop()


def job_model_view(settings: JobSettings) -> JobModelView:
    """The job's model (see the module docstring). ``ConfigError`` for a config that cannot say,
    ``MissingExtraError`` when a standalone job's ZooKeeper client is not installed,
    ``SystemFailureError`` when a broker or ZooKeeper cannot be reached."""
    job_coordinator_factory(settings)  # checks job.coordinator.factory (and zk's extra) before anything connects
    job = f"{settings.name}-{settings.id}"
    changelogs = _changelogs(settings)
    if settings.zk is not None and settings.coordinator_factory == "zk":
        from samzamp.coordinator.zk.keys import ZkKeys
        from samzamp.coordinator.zk.view import read_published_model

        published = read_published_model(settings.zk, ZkKeys(settings.name, settings.id))
        live = {
            p.processor_id: LiveProcessor(p.processor_id, p.location_id, p.host, p.pid)
            for p in published.processors.values()
        }
        if published.model is not None:
            return JobModelView(
                job,
                "zk",
                "zookeeper",
                published.model,
                changelogs,
                published.where,
                published.version,
                published.active,
                published.latest,
                processors=live,
            )
        model, found, missing = _computed(settings)
        return JobModelView(
            job, "zk", "computed", model, changelogs, published.where, None, None, None, found, live, missing
        )
    model, found, missing = _computed(settings)
    return JobModelView(
        job, settings.coordinator_factory, "computed", model, changelogs, history_found=found, missing_inputs=missing
    )
