"""What every task the run loop drives keeps, wherever it runs: its name and inputs, its readiness
state, its offsets (processed and checkpointed) and its metrics under Samza's names.

``TaskInstance`` (inline or on asyncio) and ``WorkerTaskProxy`` (in a worker) build on it.
"""

from __future__ import annotations

import functools

from samzamp.api.envelope import SystemStreamPartition
from samzamp.container.ssp_gauges import ssp_label
from samzamp.container.task_state import TaskState
from samzamp.metrics.registry import MetricsRegistry

__all__ = ["TaskBase"]


class TaskBase:
    def __init__(
        self,
        name: str,
        ssps: frozenset[SystemStreamPartition],
        max_concurrency: int,
        checkpointed: dict[SystemStreamPartition, int],
        metrics: MetricsRegistry,
    ) -> None:
        self.name = name
        self.ssps = ssps
        self.state = TaskState(max_concurrency)
        self.checkpointed = dict(checkpointed)
        self.last_processed = dict(checkpointed)  # last processed offset per SSP (the low watermark)
        self.processing_ssps = set(ssps)  # SSPs not yet at end of stream
        # While draining: the SSPs that got drain markers, and those whose marker the task has not reached.
        self.drain_marked: set[SystemStreamPartition] = set()
        self.drain_pending: set[SystemStreamPartition] = set()
        # The stores whose changelog markers each checkpoint must carry (the container sets them).
        self.logged_stores: frozenset[str] = frozenset()
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

    def count_processed(self, n: int, total_ns: int, max_ns: int) -> None:
        """Count ``n`` messages processed in ``total_ns`` (the longest took ``max_ns``): once per
        run or report, not per message."""
        self.m_processed.count += n
        t = self.m_process_ns
        t.count += n
        t.total_ns += total_ns
        if max_ns > t.max_ns:
            t.max_ns = max_ns
