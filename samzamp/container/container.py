"""SamzaContainer: builds the object graph from the config and runs it, in Samza's start-up order.

Start: validate config -> systems (embedded broker when a Kafka system names no brokers) -> create
missing topics -> publish the run id -> group SSPs into tasks -> read checkpoints -> starting offsets
-> consumers -> task instances (init) -> drain monitor -> run loop. Stop: final commit (by the run
loop) -> close tasks -> record how the run ended (and after a drain, delete its notifications) ->
stop consumers, flush producers -> stop the embedded broker.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import TYPE_CHECKING, Any

from samzamp.api.envelope import SystemStream, SystemStreamPartition
from samzamp.api.errors import SystemFailureError
from samzamp.api.task import AsyncStreamTask, WindowableTask
from samzamp.choose.round_robin import RoundRobinChooser
from samzamp.commit.topic_checkpoint import TopicCheckpointManager
from samzamp.config.settings import JobSettings
from samzamp.config.stream_serdes import StreamSerdes
from samzamp.config.validate import load_task_class
from samzamp.consume.system_consumers import SystemConsumers
from samzamp.container.run_loop import RunLoop
from samzamp.container.task_instance import TaskInstance
from samzamp.container.worker_task_proxy import WorkerTaskProxy
from samzamp.coordinator.grouper import group
from samzamp.coordinator.job_model import TaskModel
from samzamp.coordinator.metadata_store import CoordinatorStreamStore
from samzamp.coordinator.run_id import RUN_NAMESPACE, RunRecord, RunState, end_run, start_run
from samzamp.dispatch.adapters import CoroutineAdapter, adapt_task
from samzamp.dispatch.process.placement import assign_tasks
from samzamp.dispatch.process.pool import WorkerPool
from samzamp.drain.monitor import DrainMonitor
from samzamp.drain.notification import DRAIN_NAMESPACE, cleanup
from samzamp.extras import EMBEDDED, require
from samzamp.gc_freeze import freeze_start_up
from samzamp.metrics.registry import MetricsRegistry
from samzamp.storage.changelog_names import changelog_partitions
from samzamp.storage.manager import TaskStorage
from samzamp.systems.base import OLDEST, StartOffset, SystemAdmin, SystemConsumer, SystemProducer
from samzamp.systems.inmemory.system import (
    InMemoryStreams,
    InMemorySystemAdmin,
    InMemorySystemConsumer,
    InMemorySystemProducer,
)
from samzamp.task.runtime import build_task_runtime

if TYPE_CHECKING:
    from samzamp.systems.kafka.changelog import ChangelogProducer
    from samzamp.systems.kafka.client_config import KafkaClientSettings

__all__ = ["SamzaContainer"]

log = logging.getLogger(__name__)


class SamzaContainer:
    """One container of a job. ``run()`` returns when the job stops cleanly; raises on failure."""

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
        self._unconfigured_sends_to = unconfigured_sends_to
        self._freeze_gc = freeze_gc_after_start
        self.metrics = MetricsRegistry()
        self.inmemory = inmemory if inmemory is not None else {}
        self.embedded_broker: Any = None
        self.admins: dict[str, SystemAdmin] = {}
        self.producers: dict[str, SystemProducer] = {}
        self.checkpoint_producer: SystemProducer | None = None
        self.tasks: list[TaskInstance] = []
        self.remote_tasks: list[WorkerTaskProxy] = []
        self.pool: WorkerPool | None = None
        self.changelog_producers: dict[str, ChangelogProducer] | None = None
        self._markers: dict[str, dict[str, str]] = {}
        self._changelog_partitions: dict[str, int] = {}
        self.run_loop: RunLoop | None = None
        self.metadata: CoordinatorStreamStore | None = None
        self.run_record: RunRecord | None = None
        self.drain_monitor: DrainMonitor | None = None
        self.drained = False  # the run ended with a drain
        self._kafka: dict[str, KafkaClientSettings] = {}  # every client of a Kafka system starts here
        self._serdes_of = StreamSerdes(settings)

    # -- systems --------------------------------------------------------------------------------
    def _kafka_bootstrap(self, system: str) -> str:
        servers = self.settings.systems[system].bootstrap_servers
        if servers:
            return servers
        if self.embedded_broker is None:
            from samzamp.systems.kafka.embedded import EmbeddedBroker

            require(EMBEDDED, f", or set systems.{system}.bootstrap.servers to a Kafka cluster's brokers")
            self.embedded_broker = EmbeddedBroker(die_with_parent=True).start()
            log.info(
                "no bootstrap.servers for system %r: started the embedded broker at %s (memory only)",
                system,
                self.embedded_broker.bootstrap_servers,
            )
            print(f"samzamp: embedded broker at {self.embedded_broker.bootstrap_servers}", flush=True)
        return str(self.embedded_broker.bootstrap_servers)

    def _start_systems(self) -> None:
        for name, s in self.settings.systems.items():
            if s.factory == "kafka":
                from samzamp.systems.kafka import KafkaClientSettings, KafkaSystemAdmin, KafkaSystemProducer

                st = self.settings
                clients = KafkaClientSettings.of(st.name, st.id, s, self._kafka_bootstrap(name))
                self._kafka[name] = clients
                self.admins[name] = KafkaSystemAdmin(clients)
                self.producers[name] = KafkaSystemProducer(clients)
                if name == st.checkpoint_system:
                    # Its own producer, so waiting for a checkpoint never waits for task outputs.
                    self.checkpoint_producer = KafkaSystemProducer(clients, "checkpoint-producer")
            else:
                streams = self.inmemory.setdefault(name, InMemoryStreams())
                self.admins[name] = InMemorySystemAdmin(streams)
                self.producers[name] = InMemorySystemProducer(streams)
                if name == self.settings.checkpoint_system:
                    self.checkpoint_producer = self.producers[name]

    def _consumer(self, system: str) -> SystemConsumer:
        s = self.settings.systems[system]
        if s.factory == "kafka":
            from samzamp.systems.kafka import KafkaSystemConsumer

            group_id = f"samzamp-{self.settings.name}-{self.settings.id}"
            return KafkaSystemConsumer(self._kafka[system], group_id)
        return InMemorySystemConsumer(self.inmemory[system])

    def _create_streams(self) -> None:
        """Create configured streams (streams.<id>.samza.system or .partitions) that do not exist yet."""
        config = self.settings.config
        ids = {k.split(".")[1] for k in config if k.startswith("streams.") and k.count(".") >= 2}
        wanted: list[SystemStream] = []
        for sid in sorted(ids):
            system = config.get_str(f"streams.{sid}.samza.system") or self.settings.default_system
            physical = config.get_str(f"streams.{sid}.samza.physical.name") or sid
            if system is not None and system in self.settings.systems:
                wanted.append(SystemStream(system, physical))
        for ss in wanted:
            stream = self.settings.stream(ss)
            admin = self.admins[ss.system]
            if ss.stream in admin.partition_counts([ss.stream]):
                continue
            partitions = stream.partitions or self.settings.systems[ss.system].default_partitions
            admin.create_stream(
                ss.stream, partitions, self.settings.systems[ss.system].replication_factor, stream.topic_configs
            )
        missing = [
            ss
            for ss in self.settings.task.inputs
            if ss.stream not in self.admins[ss.system].partition_counts([ss.stream])
        ]
        if missing:
            names = ", ".join(str(ss) for ss in missing)
            raise SystemFailureError(
                f"input stream {names} does not exist; create it, or set streams.<id>.partitions so samzamp creates it"
            )

    # -- offsets --------------------------------------------------------------------------------
    def _starting_offsets(
        self, ssps: list[SystemStreamPartition], checkpointed: dict[SystemStreamPartition, int]
    ) -> dict[SystemStreamPartition, StartOffset]:
        starts: dict[SystemStreamPartition, StartOffset] = {}
        upcoming: dict[str, list[SystemStreamPartition]] = {}
        for ssp in ssps:
            stream = self.settings.stream(ssp.system_stream)
            if ssp in checkpointed and not stream.reset_offset:
                starts[ssp] = checkpointed[ssp] + 1
            elif stream.offset_default == OLDEST:
                starts[ssp] = OLDEST
            else:
                upcoming.setdefault(ssp.system, []).append(ssp)
        for system, pending in upcoming.items():
            for ssp, end in self.admins[system].end_offsets(pending).items():
                starts[ssp] = end
        return starts

    # -- run ------------------------------------------------------------------------------------
    async def run(self) -> None:
        try:
            await self._run()
        except Exception as e:
            await self._end_run(RunState.FAILED, f"failed: {e}")
            raise
        finally:
            if self.drain_monitor is not None:
                self.drain_monitor.stop()
            await asyncio.to_thread(self._stop_systems)

    async def _end_run(self, state: RunState, why: str) -> None:
        """Record in the metadata store how this run ended (best effort on failure paths)."""
        if self.metadata is None or self.run_record is None:
            return
        store = self.metadata.namespace(RUN_NAMESPACE)
        try:
            self.run_record = await asyncio.to_thread(end_run, store, self.run_record, state)
            log.info("run %s %s", self.run_record.run_id, why)
        except Exception as e:
            log.warning("could not record that run %s %s: %s", self.run_record.run_id, why, e)

    async def _start_run(self) -> None:
        """Create the coordinator stream and publish this container's run id."""
        st = self.settings
        system = st.coordinator_system
        producer = self.checkpoint_producer if system == st.checkpoint_system else None
        # Metadata writes happen at start and at the end, never while checkpoints are written.
        self.metadata = CoordinatorStreamStore(
            self.admins[system],
            producer or self.producers[system],
            st.coordinator_topic,
            st.coordinator_replication_factor,
        )
        await asyncio.to_thread(self.metadata.create_topic)
        record, how = await asyncio.to_thread(start_run, self.metadata.namespace(RUN_NAMESPACE), st.run_id)
        self.run_record = record
        self.metrics.gauge("SamzaContainerMetrics", "run-id").set(record.run_id)
        log.info("job %s-%s: run id %s (%s)", st.name, st.id, record.run_id, how)

    async def _start_drain_monitor(self, run_loop: RunLoop) -> None:
        st = self.settings
        if not st.drain_monitor_enabled or self.metadata is None or self.run_record is None:
            return
        self.drain_monitor = DrainMonitor(
            self.metadata.namespace(DRAIN_NAMESPACE),
            self.run_record.run_id,
            st.drain_monitor_poll_ms,
            lambda n: run_loop.drain(n.uuid),
        )
        await self.drain_monitor.start()

    async def _finish_drain(self) -> None:
        """The run drained: delete its notifications (so a tool sees it done) and record it."""
        assert self.metadata is not None
        assert self.run_record is not None
        store = self.metadata.namespace(DRAIN_NAMESPACE)
        run_id = self.run_record.run_id
        # The run is recorded as drained first: should the clean-up fail, a restart then starts a
        # new run, for which the leftover notification is stale.
        await self._end_run(RunState.DRAINED, "drained")
        try:
            removed = await asyncio.to_thread(cleanup, store, run_id)
        except Exception as e:
            log.warning("drain complete, but its notification of run %s could not be deleted: %s", run_id, e)
            return
        log.info("drain complete: removed %d drain notification(s) of run %s", removed, run_id)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        started = time.monotonic()
        st = self.settings
        for warning in st.warnings:
            log.warning("%s", warning)
        task_class = load_task_class(st.task.task_class)
        if st.pool_size >= 2 and issubclass(task_class, AsyncStreamTask):
            log.info(
                "job.container.thread.pool.size applies to synchronous tasks; this AsyncStreamTask runs on the loop"
            )
        elif st.pool_size >= 2:
            # Start the workers first: they import while this process connects to Kafka.
            self.pool = WorkerPool(st.pool_size, st.worker_ring_bytes, loop, self.metrics, self._on_pool_failure)
            self.pool.spawn()
        try:
            self._start_systems()
            checkpoints = TopicCheckpointManager(
                self.admins[st.checkpoint_system],
                self.checkpoint_producer or self.producers[st.checkpoint_system],
                st.checkpoint_topic,
                st.grouper,
                st.checkpoint_replication_factor,
                st.checkpoint_segment_bytes,
                st.checkpoint_validation,
            )
            await asyncio.to_thread(self._create_streams)
            await asyncio.to_thread(checkpoints.create_topic)
            await self._start_run()
            ssps: list[SystemStreamPartition] = []
            for ss in st.task.inputs:
                n = self.admins[ss.system].partition_counts([ss.stream])[ss.stream]
                ssps.extend(SystemStreamPartition(ss.system, ss.stream, p) for p in range(n))
            model = group(st.grouper, ssps)
            last = await asyncio.to_thread(checkpoints.read_last_checkpoints)
            self._markers = {name: dict(cp.state_markers) for name, cp in last.items()}
            self._changelog_partitions = changelog_partitions(model)
            await asyncio.to_thread(self._create_changelogs, len(model))
            checkpointed: dict[SystemStreamPartition, int] = {}
            for name, task_ssps in model.items():
                if name in last:
                    offsets = last[name].offsets()
                    checkpointed.update({s: o for s, o in offsets.items() if s in task_ssps})
            starts = await asyncio.to_thread(self._starting_offsets, ssps, checkpointed)
            consumers: dict[str, SystemConsumer] = {}
            for ssp in ssps:
                c = consumers.get(ssp.system) or consumers.setdefault(ssp.system, self._consumer(ssp.system))
                c.register(ssp, starts[ssp])
            log.info(
                "job %s-%s: %d tasks over %d partitions; starting offsets %s",
                st.name,
                st.id,
                len(model),
                len(ssps),
                {str(s): o for s, o in sorted(starts.items())},
            )
            system_consumers = SystemConsumers(
                consumers, ssps, RoundRobinChooser(), self.metrics, st.task.fetch_threshold, st.task.poll_interval_ms
            )
            run_loop = self.run_loop = RunLoop([], system_consumers, checkpoints, st.task, self.metrics, loop)
            if self.pool is not None:
                await self._start_remote_tasks(self.pool, model, checkpointed, task_class, run_loop)
            for name in sorted(model) if self.pool is None else ():
                task_ssps = model[name]
                model_of_task = TaskModel(
                    name,
                    tuple(sorted(task_ssps)),
                    self._changelog_partitions.get(name, 0),
                    self._markers.get(name, {}),
                )
                runtime = build_task_runtime(
                    st.task,
                    model_of_task,
                    task_class,
                    self.producers,
                    self._serdes_of,
                    self.metrics,
                    fallback_system=self._unconfigured_sends_to,
                )
                ti = TaskInstance(
                    runtime,
                    adapt_task(runtime.task, loop),
                    {s: o for s, o in checkpointed.items() if s in task_ssps},
                    max_concurrency=st.task.max_concurrency,
                    callback_timeout_ms=st.task.callback_timeout_ms,
                    metrics=self.metrics,
                    loop=loop,
                    on_ready=run_loop.task_ready,
                    on_abort=run_loop.abort,
                    on_requests=run_loop.on_requests,
                )
                await self._open_stores(ti)
                runtime.init(st.config)
                self.tasks.append(ti)
                run_loop.add_task(ti)
            self._register_lag_gauges(system_consumers)
            self.metrics.gauge("SamzaContainerMetrics", "container-startup-time").set(
                round(time.monotonic() - started, 3)
            )
            await self._start_drain_monitor(run_loop)
            if self._freeze_gc:
                freeze_start_up()  # before the fetch thread starts: no buffered message is frozen
            system_consumers.start(loop, run_loop.wake, run_loop.abort)
            reporter = loop.create_task(self._report_metrics()) if st.metrics_log_interval_ms > 0 else None
            try:
                await run_loop.run()
            finally:
                if reporter is not None:
                    reporter.cancel()
                if self.drain_monitor is not None:
                    self.drain_monitor.stop()
                system_consumers.stop()
                for ti in self.tasks:
                    if isinstance(ti.runnable, CoroutineAdapter):
                        ti.runnable.cancel_all()
            for ti in self.tasks:
                ti.close()  # the task, then its stores
            if self.pool is not None:
                await self.pool.stop()  # closes every task in its worker
            self.drained = run_loop.drain_complete
            if self.drained:
                await self._finish_drain()
            else:
                await self._end_run(RunState.STOPPED, "stopped")
        finally:
            if self.pool is not None:
                self.pool.kill()

    # -- stores ---------------------------------------------------------------------------------
    def _create_changelogs(self, tasks: int) -> None:
        """Each changelog topic: compacted, one partition per task (created when missing)."""
        for st in self.settings.stores.values():
            if st.changelog is None:
                continue
            admin = self.admins[st.changelog.system]
            if st.changelog.stream in admin.partition_counts([st.changelog.stream]):
                continue
            prefix = f"stores.{st.name}.changelog.kafka."
            configs = {"cleanup.policy": "compact"}
            configs.update({k[len(prefix) :]: str(v) for k, v in self.settings.config.items() if k.startswith(prefix)})
            rf = self.settings.systems[st.changelog.system].replication_factor
            admin.create_stream(st.changelog.stream, tasks, rf, configs)

    async def _open_stores(self, ti: TaskInstance) -> None:
        """Open and restore the task's stores before its init (the task sees no message before)."""
        if not self.settings.stores:
            return
        if self.changelog_producers is None:
            from samzamp.systems.kafka.changelog import changelog_producers

            self.changelog_producers = changelog_producers(self.settings, self._kafka)
        name = ti.name
        storage = TaskStorage(
            name, self.settings, self._changelog_partitions[name], self._kafka, self.changelog_producers
        )
        ti.logged_stores = self.settings.logged_stores
        reports = await asyncio.to_thread(ti.runtime.open_stores, storage)
        for r in reports:
            self.metrics.gauge(f"TaskName-{name}", f"{r.store}-restored-records").set(r.replayed)
            self.metrics.gauge(f"TaskName-{name}", f"{r.store}-reverted-records").set(r.reverted)

    def _on_pool_failure(self, error: BaseException) -> None:
        if self.run_loop is not None:
            self.run_loop.abort(error)
        else:
            log.error("%s", error)

    async def _start_remote_tasks(
        self,
        pool: WorkerPool,
        model: dict[str, frozenset[SystemStreamPartition]],
        checkpointed: dict[SystemStreamPartition, int],
        task_class: type,
        run_loop: RunLoop,
    ) -> None:
        """Pin each task to a worker, hand the workers their tasks and wait until all are init'ed."""
        st = self.settings
        placement = assign_tasks(model, st.pool_size)
        batch = st.worker_batch_size
        for name in sorted(model):
            ti = WorkerTaskProxy(
                name,
                model[name],
                issubclass(task_class, WindowableTask),
                pool,
                placement[name],
                {s: o for s, o in checkpointed.items() if s in model[name]},
                batch_size=batch,
                in_flight_limit=max(4 * batch, st.task.max_concurrency),
                metrics=self.metrics,
                on_ready=run_loop.task_ready,
                on_requests=run_loop.on_requests,
                on_dirty=run_loop.mark_dirty,
            )
            ti.logged_stores = st.logged_stores
            self.remote_tasks.append(ti)
            run_loop.add_task(ti)
        config = dict(st.config)
        for system, clients in self._kafka.items():  # the embedded broker's address, when it is one
            config[f"systems.{system}.bootstrap.servers"] = clients.bootstrap
        await pool.start(config)
        models = [
            TaskModel(t.name, tuple(sorted(t.ssps)), self._changelog_partitions[t.name], self._markers.get(t.name, {}))
            for t in self.remote_tasks
        ]
        await asyncio.gather(*(t.start(m) for t, m in zip(self.remote_tasks, models, strict=True)))  # in parallel
        pool.time_calls(st.task.callback_timeout_ms, "task.callback.timeout.ms")

    def _register_lag_gauges(self, consumers: SystemConsumers) -> None:
        tasks: list[TaskInstance | WorkerTaskProxy] = [*self.tasks, *self.remote_tasks]
        for ti in tasks:
            for ssp in ti.ssps:

                def lag(
                    ssp: SystemStreamPartition = ssp, last: dict[SystemStreamPartition, int] = ti.last_processed
                ) -> int | None:
                    hw = consumers.high_watermark(ssp)
                    if hw is None:
                        return None
                    return max(0, hw - (last.get(ssp, -1) + 1))

                self.metrics.gauge(
                    "SystemConsumersMetrics",
                    f"{ssp.system}-{ssp.stream}-{ssp.partition}-messages-behind-high-watermark",
                    fn=lag,
                )

    async def _report_metrics(self) -> None:
        period = self.settings.metrics_log_interval_ms / 1000
        while True:
            await asyncio.sleep(period)
            log.info("metrics %s", json.dumps(self.metrics.snapshot(), default=str, sort_keys=True))

    def _stop_systems(self) -> None:
        producers: list[Any] = [*self.producers.values()]
        producers.extend((self.changelog_producers or {}).values())
        if self.checkpoint_producer is not None and self.checkpoint_producer not in producers:
            producers.append(self.checkpoint_producer)
        for p in producers:
            try:
                p.stop()
            except Exception as e:  # stopping must go on for the others
                log.warning("stopping a producer failed: %s", e)
        for a in self.admins.values():
            a.stop()
        if self.embedded_broker is not None:
            self.embedded_broker.stop()
