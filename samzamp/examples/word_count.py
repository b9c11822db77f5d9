"""Word count: lines of text in, running counts out (``word -> count``) every window.

A synchronous StreamTask that keeps counts in memory and emits the words that changed since the
last window, so the output is a changelog of counts. The counts live in memory, so a restart starts
them over; README's Getting Started keeps them in a changelogged store instead.
"""

from __future__ import annotations

from collections import Counter

from samzamp import (
    IncomingMessageEnvelope,
    InitableTask,
    MessageCollector,
    OutgoingMessageEnvelope,
    StreamTask,
    SystemStream,
    TaskContext,
    TaskCoordinator,
    WindowableTask,
)

__all__ = ["WordCountTask"]


class WordCountTask(StreamTask, InitableTask, WindowableTask):
    def init(self, context: TaskContext) -> None:
        self.output = SystemStream("kafka", str(context.config.get("word-count.output", "word-counts")))
        self.counts: Counter[str] = Counter()
        self.changed: set[str] = set()

    def process(
        self, envelope: IncomingMessageEnvelope, collector: MessageCollector, coordinator: TaskCoordinator
    ) -> None:
        for word in str(envelope.message).lower().split():
            self.counts[word] += 1
            self.changed.add(word)

    def window(self, collector: MessageCollector, coordinator: TaskCoordinator) -> None:
        for word in sorted(self.changed):
            collector.send(OutgoingMessageEnvelope(self.output, self.counts[word], key=word))
        self.changed.clear()
