"""job.coordinator.factory = zk (Samza's ZkJobCoordinatorFactory): the ``JobCoordinatorFactory`` of a
standalone job. Its run lives on ZooKeeper (``runs.ZkRuns``; tools see it through ``runs.ZkRunView``),
and each container of the processor gets a ``ZkJobCoordinator`` of its own.

kazoo is an extra that a job of one container does not need, so this module imports nothing that
imports it: the modules that do are imported when a method needs them. Making the factory checks
that the extra is installed, before anything starts.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from samzamp.api.errors import ConfigError
from samzamp.config.settings import JobSettings
from samzamp.config.standalone import ZkSettings
from samzamp.coordinator.job_coordinator import JobCoordinator, ModelCalculator
from samzamp.coordinator.location import location_id, processor_id
from samzamp.coordinator.metadata_store import CoordinatorStreamStore
from samzamp.coordinator.run_id import Runs, RunView
from samzamp.extras import ZOOKEEPER, require
from samzamp.metrics.registry import MetricsRegistry

__all__ = ["ZkJobCoordinatorFactory"]

_View = TypeVar("_View")


class ZkJobCoordinatorFactory:
    """The coordinators and the run of a standalone job, on ZooKeeper (job.coordinator.zk.connect)."""

    def __init__(self, settings: JobSettings) -> None:
        """MissingExtraError (how to install it) when kazoo is not installed."""
        if settings.zk is None:
            raise ConfigError("job.coordinator.zk.connect", "is not set: the zk coordinator needs ZooKeeper")
        require(ZOOKEEPER)
        self._settings = settings
        self._zk: ZkSettings = settings.zk

    def runs(self, metadata: CoordinatorStreamStore) -> Runs:
        """The run shared by the job's processors, on ZooKeeper (not in ``metadata``)."""
        from samzamp.coordinator.zk.keys import ZkKeys
        from samzamp.coordinator.zk.runs import ZkRuns

        st = self._settings
        return ZkRuns.open(self._zk, ZkKeys(st.name, st.id))

    def run_view(self, coordinator_stream: Callable[[], _View]) -> _View | RunView:
        """The run on ZooKeeper; the coordinator stream is not needed (nor the broker)."""
        from samzamp.coordinator.zk.keys import ZkKeys
        from samzamp.coordinator.zk.runs import ZkRunView

        st = self._settings
        return ZkRunView.open(self._zk, ZkKeys(st.name, st.id))

    def coordinator(self, calculator: ModelCalculator, metrics: MetricsRegistry) -> JobCoordinator:
        """A new membership of the job: without processor.id, under a new processor id."""
        from samzamp.coordinator.zk.job_coordinator import ZkJobCoordinator
        from samzamp.coordinator.zk.keys import ZkKeys

        st, zk = self._settings, self._zk
        return ZkJobCoordinator(zk, ZkKeys(st.name, st.id), processor_id(zk), location_id(zk), calculator, metrics)
