"""The processor's side of the coordinator seam: each job model its ``JobCoordinator`` decides is
applied to the processor's ``SamzaContainer`` (Samza's StreamProcessor JobCoordinatorListener).

A model comes in one phase or two. The passthrough coordinator's one model is applied at start;
a ZooKeeper version first expires the running model (``on_job_model_expired``: the tasks it
takes away are stopped, their in-flight work finished and committed and their stores closed, so
that their next owner may start them), and once every processor has done so, is applied
(``on_new_job_model``: its new tasks start, the staying ones run on untouched). A container that
is shutting down or failed takes no part in either; a draining one does (``takes_models``), so
that a processor that leaves or comes back during a drain has its tasks drained by their owners.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from samzamp.container.container import SamzaContainer, same_task
from samzamp.dispatch.process.pool import WorkerPool
from samzamp.model.grouper import task_order
from samzamp.model.job_model import JobModel

__all__ = ["ContainerListener"]

log = logging.getLogger(__name__)


class ContainerListener:
    """A ``JobCoordinatorListener`` that runs the models it hears in ``container`` (and fences
    ``pool``'s workers with the coordinator's lease). Event loop thread only."""

    def __init__(self, container: SamzaContainer, pool: WorkerPool | None) -> None:
        self._container = container
        self._pool = pool
        # The container's own model generation: it grows with each model applied, the release
        # of a version's leaving tasks included, whatever the coordinator numbers its models.
        self._generation = 0
        # A version is under way: from its expiry of the running model until it is applied (a
        # version whose barrier timed out stays under way until the next one is applied).
        self.rebalancing = False

    async def on_job_model_expired(self, model: JobModel) -> list[str] | None:
        self.rebalancing = True
        container = self._container
        running = container.job_model
        if container.takes_models and any(not same_task(t, running.tasks.get(n)) for n, t in model.tasks.items()):
            container.expect(model)  # tasks arrive with it: their checkpoints are read ahead
        keep = [n for n, t in running.tasks.items() if same_task(t, model.tasks.get(n))]
        if not container.takes_models:
            return None
        if len(keep) == len(running.tasks):
            return []
        lost = sorted(set(running.tasks) - set(keep), key=task_order)
        log.info(
            "job model version %d: stopping %d tasks that leave this processor: %s", model.generation, len(lost), lost
        )
        self._generation += 1
        await container.apply(running.only(keep, self._generation))
        return lost

    async def on_new_job_model(self, model: JobModel) -> list[str] | None:
        container = self._container
        try:
            if not container.takes_models:
                return None
            before = set(container.job_model.tasks)
            self._generation += 1
            await container.apply(JobModel(self._generation, model.tasks))
            return sorted(set(model.tasks) - before, key=task_order)
        finally:
            self.rebalancing = False

    def on_membership_change(self) -> None:
        """A processor joined or left, so a model comes (after the leader's debounce time and its
        computation): the container reads the checkpoint topic ahead now, so that the reads at the
        model's arrival and at its barrier take only the commits since, while everyone waits."""
        self._container.read_checkpoints_ahead()

    def on_coordinator_failure(self, error: BaseException) -> None:
        log.error("%s: %s", type(error).__name__, error)
        self._container.abort(error)

    def fence(self, lease_valid: Callable[[], bool]) -> None:
        self._container.fence = lease_valid

    def on_lease(self, until: float) -> None:
        if self._pool is not None:  # the workers' calls are fenced too (dispatch.process.calls)
            # 1, not 0, once the lease is gone: 0 would mean no fence at all.
            self._pool.set_fence(max(1, int(until * 1e9)))
