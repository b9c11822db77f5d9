"""MetricsRegistry.snapshot() from another thread than the one that adds and removes metrics (a
user's monitoring thread beside the loop, which adds and removes a task's metrics as tasks come and go)."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator

import pytest

from samzamp.metrics.registry import MetricsRegistry


@pytest.fixture
def switch_often() -> Iterator[None]:
    # Threads take turns every microsecond instead of every 5 ms, so that a snapshot is interrupted
    # mid-iteration in nearly every round rather than in a few.
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(before)


def test_a_snapshot_on_another_thread_while_tasks_come_and_go(switch_often: None) -> None:
    metrics = MetricsRegistry()
    for i in range(200):
        metrics.gauge("SystemConsumersMetrics", f"kafka-in-{i}-messages-behind-high-watermark", fn=lambda: 0)
    stop = threading.Event()

    def tasks_come_and_go() -> None:
        n = 0
        while not stop.is_set():
            n += 1
            metrics.counter(f"TaskName-Partition {n}", "process-calls")
            metrics.gauge("SystemConsumersMetrics", f"kafka-new-{n}-messages-behind-high-watermark", fn=lambda: 0)
            metrics.remove(f"TaskName-Partition {n - 1}")
            metrics.remove("SystemConsumersMetrics", [f"kafka-new-{n - 1}-messages-behind-high-watermark"])

    loop = threading.Thread(target=tasks_come_and_go)
    loop.start()
    try:
        for _ in range(2000):
            snapshot = metrics.snapshot()
            # The 200 that stay, and one or two of the thread's: it adds one, then removes the one before.
            assert 200 <= len(snapshot["SystemConsumersMetrics"]) <= 202
    finally:
        stop.set()
        loop.join()
