"""One view of every store restore a processor runs, wherever it runs (its own threads, its workers).

A restore reports ``(task, store, records so far, records expected or None, done)`` to the
processor's ``RestoreProgress``: inline restores call it from their threads, a worker's arrive as
frames. The view keeps one line of progress for them all:

- on a terminal, one status line redrawn in place (never one bar per restore, which several
  processes writing ``\\r`` at once would overwrite each other with). The cursor is left at the
  line's start, so a log line of any process meanwhile writes over it, and the next redraw comes
  below that;
- otherwise a log line every ``LOG_EVERY_S`` while restores run, and one when the last ends.

It also keeps each task's ``<store>-restored-records`` gauge current, so a scrape during a long
restore shows how far it got.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TextIO

from samzamp.metrics.registry import MetricsRegistry

__all__ = ["LOG_EVERY_S", "RestoreProgress", "StoreProgress"]

log = logging.getLogger(__name__)

LOG_EVERY_S = 5.0
DRAW_EVERY_S = 0.2

# A restore's report: (store, records so far, records expected or None when unknown, done).
StoreProgress = Callable[[str, int, "int | None", bool], None]


@dataclass
class _Restore:
    records: int
    expected: int | None
    done: bool


class RestoreProgress:
    """The processor's restores, as one view; thread-safe (restores report from their threads)."""

    def __init__(
        self, metrics: MetricsRegistry | None = None, stream: TextIO | None = None, tty: bool | None = None
    ) -> None:
        self._metrics = metrics
        self._stream = stream if stream is not None else sys.stderr
        if tty is None:
            tty = self._stream.isatty() and os.environ.get("CI") != "true"
        self._tty = tty
        self._lock = threading.Lock()
        self._restores: dict[tuple[str, str], _Restore] = {}
        self._started = 0.0
        self._next_log = 0.0
        self._next_draw = 0.0

    def reporter(self, task: str) -> StoreProgress:
        """How the restores of ``task``'s stores report here."""
        return lambda store, records, expected, done: self.update(task, store, records, expected, done)

    def update(self, task: str, store: str, records: int, expected: int | None, done: bool) -> None:
        """Restore ``store`` of ``task`` read ``records`` records of ``expected`` (None: unknown);
        ``done``: it ended."""
        now = time.monotonic()
        with self._lock:
            if not self._running():  # the first of a new round of restores
                self._restores = {k: r for k, r in self._restores.items() if not r.done}
                self._started = now
                self._next_log = now + LOG_EVERY_S
            self._restores[task, store] = _Restore(records, expected, done)
            if self._metrics is not None:
                self._metrics.gauge(f"TaskName-{task}", f"{store}-restored-records").set(records)
            finished = not self._running()
            if self._tty:
                if finished or now >= self._next_draw:
                    self._next_draw = now + DRAW_EVERY_S
                    self._draw(now, finished)
            elif finished:
                if now - self._started >= LOG_EVERY_S:  # a restore that was worth a line while it ran
                    log.info("%s", self._summary(now))
            elif now >= self._next_log:
                self._next_log = now + LOG_EVERY_S
                log.info("%s", self._summary(now))

    def forget(self, task: str) -> None:
        """``task``'s start failed or was given up: its restores ended, unfinished."""
        with self._lock:
            for key, r in self._restores.items():
                if key[0] == task:
                    r.done = True

    def running(self) -> bool:
        """Whether a restore runs now."""
        with self._lock:
            return self._running()

    def _running(self) -> bool:
        return any(not r.done for r in self._restores.values())

    def _summary(self, now: float) -> str:
        """One line: how many restores ran and run, the records read of those expected, the rate.
        Called with the lock held."""
        restores = list(self._restores.values())
        records = sum(r.records for r in restores)
        rate = records / max(now - self._started, 1e-9)
        ended = sum(r.done for r in restores)
        if all(r.expected is not None for r in restores):
            expected = sum(max(r.expected or 0, r.records) for r in restores)
            share = f" ({records / expected:.0%})" if expected else ""
            read = f"{records:,} of {expected:,} records{share}"
        else:
            read = f"{records:,} records"
        if ended == len(restores):
            return f"restored {len(restores)} stores: {read} in {now - self._started:.1f} s ({rate:,.0f} records/s)"
        return f"restoring stores: {ended} of {len(restores)} done, {read}, {rate:,.0f} records/s"

    def _draw(self, now: float, finished: bool) -> None:
        line = self._summary(now)
        self._stream.write("\r\x1b[K" + line + ("\n" if finished else "\r"))
        self._stream.flush()
