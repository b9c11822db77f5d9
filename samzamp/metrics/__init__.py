"""Counters, gauges and timers with Samza's metric names, grouped as Samza groups them."""

from samzamp.metrics.registry import Counter, Gauge, MetricsRegistry, Timer

__all__ = ["Counter", "Gauge", "MetricsRegistry", "Timer"]
