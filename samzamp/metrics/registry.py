"""A small metrics registry. Groups are Samza's (e.g. ``SamzaContainerMetrics``, ``TaskName-Partition 0``).

Counters and timers are updated only on the thread that runs what they count (the event loop, or a
worker's one thread), so they need no locks. A gauge may be a value or a function evaluated when a
snapshot is taken. A timer reports its average in ns, as Samza's snapshot reporter does, plus count
and max. The metric types are the public ones of ``samzamp.api.metrics`` (a task's own metrics are
the same objects, in its ``TaskName-<task>`` group).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from samzamp.api.metrics import Counter, Gauge, Timer

__all__ = ["Counter", "Gauge", "Metric", "MetricsRegistry", "Timer"]

Metric = Counter | Gauge | Timer


class MetricsRegistry:
    """Metrics by group and name; ``snapshot()`` gives plain values for logs and tests."""

    def __init__(self) -> None:
        self._groups: dict[str, dict[str, Metric]] = {}

    def _get(self, group: str, name: str, kind: type[Metric]) -> Any:
        metrics = self._groups.setdefault(group, {})
        m = metrics.get(name)
        if m is None:
            m = metrics[name] = kind()
        elif type(m) is not kind:
            # One name, one kind: a counter read as a gauge would be exported wrongly everywhere.
            raise ValueError(f"metric {name!r} of {group} is a {type(m).__name__}, not a {kind.__name__}")
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

    def metrics(self) -> list[tuple[str, list[tuple[str, Metric]]]]:
        """Every metric object, by group and name, for a reporter that needs each one's kind (a
        counter, a gauge, a timer); copied as ``snapshot`` copies, so safe on any thread."""
        return [(g, list(ms.items())) for g, ms in list(self._groups.items()) if ms]

    def snapshot(self) -> dict[str, dict[str, Any]]:
        """Every metric's value, by group and name. Safe on any thread while the loop adds and
        removes metrics: each dict is copied in one C call (``list(d.items())`` runs no bytecode, so
        no other thread runs meanwhile) before any gauge's function is called."""
        return {g: {n: m.snapshot() for n, m in list(ms.items())} for g, ms in list(self._groups.items()) if ms}
