"""Windows of the high-level API: how messages are grouped in time and folded (Samza's Windows).

Windows are in processing time, as Samza's are: a message belongs to the window open when its task
handles it. A tumbling window of ``interval`` covers ``[start, start + interval)`` with
``start = now - now % interval`` (aligned to the wall clock); a session window of ``gap`` closes
once its key has had no message for ``gap``. A window fires on the task's window timer
(task.window.ms) once it closed, and at end of stream; it emits one ``WindowPane`` per key.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Generic, Literal, TypeVar

__all__ = ["WindowKey", "WindowPane", "WindowSpec", "Windows"]

K = TypeVar("K")
V = TypeVar("V")


@dataclass(frozen=True)
class WindowKey(Generic[K]):
    """A pane's key: the messages' key (None for an unkeyed window) and ``pane_id``, the window's
    start in milliseconds since the epoch as a string (Samza's paneId)."""

    key: K
    pane_id: str


@dataclass(frozen=True)
class WindowPane(Generic[K, V]):
    """What a window emits: the key of its pane, the folded value, and ``firing_type``: "default"
    when the window closed (or the stream ended), "early" for an early trigger."""

    key: WindowKey[K]
    message: V
    firing_type: Literal["default", "early"] = "default"


@dataclass(frozen=True)
class WindowSpec:
    """A window definition (built by ``Windows``): ``kind`` "tumbling" or "session", the key
    function (None: one window per task), the interval or gap in milliseconds, the fold."""

    kind: Literal["tumbling", "session"]
    key_fn: Callable[[Any], Any] | None
    duration_ms: int
    initial: Callable[[], Any]
    fold: Callable[[Any, Any], Any]


def _millis(value: timedelta, what: str) -> int:
    if not isinstance(value, timedelta):
        raise TypeError(f"the {what} must be a datetime.timedelta, got {type(value).__name__}")
    ms = int(value.total_seconds() * 1000)
    if ms <= 0:
        raise ValueError(f"the {what} must be at least one millisecond, got {value}")
    return ms


class Windows:
    """Factories of windows for ``MessageStream.window``.

    ``initial()`` gives a new window's value; ``fold(message, value)`` the value after one more
    message. Values are kept in the window's store (JSON by default), so they must be what its
    serde can write: numbers, strings, lists, dicts.
    """

    @staticmethod
    def keyed_tumbling_window(
        key_fn: Callable[[Any], Any], interval: timedelta, initial: Callable[[], Any], fold: Callable[[Any, Any], Any]
    ) -> WindowSpec:
        """Windows of ``interval`` per key ``key_fn(message)``, aligned to the wall clock."""
        return WindowSpec("tumbling", key_fn, _millis(interval, "interval"), initial, fold)

    @staticmethod
    def tumbling_window(interval: timedelta, initial: Callable[[], Any], fold: Callable[[Any, Any], Any]) -> WindowSpec:
        """Windows of ``interval`` over every message of a task (the pane's key is None)."""
        return WindowSpec("tumbling", None, _millis(interval, "interval"), initial, fold)

    @staticmethod
    def keyed_session_window(
        key_fn: Callable[[Any], Any], gap: timedelta, initial: Callable[[], Any], fold: Callable[[Any, Any], Any]
    ) -> WindowSpec:
        """A window per key that closes once the key had no message for ``gap``."""
        return WindowSpec("session", key_fn, _millis(gap, "gap"), initial, fold)
