"""A processor of a standalone job: what it does with the versions ZooKeeper publishes.

``Standalone`` joins the job through ``ZkJobCoordinator`` and is its ``Listener``: a version first
stops the running tasks this processor gives up (``release``: their in-flight work finished and
committed, their stores closed, so that their next owner may start them), and once every processor
has done so (the barrier), starts the tasks it gains (``apply``). While it leads, it is also the
coordinator's ``Calculate``: the tasks come from the inputs and the task history in the
coordinator stream, exactly as for a one-processor job (``PassthroughJobCoordinator``), and are then
grouped onto the live processors (``group_by_container_ids``: minimal movement, host affinity).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from samzamp.config.settings import JobSettings
from samzamp.container.container import SamzaContainer, same_task
from samzamp.coordinator.container_grouper import group_by_container_ids
from samzamp.coordinator.grouper import task_order
from samzamp.coordinator.job_model import ContainerModel, JobModel
from samzamp.coordinator.location import location_id, processor_id
from samzamp.coordinator.passthrough import PassthroughJobCoordinator
from samzamp.coordinator.zk.job_coordinator import METRICS_GROUP, ZkJobCoordinator
from samzamp.coordinator.zk.keys import ZkKeys
from samzamp.metrics.registry import MetricsRegistry
from samzamp.processor.systems import Systems

__all__ = ["Standalone"]

log = logging.getLogger(__name__)


class Standalone:
    """This processor's membership of a standalone job, applying each version to ``container``."""

    def __init__(
        self,
        settings: JobSettings,
        systems: Systems,
        tasks: PassthroughJobCoordinator,
        container: SamzaContainer,
        check_factor: Callable[[JobModel], None],
        metrics: MetricsRegistry,
    ) -> None:
        """``tasks`` computes the job's tasks and keeps their history; ``check_factor`` raises when
        the checkpoints cannot follow a change of job.elasticity.factor (the processor's check)."""
        zk = settings.zk
        assert zk is not None, "a standalone processor needs job.coordinator.factory = zk"
        self._settings = settings
        self._systems = systems
        self._tasks = tasks
        self._container = container
        self._check_factor = check_factor
        self._generation = 0
        self._paused_since: float | None = None  # this rebalance's first release, until its apply
        self._lost: list[str] = []
        self._m_pause_ms = metrics.gauge(METRICS_GROUP, "last-rebalance-pause-ms")
        self.coordinator = ZkJobCoordinator(
            zk,
            ZkKeys(settings.name, settings.id),
            processor_id(zk),
            location_id(zk),
            self.calculate,
            self,
            metrics,
        )

    async def start(self) -> None:
        """Join the job; from now on the container processes only while the session is known alive."""
        self._container.run_loop.fence = self.coordinator.lease_valid
        pool = self._container.pool
        if pool is not None:  # the workers' calls are fenced too (dispatch.process.calls)
            # 1, not 0, once the lease is gone: 0 would mean no fence at all.
            self.coordinator.on_lease = lambda until: pool.set_fence(max(1, int(until * 1e9)))
        await self.coordinator.start()

    async def stop(self) -> None:
        await self.coordinator.stop()

    # -- the leader's job model -----------------------------------------------------------------
    async def calculate(
        self, processors: dict[str, str], previous: JobModel | None, locality: dict[str, str]
    ) -> JobModel:
        """The job model over the inputs now, its tasks grouped onto ``processors`` (id -> location)."""
        model, history = await asyncio.to_thread(self._tasks.job_model)
        await asyncio.to_thread(self._check_factor, model)
        await asyncio.to_thread(self._systems.create_changelogs, model, history)
        await asyncio.to_thread(self._tasks.record, history)  # before a task writes to its changelog partition
        zk = self._settings.zk
        assert zk is not None
        groups = group_by_container_ids(
            model.tasks,
            processors,
            previous_owner=previous.owners() if previous is not None else {},
            task_locality=locality,
            host_affinity=zk.host_affinity,
        )
        containers = {pid: ContainerModel(pid, processors[pid], tuple(tasks)) for pid, tasks in groups.items()}
        return JobModel(0, model.tasks, containers)

    # -- the coordinator's listener -------------------------------------------------------------
    async def release(self, version: int, model: JobModel) -> bool:
        container = self._container
        running = container.job_model
        keep = [n for n, t in running.tasks.items() if same_task(t, model.tasks.get(n))]
        if self._paused_since is None:  # a version superseding one not applied yet: the same pause
            self._paused_since = time.monotonic()
        if self._stopping():
            return False
        if len(keep) == len(running.tasks):
            return True
        lost = sorted(set(running.tasks) - set(keep), key=task_order)
        self._lost += lost  # until the apply that ends this rebalance, over superseded versions too
        log.info("job model version %d: stopping %d tasks that leave this processor: %s", version, len(lost), lost)
        self._generation += 1
        await container.apply(running.only(keep, self._generation))
        return True

    async def apply(self, version: int, model: JobModel) -> bool:
        container = self._container
        if self._stopping():
            return False
        before = set(container.job_model.tasks)
        self._generation += 1
        await container.apply(JobModel(self._generation, model.tasks))
        gained = sorted(set(model.tasks) - before, key=task_order)
        since, self._paused_since = self._paused_since, None
        paused_ms = (time.monotonic() - since) * 1000 if since is not None else 0.0
        self._m_pause_ms.set(round(paused_ms))
        lost, self._lost = self._lost, []
        log.info(
            "job model version %d applied by processor %s: %d tasks; gained %s; lost %s; paused %.0f ms",
            version,
            self.coordinator.processor_id,
            len(model.tasks),
            gained or "none",
            lost or "none",
            paused_ms,
        )
        return True

    def failed(self, error: BaseException) -> None:
        log.error("%s: %s", type(error).__name__, error)
        self._container.run_loop.abort(error)

    def _stopping(self) -> bool:
        loop = self._container.run_loop
        return loop.draining or loop.shutdown_requested or loop.error is not None
