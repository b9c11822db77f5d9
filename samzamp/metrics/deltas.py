"""Metrics counted in one process and added to another's registry: a worker's tasks' metrics reach
the container's this way.

The counting side keeps a ``DeltaTracker`` over its registry and takes ``MetricDeltas`` from it now
and then: what each counter and timer gained since the last take, and each gauge whose value changed.
The receiving side adds them to its own registry with ``apply_deltas``, under the same group and
name. So a counter in the receiver is the sum of what every sender counted into it (as if all
had counted into one registry), and it never goes down: each delta is taken once, sent once and
added once, so a take that never arrives (its sender died) loses that part, and none is counted
twice.

A delta crosses as plain values (msgspec): group and name strings and numbers; a gauge's value that
is not a number, string, bool or None crosses as its ``str()``.
"""

from __future__ import annotations

import logging
from typing import Any

import msgspec

from samzamp.metrics.registry import Counter, Gauge, MetricsRegistry, Timer

__all__ = ["DeltaTracker", "MetricDeltas", "apply_deltas"]

log = logging.getLogger(__name__)

_INT64 = 1 << 63


class MetricDeltas(msgspec.Struct, array_like=True, frozen=True):
    """What changed in a registry since the last take."""

    counters: list[tuple[str, str, int]] = []  # (group, name, gained)
    timers: list[tuple[str, str, int, int, int]] = []  # (group, name, count gained, ns gained, max ns so far)
    gauges: list[tuple[str, str, Any]] = []  # (group, name, value now)

    def __bool__(self) -> bool:
        return bool(self.counters or self.timers or self.gauges)


class DeltaTracker:
    """The changes of ``registry``'s metrics, taken one ``take`` after another. Call it on the
    thread that updates the metrics (their functions run there, at the take)."""

    def __init__(self, registry: MetricsRegistry) -> None:
        self.registry = registry
        # Per group, per name (by group, so that a group leaves in one step: thousands of tasks'
        # groups leave one by one when their tasks do).
        self._counted: dict[str, dict[str, int]] = {}  # counter -> count at the last take
        self._timed: dict[str, dict[str, tuple[int, int]]] = {}  # timer -> (count, total ns) then
        self._gauged: dict[str, dict[str, Any]] = {}  # gauge -> value sent last

    def forget(self, group: str) -> None:
        """``group`` left the registry: a group of that name made later starts from zero."""
        self._counted.pop(group, None)
        self._timed.pop(group, None)
        self._gauged.pop(group, None)

    def take(self) -> MetricDeltas:
        """What changed since the last take (everything, the first time: from zero)."""
        counters: list[tuple[str, str, int]] = []
        timers: list[tuple[str, str, int, int, int]] = []
        gauges: list[tuple[str, str, Any]] = []
        all_counted, all_timed, all_gauged = self._counted, self._timed, self._gauged
        # A worker of thousands of tasks walks thousands of groups of a metric or two each, every
        # second: each group's dicts are looked up only for the kinds it has, and kinds are told
        # apart by their exact type (the registry makes exactly these).
        for group, metrics in self.registry.metrics():
            counted: dict[str, int] | None = None
            timed: dict[str, tuple[int, int]] | None = None
            gauged: dict[str, Any] | None = None
            for name, m in metrics:
                kind = type(m)
                if kind is Counter:
                    if counted is None:
                        counted = all_counted.setdefault(group, {})
                    count = m.count  # type: ignore[union-attr]
                    gained = count - counted.get(name, 0)
                    if gained > 0:  # one set back (by hand) counts again only past where it was
                        counted[name] = count
                        counters.append((group, name, gained))
                elif kind is Timer:
                    if timed is None:
                        timed = all_timed.setdefault(group, {})
                    count, total = m.count, m.total_ns  # type: ignore[union-attr]
                    last_count, last_total = timed.get(name, (0, 0))
                    if count > last_count:
                        timed[name] = (count, total)
                        timers.append((group, name, count - last_count, total - last_total, m.max_ns))  # type: ignore[union-attr]
                elif kind is Gauge:
                    if gauged is None:
                        gauged = all_gauged.setdefault(group, {})
                    value = _plain(m.snapshot())
                    if name not in gauged or gauged[name] != value:
                        gauged[name] = value
                        gauges.append((group, name, value))
        return MetricDeltas(counters, timers, gauges)


def _plain(value: Any) -> Any:
    """``value`` as it can cross: a number that fits 64 bits, a string, a bool or None, else its str()."""
    if value is None or isinstance(value, (bool, float, str)):
        return value
    if isinstance(value, int):
        return value if -_INT64 <= value < _INT64 else float(value)
    return str(value)


def apply_deltas(registry: MetricsRegistry, deltas: MetricDeltas) -> None:
    """Add ``deltas`` to ``registry``'s metrics of the same group and name (made when missing). A
    name that is another kind of metric here is skipped, with a warning: it cannot be added to."""
    for group, name, gained in deltas.counters:
        try:
            registry.counter(group, name).count += gained
        except ValueError as e:
            log.warning("metrics from a worker: %s; its counts are not added", e)
    for group, name, count, total_ns, max_ns in deltas.timers:
        try:
            t = registry.timer(group, name)
        except ValueError as e:
            log.warning("metrics from a worker: %s; its times are not added", e)
            continue
        t.count += count
        t.total_ns += total_ns
        if max_ns > t.max_ns:
            t.max_ns = max_ns
    for group, name, value in deltas.gauges:
        try:
            registry.gauge(group, name).set(value)
        except ValueError as e:
            log.warning("metrics from a worker: %s; its value is not set", e)
