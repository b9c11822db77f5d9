"""Each task's window and commit timers (task.window.ms, task.commit.ms).

A timer only raises its task's flag (``TaskState.request_window`` / ``request_commit``) and wakes the
loop: the window or commit then runs when ``TaskState.next_op`` allows, never concurrently with
process. Event loop thread only.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable

from samzamp.config.settings import TaskSettings
from samzamp.container.run_loop_task import RunLoopTask

__all__ = ["TaskTimers"]


class _Ticker:
    """Fixed-rate ticks (like scheduleAtFixedRate): the n-th tick is due at start + n * period; a
    tick that fell behind (a long window or commit) skips the missed ones and keeps the phase."""

    __slots__ = ("_fn", "_handle", "_loop", "_period", "_start")

    def __init__(self, loop: asyncio.AbstractEventLoop, period_s: float, fn: Callable[[], None]) -> None:
        self._loop = loop
        self._period = period_s
        self._fn = fn
        self._start = loop.time()
        self._handle = loop.call_at(self._start + period_s, self._tick, 1)

    def _tick(self, n: int) -> None:
        self._fn()
        due = self._start + (n + 1) * self._period
        now = self._loop.time()
        if due < now:
            n = int((now - self._start) / self._period)
            due = self._start + (n + 1) * self._period
        self._handle = self._loop.call_at(due, self._tick, n + 1)

    def cancel(self) -> None:
        self._handle.cancel()


class TaskTimers:
    """The window and commit timers of the loop's tasks. ``stopping`` says whether the container
    shuts down (then no timer flags anything: a shutdown forces no window and ends with its own
    commit); ``ready`` tells the loop a task has something to do."""

    def __init__(
        self,
        settings: TaskSettings,
        loop: asyncio.AbstractEventLoop,
        stopping: Callable[[], bool],
        ready: Callable[[RunLoopTask], None],
    ) -> None:
        self._settings = settings
        self._loop = loop
        self._stopping = stopping
        self._ready = ready
        self._tickers: dict[RunLoopTask, list[_Ticker]] = {}

    def start(self, ti: RunLoopTask) -> None:
        s = self._settings
        tickers = self._tickers.setdefault(ti, [])
        if s.window_ms > 0 and ti.windowable:
            tickers.append(_Ticker(self._loop, s.window_ms / 1000, functools.partial(self._flag, ti, window=True)))
        if s.commit_ms > 0:
            tickers.append(_Ticker(self._loop, s.commit_ms / 1000, functools.partial(self._flag, ti, commit=True)))

    def stop(self, ti: RunLoopTask | None = None) -> None:
        """Stop the timers of ``ti`` (of every task when None)."""
        for t in [ti] if ti is not None else list(self._tickers):
            for ticker in self._tickers.pop(t, ()):
                ticker.cancel()

    def _flag(self, ti: RunLoopTask, window: bool = False, commit: bool = False) -> None:
        if self._stopping():
            return
        if window:
            ti.state.request_window()
        if commit:
            ti.state.request_commit()
        self._ready(ti)
