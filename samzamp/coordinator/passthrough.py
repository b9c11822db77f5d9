"""The job coordinator of a job with one processor: that processor owns every task.

Samza's PassthroughJobCoordinator: no election and no other processors, so the job model is the
calculator's (``JobModelCalculator``: the inputs' partitions grouped into tasks, given their
history), published once, within ``start``.
"""

from __future__ import annotations

import asyncio

from samzamp.coordinator.job_coordinator import JobCoordinatorListener, ModelCalculator

__all__ = ["PassthroughJobCoordinator"]


class PassthroughJobCoordinator:
    """A ``JobCoordinator`` that publishes one model, at start, in which this processor runs every task."""

    models_while_running = False
    processor_id = "0"  # the one processor (Samza's container "0")

    def __init__(self, calculator: ModelCalculator) -> None:
        self._calculator = calculator

    async def start(self, listener: JobCoordinatorListener) -> None:
        """Compute the job's tasks and have ``listener`` run them all."""
        model = await asyncio.to_thread(self._calculator.calculate)
        await listener.on_new_job_model(model)

    async def stop(self) -> None:
        """Nothing to leave: no other processor waits for this one."""
