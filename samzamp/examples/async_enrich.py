"""An async task: each message awaits a (simulated) remote lookup; up to task.max.concurrency at once.

Messages may complete out of order; samzamp checkpoints only the low watermark of completed ones.
"""

from __future__ import annotations

import asyncio
import zlib

from samzamp import (
    AsyncStreamTask,
    IncomingMessageEnvelope,
    InitableTask,
    MessageCollector,
    OutgoingMessageEnvelope,
    SystemStream,
    TaskContext,
    TaskCoordinator,
)

__all__ = ["EnrichTask"]


class EnrichTask(AsyncStreamTask, InitableTask):
    def init(self, context: TaskContext) -> None:
        self.output = SystemStream("kafka", "enriched")

    async def process_async(  # type: ignore[override]
        self, envelope: IncomingMessageEnvelope, collector: MessageCollector, coordinator: TaskCoordinator
    ) -> None:
        user = envelope.message
        # Stands in for an HTTP or database call: latency varies per message, so completions reorder.
        await asyncio.sleep((zlib.crc32(str(user).encode()) % 20) / 1000)
        collector.send(OutgoingMessageEnvelope(self.output, {"user": user, "score": len(str(user))}, key=str(user)))
