"""How samzamp's processes log: ``--log-level`` and ``--log-format text|json``, the same in the
container and in its worker processes.

``configure`` sets the root logger of a process up once, on stderr: ``text`` is one line per
record, ``<time> <LEVEL> <logger>: <message>`` (a worker's logger name is prefixed with
``worker-<i>``); ``json`` is one JSON object per line, for log collectors::

    {"time": "2026-11-27T03:05:14.172Z", "level": "INFO", "logger": "samzamp.container.container",
     "message": "...", "processor": "0", "worker": 1, "task": "Partition 0", "exception": "Traceback ..."}

``time`` is UTC with milliseconds. ``processor`` (the processor id: ``processor.id``, or the id a
standalone processor registered with, ``0`` for a job of one container) is there once known
(``set_processor``); ``worker`` in a worker process; ``task`` while a task's code or samzamp's work
for one task runs (``task_scope``: its process, window, hooks, init, close and commit steps, on the
loop or in a worker); ``exception`` (the traceback) and ``stack`` when the record has them.
librdkafka's own lines come through the ``librdkafka`` logger (``samzamp.systems.kafka.client_config``).

``current`` is what a process was set up with: the worker pool hands it to each worker it starts.
"""

from __future__ import annotations

import contextvars
import logging
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal, TextIO

import msgspec

__all__ = [
    "LOG_FORMATS",
    "JsonFormatter",
    "LogFormat",
    "LogSetup",
    "announce",
    "configure",
    "current",
    "enter_task",
    "leave_task",
    "set_processor",
    "task_scope",
]

LogFormat = Literal["text", "json"]
LOG_FORMATS: tuple[LogFormat, ...] = ("text", "json")

# The task whose code (or whose work in samzamp) the current thread or coroutine runs.
_task: contextvars.ContextVar[str | None] = contextvars.ContextVar("samzamp_task", default=None)


@dataclass(frozen=True)
class LogSetup:
    """How a process logs: a level name (DEBUG, INFO, WARNING, ERROR) and a format."""

    level: str = "INFO"
    format: LogFormat = "text"


_setup = LogSetup()
_processor: str | None = None
_worker: int | None = None
_handler: logging.Handler | None = None  # what ``configure`` installed
_encoder = msgspec.json.Encoder()


def current() -> LogSetup:
    """What ``configure`` set this process up with (INFO and text before it was called)."""
    return _setup


def set_processor(processor_id: str | None) -> None:
    """The processor id every JSON record carries from now on (None: none)."""
    global _processor
    _processor = processor_id


@contextmanager
def task_scope(task: str) -> Iterator[None]:
    """Records logged inside carry ``task`` (this thread or coroutine, and coroutines it starts)."""
    token = _task.set(task)
    try:
        yield
    finally:
        _task.reset(token)


def enter_task(task: str) -> contextvars.Token[str | None]:
    """``task_scope`` for a hot path, without a context manager: pass the token to ``leave_task``."""
    return _task.set(task)


def leave_task(token: contextvars.Token[str | None]) -> None:
    _task.reset(token)


def _utc(created: float) -> str:
    seconds = int(created)
    return f"{time.strftime('%Y-%m-%dT%H:%M:%S', time.gmtime(seconds))}.{int((created - seconds) * 1000):03d}Z"


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line (see the module docstring)."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": _utc(record.created),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        processor = getattr(record, "processor", None) or _processor
        if processor is not None:
            out["processor"] = processor
        if _worker is not None:
            out["worker"] = _worker
        task = getattr(record, "task", None) or _task.get()
        if task is not None:
            out["task"] = task
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            out["exception"] = record.exc_text
        if record.stack_info:
            out["stack"] = self.formatStack(record.stack_info)
        return _encoder.encode(out).decode()


def _text_formatter(worker: int | None) -> logging.Formatter:
    where = f"worker-{worker} " if worker is not None else ""
    return logging.Formatter(f"%(asctime)s %(levelname)s {where}%(name)s: %(message)s")


def configure(
    level: str = "INFO", fmt: LogFormat = "text", *, worker: int | None = None, stream: TextIO | None = None
) -> None:
    """Log records at ``level`` and above to ``stream`` (stderr) in format ``fmt``. ``worker``: this
    is worker process ``worker`` of a container.

    As ``logging.basicConfig`` does, it leaves a root logger that something else set up alone (a
    test harness running a command in its own process); it replaces what an earlier call installed.
    ``current`` says what was asked for either way."""
    global _setup, _worker, _handler
    if fmt not in LOG_FORMATS:
        msg = f"log format {fmt!r}: choose {' or '.join(LOG_FORMATS)}"
        raise ValueError(msg)
    _setup = LogSetup(level, fmt)
    _worker = worker
    root = logging.getLogger()
    if _handler is not None and _handler in root.handlers:
        root.removeHandler(_handler)
    elif root.handlers:
        return
    _handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    _handler.setFormatter(JsonFormatter() if fmt == "json" else _text_formatter(worker))
    root.addHandler(_handler)
    root.setLevel(level)


def announce(line: str, stream: TextIO | None = None) -> None:
    """Print ``line`` for a person or a script to read on stdout (an address something listens on):
    as it is, or, in the JSON format, as an INFO record of the ``samzamp`` logger."""
    out = stream if stream is not None else sys.stdout
    if _setup.format == "json":
        record = logging.LogRecord("samzamp", logging.INFO, __file__, 0, line, None, None)
        line = JsonFormatter().format(record)
    print(line, file=out, flush=True)
