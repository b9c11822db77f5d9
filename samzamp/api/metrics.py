"""Metrics a task keeps of its own: counters, gauges and timers (Samza's samza-api metrics).

A task gets its registry as ``context.metrics`` in ``init`` (``TaskMetrics``, Samza's
``TaskContext.getTaskMetricsRegistry()``). Its metrics sit in the task's group, ``TaskName-<task>``,
beside samzamp's own metrics of the task, and go wherever samzamp's go: the metrics log line, the
snapshot reporter's messages, and every other export of the container's registry. A task that runs
in a worker process (job.container.thread.pool.size >= 2) counts in that process; the worker
reports what changed to the container about once a second, and at the task's removal and the
worker's stop, so the container's totals are the task's totals.

``Counter``, ``Gauge`` and ``Timer`` are also the types of samzamp's own metrics. They hold no lock:
each is updated on the thread that runs its task.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Protocol

__all__ = ["Counter", "Gauge", "TaskMetrics", "Timer"]

log = logging.getLogger(__name__)


class Counter:
    """A count that only goes up (Samza's ``Counter``): ``inc()`` or ``inc(n)``; ``count`` reads it."""

    __slots__ = ("count",)

    def __init__(self) -> None:
        self.count = 0

    def inc(self, n: int = 1) -> None:
        """Add ``n`` (at least 0: a counter never goes down, so an exporter's rate stays right)."""
        if n < 0:
            msg = f"a counter only goes up: inc({n}); use a gauge for a value that goes down"
            raise ValueError(msg)
        self.count += n

    def snapshot(self) -> Any:
        """The count."""
        return self.count


class Gauge:
    """A value: set with ``set(value)``, or read from ``fn()`` whenever the metrics are reported.

    A value that crosses from a worker process or goes into a snapshot message must be a number, a
    string, a bool or None; anything else is reported as its ``str()``.
    """

    __slots__ = ("fn", "value")

    def __init__(self, value: Any = 0, fn: Callable[[], Any] | None = None) -> None:
        self.value = value
        self.fn = fn

    def set(self, value: Any) -> None:
        """Set the value (a gauge with a function reports the function's value instead)."""
        self.value = value

    def snapshot(self) -> Any:
        """The function's value, else the value set."""
        return self.fn() if self.fn is not None else self.value


class Timer:
    """Durations in nanoseconds (Samza's ``Timer``): ``update(ns)`` once per timed call. Reported as
    the average (Samza's snapshot reporter does so), with the count and the longest."""

    __slots__ = ("count", "max_ns", "total_ns")

    def __init__(self) -> None:
        self.count = 0
        self.total_ns = 0
        self.max_ns = 0

    def update(self, ns: int) -> None:
        """Count one duration of ``ns`` nanoseconds (e.g. a difference of ``time.perf_counter_ns()``)."""
        self.count += 1
        self.total_ns += ns
        if ns > self.max_ns:
            self.max_ns = ns

    def snapshot(self) -> Any:
        """``{"avg": ns, "count": n, "max": ns}``."""
        avg = self.total_ns / self.count if self.count else 0.0
        return {"avg": round(avg), "count": self.count, "max": self.max_ns}


class _Registry(Protocol):
    """Where a ``TaskMetrics`` keeps its metrics: the registry of the process the task runs in."""

    def counter(self, group: str, name: str) -> Counter: ...

    def gauge(self, group: str, name: str, fn: Callable[[], Any] | None = None) -> Gauge: ...

    def timer(self, group: str, name: str) -> Timer: ...


class _OwnRegistry:
    """A registry of a ``TaskMetrics`` made outside samzamp (a task's own unit test)."""

    def __init__(self) -> None:
        self._metrics: dict[tuple[str, str], Counter | Gauge | Timer] = {}

    def _get(self, group: str, name: str, kind: type[Counter | Gauge | Timer]) -> Any:
        m = self._metrics.get((group, name))
        if m is None:
            m = self._metrics[(group, name)] = kind()
        elif not isinstance(m, kind):
            msg = f"metric {name!r} of {group} is a {type(m).__name__}, not a {kind.__name__}"
            raise ValueError(msg)
        return m

    def counter(self, group: str, name: str) -> Counter:
        c: Counter = self._get(group, name, Counter)
        return c

    def gauge(self, group: str, name: str, fn: Callable[[], Any] | None = None) -> Gauge:
        g: Gauge = self._get(group, name, Gauge)
        if fn is not None:
            g.fn = fn
        return g

    def timer(self, group: str, name: str) -> Timer:
        t: Timer = self._get(group, name, Timer)
        return t


class TaskMetrics:
    """The task's metrics registry (Samza's task metrics registry), as ``context.metrics``.

    Each method returns the metric of that name in the task's group ``TaskName-<task>``, made on the
    first call; a later call with the same name returns the same metric (a name used for another
    kind of metric is a ``ValueError``). Names are the task's to choose, except samzamp's own metric
    names of the task (``process-calls``, ``send-calls``, ...: a ``ValueError`` says so)::

        def init(self, context):
            self.words = context.metrics.counter("words-seen")
            self.latency = context.metrics.timer("lookup-ns")
            context.metrics.gauge("cache-size", fn=lambda: len(self.cache))

    Call these in ``init`` and keep the metrics: the update calls (``inc``, ``set``, ``update``)
    are the ones to make per message. Metrics are the task's from its start in this container to
    its end here: a task that moves to another container (a new job model) starts its own at zero
    there.
    """

    def __init__(
        self, task_name: str, registry: _Registry | None = None, reserved: Callable[[str], bool] | None = None
    ) -> None:
        """``registry``: where the metrics live (samzamp passes the registry of the process that runs
        the task; None: a registry of this object's own, for a task's unit test). ``reserved``: which
        names are samzamp's own metrics of the task."""
        self.task_name = task_name
        self.group = f"TaskName-{task_name}"
        self._registry: _Registry = registry if registry is not None else _OwnRegistry()
        self._reserved = reserved

    def _check(self, name: str) -> None:
        if not isinstance(name, str) or not name:
            msg = f"task {self.task_name!r}: a metric name must be a non-empty string, got {name!r}"
            raise ValueError(msg)
        if self._reserved is not None and self._reserved(name):
            msg = (
                f"task {self.task_name!r}: {name!r} is one of samzamp's own metrics of the task "
                f"(group {self.group}); choose another name"
            )
            raise ValueError(msg)

    def counter(self, name: str) -> Counter:
        """The counter ``name`` of the task."""
        self._check(name)
        return self._registry.counter(self.group, name)

    def gauge(self, name: str, fn: Callable[[], Any] | None = None) -> Gauge:
        """The gauge ``name`` of the task: ``set()`` its value, or give ``fn``, called whenever the
        metrics are reported (in a worker process, about once a second, on the thread that runs the
        task, between its calls). A function that raises reports None, and is logged once."""
        self._check(name)
        return self._registry.gauge(self.group, name, None if fn is None else _Guarded(self.task_name, name, fn))

    def timer(self, name: str) -> Timer:
        """The timer ``name`` of the task: ``update(ns)`` with each duration, in nanoseconds."""
        self._check(name)
        return self._registry.timer(self.group, name)


class _Guarded:
    """A task's gauge function as samzamp calls it: a failure reads None (logged once) rather than
    failing the report of every metric."""

    __slots__ = ("failed", "fn", "name", "task")

    def __init__(self, task: str, name: str, fn: Callable[[], Any]) -> None:
        self.task = task
        self.name = name
        self.fn = fn
        self.failed = False

    def __call__(self) -> Any:
        try:
            return self.fn()
        except Exception as e:
            if not self.failed:
                self.failed = True
                log.warning(
                    "task %r: gauge %r failed, reported as None: %s: %s", self.task, self.name, type(e).__name__, e
                )
            return None
