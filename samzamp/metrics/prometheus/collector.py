"""A prometheus_client collector over a ``MetricsRegistry``, read at scrape time.

Each scrape reads every metric once (``MetricsRegistry.entries``: safe on the scraping thread while
the loop adds and removes metrics), names it (``names.Namer``) and adds ``job``, ``job_id`` and
``processor`` to every series. What comes out is valid whatever the registry holds: every name
matches ``[a-zA-Z_:][a-zA-Z0-9_:]*``, and no series appears twice; a metric that would break that
(two registry names that snake-case alike, or a family name taken by another kind) is left out, with
one warning naming it. A gauge whose function raises, or whose value is None, gives no sample.

Counters end in ``_total``; timers give a summary in seconds (``_count``, ``_sum``) and a gauge
``<name>_max_seconds``; text gauges give ``samza_<area>_info{<metric>="..."} 1``. With ``state``,
``samza_processor_state{state}`` is 1 for the processor's state and 0 for each other one.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric, SummaryMetricFamily
from prometheus_client.samples import Sample

from samzamp.metrics.prometheus.names import PREFIX, Namer, Series
from samzamp.metrics.registry import Counter, MetricsRegistry, Timer

__all__ = ["RegistryCollector"]

log = logging.getLogger(__name__)

_CACHE_MAX = 50_000  # names of metrics seen; cleared when larger (tasks come and go in standalone mode)


@dataclass
class _Family:
    kind: str  # counter, gauge or summary (the family's type); info families are gauges
    help: str
    samples: dict[tuple[tuple[str, str], ...], tuple[dict[str, str], tuple[float, ...]]] = field(default_factory=dict)


class _Scrape:
    """The families of one scrape, as they are added: conflicts refused, each family's samples."""

    def __init__(self, const: Mapping[str, str]) -> None:
        self.const = dict(const)
        self.families: dict[str, _Family] = {}
        self.taken: dict[str, str] = {}  # every sample name -> the family it belongs to
        self.infos: dict[tuple[str, tuple[tuple[str, str], ...]], dict[str, str]] = {}
        self.info_help: dict[str, str] = {}
        self.refused: list[str] = []

    def family(self, name: str, kind: str, doc: str, what: str) -> _Family | None:
        family = self.families.get(name)
        if family is not None:
            if family.kind == kind:
                return family
            self.refused.append(f"{what}: {name} is a {family.kind} already")
            return None
        names = _sample_names(name, kind)
        clash = next((n for n in names if n in self.taken), None)
        if clash is not None:
            self.refused.append(f"{what}: {clash} belongs to {self.taken[clash]} already")
            return None
        for n in names:
            self.taken[n] = name
        family = self.families[name] = _Family(kind, doc)
        return family

    def add(self, family: _Family, labels: Mapping[str, str], values: tuple[float, ...], what: str) -> None:
        full = {k: v for k, v in {**self.const, **labels}.items() if v}  # an empty label is no label
        key = tuple(sorted(full.items()))
        if key in family.samples:
            self.refused.append(f"{what}: the series {dict(key)} is there already")
            return
        family.samples[key] = (full, values)

    def info(self, series: Series, value: str, what: str) -> None:
        labels = dict(series.labels)
        key = (series.name, tuple(sorted(labels.items())))
        values = self.infos.setdefault(key, {})
        label = series.metric if series.metric[0].isalpha() else f"_{series.metric}"
        if label in labels or label in self.const or label in values:
            label = f"value_{label}"
        if label in values:
            self.refused.append(f"{what}: {series.name} has a label {label} already")
            return
        values[label] = value
        self.info_help.setdefault(series.name, f"Text values of {PREFIX}_{series.area}, as labels.")

    def metrics(self) -> list[Metric]:
        for (name, base), texts in self.infos.items():
            info = self.family(name, "gauge", self.info_help[name], name)
            if info is not None:
                self.add(info, {**dict(base), **texts}, (1.0,), name)
        out: list[Metric] = []
        for name, family in self.families.items():
            if not family.samples:
                continue
            # Samples are added as they are (prometheus_client's add_metric would give every sample
            # every label of the family, an empty one where it has none).
            metric: Metric
            if family.kind == "counter":
                metric = CounterMetricFamily(name, family.help)
                for labels, values in family.samples.values():
                    metric.samples.append(Sample(f"{name}_total", labels, values[0]))
            elif family.kind == "summary":
                metric = SummaryMetricFamily(name, family.help)
                for labels, values in family.samples.values():
                    metric.samples.append(Sample(f"{name}_count", labels, values[0]))
                    metric.samples.append(Sample(f"{name}_sum", labels, values[1]))
            else:
                metric = GaugeMetricFamily(name, family.help)
                for labels, values in family.samples.values():
                    metric.samples.append(Sample(name, labels, values[0]))
            out.append(metric)
        return out


def _sample_names(name: str, kind: str) -> tuple[str, ...]:
    """The names a family's samples take in the text format (its own name too: a parser names a
    counter's family without ``_total``)."""
    if kind == "counter":
        return name, f"{name}_total", f"{name}_created"
    if kind == "summary":
        return name, f"{name}_count", f"{name}_sum", f"{name}_created"
    return (name,)


def _number(value: Any) -> float | None:
    """A sample's value, None for no sample (None, or not a number)."""
    if isinstance(value, bool | int | float):
        return float(value)
    return None


class RegistryCollector:
    """A prometheus_client collector (``collect()``, called on the HTTP server's threads) over
    ``registry``.

    ``labels()``: job, job_id and processor, read at each scrape (a standalone processor's id can
    change when it joins again). ``state()``, with ``states`` (every state it may return): the
    processor's state for ``samza_processor_state``.
    """

    def __init__(
        self,
        registry: MetricsRegistry,
        namer: Namer,
        labels: Callable[[], Mapping[str, str]],
        state: Callable[[], str] | None = None,
        states: Sequence[str] = (),
    ) -> None:
        self._registry = registry
        self._namer = namer
        self._labels = labels
        self._state = state
        self._states = tuple(states)
        self._names: dict[tuple[str, str, str], Series] = {}
        self._warned: set[str] = set()

    def collect(self) -> Iterable[Metric]:
        """Every metric of the registry now, as Prometheus metric families."""
        scrape = _Scrape(self._labels())
        for group, metrics in self._registry.metrics():
            for name, metric in metrics:
                self._add(scrape, group, name, metric)
        if self._state is not None:
            self._add_state(scrape, self._state())
        for refused in scrape.refused:
            if refused not in self._warned and len(self._warned) < 1000:
                self._warned.add(refused)
                log.warning("prometheus: left out %s", refused)
        return scrape.metrics()

    def _series(self, group: str, name: str, kind: str) -> Series:
        key = (group, name, kind)
        series = self._names.get(key)
        if series is None:
            if len(self._names) > _CACHE_MAX:
                self._names.clear()
            series = self._names[key] = self._namer.series(group, name, kind)
        return series

    def _add(self, scrape: _Scrape, group: str, name: str, metric: Any) -> None:
        what = f"{group} {name!r}"
        registered = "timer" if isinstance(metric, Timer) else "counter" if isinstance(metric, Counter) else "gauge"
        series = self._series(group, name, registered)
        try:
            if isinstance(metric, Timer):
                # Read once each: the loop may update the timer meanwhile (a sample off by one message).
                count, total_ns, max_ns = metric.count, metric.total_ns, metric.max_ns
                value: Any = None
            else:
                value = metric.snapshot()
        except Exception as e:  # a gauge's function failed (say, a worker that just exited): no sample
            log.debug("prometheus: %s: %s", what, e)
            return
        labels = dict(series.labels)
        if isinstance(metric, Timer) and series.kind == "timer":
            family = scrape.family(f"{series.name}_seconds", "summary", series.help, what)
            top = scrape.family(f"{series.name}_max_seconds", "gauge", f"The longest: {series.help}", what)
            if family is not None and top is not None:
                scrape.add(family, labels, (count, total_ns * series.scale), what)
                scrape.add(top, labels, (max_ns * series.scale,), what)
            return
        if isinstance(metric, Timer):  # named as a counter or gauge: its count
            value = count
        if series.kind == "info" or isinstance(value, str):
            if isinstance(value, str | int | float):
                scrape.info(series.as_info(), str(value), what)
            return
        number = _number(value)
        if number is None or math.isnan(number) and series.kind == "counter":
            return
        kind = "counter" if series.kind == "counter" else "gauge"
        family = scrape.family(series.name, kind, series.help, what)
        if family is not None:
            scrape.add(family, labels, (number * series.scale,), what)

    def _add_state(self, scrape: _Scrape, state: str) -> None:
        name = f"{PREFIX}_processor_state"
        family = scrape.family(name, "gauge", "1 for the processor's state (see GET /healthz), 0 for the others.", name)
        if family is None:
            return
        for s in dict.fromkeys((*self._states, state)):
            scrape.add(family, {"state": s}, (1.0 if s == state else 0.0,), name)
