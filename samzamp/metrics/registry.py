"""A small metrics registry. Groups are Samza's (e.g. ``SamzaContainerMetrics``, ``TaskName-Partition 0``).

Counters and timers are updated only on the event loop thread, so they need no locks. A gauge may be
a value or a function evaluated when a snapshot is taken. A timer reports its average in ns, as
Samza's snapshot reporter does, plus count and max.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

__all__ = ["Counter", "Gauge", "MetricsRegistry", "Timer"]


class Counter:
    __slots__ = ("count",)

    def __init__(self) -> None:
        self.count = 0

    def inc(self, n: int = 1) -> None:
        self.count += n

    def snapshot(self) -> Any:
        return self.count


class Gauge:
    __slots__ = ("fn", "value")

    def __init__(self, value: Any = 0, fn: Callable[[], Any] | None = None) -> None:
        self.value = value
        self.fn = fn

    def set(self, value: Any) -> None:
        self.value = value

    def snapshot(self) -> Any:
        return self.fn() if self.fn is not None else self.value


class Timer:
    __slots__ = ("count", "max_ns", "total_ns")

    def __init__(self) -> None:
        self.count = 0
        self.total_ns = 0
        self.max_ns = 0

    def update(self, ns: int) -> None:
        self.count += 1
        self.total_ns += ns
        if ns > self.max_ns:
            self.max_ns = ns

    def snapshot(self) -> Any:
        avg = self.total_ns / self.count if self.count else 0.0
        return {"avg": round(avg), "count": self.count, "max": self.max_ns}


class MetricsRegistry:
    """Metrics by group and name; ``snapshot()`` gives plain values for logs and tests."""

    def __init__(self) -> None:
        self._groups: dict[str, dict[str, Counter | Gauge | Timer]] = {}

    def _get(self, group: str, name: str, kind: type) -> Any:
        metrics = self._groups.setdefault(group, {})
        m = metrics.get(name)
        if m is None:
            m = metrics[name] = kind()
        return m

    def counter(self, group: str, name: str) -> Counter:
        c: Counter = self._get(group, name, Counter)
        return c

    def timer(self, group: str, name: str) -> Timer:
        t: Timer = self._get(group, name, Timer)
        return t

    def gauge(self, group: str, name: str, fn: Callable[[], Any] | None = None) -> Gauge:
        g: Gauge = self._get(group, name, Gauge)
        if fn is not None:
            g.fn = fn
        return g

    def remove(self, group: str, names: Iterable[str] | None = None) -> None:
        """Forget ``names`` of ``group`` (all of the group when None): a task that leaves the
        container takes its metrics with it, and one that comes back starts them from zero."""
        if names is None:
            self._groups.pop(group, None)
            return
        metrics = self._groups.get(group)
        if metrics is not None:
            for name in names:
                metrics.pop(name, None)

    def snapshot(self) -> dict[str, dict[str, Any]]:
        """Every metric's value, by group and name. Safe on any thread while the loop adds and
        removes metrics: each dict is copied in one C call (``list(d.items())`` runs no bytecode, so
        no other thread runs meanwhile) before any gauge's function is called."""
        return {g: {n: m.snapshot() for n, m in list(ms.items())} for g, ms in list(self._groups.items()) if ms}

    def entries(self) -> list[tuple[str, str, Counter | Gauge | Timer]]:
        """Every metric as (group, name, metric), for an exporter that needs each metric's kind
        (a counter and a gauge snapshot alike). Safe on any thread, as ``snapshot``; nothing is
        evaluated: the caller calls each metric's ``snapshot()``."""
        return [(g, n, m) for g, ms in list(self._groups.items()) for n, m in list(ms.items())]
