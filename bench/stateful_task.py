"""The stateful task of bench/stateful.py: a count per key in a changelogged LMDB store, one output per
message.

Each input (noop's JSON click) is keyed ``u<id % bench.keys>``; the task reads the key's record from
the store "counts", writes it back with the count one higher and the click's time, and sends the new
record to the output topic (BENCH_NOOP_OUTPUT, set by the bench per run) keyed by the key.
"""

from __future__ import annotations

import os
from typing import Any

from samzamp import (
    IncomingMessageEnvelope,
    InitableTask,
    MessageCollector,
    OutgoingMessageEnvelope,
    StreamTask,
    SystemStream,
    TaskContext,
    TaskCoordinator,
)

OUTPUT_TOPIC = os.environ.get("BENCH_NOOP_OUTPUT", "bench-stateful-out")


class StatefulCountTask(StreamTask, InitableTask):
    OUT = SystemStream("kafka", OUTPUT_TOPIC)

    def init(self, context: TaskContext) -> None:
        self.counts: Any = context.get_store("counts")
        self.keys = int(context.config.get("bench.keys", 100_000))

    def process(
        self, envelope: IncomingMessageEnvelope, collector: MessageCollector, coordinator: TaskCoordinator
    ) -> None:
        click = envelope.message
        key = f"u{click['id'] % self.keys}"
        record = self.counts.get(key)
        record = {"count": 1 if record is None else record["count"] + 1, "ts": click["ts"]}
        self.counts.put(key, record)
        collector.send(OutgoingMessageEnvelope(self.OUT, record, key=key))
