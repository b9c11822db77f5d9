"""The no-op task of bench/noop.py: every input message goes, unchanged, to the output topic with its key.

The output topic is read from BENCH_NOOP_OUTPUT (set by bench/noop.py, one topic per run) so that
repeated runs on one broker do not mix their outputs.
"""

from __future__ import annotations

import os

from samzamp import (
    IncomingMessageEnvelope,
    MessageCollector,
    OutgoingMessageEnvelope,
    StreamTask,
    SystemStream,
    TaskCoordinator,
)

OUTPUT_TOPIC = os.environ.get("BENCH_NOOP_OUTPUT", "bench-noop-out")


class NoopTask(StreamTask):
    OUT = SystemStream("kafka", OUTPUT_TOPIC)

    def process(
        self, envelope: IncomingMessageEnvelope, collector: MessageCollector, coordinator: TaskCoordinator
    ) -> None:
        collector.send(OutgoingMessageEnvelope(self.OUT, envelope.message, key=envelope.key))
