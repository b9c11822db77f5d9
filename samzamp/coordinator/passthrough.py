"""The job coordinator of a job with one processor: that processor owns every task.

Samza's PassthroughJobCoordinator: no election and no other processors, so the job model is what
the grouper makes of the inputs' partitions, published once at start.
"""

from __future__ import annotations

from samzamp.api.envelope import SystemStreamPartition
from samzamp.config.settings import JobSettings
from samzamp.coordinator.job_model import JobModel, job_model
from samzamp.systems.base import SystemAdmin

__all__ = ["PassthroughJobCoordinator"]


class PassthroughJobCoordinator:
    """Builds the one job model of a single-processor job from the inputs' partition counts."""

    def __init__(self, settings: JobSettings, admins: dict[str, SystemAdmin]) -> None:
        self._settings = settings
        self._admins = admins

    def job_model(self) -> JobModel:
        """Every input partition grouped into tasks by job.systemstreampartition.grouper.factory."""
        ssps: list[SystemStreamPartition] = []
        for ss in self._settings.task.inputs:
            n = self._admins[ss.system].partition_counts([ss.stream])[ss.stream]
            ssps.extend(SystemStreamPartition(ss.system, ss.stream, p) for p in range(n))
        return job_model(self._settings.grouper, ssps)
