"""The per-SSP gauges of a container: one set per input partition (or key bucket), however many
tasks read it.

- ``OffsetManagerMetrics``, ``<ssp>-checkpointed-offset``: the last offset checkpointed for the SSP;
- ``SystemConsumersMetrics``, ``<ssp>-messages-behind-high-watermark``: messages past the last one
  processed.

A broadcast partition is read by every task, each at its own pace and with its own checkpoint, so
its gauges speak for the slowest reader: the lowest checkpointed offset (None while a reader has no
checkpoint yet) and the largest lag. A gauge lives while any task reads its SSP, so a task that leaves
takes with it only the gauges of SSPs no other task reads.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Protocol

from samzamp.api.envelope import SystemStreamPartition
from samzamp.metrics.names import ssp_label
from samzamp.metrics.registry import MetricsRegistry

__all__ = ["SspGauges", "ssp_label"]


def _gauge_names(ssp: SystemStreamPartition) -> tuple[tuple[str, str], tuple[str, str]]:
    """(group, name) of the SSP's checkpointed-offset gauge, then of its lag gauge."""
    label = ssp_label(ssp)
    return (
        ("OffsetManagerMetrics", f"{label}-checkpointed-offset"),
        ("SystemConsumersMetrics", f"{label}-messages-behind-high-watermark"),
    )


class SspReader(Protocol):
    """What the gauges read of a task, wherever it runs."""

    @property
    def ssps(self) -> frozenset[SystemStreamPartition]: ...

    @property
    def checkpointed(self) -> Mapping[SystemStreamPartition, int]: ...

    @property
    def last_processed(self) -> Mapping[SystemStreamPartition, int]: ...


class SspGauges:
    """The gauges of the SSPs the container's tasks read. Event loop thread only (the gauges
    themselves may be read from any thread: they only read dicts)."""

    def __init__(self, metrics: MetricsRegistry, high_watermark: Callable[[SystemStreamPartition], int | None]) -> None:
        """``high_watermark``: the partition's high watermark as the consumers last saw it."""
        self._metrics = metrics
        self._high_watermark = high_watermark
        self._readers: dict[SystemStreamPartition, list[SspReader]] = {}

    def add(self, task: SspReader) -> None:
        """Count ``task`` among the readers of each of its SSPs, creating the gauges of the first."""
        for ssp in task.ssps:
            readers = self._readers.get(ssp)
            if readers is None:
                readers = self._readers[ssp] = []
                checkpointed, behind = _gauge_names(ssp)
                self._metrics.gauge(*checkpointed, fn=functools.partial(_lowest_checkpoint, ssp, readers))
                self._metrics.gauge(*behind, fn=functools.partial(self._most_behind, ssp, readers))
            readers.append(task)

    def remove(self, task: SspReader) -> None:
        """Stop counting ``task``; the gauges of an SSP it was the last reader of go."""
        for ssp in task.ssps:
            readers = self._readers[ssp]
            readers.remove(task)
            if not readers:
                del self._readers[ssp]
                for group, name in _gauge_names(ssp):
                    self._metrics.remove(group, [name])

    def _most_behind(self, ssp: SystemStreamPartition, readers: list[SspReader]) -> int | None:
        hw = self._high_watermark(ssp)
        processed = [t.last_processed.get(ssp, -1) for t in readers]  # one pass: any thread may read
        if hw is None or not processed:
            return None
        return max(0, hw - (min(processed) + 1))


def _lowest_checkpoint(ssp: SystemStreamPartition, readers: list[SspReader]) -> int | None:
    offsets = [t.checkpointed.get(ssp) for t in readers]  # one pass, as _most_behind
    if not offsets or None in offsets:
        return None
    return min(o for o in offsets if o is not None)
