"""The ``JobCoordinatorFactory`` that job.coordinator.factory names (Samza's key; Samza's class names
are accepted as aliases by ``samzamp.config.standalone``): ``passthrough`` (one processor owns
every task; its run lives in the coordinator stream) or ``zk`` (standalone mode: ZooKeeper decides,
and keeps the run).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TypeVar

from samzamp.api.errors import ConfigError
from samzamp.config.settings import JobSettings
from samzamp.coordinator.job_coordinator import JobCoordinator, JobCoordinatorFactory, ModelCalculator
from samzamp.coordinator.metadata_store import CoordinatorStreamStore
from samzamp.coordinator.passthrough import PassthroughJobCoordinator
from samzamp.coordinator.run_id import Runs, RunView, StreamRuns
from samzamp.coordinator.zk.factory import ZkJobCoordinatorFactory
from samzamp.metrics.registry import MetricsRegistry

__all__ = ["FACTORIES", "PassthroughJobCoordinatorFactory", "job_coordinator_factory"]

_View = TypeVar("_View")


class PassthroughJobCoordinatorFactory:
    """A job of one processor: its run in its coordinator stream, its one model at start."""

    def __init__(self, settings: JobSettings) -> None:
        self._settings = settings

    def runs(self, metadata: CoordinatorStreamStore) -> Runs:
        return StreamRuns(metadata)

    def run_view(self, coordinator_stream: Callable[[], _View]) -> _View | RunView:
        return coordinator_stream()

    def coordinator(self, calculator: ModelCalculator, metrics: MetricsRegistry) -> JobCoordinator:
        return PassthroughJobCoordinator(calculator)


# job.coordinator.factory, as samzamp.config.standalone.coordinator_factory names it -> its factory
FACTORIES: Mapping[str, Callable[[JobSettings], JobCoordinatorFactory]] = {
    "passthrough": PassthroughJobCoordinatorFactory,
    "zk": ZkJobCoordinatorFactory,
}


def job_coordinator_factory(settings: JobSettings) -> JobCoordinatorFactory:
    """The factory of ``settings``' job.coordinator.factory. MissingExtraError when it needs an extra
    that is not installed (zk: kazoo), so that a job fails before anything starts."""
    make = FACTORIES.get(settings.coordinator_factory)
    if make is None:
        raise ConfigError(
            "job.coordinator.factory",
            f"names {settings.coordinator_factory!r}, which has no coordinator; use {' or '.join(sorted(FACTORIES))}",
        )
    return make(settings)
