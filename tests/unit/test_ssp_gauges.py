"""The per-SSP gauges: one per SSP whatever the number of tasks reading it; a broadcast SSP's speak
for its slowest reader. The same through a running container: test_apply_job_model.py."""

from __future__ import annotations

from dataclasses import dataclass, field

from samzamp.api.envelope import SystemStreamPartition
from samzamp.container.ssp_gauges import SspGauges
from samzamp.metrics.registry import MetricsRegistry

BC = SystemStreamPartition("kafka", "bc", 0)
BUCKET = SystemStreamPartition("kafka", "in", 3, 1)


@dataclass(eq=False)
class Reader:
    ssps: frozenset[SystemStreamPartition]
    checkpointed: dict[SystemStreamPartition, int] = field(default_factory=dict)
    last_processed: dict[SystemStreamPartition, int] = field(default_factory=dict)


def _gauges(metrics: MetricsRegistry) -> dict[str, object]:
    snapshot = metrics.snapshot()
    return {**snapshot.get("OffsetManagerMetrics", {}), **snapshot.get("SystemConsumersMetrics", {})}


def test_a_broadcast_ssp_reports_its_lowest_checkpoint_and_largest_lag_until_its_last_reader_leaves() -> None:
    metrics = MetricsRegistry()
    watermarks = {BC: 100, BUCKET: 50}
    gauges = SspGauges(metrics, watermarks.get)
    a = Reader(frozenset({BC, BUCKET}), {BC: 40, BUCKET: 7}, {BC: 59, BUCKET: 9})
    b = Reader(frozenset({BC}))
    gauges.add(a)
    gauges.add(b)
    assert _gauges(metrics) == {
        "kafka-bc-0-checkpointed-offset": None,  # b has no checkpoint: a restart of b starts elsewhere
        "kafka-in-3-1-checkpointed-offset": 7,
        "kafka-bc-0-messages-behind-high-watermark": 100,  # b has processed nothing
        "kafka-in-3-1-messages-behind-high-watermark": 40,
    }
    b.checkpointed, b.last_processed = {BC: 30}, {BC: 79}
    values = _gauges(metrics)
    assert values["kafka-bc-0-checkpointed-offset"] == 30
    assert values["kafka-bc-0-messages-behind-high-watermark"] == 40  # a's lag, past offset 59
    gauges.remove(a)
    values = _gauges(metrics)
    assert values == {"kafka-bc-0-checkpointed-offset": 30, "kafka-bc-0-messages-behind-high-watermark": 20}
    gauges.remove(b)
    assert _gauges(metrics) == {}
    gauges.add(a)  # a reader that comes back gets its gauges again
    assert _gauges(metrics)["kafka-bc-0-checkpointed-offset"] == 40


def test_lag_is_unknown_until_the_consumers_know_the_high_watermark() -> None:
    metrics = MetricsRegistry()
    gauges = SspGauges(metrics, {}.get)
    gauges.add(Reader(frozenset({BC}), {BC: 4}, {BC: 4}))
    assert _gauges(metrics)["kafka-bc-0-messages-behind-high-watermark"] is None
