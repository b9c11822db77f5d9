"""The CPU-bound task of bench/cpu_scaling.py: a deterministic pure-Python loop (~20 µs a message on
this machine), then one output per input. The output topic comes from BENCH_NOOP_OUTPUT.

BENCH_CPU_SLEEP_US: sleep that long instead of the loop, a task that waits rather than computes. On a
machine of few cores it shows whether many workers are kept fed, apart from whether the cores can
run them: the ceiling of N workers is then N, and the loop and the broker have the cores to
themselves."""

from __future__ import annotations

import os
import time

from samzamp import (
    IncomingMessageEnvelope,
    MessageCollector,
    OutgoingMessageEnvelope,
    StreamTask,
    SystemStream,
    TaskCoordinator,
)

OUTPUT_TOPIC = os.environ.get("BENCH_NOOP_OUTPUT", "bench-cpu-out")
ITERATIONS = int(os.environ.get("BENCH_CPU_ITERATIONS", "280"))
SLEEP_S = float(os.environ.get("BENCH_CPU_SLEEP_US", "0")) / 1e6


def burn(seed: int, iterations: int = ITERATIONS) -> int:
    if SLEEP_S:
        time.sleep(SLEEP_S)
        return seed
    x = seed
    for _ in range(iterations):
        x = (x * 1103515245 + 12345) & 0x7FFFFFFF
    return x


class CpuTask(StreamTask):
    OUT = SystemStream("kafka", OUTPUT_TOPIC)

    def process(
        self, envelope: IncomingMessageEnvelope, collector: MessageCollector, coordinator: TaskCoordinator
    ) -> None:
        message = envelope.message
        message["h"] = burn(message["id"])
        collector.send(OutgoingMessageEnvelope(self.OUT, message, key=envelope.key))
