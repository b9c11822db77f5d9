"""How long sends wait for room in a Kafka producer's local queue: back-pressure from the broker.

A producer's local queue (librdkafka's ``queue.buffering.max.messages``) fills when the broker
acknowledges more slowly than the process sends; a send then waits until deliveries make room.
Each send that waited is timed, once, from the first refusal until the queue took it (Kafka's own
producer reports the like as bufferpool-wait-time), in ``SystemProducersMetrics``:

- ``producer-buffer-wait-ns``: sends of the process's output producers (one per Kafka system);
- ``changelog-buffer-wait-ns``: store writes to their changelogs.

The container and each worker process time their own producers into their own registry; a worker's
timers reach the container's like every metric of its tasks.
"""

from __future__ import annotations

from collections.abc import Iterable

from samzamp.metrics.registry import MetricsRegistry
from samzamp.systems.kafka.changelog import ChangelogProducer
from samzamp.systems.kafka.producer import KafkaSystemProducer

__all__ = ["CHANGELOG_WAITS", "PRODUCER_WAITS", "time_buffer_waits"]

GROUP = "SystemProducersMetrics"
PRODUCER_WAITS = "producer-buffer-wait-ns"
CHANGELOG_WAITS = "changelog-buffer-wait-ns"


def time_buffer_waits(
    metrics: MetricsRegistry, producers: Iterable[object] = (), changelogs: Iterable[ChangelogProducer] = ()
) -> None:
    """Time the waits of ``producers`` (a process's system producers: the Kafka ones are timed) and
    of ``changelogs`` in ``metrics``."""
    for p in producers:
        if isinstance(p, KafkaSystemProducer):
            p.waits = metrics.timer(GROUP, PRODUCER_WAITS)
    for c in changelogs:
        c.waits = metrics.timer(GROUP, CHANGELOG_WAITS)
