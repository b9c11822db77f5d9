"""The seam between a processor and its job coordinator (Samza's JobCoordinator,
JobCoordinatorListener and JobCoordinatorFactory).

A ``JobCoordinator`` decides which tasks this processor runs and tells its ``JobCoordinatorListener``
(the processor's side, which applies each model to its container). The processor gets its
coordinator from the ``JobCoordinatorFactory`` that job.coordinator.factory names
(``samzamp.coordinator.factory``) and never asks which one it has:

- passthrough (``samzamp.coordinator.passthrough``): this processor owns every task; one model,
  applied within ``start``;
- zk (``samzamp.coordinator.zk.job_coordinator``): ZooKeeper decides; models follow ``start``,
  each in two phases: the tasks it takes away are released (``on_job_model_expired``), every
  processor joins a barrier, then the model is applied (``on_new_job_model``).

Either computes the job's tasks with a ``ModelCalculator`` (``JobModelCalculator``); the ZooKeeper
leader then groups them onto the live processors.

Threads: every method of these protocols is called on the processor's event loop, one at a time;
``ModelCalculator.calculate`` blocks (the coordinators run it in a thread).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, TypeVar

from samzamp.api.errors import SystemFailureError
from samzamp.coordinator.metadata_store import CoordinatorStreamStore
from samzamp.coordinator.run_id import Runs, RunView
from samzamp.metrics.registry import MetricsRegistry
from samzamp.model.job_model import JobModel

__all__ = [
    "JobCoordinator",
    "JobCoordinatorFactory",
    "JobCoordinatorListener",
    "MembershipExpired",
    "ModelCalculator",
]

_View = TypeVar("_View")


class MembershipExpired(SystemFailureError):
    """The coordinator lost this processor's membership of the job: its tasks may run elsewhere
    now, so it abandons them without a commit and joins the job again as a new member (handed to
    ``JobCoordinatorListener.on_coordinator_failure``; the processor then starts a new container
    with a new coordinator)."""


class ModelCalculator(Protocol):
    """What a coordinator computes the job's tasks with (``JobModelCalculator``)."""

    def calculate(self) -> JobModel:
        """The job's tasks over its inputs now (no containers), ready to run: their changelogs exist
        and their history is recorded. Blocks; ConfigError when the job cannot run them."""


class JobCoordinatorListener(Protocol):
    """The processor's side: what it does with what the coordinator decides. Called on the event
    loop, one call at a time; ``model`` is this processor's part of a job model (no containers),
    whose ``generation`` is the version the coordinator published."""

    async def on_job_model_expired(self, model: JobModel) -> list[str] | None:
        """The running model expired and ``model`` comes next: stop every running task that
        ``model`` does not keep unchanged (in-flight work finished, committed, stores closed), so
        its next owner may start it. The names of the tasks stopped; None when the processor is
        stopping: it took no part, and must not be counted as having released them."""

    async def on_new_job_model(self, model: JobModel) -> list[str] | None:
        """Run exactly ``model``'s tasks. The names of the tasks that did not run here before; None
        when the processor is stopping and took none of them."""

    def on_coordinator_failure(self, error: BaseException) -> None:
        """The coordinator cannot go on: stop the processor with ``error`` (``MembershipExpired``:
        abandon the tasks and join again)."""

    # Optional, looked up when called: ``on_membership_change()``, called by a coordinator whose
    # membership changed before it decides the next model, to read ahead what starting tasks reads.

    def fence(self, lease_valid: Callable[[], bool]) -> None:
        """From now on, process only while ``lease_valid()``: the coordinator knows this processor's
        membership alive (a coordinator without leases never calls it)."""

    def on_lease(self, until: float) -> None:
        """The lease now ends at ``until`` (``time.monotonic()`` seconds; 0: none), for the worker
        processes' fence."""


class JobCoordinator(Protocol):
    """One processor's membership of its job."""

    # True: models arrive while the container runs, after ``start`` returned, so the processor is
    # stopped through its container's loop and then ``stop`` (the coordinator leaves cleanly).
    # False: ``start`` applies the job's one model, so a stop during it abandons the start-up.
    models_while_running: bool
    # This processor's id in its job: processor.id, or the one a standalone processor registered with
    # ("0" for a job of one container); its logs carry it.
    processor_id: str

    async def start(self, listener: JobCoordinatorListener) -> None:
        """Join the job; ``listener`` hears every decision from now until ``stop``."""

    async def stop(self) -> None:
        """Leave the job, once this processor's tasks are stopped and committed."""


class JobCoordinatorFactory(Protocol):
    """What job.coordinator.factory names: where the job's run is kept, and the coordinator of each
    container the processor runs (a new one after ``MembershipExpired``)."""

    def runs(self, metadata: CoordinatorStreamStore) -> Runs:
        """The job's run (``samzamp.coordinator.run_id``); blocks. ``metadata``: the job's coordinator stream."""

    def run_view(self, coordinator_stream: Callable[[], _View]) -> _View | RunView:
        """The job's run as a tool sees it; blocks. ``coordinator_stream`` opens the view of the job's
        coordinator stream (``StreamRunView``), which the tool knows how to reach: called only when
        the run is kept there."""

    def coordinator(self, calculator: ModelCalculator, metrics: MetricsRegistry) -> JobCoordinator:
        """A new coordinator for this processor, not started."""
