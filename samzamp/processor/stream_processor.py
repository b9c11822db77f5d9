"""StreamProcessor: one processor of a job, for as long as its process lives.

It owns what outlasts any one job model: the systems (and the embedded broker), the worker
processes, the metrics and their reporters (``processor.metrics_reporters``: the metrics log and
Samza's snapshot reporter, from the run's start to a last report at stop), its part of the job's
run (``Runs``), the drain monitor, signal handling, the job coordinator and the Prometheus endpoint
(metrics.prometheus.port: /metrics, and /healthz, which reports ``state``). It gets the
coordinator, and where the run is kept, from the ``JobCoordinatorFactory`` that
job.coordinator.factory names (``samzamp.coordinator.factory``), and never asks which it has: the
coordinator decides the job models and its listener (``ContainerListener``) applies each to the
processor's ``SamzaContainer``. When the coordinator loses this processor's membership
(``MembershipExpired``), the processor abandons its tasks and joins again with a new container and
a new coordinator.

Start, in Samza's order: the Prometheus endpoint (when on) -> config warnings -> worker processes
spawned (they import while this process connects) -> systems -> missing topics created -> run id
published -> container made -> coordinator started: each job model computed
(``JobModelCalculator``: from the inputs and the task history in the metadata store; changelog
topics created or checked; the task history recorded) and applied (checkpoints read, stores
restored, tasks init'ed) -> drain monitor -> run loop. Stop:
final commit (by the run loop) -> tasks closed, in this process and in the workers -> the
coordinator left -> how the run ended recorded (after a drain, its notifications deleted) ->
the metrics reported a last time (the workers' last counts included) -> producers flushed and
stopped -> embedded broker stopped -> the endpoint stopped.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import signal
import time
from typing import TYPE_CHECKING

from samzamp import logs
from samzamp.api.errors import ConfigError
from samzamp.api.task import AsyncStreamTask
from samzamp.commit.elasticity import check_state_factor, starting_checkpoints
from samzamp.commit.topic_checkpoint import TopicCheckpointManager
from samzamp.config.settings import JobSettings
from samzamp.container.container import SamzaContainer
from samzamp.container.run_loop import RunLoop
from samzamp.coordinator.factory import job_coordinator_factory
from samzamp.coordinator.job_coordinator import JobCoordinator, JobCoordinatorFactory, MembershipExpired
from samzamp.coordinator.job_model_calculator import JobModelCalculator
from samzamp.coordinator.metadata_store import CoordinatorStreamStore
from samzamp.coordinator.run_id import RunAlreadyDrained, RunRecord, Runs, RunState
from samzamp.dispatch.process.pool import WorkerPool
from samzamp.drain.monitor import DrainMonitor
from samzamp.drain.notification import DRAIN_NAMESPACE, cleanup
from samzamp.gc_freeze import freeze_start_up, hold_collection, resume_collection
from samzamp.metrics.registry import MetricsRegistry
from samzamp.metrics.reporting import Reporting
from samzamp.model.job_model import JobModel
from samzamp.operators.factory import job_task_class
from samzamp.processor.health import READY, ProcessorState
from samzamp.processor.listener import ContainerListener
from samzamp.processor.metrics_reporters import metrics_reporters
from samzamp.processor.systems import Systems
from samzamp.storage.restore_progress import RestoreProgress
from samzamp.systems.inmemory.system import InMemoryStreams

if TYPE_CHECKING:
    from samzamp.metrics.prometheus.server import MetricsServer

__all__ = ["StreamProcessor", "resolve_job"]

log = logging.getLogger(__name__)


def resolve_job(settings: JobSettings) -> tuple[type, JobCoordinatorFactory]:
    """What a processor resolves from a validated config before it connects to anything: the task
    class (task.class, or app.class's operator-graph task) and the coordinator factory (which fails
    here when its extra is missing). ``samzamp check`` calls this too, so it checks what a start would.
    Raises ConfigError or MissingExtraError."""
    return job_task_class(settings), job_coordinator_factory(settings)


class StreamProcessor:
    """One processor of a job. ``run()`` returns when the job stops cleanly; raises on failure."""

    def __init__(
        self,
        settings: JobSettings,
        inmemory: dict[str, InMemoryStreams] | None = None,
        *,
        freeze_gc_after_start: bool = False,
        unconfigured_sends_to: str | None = None,
    ) -> None:
        """``freeze_gc_after_start``: the caller owns the process (the CLI); see ``freeze_start_up``.
        ``unconfigured_sends_to``: a system that takes sends to systems the config does not name
        (``samzamp.testing.TestRunner``; None, as in production: such a send fails the task)."""
        self.settings = settings
        self.metrics = MetricsRegistry()
        self.restores = RestoreProgress(self.metrics)  # every restore of this processor, as one view
        self.systems = Systems(settings, inmemory, self.metrics)
        self.pool: WorkerPool | None = None
        self.container: SamzaContainer | None = None
        self.metadata: CoordinatorStreamStore | None = None
        self.runs: Runs | None = None  # where this processor's run is recorded
        self.run_record: RunRecord | None = None
        self.drain_monitor: DrainMonitor | None = None
        self.reporting: Reporting | None = None  # the metrics reporters, from the run's start to the end
        self.coordinator: JobCoordinator | None = None  # this processor's membership of its job
        self.drained = False  # the run ended with a drain
        self._freeze_gc = freeze_gc_after_start
        self._unconfigured_sends_to = unconfigured_sends_to
        self._stop_requested = False
        self._main: asyncio.Task[None] | None = None
        self._listener: ContainerListener | None = None  # the current container's
        self._finished = False  # run() returned or raised
        self.endpoint: MetricsServer | None = None  # metrics.prometheus.port: /metrics and /healthz

    @property
    def run_loop(self) -> RunLoop | None:
        """The container's run loop, once the container exists."""
        return self.container.run_loop if self.container is not None else None

    @property
    def inmemory(self) -> dict[str, InMemoryStreams]:
        return self.systems.inmemory

    @property
    def processor_id(self) -> str:
        """This processor's id in its job: its coordinator's (passthrough: "0"; standalone:
        processor.id, else the one generated when it joined); "" while a standalone processor
        without processor.id has not joined yet."""
        coordinator = self.coordinator
        if coordinator is not None:
            return coordinator.processor_id
        zk = self.settings.zk
        if zk is None:
            return "0"
        return zk.processor_id or ""

    @property
    def state(self) -> ProcessorState:
        """What the processor is doing now (see ``ProcessorState``). Any thread may read it: it
        only reads flags the event loop sets."""
        container = self.container
        if self._finished:
            return ProcessorState.STOPPED
        if self._stop_requested or (container is not None and not container.takes_models):
            return ProcessorState.STOPPING
        if container is None:
            return ProcessorState.STARTING
        if container.starting_tasks:
            return ProcessorState.RESTORING
        listener = self._listener
        if listener is not None and listener.rebalancing:
            return ProcessorState.REBALANCING
        if not container.running or container.job_model.generation == 0:  # no job model applied yet
            return ProcessorState.STARTING
        fence = container.fence
        if fence is not None and not fence():
            return ProcessorState.PAUSED
        if container.draining:
            return ProcessorState.DRAINING
        return ProcessorState.RUNNING

    def stop(self) -> None:
        """Stop: a running container finishes its in-flight work and commits; during start-up,
        start-up is abandoned (``run`` returns without a final commit: nothing was processed)."""
        self._stop_requested = True
        container, coordinator = self.container, self.coordinator
        if container is not None and (
            container.tasks or (coordinator is not None and coordinator.models_while_running)
        ):
            container.request_shutdown()
        elif self._main is not None:
            self._main.cancel()
        # Else run() has not begun: it stops once started (see _run).

    # -- run ------------------------------------------------------------------------------------
    async def run(self, handle_signals: bool = False) -> None:
        """Run until the job stops. ``handle_signals``: SIGTERM and SIGINT stop the processor as
        ``stop()`` does; a second one exits the process at once (for the process's owner: the CLI)."""
        self._main = asyncio.current_task()
        if handle_signals:
            self._handle_signals()
        self.endpoint = await self._start_endpoint()
        try:
            await self._run()
        except asyncio.CancelledError:
            if not self._stop_requested:
                raise
            log.info("stopped during start-up")
        except Exception as e:
            await self._end_run(RunState.FAILED, f"failed: {e}")
            raise
        finally:
            if self.drain_monitor is not None:
                self.drain_monitor.stop()
            if self.reporting is not None:  # a last report, before the producers stop
                await self.reporting.stop()
            await asyncio.to_thread(self.systems.stop)
            if self.runs is not None:
                await asyncio.to_thread(self.runs.close)
            self._finished = True
            if self.endpoint is not None:
                await asyncio.to_thread(self.endpoint.stop)

    def _handle_signals(self) -> None:
        loop = asyncio.get_running_loop()
        seen = 0

        def on_signal(signum: int) -> None:
            nonlocal seen
            seen += 1
            if seen > 1:
                os.write(2, f"samzamp: second {signal.Signals(signum).name}: exiting at once\n".encode())
                os._exit(128 + signum)
            log.info("%s: stopping (send it again to exit at once)", signal.Signals(signum).name)
            self.stop()

        # A Python handler, not loop.add_signal_handler: that one learns of a signal only from a
        # byte written to the loop's self-pipe, and a processor of thousands of tasks fills that
        # pipe with the wake-ups of its threads' results (a commit round's), so a SIGTERM's byte
        # is dropped and the processor never stops. A Python handler runs on this thread whatever
        # the pipe holds, and queues the stop on the loop.
        def handler(signum: int, _frame: object) -> None:
            loop.call_soon_threadsafe(on_signal, signum)

        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, handler)

    async def _run(self) -> None:
        started = time.monotonic()
        st = self.settings
        for warning in st.warnings:
            log.warning("%s", warning)
        # Before anything starts: a coordinator may need an extra (zk: its ZooKeeper client).
        task_class, coordinators = resolve_job(st)
        if st.pool_size >= 2 and issubclass(task_class, AsyncStreamTask):
            log.info(
                "job.container.thread.pool.size applies to synchronous tasks; this AsyncStreamTask runs on the loop"
            )
        # Start the workers first: they import while this process connects to Kafka.
        self._spawn_pool(task_class)
        try:
            systems = self.systems
            systems.start()
            checkpoints = TopicCheckpointManager(
                systems.admins[st.checkpoint_system],
                systems.producer_for_metadata(st.checkpoint_system),
                st.checkpoint_topic,
                st.grouper,
                st.checkpoint_replication_factor,
                st.checkpoint_segment_bytes,
                st.checkpoint_validation,
            )
            await asyncio.to_thread(systems.create_streams)
            await asyncio.to_thread(checkpoints.create_topic)
            try:
                metadata = await self._start_run(coordinators)
            except RunAlreadyDrained as e:
                log.warning("%s", e)
                self.drained = True
                return
            assert self.run_record is not None
            reporters = await asyncio.to_thread(metrics_reporters, st, self.metrics, systems, self._run_id)
            self.reporting = Reporting(reporters)
            self.reporting.start()
            checkpoints.run_id = self.run_record.run_id
            calculator = JobModelCalculator(
                st,
                systems.admins,
                metadata,
                # A change of job.elasticity.factor the checkpoints cannot follow stops here, before a
                # changelog is created for the new tasks or their partitions are recorded.
                lambda model: self._check_factor(model, checkpoints),
                systems.create_changelogs,
            )
            while True:
                try:
                    container = await self._run_container(task_class, checkpoints, coordinators, calculator, started)
                    break
                except MembershipExpired as e:
                    # Its tasks were abandoned without a commit (the loop aborted, its workers are
                    # killed): their next owners start from their last checkpoints. Join again as
                    # a new member, with fresh workers.
                    log.warning("%s", e)
                    if self.container is not None:
                        self.container.forget_metrics()
                    if self.pool is not None:
                        self.pool.kill()
                        self._spawn_pool(task_class)
                    started = time.monotonic()
            self.drained = container.drain_complete
            if self.drained:
                await self._finish_drain()
            else:
                await self._end_run(RunState.STOPPED, "stopped")
        finally:
            if self.pool is not None:
                self.pool.kill()

    def _spawn_pool(self, task_class: type) -> None:
        """The worker processes of the synchronous tasks (job.container.thread.pool.size >= 2)."""
        st = self.settings
        if st.pool_size >= 2 and not issubclass(task_class, AsyncStreamTask):
            loop = asyncio.get_running_loop()
            self.pool = WorkerPool(
                st.pool_size, st.worker_ring_bytes, loop, self.metrics, self._on_pool_failure, self.restores
            )
            self.pool.spawn()

    async def _run_container(
        self,
        task_class: type,
        checkpoints: TopicCheckpointManager,
        coordinators: JobCoordinatorFactory,
        calculator: JobModelCalculator,
        started: float,
    ) -> SamzaContainer:
        """Run a container until it stops, with the tasks of the models a new coordinator decides.
        Raises MembershipExpired when the processor must join again."""
        st, systems, loop = self.settings, self.systems, asyncio.get_running_loop()
        # Made (not started) first: its processor id names this processor in every log record, the
        # workers' included.
        coordinator = self.coordinator = coordinators.coordinator(calculator, self.metrics)
        logs.set_processor(coordinator.processor_id)
        if self.pool is not None:
            app = st.application
            await self.pool.start(
                systems.worker_config(), app.digest if app is not None else "", coordinator.processor_id
            )
            self.pool.time_calls(st.task.callback_timeout_ms, "task.callback.timeout.ms")
        container = self.container = SamzaContainer(
            st,
            systems,
            checkpoints,
            self.metrics,
            task_class,
            loop,
            pool=self.pool,
            unconfigured_sends_to=self._unconfigured_sends_to,
            restores=self.restores,
        )
        listener = self._listener = ContainerListener(container, self.pool)
        if coordinator.models_while_running:
            # Read the checkpoint topic before joining: the tasks this processor is given start
            # from it, and a later read takes only what was written since. Read at the rebalance,
            # the whole topic (a record per task per commit) would lengthen everyone's pause.
            await asyncio.to_thread(checkpoints.read_last_checkpoints)
        # What the tasks' start builds lives as long as the process and is frozen below: collecting
        # it meanwhile only scans it again and again (with thousands of tasks, full collections
        # of a heap that grows by a quarter each time).
        held = self._freeze_gc and hold_collection()
        try:
            await coordinator.start(listener)
            self.metrics.gauge("SamzaContainerMetrics", "container-startup-time").set(
                round(time.monotonic() - started, 3)
            )
            await self._start_drain_monitor(container)
        finally:
            if held:
                resume_collection()
        if self._freeze_gc:
            self._freeze_gc = False  # once per process
            freeze_start_up()  # before the fetch thread starts: no buffered message is frozen
        if self._stop_requested:  # a signal during start-up: stop before processing anything
            container.request_shutdown()
        try:
            await container.run()
        finally:
            if self.drain_monitor is not None:
                self.drain_monitor.stop()
            # Only now, with every task stopped and committed, may their next owners start them.
            await coordinator.stop()
        if self.pool is not None:
            await self.pool.stop()  # closes every task in its worker
        return container

    def _on_pool_failure(self, error: BaseException) -> None:
        if self.container is not None:
            self.container.on_pool_failure(error)
        else:
            log.error("%s", error)

    # -- the run record and drains --------------------------------------------------------------
    def _check_factor(self, model: JobModel, checkpoints: TopicCheckpointManager) -> None:
        """ConfigError naming job.elasticity.factor if the tasks of ``model`` cannot start from the
        job's checkpoints (samzamp.commit.elasticity): the container checks again for each task
        that arrives, but at start it must come before anything is created or recorded."""
        st = self.settings
        last = checkpoints.read_last_checkpoints()
        check_state_factor(model.tasks.values(), last, st.logged_stores)
        # Only a task without a checkpoint of its own can be refused: the offsets of the others,
        # thousands in a large job, are not wanted here.
        starting_checkpoints([t for t in model.tasks.values() if t.name not in last], last, st.reset_inputs())

    async def _start_run(self, coordinators: JobCoordinatorFactory) -> CoordinatorStreamStore:
        """Create the coordinator stream and join the job's run; the stream.

        Where the run is recorded is the coordinator factory's choice: a job of one container's in
        its coordinator stream, a standalone job's in ZooKeeper, where its processors share one run
        (``ZkRuns``)."""
        st = self.settings
        system = st.coordinator_system
        # Metadata writes happen at start and at the end, never while checkpoints are written.
        metadata = self.metadata = CoordinatorStreamStore(
            self.systems.admins[system],
            self.systems.producer_for_metadata(system),
            st.coordinator_topic,
            st.coordinator_replication_factor,
        )
        await asyncio.to_thread(metadata.create_topic)
        runs = self.runs = await asyncio.to_thread(coordinators.runs, metadata)
        record, how = await asyncio.to_thread(runs.start, st.run_id)
        self.run_record = record
        self.metrics.gauge("SamzaContainerMetrics", "run-id").set(record.run_id)
        log.info("job %s-%s: run id %s (%s)", st.name, st.id, record.run_id, how)
        return metadata

    async def _end_run(self, state: RunState, why: str) -> int | None:
        """Record that this processor's part of the run ended (best effort on failure paths): how
        many other processors still run it (0: the run ended so), None when it could not be recorded."""
        if self.runs is None or self.run_record is None:
            return None
        run_id = self.run_record.run_id
        try:
            self.run_record, others = await asyncio.to_thread(self.runs.end, self.run_record, state)
        except Exception as e:
            log.warning("could not record that run %s %s: %s", run_id, why, e)
            return None
        if others:
            log.info("left run %s (%s): %d other processor(s) still run it", run_id, why, others)
        else:
            log.info("run %s %s", run_id, why)
        return others

    async def _start_drain_monitor(self, container: SamzaContainer) -> None:
        st = self.settings
        if not st.drain_monitor_enabled or self.runs is None or self.run_record is None:
            return
        self.drain_monitor = DrainMonitor(
            self.runs.namespace(DRAIN_NAMESPACE),
            self.run_record.run_id,
            st.drain_monitor_poll_ms,
            lambda n: container.drain(n.uuid),
        )
        await self.drain_monitor.start()

    async def _finish_drain(self) -> None:
        """This processor drained: record it; the run's last processor deletes the run's
        notifications (so a tool sees it done, and no processor still draining misses one)."""
        assert self.runs is not None
        assert self.run_record is not None
        store = self.runs.namespace(DRAIN_NAMESPACE)
        run_id = self.run_record.run_id
        # The run is recorded as drained first: should the clean-up fail, a restart then starts a
        # new run, for which the leftover notification is stale.
        if await self._end_run(RunState.DRAINED, "drained"):
            return
        try:
            removed = await asyncio.to_thread(cleanup, store, run_id)
        except Exception as e:
            log.warning("drain complete, but its notification of run %s could not be deleted: %s", run_id, e)
            return
        log.info("drain complete: removed %d drain notification(s) of run %s", removed, run_id)

    async def _start_endpoint(self) -> MetricsServer | None:
        """Serve /metrics and /healthz when metrics.prometheus.port is set (its settings checked
        that prometheus_client is installed); log where. ConfigError when it cannot listen."""
        st = self.settings
        if st.prometheus is None:
            return None
        # Imported only here: prometheus_client is the extra samzamp[prometheus].
        from samzamp.metrics.prometheus.collector import RegistryCollector
        from samzamp.metrics.prometheus.names import Namer
        from samzamp.metrics.prometheus.server import MetricsServer

        task = st.task
        read = {
            *task.inputs,
            *task.broadcast_only,
            *task.intermediate,
            *(p.system_stream for p in task.broadcast_inputs),
        }
        streams = {(ss.system, ss.stream) for ss in read}
        labels = {"job": st.name, "job_id": st.id}
        collector = RegistryCollector(
            self.metrics,
            Namer(streams),
            lambda: {**labels, "processor": self.processor_id},
            lambda: str(self.state),
            [str(s) for s in ProcessorState],
        )

        def health() -> tuple[str, bool]:
            state = self.state
            return str(state), state in READY

        server = MetricsServer(st.prometheus.host, st.prometheus.port, collector, health)
        try:
            await asyncio.to_thread(server.start)
        except OSError as e:
            key = (
                "metrics.prometheus.port" if e.errno in (errno.EADDRINUSE, errno.EACCES) else "metrics.prometheus.host"
            )
            raise ConfigError(
                key,
                f"the Prometheus endpoint cannot listen on {st.prometheus.host}:{st.prometheus.port}: {e.strerror or e}; "
                "choose another port (0: any free one) or an address of this machine",
            ) from None
        log.info("prometheus: %s", server.url)
        return server

    def _run_id(self) -> str | None:
        return self.run_record.run_id if self.run_record is not None else None
