"""SamzaContainer: the tasks of one job model in this process, and the run loop that drives them.

It lives inside a ``StreamProcessor`` (samzamp.processor), which owns what outlasts a job model: the
systems, the worker processes, the metrics, the coordinator. ``start(model)`` takes the first
model's tasks on; ``apply(model)`` moves to a newer model while the loop runs:

- a task that leaves (or whose inputs or changelog partition changed) is stopped: its SSPs leave
  the consumers, what is queued for it is dropped, what is in flight finishes, a final commit runs,
  then it is closed (the task, then its stores, which unlocks them); its metrics go with it;
- a task that arrives is started as at start-up: its last checkpoint read, its stores restored from
  the checkpoint's markers, init called, then its SSPs join the consumers at the checkpointed
  offsets (or offset.default);
- a task that stays keeps running untouched.

Leaving tasks are stopped before arriving ones start, so a task moved within this process (or to
another one, later) never runs in two places at once, and its stores are closed before they are
opened again. ``run()`` runs until shutdown, drain or failure, then closes every task; after a
failure it only releases their stores, without a commit, so that a processor joining its job again
in this process can open them again.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable

import msgspec

from samzamp.api.envelope import SystemStream, SystemStreamPartition
from samzamp.api.task import WindowableTask
from samzamp.choose.round_robin import RoundRobinChooser
from samzamp.commit.elasticity import check_state_factor, starting_checkpoints
from samzamp.commit.group_offsets import GroupOffsets
from samzamp.commit.topic_checkpoint import TopicCheckpointManager
from samzamp.config.settings import JobSettings, StreamSettings
from samzamp.config.stream_serdes import StreamSerdes
from samzamp.consume.lane import Lane, partition_of, task_lanes
from samzamp.consume.system_consumers import SystemConsumers
from samzamp.container.run_loop import RunLoop
from samzamp.container.run_loop_task import RunLoopTask
from samzamp.container.ssp_gauges import SspGauges
from samzamp.container.system_clients import SystemClients
from samzamp.container.task_instance import TaskInstance
from samzamp.container.worker_task_proxy import WorkerTaskProxy
from samzamp.dispatch.process.frames import IN_FLIGHT_BATCHES
from samzamp.dispatch.process.placement import place_tasks
from samzamp.dispatch.process.pool import WorkerPool
from samzamp.metrics.registry import MetricsRegistry
from samzamp.model.grouper import task_order
from samzamp.model.job_model import JobModel, TaskModel
from samzamp.storage.manager import RestoreReport, TaskStorage
from samzamp.storage.restore_progress import RestoreProgress
from samzamp.systems.base import OLDEST, StartOffset, SystemConsumer
from samzamp.task.start import start_task

__all__ = ["SamzaContainer"]

log = logging.getLogger(__name__)


def _prefetched(read: asyncio.Task[object]) -> None:
    if not read.cancelled() and read.exception() is not None:
        log.debug("reading the checkpoint topic ahead of a rebalance: %s", read.exception())


_NAMED_TASKS = 8  # the tasks one log line names at most


def _some(names: list[str]) -> str:
    """The first few of ``names``, for a log line about thousands of tasks."""
    shown = ", ".join(repr(n) for n in names[:_NAMED_TASKS])
    return shown + (f" and {len(names) - _NAMED_TASKS} more" if len(names) > _NAMED_TASKS else "")


# The starting offsets a start logs lane by lane at INFO, at most: a start of thousands of tasks
# logs how many lanes start where instead (each one at DEBUG), not a line of hundreds of kilobytes.
_LISTED_STARTS = 64


def _starts_summary(starts: dict[Lane, StartOffset]) -> str:
    """How many of ``starts`` begin at each named place, and after a checkpoint (an exact offset)."""
    counts: dict[str, int] = {}
    for start in starts.values():
        where = "an exact offset" if isinstance(start, int) else repr(start)
        counts[where] = counts.get(where, 0) + 1
    return f"of {len(starts)} lanes: " + ", ".join(f"{n} at {where}" for where, n in sorted(counts.items()))


def same_task(a: TaskModel, b: TaskModel | None) -> bool:
    """Whether ``b`` is task ``a`` unchanged (markers aside: they come from the checkpoint)."""
    return b is not None and (a.name, a.ssps, a.changelog_partition) == (b.name, b.ssps, b.changelog_partition)


class SamzaContainer:
    """The tasks of the current job model and their run loop. Event loop thread only."""

    def __init__(
        self,
        settings: JobSettings,
        systems: SystemClients,
        checkpoints: TopicCheckpointManager,
        metrics: MetricsRegistry,
        task_class: type,
        loop: asyncio.AbstractEventLoop,
        *,
        pool: WorkerPool | None = None,
        unconfigured_sends_to: str | None = None,
        restores: RestoreProgress | None = None,
    ) -> None:
        """``pool``: the worker processes that run the synchronous tasks (None: every task inline).
        ``unconfigured_sends_to``: a system that takes sends to systems the config does not name
        (``samzamp.testing.TestRunner``; None, as in production: such a send fails the task).
        ``restores``: the processor's one view of its restores (inline and in its workers)."""
        self.settings = settings
        self.systems = systems
        self.metrics = metrics
        self.pool = pool
        self.restores = restores if restores is not None else RestoreProgress(metrics)
        self._checkpoints = checkpoints
        self._task_class = task_class
        self._loop = loop
        self._unconfigured_sends_to = unconfigured_sends_to
        self._serdes_of = StreamSerdes(settings)
        self.job_model = JobModel(0, {})
        self.tasks: dict[str, RunLoopTask] = {}
        # Tasks of the model whose last checkpoint is their drain's in this run: held, never started
        # (``_start_tasks``).
        self._drained_before: set[str] = set()
        # A drain notification found before the first job model: the drain begins with that model
        # (a standalone processor learns its tasks only then).
        self._drain_pending: str | None = None
        consumers: dict[str, SystemConsumer] = {}
        for ss in settings.task.inputs:
            if ss.system not in consumers:
                consumers[ss.system] = systems.consumer(ss.system)
        st = settings.task
        self.consumers = SystemConsumers(
            consumers,
            [],
            RoundRobinChooser(),
            metrics,
            st.fetch_threshold,
            st.poll_interval_ms,
            elasticity_factor=settings.elasticity_factor,
            # Every task runs in a worker: the fetch thread packs what it fetched for them, unless a
            # task takes one message per choice (task.consumer.batch.size 0 or 1).
            pack_runs=st.consumer_batch_size if pool is not None and st.consumer_batch_size > 1 else 0,
            intermediate=st.intermediate,
        )
        self.run_loop = RunLoop(self.consumers, checkpoints, st, metrics, loop, self._group_offsets())
        self._ssp_gauges = SspGauges(metrics, self.consumers.high_watermark)
        self._applying = asyncio.Lock()
        self._broadcast = settings.task.broadcast_inputs
        self._starting = 0  # calls of _start_tasks under way (restores, inits)
        self._prefetch: asyncio.Task[object] | None = None  # a read of the checkpoint topic ahead (expect)

    def _group_offsets(self) -> GroupOffsets | None:
        """Where each checkpoint's input offsets go for lag tools (task.checkpoint.commit.group.offsets),
        or None: switched off, or no input system has consumer groups."""
        st = self.settings
        if not st.task.commit_group_offsets:
            return None
        committers = {}
        for system in sorted({ss.system for ss in st.task.inputs}):
            committer = self.systems.group_offsets(system)
            if committer is not None:
                committers[system] = committer
        if not committers:
            return None
        return GroupOffsets(committers, self.metrics, broadcast=st.task.broadcast_inputs, sole_processor=st.zk is None)

    # -- job models -----------------------------------------------------------------------------
    async def start(self, model: JobModel) -> None:
        """Take the first job model's tasks on (before ``run``)."""
        await self.apply(model)

    async def apply(self, model: JobModel) -> None:
        """Move to ``model``: stop the tasks that leave, then start the tasks that arrive; the
        others run on untouched. One apply at a time; a model no newer than the current one, or
        one applied once the container stops or failed, is refused (ValueError); while it drains, a
        task that arrives drains where its checkpoint is. A failure while tasks stop or start (a
        final commit, a restore, an init) fails the container as well as the caller: half a model
        is never run, and a restart resumes from the checkpoints."""
        async with self._applying:
            if model.generation <= self.job_model.generation:
                raise ValueError(
                    f"job model generation {model.generation} is not newer than the current {self.job_model.generation}"
                )
            loop = self.run_loop
            if not loop.takes_tasks:
                raise ValueError(f"job model generation {model.generation}: the container is stopping")
            current = self.job_model.tasks
            leaving = sorted((n for n, t in current.items() if not same_task(t, model.tasks.get(n))), key=task_order)
            arriving = sorted((n for n, t in model.tasks.items() if not same_task(t, current.get(n))), key=task_order)
            try:
                if leaving:
                    await self._stop_tasks(leaving)
                if arriving:
                    await self._start_tasks([model.tasks[n] for n in arriving])
            except Exception as e:
                loop.abort(e)
                raise
            self.job_model = model
            log.info(
                "job model generation %d: %d tasks (%d left, %d arrived)",
                model.generation,
                len(model.tasks),
                len(leaving),
                len(arriving),
            )
            self._begin_pending_drain()

    def expect(self, model: JobModel) -> None:
        """``model`` is on its way (a standalone version, before its barrier): if tasks arrive with
        it, read the checkpoint topic now, in the background, so that their start reads only what
        was written since (the final checkpoints of their previous owners), not everything since
        the last rebalance while every processor waits. A read that fails here is read again then."""
        if not any(not same_task(t, self.job_model.tasks.get(n)) for n, t in model.tasks.items()):
            return  # none arrives
        self.read_checkpoints_ahead()

    def read_checkpoints_ahead(self) -> None:
        """Read the checkpoint topic now, in a thread, unless such a read is under way: a start of
        tasks soon after reads only what was written since. A read that fails here is only logged
        (at DEBUG): the start reads again."""
        if self._prefetch is not None and not self._prefetch.done():
            return
        self._prefetch = self._loop.create_task(asyncio.to_thread(self._checkpoints.read_last_checkpoints))
        self._prefetch.add_done_callback(_prefetched)

    # -- stopping tasks -------------------------------------------------------------------------
    async def _stop_tasks(self, names: list[str]) -> None:
        self._drained_before.difference_update(names)
        tasks = [self.tasks[n] for n in names if n in self.tasks]
        self.consumers.remove([lane for t in tasks for lane in self._lanes(t)])
        await asyncio.gather(*(self.run_loop.remove_task(t) for t in tasks))
        for t in tasks:
            await t.stop()
            del self.tasks[t.name]
            self._remove_metrics(t)
        if tasks:
            log.info(
                "%d tasks stopped, each after its final checkpoint: %s", len(tasks), _some([t.name for t in tasks])
            )

    def _lanes(self, t: RunLoopTask) -> dict[Lane, SystemStreamPartition]:
        return task_lanes(t.name, t.ssps, self._broadcast)

    def forget_metrics(self) -> None:
        """The tasks were abandoned (this processor's membership expired): their metrics go with
        them, as a task's do when it leaves, so no export shows a task this processor lost, and
        one it gets back counts from zero."""
        for t in self.tasks.values():
            self._remove_metrics(t)

    def _remove_metrics(self, t: RunLoopTask) -> None:
        self.metrics.remove(f"TaskName-{t.name}")
        self._ssp_gauges.remove(t)

    # -- starting tasks -------------------------------------------------------------------------
    async def _start_tasks(self, models: list[TaskModel]) -> None:
        self._starting += 1
        try:
            await self._start_new_tasks(models)
        finally:
            self._starting -= 1

    async def _start_new_tasks(self, models: list[TaskModel]) -> None:
        last = await asyncio.to_thread(self._checkpoints.read_last_checkpoints)
        # A task drained in this run already (by a processor that left since) stays drained: it
        # reads nothing past its drain point, and sends nothing after its drain messages (R-A14).
        run_id = self._checkpoints.run_id
        held = [m.name for m in models if m.name in last and last[m.name].drained_in(run_id)]
        if held:
            log.info("tasks %s drained in run %s already (their last checkpoints): not started", held, run_id)
            self._drained_before.update(held)
            models = [m for m in models if m.name not in self._drained_before]
            if not models:
                return
        # A factor change (job.elasticity.factor): a new virtual task starts where the tasks of the
        # old factor that read its messages stood (samzamp.commit.elasticity), and a task whose
        # state those tasks wrote must not start without it.
        check_state_factor(models, last, self.settings.logged_stores)
        checkpointed = starting_checkpoints(models, last, self.settings.reset_inputs())
        lanes = {
            lane: (m.name, ssp) for m in models for lane, ssp in task_lanes(m.name, m.ssps, self._broadcast).items()
        }
        starts, ends = await asyncio.to_thread(self._starting_offsets, lanes, checkpointed)
        each = (
            {f"{lanes[lane][0]}: {lanes[lane][1]}": o for lane, o in starts.items()}
            if len(starts) <= _LISTED_STARTS
            else None
        )
        log.info(
            "job %s-%s: %d tasks over %d partitions; starting offsets %s",
            self.settings.name,
            self.settings.id,
            len(models),
            len({partition_of(lane) for lane in lanes}),
            each if each is not None else _starts_summary(starts),
        )
        if each is None and log.isEnabledFor(logging.DEBUG):
            log.debug("starting offsets %s", {f"{lanes[lane][0]}: {lanes[lane][1]}": o for lane, o in starts.items()})
        models = [
            msgspec.structs.replace(
                m,
                markers=dict(last[m.name].state_markers) if m.name in last else {},
                run_id=run_id,
                control=last[m.name].control if m.name in last else None,
            )
            for m in models
        ]
        tasks = self._new_tasks(models, checkpointed)
        try:
            reports = await asyncio.gather(*(t.start(m) for t, m in zip(tasks, models, strict=True)))
        except BaseException:
            for m in models:  # a start that failed or was given up ended its restores too
                self.restores.forget(m.name)
            raise
        for t, m, restored in zip(tasks, models, reports, strict=True):
            t.checkpointed_control = m.control
            self.tasks[t.name] = t
            self.run_loop.add_task(t)
            self._register_metrics(t, restored)
        log.info("%d tasks started", len(tasks))
        # A task whose sources drained in this run says a drain of the run is under way (its
        # notification stays until the run ends): it must read no source past its checkpoint, so
        # the drain begins here, before any of its lanes is read, however late this processor's
        # monitor would find it.
        under_way = sorted(
            m.name
            for m in models
            if m.control is not None and m.control.run_id == run_id and m.control.sources_drained and run_id
        )
        if under_way and self._drain_pending is None and not self.run_loop.draining:
            self._drain_pending = f"of run {run_id} (tasks {', '.join(under_way)} drained their sources in it)"
        self._begin_pending_drain()
        marked = self.consumers.add(starts, ends)
        if self.run_loop.draining:
            self.run_loop.join_drain(tasks, marked)

    def _new_tasks(
        self, models: list[TaskModel], checkpointed: dict[str, dict[SystemStreamPartition, int]]
    ) -> list[RunLoopTask]:
        """The hosts of the arriving tasks, not started yet: in worker processes when the container
        has them (placed there balanced; tasks already placed never move), else on this thread."""
        st = self.settings
        run_loop = self.run_loop
        logged = st.logged_stores  # a property that walks the stores: once, not once per task
        if self.pool is None:
            starter = functools.partial(
                start_task,
                st,
                task_factory=self._task_class,
                producers=self.systems.producers,
                serdes_of=self._serdes_of,
                metrics=self.metrics,
                storage=self._storage,
                blocking=asyncio.to_thread,
                fallback_system=self._unconfigured_sends_to,
            )
            return [
                TaskInstance(
                    m.name,
                    frozenset(m.ssps),
                    checkpointed[m.name],
                    starter,
                    max_concurrency=st.task.max_concurrency,
                    callback_timeout_ms=st.task.callback_timeout_ms,
                    logged_stores=logged,
                    intermediate=st.task.intermediate,
                    metrics=self.metrics,
                    loop=self._loop,
                    on_ready=run_loop.task_ready,
                    on_abort=run_loop.abort,
                    on_requests=run_loop.on_requests,
                )
                for m in models
            ]
        pool = self.pool
        placement = place_tasks({m.name: len(m.ssps) for m in models}, pool.loads())
        windowable = issubclass(self._task_class, WindowableTask)
        batch = st.worker_batch_size
        return [
            WorkerTaskProxy(
                m.name,
                frozenset(m.ssps),
                windowable,
                pool,
                placement[m.name],
                checkpointed[m.name],
                batch_size=batch,
                in_flight_limit=max(IN_FLIGHT_BATCHES * batch, st.task.max_concurrency),
                logged_stores=logged,
                intermediate=st.task.intermediate,
                metrics=self.metrics,
                on_ready=run_loop.task_ready,
                on_requests=run_loop.on_requests,
                on_dirty=run_loop.mark_dirty,
            )
            for m in models
        ]

    def _storage(self, model: TaskModel) -> TaskStorage:
        """The stores of a task on this thread."""
        systems = self.systems
        return TaskStorage(
            model.name,
            self.settings,
            model.changelog_partition,
            systems.kafka,
            systems.changelog_producers(),
            self.restores.reporter(model.name),
        )

    def _starting_offsets(
        self,
        lanes: dict[Lane, tuple[str, SystemStreamPartition]],
        checkpointed: dict[str, dict[SystemStreamPartition, int]],
    ) -> tuple[dict[Lane, StartOffset], dict[SystemStreamPartition, int]]:
        """Where each lane (task, SSP) starts: after its task's checkpoint, else at
        samza.offset.default. A checkpoint past the partition's end (the topic was recreated or
        truncated) starts at the oldest message, as Kafka's out-of-range reset would; checked here
        because not every broker answers such a fetch with an out-of-range error (Tansu returns
        nothing, forever). Also where each partition of a bounded stream ends (its end now)."""
        starts: dict[Lane, StartOffset] = {}
        ends_needed: dict[SystemStreamPartition, list[Lane]] = {}
        bounded: set[SystemStreamPartition] = set()
        # A stream's settings are read from the whole config: once per stream, not per lane.
        streams: dict[SystemStream, StreamSettings] = {}
        for lane, (task, ssp) in lanes.items():
            ss = ssp.system_stream
            stream = streams.get(ss)
            if stream is None:
                stream = streams[ss] = self.settings.stream(ss)
            if stream.bounded:
                bounded.add(partition_of(lane))
                ends_needed.setdefault(partition_of(lane), [])
            offset = checkpointed[task].get(ssp)
            if offset is not None and not stream.reset_offset:
                starts[lane] = offset + 1
            elif stream.offset_default == OLDEST:
                starts[lane] = OLDEST
                continue
            ends_needed.setdefault(partition_of(lane), []).append(lane)
        by_system: dict[str, list[SystemStreamPartition]] = {}
        for partition in ends_needed:
            by_system.setdefault(partition.system, []).append(partition)
        ends: dict[SystemStreamPartition, int] = {}
        for system, partitions in by_system.items():
            for partition, end in self.systems.admins[system].end_offsets(partitions).items():
                if partition in bounded:
                    ends[partition] = end
                for lane in ends_needed[partition]:
                    start = starts.setdefault(lane, end)
                    if isinstance(start, int) and start > end:
                        log.warning(
                            "%s of task %r: the checkpoint says offset %d was processed, but the partition ends at "
                            "offset %d (the topic was recreated or truncated); starting from its oldest message",
                            lanes[lane][1],
                            lanes[lane][0],
                            start - 1,
                            end,
                        )
                        starts[lane] = OLDEST
        return starts, ends

    def _register_metrics(self, t: RunLoopTask, restored: list[RestoreReport]) -> None:
        """The gauges of ``t`` that need the container: how its stores were restored, its skipped
        envelopes, and its SSPs' checkpointed offsets and lag (shared with the other readers of a
        broadcast SSP)."""
        group = f"TaskName-{t.name}"
        for r in restored:
            self.metrics.gauge(group, f"{r.store}-restored-records").set(r.replayed)
            self.metrics.gauge(group, f"{r.store}-reverted-records").set(r.reverted)
        consumers = self.consumers
        lanes = self._lanes(t)
        self.metrics.gauge(group, "skipped-envelopes", fn=lambda: sum(consumers.skipped(lane) for lane in lanes))
        self._ssp_gauges.add(t)

    # -- run ------------------------------------------------------------------------------------
    async def run(self) -> None:
        """Start fetching and run the loop until shutdown, drain or failure; then close every task
        that runs in this process, or after a failure release their stores (raises the failure; the
        processor stops the workers)."""
        self.consumers.start(self._loop, self.run_loop.wake, self.run_loop.abort)
        clean = False
        try:
            await self.run_loop.run()
            clean = True
        finally:
            self.consumers.stop()
            for t in self.tasks.values():
                t.abandon()
                if not clean:
                    try:
                        t.release()
                    except Exception as e:  # the container's own failure is the one to report
                        log.warning("task %r: releasing its stores after a failure: %s", t.name, e)
        for t in self.tasks.values():
            t.close()  # the task, then its stores (a worker closes its own when it stops)

    def on_pool_failure(self, error: BaseException) -> None:
        """A worker died or failed: the container fails."""
        self.run_loop.abort(error)

    # -- the loop's controls, for the processor and its coordinator (they never reach into the loop)
    @property
    def starting_tasks(self) -> bool:
        """Whether tasks that arrived are being started: their checkpoints read, their stores
        restored, ``init`` called (read from any thread, as the processor's health)."""
        return self._starting > 0

    @property
    def running(self) -> bool:
        """Whether the run loop runs (from ``run`` until it stops or fails)."""
        return self.run_loop.running

    @property
    def draining(self) -> bool:
        """Whether the container drains (samzamp-drain), until it stops."""
        return self.run_loop.draining

    @property
    def takes_models(self) -> bool:
        """Whether a new job model may be applied: not once asked to shut down or failed. A draining
        container takes them: a task that arrives drains where its checkpoint is, one that leaves
        is drained by its next owner."""
        return self.run_loop.takes_tasks

    @property
    def fence(self) -> Callable[[], bool] | None:
        """Checked before each slice: the loop processes only while it returns True (None: always)."""
        return self.run_loop.fence

    @fence.setter
    def fence(self, fence: Callable[[], bool] | None) -> None:
        self.run_loop.fence = fence

    def drain(self, notification: str) -> None:
        """Drain every task (the drain notification ``notification`` asks it), then stop. Before
        the first job model (a standalone processor's), the drain waits for it."""
        if self.job_model.generation == 0:
            log.info("drain %s: it begins once this processor has its tasks", notification)
            self._drain_pending = notification
            return
        self.run_loop.drain(notification)

    def _begin_pending_drain(self) -> None:
        pending, self._drain_pending = self._drain_pending, None
        if pending is not None and not self.run_loop.draining:
            self.run_loop.drain(pending)

    def request_shutdown(self) -> None:
        """Stop: in-flight work finishes, a final commit runs, ``run`` returns."""
        self.run_loop.request_shutdown()

    def abort(self, error: BaseException) -> None:
        """Fail the container with ``error`` (``run`` raises it), without a final commit."""
        self.run_loop.abort(error)

    @property
    def drain_complete(self) -> bool:
        """The container stopped because every task drained (not merely stopped)."""
        return self.run_loop.drain_complete
