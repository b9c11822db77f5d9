"""The two jobs of bench/app_word_count.py: the word-count application with the bench's window, and
the same job written as a low-level StreamTask.

``WordCountLowLevelTask`` does by hand what the application's graph does, in the same two stages of
one task: a line (from ``lines``) is split into lower-case words, each sent keyed by itself to the
re-keying topic (JSON key and value, as partition_by sends); a word read back from that topic is
counted in the changelogged store ``counts``; each window (task.window.ms) sends the count of each
word counted since the last one to the output and deletes it from the store, as a tumbling window
does when it fires. Topic names come from the config: bench.rekeyed and bench.output.
"""

from __future__ import annotations

from datetime import timedelta
from typing import ClassVar

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
from samzamp.examples.word_count_app import WordCountApp, split_words

__all__ = ["WINDOW", "BenchWordCountApp", "WordCountLowLevelTask"]

WINDOW = timedelta(seconds=1)


class BenchWordCountApp(WordCountApp):
    """The example application, with the bench's window."""

    interval: ClassVar[timedelta] = WINDOW


class WordCountLowLevelTask(StreamTask, InitableTask, WindowableTask):
    def init(self, context: TaskContext) -> None:
        self.counts = context.get_store("counts")
        self.rekeyed = SystemStream("kafka", str(context.config["bench.rekeyed"]))
        self.output = SystemStream("kafka", str(context.config["bench.output"]))
        self.changed: set[str] = set()

    def process(
        self, envelope: IncomingMessageEnvelope, collector: MessageCollector, coordinator: TaskCoordinator
    ) -> None:
        if envelope.system_stream_partition.stream == self.rekeyed.stream:
            word = envelope.key
            self.counts.put(word, (self.counts.get(word) or 0) + envelope.message)
            self.changed.add(word)
            return
        for word in split_words(envelope.message):
            collector.send(OutgoingMessageEnvelope(self.rekeyed, 1, key=word))

    def window(self, collector: MessageCollector, coordinator: TaskCoordinator) -> None:
        for word in self.changed:
            collector.send(OutgoingMessageEnvelope(self.output, self.counts.get(word), key=word))
        self.counts.delete_all(list(self.changed))
        self.changed.clear()
