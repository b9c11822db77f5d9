"""What every task the run loop drives keeps, wherever it runs: its name and inputs, its readiness
state, its offsets (processed and checkpointed) and its metrics under Samza's names.

``TaskInstance`` (inline or on asyncio) and ``WorkerTaskProxy`` (in a worker) build on it.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping

from samzamp.api.envelope import SystemStream, SystemStreamPartition
from samzamp.container.ssp_gauges import ssp_label
from samzamp.container.task_state import TaskState
from samzamp.metrics.registry import MetricsRegistry
from samzamp.model.control_state import ControlState

__all__ = ["TaskBase"]


class TaskBase:
    """The host-independent half of a ``RunLoopTask``."""

    def __init__(
        self,
        name: str,
        ssps: frozenset[SystemStreamPartition],
        max_concurrency: int,
        checkpointed: dict[SystemStreamPartition, int],
        metrics: MetricsRegistry,
        logged_stores: frozenset[str] = frozenset(),
        intermediate: frozenset[SystemStream] = frozenset(),
    ) -> None:
        self.name = name
        self.ssps = ssps
        self.state = TaskState(max_concurrency, ssps, intermediate)
        self._checkpointed = dict(checkpointed)
        self.checkpointed_control: ControlState | None = None  # that of the last checkpoint written
        self.last_processed = dict(checkpointed)  # last processed offset per SSP (the low watermark)
        # The stores whose changelog markers each checkpoint must carry.
        self.logged_stores = logged_stores
        group = f"TaskName-{name}"
        self.m_process_calls = metrics.counter(group, "process-calls")
        self.m_processed = metrics.counter(group, "messages-actually-processed")
        self.m_window_calls = metrics.counter(group, "window-calls")
        self.m_commit_calls = metrics.counter(group, "commit-calls")
        self.m_process_ns = metrics.timer("SamzaContainerMetrics", "process-ns")
        self.m_window_ns = metrics.timer("SamzaContainerMetrics", "window-ns")
        self.m_commit_ns = metrics.timer("SamzaContainerMetrics", "commit-ns")
        metrics.gauge(group, "messages-in-flight", fn=lambda: self.state.messages_in_flight)
        metrics.gauge(group, "pending-messages", fn=lambda: len(self.state.pending))
        for ssp in ssps:
            metrics.gauge(group, f"{ssp_label(ssp)}-offset", fn=functools.partial(self.last_processed.get, ssp))

    @property
    def checkpointed(self) -> Mapping[SystemStreamPartition, int]:
        """The offsets of the last checkpoint written (or the one the task started from)."""
        return self._checkpointed

    def catch_up(self, ssp: SystemStreamPartition, offset: int) -> None:
        """Nothing of ``ssp`` before ``offset`` is left for the task: its low watermark moves there."""
        if offset > self.last_processed.get(ssp, -1):
            self.last_processed[ssp] = offset

    def snapshot_offsets(self) -> dict[SystemStreamPartition, int]:
        """Commit step 2: the low watermark (exact: the task is idle while it commits)."""
        return dict(self.last_processed)

    def checkpoint_written(self, offsets: dict[SystemStreamPartition, int], control: ControlState | None) -> None:
        """Commit step 6: ``offsets`` (and ``control``) are checkpointed; tell the task where it runs."""
        self._checkpointed = offsets
        self.checkpointed_control = control
        self._tell_checkpoint(offsets)

    def _tell_checkpoint(self, offsets: dict[SystemStreamPartition, int]) -> None:
        raise NotImplementedError

    def count_processed(self, n: int, total_ns: int, max_ns: int) -> None:
        """Count ``n`` messages processed in ``total_ns`` (the longest took ``max_ns``): once per
        run or report, not per message."""
        self.m_processed.count += n
        t = self.m_process_ns
        t.count += n
        t.total_ns += total_ns
        if max_ns > t.max_ns:
            t.max_ns = max_ns
