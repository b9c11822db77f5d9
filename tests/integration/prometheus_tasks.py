"""The word count of the Prometheus endpoint's tests: one output per word of each line, so that
outputs and send calls can be counted against the input.

Config keys (passed through to the task): test.output (the output stream); test.store = true counts
in the changelogged store "counts" instead of in memory.
"""

from __future__ import annotations

from collections import Counter

from samzamp import InitableTask, OutgoingMessageEnvelope, StreamTask, SystemStream


class WordCountTask(StreamTask, InitableTask):
    """Counts the words of each line and sends each word's new count at once, keyed by the word."""

    def init(self, context) -> None:
        self.output = SystemStream("kafka", context.config["test.output"])
        self.store = context.get_store("counts") if str(context.config.get("test.store", "")) == "true" else None
        self.counts: Counter[str] = Counter()

    def process(self, envelope, collector, coordinator) -> None:
        for word in envelope.message.split():
            if self.store is not None:
                count = (self.store.get(word) or 0) + 1
                self.store.put(word, count)
            else:
                self.counts[word] += 1
                count = self.counts[word]
            collector.send(OutgoingMessageEnvelope(self.output, count, key=word))
