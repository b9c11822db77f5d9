"""Word count as an application: lines in, a count per word and 2-second window out.

``flat_map`` splits lines into lower-case words; ``partition_by`` re-keys them by word through the
intermediate topic ``<job.name>-<job.id>-partition_by-by-word``, so one task sees every occurrence
of a word; a keyed tumbling window of 2 s counts each word; each pane goes out as ``word -> count``
(string key, long value), one message per word and window.

Every count belongs to one window: the sum of a word's counts over all its messages is the number
of times it occurred. A restart after a crash restores the windows from their changelog and may
emit a pane again (at least once): the pane's id (``pane.key.pane_id``, the window's start) tells
such repeats apart, and ``pane_message`` is where an application would put it in the output.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, ClassVar

from samzamp import KV, StreamApplication, StreamApplicationDescriptor, WindowPane, Windows

__all__ = ["WordCountApp", "split_words"]


def split_words(line: str) -> list[str]:
    """The lower-case words of a line."""
    return line.lower().split()


class WordCountApp(StreamApplication):
    """``lines`` -> words -> re-keyed by word -> counted per 2 s window -> ``word-counts``."""

    interval: ClassVar[timedelta] = timedelta(seconds=2)  # the windows' length

    def describe(self, app: StreamApplicationDescriptor) -> None:
        lines = app.input_stream("lines", msg_serde="string")
        counts = app.output_stream("word-counts", key_serde="string", msg_serde="long")
        (
            lines.flat_map(split_words)
            .partition_by(lambda word: word, lambda word: 1, id="by-word")
            .window(
                Windows.keyed_tumbling_window(lambda kv: kv.key, self.interval, lambda: 0, lambda kv, n: n + kv.value),
                id="count",
            )
            .map(self.pane_message)
            .send_to(counts)
        )

    @staticmethod
    def pane_message(pane: WindowPane[str, int]) -> Any:
        """What a pane sends: ``KV(word, count)``."""
        return KV(pane.key.key, pane.message)
