"""Metrics reporters, and the schedule that runs them: every reporter reports the registry every
``interval_s`` seconds while the processor runs, and once more when it stops.

A report has two halves, so that no reporter reads the registry off the event loop nor blocks it:

- ``collect()`` runs on the event loop thread, between the tasks' calls: it reads the registry
  (gauges' functions run here, where the state they read is changed) into plain values;
- ``publish(collected)`` runs on a thread of the loop's default executor: it may block (a send and
  its flush).

A reporter's reports never overlap: the next waits ``interval_s`` after the last one ended (Samza's
fixed delay). A report that raises is logged and the schedule goes on: reporting never stops the job.
``LogReporter`` (metrics.log.interval.ms) logs one JSON line per report; Samza's snapshot reporter
is ``samzamp.metrics.snapshot``.
"""

from __future__ import annotations

import asyncio
import json
import logging
from abc import ABC, abstractmethod
from typing import Any

from samzamp.metrics.registry import MetricsRegistry

__all__ = ["LogReporter", "MetricsReporter", "Reporting"]

log = logging.getLogger(__name__)


class MetricsReporter(ABC):
    """One way out for the metrics (see the module docstring for which thread calls what)."""

    name: str
    interval_s: float

    @abstractmethod
    def collect(self) -> Any:
        """Read what to report, as plain values (the event loop thread)."""

    @abstractmethod
    def publish(self, collected: Any) -> None:
        """Report ``collected`` (an executor thread; may block)."""


class LogReporter(MetricsReporter):
    """The metrics log: the registry's snapshot as one JSON line, ``metrics {...}``."""

    name = "log"

    def __init__(self, registry: MetricsRegistry, interval_s: float) -> None:
        self.registry = registry
        self.interval_s = interval_s

    def collect(self) -> Any:
        return self.registry.snapshot()

    def publish(self, collected: Any) -> None:
        log.info("metrics %s", json.dumps(collected, default=str, sort_keys=True))


class Reporting:
    """Runs ``reporters`` on the event loop from ``start`` until ``stop``, which makes each report once
    more (the last values: a worker's last counts arrive when the workers stop, before this)."""

    def __init__(self, reporters: list[MetricsReporter]) -> None:
        self.reporters = reporters
        self._stopping: asyncio.Event | None = None
        self._runs: list[asyncio.Task[None]] = []

    def start(self) -> None:
        """Begin the reports (on the running event loop); the first comes one interval from now."""
        if self._stopping is not None:
            return
        self._stopping = asyncio.Event()
        self._runs = [asyncio.get_running_loop().create_task(self._run(r)) for r in self.reporters]

    async def stop(self) -> None:
        """Stop the schedule and wait for each reporter's last report. Does nothing before ``start``."""
        if self._stopping is None:
            return
        self._stopping.set()
        await asyncio.gather(*self._runs)

    async def _run(self, reporter: MetricsReporter) -> None:
        stopping = self._stopping
        assert stopping is not None
        while not stopping.is_set():
            try:
                await asyncio.wait_for(stopping.wait(), reporter.interval_s)
            except TimeoutError:
                await self._report(reporter)
        await self._report(reporter)  # the last one, with what the stop left

    @staticmethod
    async def _report(reporter: MetricsReporter) -> None:
        try:
            collected = reporter.collect()
            await asyncio.to_thread(reporter.publish, collected)
        except Exception as e:  # a reporter must never stop the job
            log.warning("metrics reporter %r: report failed: %s: %s", reporter.name, type(e).__name__, e)
