"""The job's tasks over its inputs now, made ready to run (Samza's JobModelCalculator), for
every coordinator: the passthrough coordinator's one model and each model the ZooKeeper leader
publishes (which then groups the tasks onto its processors).

``calculate`` runs four steps, in this order:

1. the tasks: what the grouper makes of the inputs' partitions, given the task history read from
   the job's metadata store (so a task keeps its changelog partition and, with input expansion, a
   new partition joins an old task: ``job_model``);
2. the check that the tasks can start from the job's checkpoints (a change of job.elasticity.factor
   they cannot follow stops here, before anything is created or recorded);
3. the changelog topics created, or checked to have a partition for every task;
4. the task history recorded, before any task writes to the changelog partition it assigns.

Steps 2 and 3 belong to the layers above (the checkpoints, the processor's systems), so they
are handed in.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Iterable

import msgspec

from samzamp.api.envelope import SystemStreamPartition
from samzamp.api.errors import ConfigError
from samzamp.config.settings import JobSettings
from samzamp.coordinator.metadata_store import CoordinatorStreamStore
from samzamp.coordinator.task_history import (
    CHANGELOG_NAMESPACE,
    SSP_NAMESPACE,
    TaskHistory,
    assign_changelog_partitions,
    read_task_history,
    record_task_history,
    task_history_of,
)
from samzamp.model.grouper import expand, group, task_order
from samzamp.model.job_model import JobModel, TaskModel, intermediate_streams
from samzamp.systems.base import SystemAdmin

__all__ = ["JobModelCalculator", "input_partitions", "job_model", "preview_job_model", "tasks_over_inputs"]

log = logging.getLogger(__name__)


def input_partitions(settings: JobSettings, admins: dict[str, SystemAdmin]) -> list[SystemStreamPartition]:
    """Every partition the job reads, as the admins see them now: each partition of task.inputs and
    those of task.broadcast.inputs. ConfigError if a broadcast partition does not exist."""
    task = settings.task
    ssps: list[SystemStreamPartition] = []
    for ss in task.inputs:
        n = admins[ss.system].partition_counts([ss.stream]).get(ss.stream, 0)
        here = [SystemStreamPartition(ss.system, ss.stream, p) for p in range(n)]
        missing = sorted(b for b in task.broadcast_inputs if b.system_stream == ss and b.partition >= n)
        if missing:
            raise ConfigError(
                "task.broadcast.inputs",
                f"names {', '.join(map(str, missing))}, but {ss} has {n} partitions; name partitions that exist",
            )
        if ss in task.broadcast_only:
            here = [s for s in here if s in task.broadcast_inputs]
        ssps.extend(here)
    return ssps


def tasks_over_inputs(
    settings: JobSettings,
    admins: dict[str, SystemAdmin],
    known: TaskHistory,
    factor: int | None = None,
    ssps: list[SystemStreamPartition] | None = None,
) -> tuple[JobModel, TaskHistory]:
    """Step 1 of ``JobModelCalculator.calculate``: the job model over the inputs' partitions now
    (as ``admins`` see them, or ``ssps`` when the caller read them: ``input_partitions``) given the
    task history ``known``, and the history it implies; at elasticity factor ``factor`` (default:
    job.elasticity.factor; re-bucketing asks for another)."""
    st = settings
    model, history = job_model(
        st.grouper,
        input_partitions(st, admins) if ssps is None else ssps,
        known,
        expansion=st.input_expansion,
        factor=st.elasticity_factor if factor is None else factor,
        broadcast=st.task.broadcast_inputs,
    )
    if st.application is not None and st.application.feeds:
        streams = intermediate_streams(model.tasks, st.application.feeds)
        model = JobModel(
            model.generation,
            {n: msgspec.structs.replace(t, intermediate=streams) for n, t in model.tasks.items()},
            model.containers,
        )
    return model, history


def preview_job_model(
    settings: JobSettings, admins: dict[str, SystemAdmin], metadata: CoordinatorStreamStore
) -> tuple[JobModel, bool]:
    """The tasks a container of the job would run if it started now, computed as ``calculate``
    computes them (step 1 only: nothing is checked, created or recorded), and whether the job's task
    history was found (False: its coordinator stream does not exist yet, so the changelog partitions
    shown are those a first start would assign)."""
    found = metadata.exists()
    known = _read_history(metadata) if found else TaskHistory()
    return tasks_over_inputs(settings, admins, known)[0], found


def _read_history(metadata: CoordinatorStreamStore) -> TaskHistory:
    """The task history in the job's metadata store: both namespaces from one read of the stream
    (a read of the broker each), or, from a store that only has namespaces, from each."""
    if isinstance(metadata, CoordinatorStreamStore):
        records = metadata.namespaces(CHANGELOG_NAMESPACE, SSP_NAMESPACE)
        return task_history_of(records[CHANGELOG_NAMESPACE], records[SSP_NAMESPACE])
    return read_task_history(metadata.namespace(CHANGELOG_NAMESPACE), metadata.namespace(SSP_NAMESPACE))


class JobModelCalculator:
    """Computes the job's tasks and keeps their history in the job's metadata store. Blocking;
    one ``calculate`` at a time."""

    def __init__(
        self,
        settings: JobSettings,
        admins: dict[str, SystemAdmin],
        metadata: CoordinatorStreamStore,
        check: Callable[[JobModel], None],
        create_changelogs: Callable[[JobModel, TaskHistory], None],
    ) -> None:
        """``check`` raises (ConfigError naming the key) when the tasks of a model cannot start from
        the job's checkpoints; ``create_changelogs`` creates or checks the changelog topics for a
        model and the history it implies."""
        self._settings = settings
        self._admins = admins
        self._metadata = metadata
        self._check = check
        self._create_changelogs = create_changelogs
        self._history = TaskHistory()
        self._checked: dict[str, TaskModel] | None = None  # the tasks ``check`` last passed
        # Step 1's last result, with what it was computed from (the inputs' partitions, the history read).
        self._last: tuple[list[SystemStreamPartition], TaskHistory, JobModel, TaskHistory] | None = None

    def calculate(self) -> JobModel:
        """The job's tasks now, ready to run (the four steps of the module docstring). Step 2 is
        skipped for exactly the tasks it passed last time: only those tasks ran since, so no
        checkpoint of another factor can have appeared, and the container checks each task that
        arrives anyway (a standalone leader computes a model at every rebalance, and the check reads
        every checkpoint written since the last one while every processor waits)."""
        model, history = self._tasks()
        if model.tasks != self._checked:
            self._check(model)
            self._checked = model.tasks
        self._create_changelogs(model, history)
        self._record(history)
        return model

    def _tasks(self) -> tuple[JobModel, TaskHistory]:
        """The job model over the inputs' partitions now, and the task history it implies."""
        known = self._history = _read_history(self._metadata)
        ssps = input_partitions(self._settings, self._admins)
        last = self._last
        if last is not None and last[0] == ssps and last[1] == known:
            # The same partitions and history give the same tasks: a standalone leader computes a
            # model at each rebalance, where usually only the processors changed.
            model, history = last[2], last[3]
        else:
            model, history = tasks_over_inputs(self._settings, self._admins, known, ssps=ssps)
            self._last = (ssps, known, model, history)
        if known.changelog:
            for name, task in model.tasks.items():
                joined = [str(s) for s in task.ssps if s not in known.ssp_tasks]
                if joined and name in known.changelog:
                    log.info("%s joined task %r, which keeps its state", ", ".join(joined), name)
            new = sorted(set(model.tasks) - set(known.changelog), key=task_order)
            if new:
                log.info("new tasks %s take changelog partitions %s", new, [history.changelog[n] for n in new])
        return model, history

    def _record(self, history: TaskHistory) -> None:
        """Write what ``history`` adds to the one read by ``_tasks`` to the metadata store."""
        record_task_history(
            self._metadata.namespace(CHANGELOG_NAMESPACE),
            self._metadata.namespace(SSP_NAMESPACE),
            self._history,
            history,
        )
        self._history = history


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
