"""``samzamp.logs``: the JSON records (fields, processor, worker, task, traceback), the announce
line, and what ``configure`` leaves alone."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import re
import sys
from collections.abc import Iterator

import pytest

from samzamp import logs


@pytest.fixture(autouse=True)
def _reset() -> Iterator[None]:
    """Each test starts, and leaves, the process as a command starts: text at INFO, no processor
    (a processor run in this process before may have named itself)."""
    logs.set_processor(None)
    yield
    logs.set_processor(None)
    logs.configure("INFO", "text")


def _record(msg: str = "hello %s", args: tuple[object, ...] = ("world",), **extra: object) -> logging.LogRecord:
    record = logging.LogRecord("samzamp.test", logging.WARNING, __file__, 1, msg, args, None)
    record.__dict__.update(extra)
    return record


def test_a_json_record_has_time_level_logger_and_message() -> None:
    out = json.loads(logs.JsonFormatter().format(_record()))
    assert out.keys() == {"time", "level", "logger", "message"}
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", out["time"])
    assert (out["level"], out["logger"], out["message"]) == ("WARNING", "samzamp.test", "hello world")


def test_processor_and_task_where_known() -> None:
    logs.set_processor("proc-1")
    with logs.task_scope("Partition 3"):
        out = json.loads(logs.JsonFormatter().format(_record()))
    assert (out["processor"], out["task"]) == ("proc-1", "Partition 3")
    out = json.loads(logs.JsonFormatter().format(_record()))
    assert out["processor"] == "proc-1"
    assert "task" not in out  # out of the scope


def test_a_coroutine_started_in_a_task_scope_names_the_task() -> None:
    async def logged_later() -> str | None:
        await asyncio.sleep(0)
        return json.loads(logs.JsonFormatter().format(_record())).get("task")

    async def main() -> str | None:
        token = logs.enter_task("Partition 1")
        try:
            started = asyncio.ensure_future(logged_later())
        finally:
            logs.leave_task(token)
        return await started

    assert asyncio.run(main()) == "Partition 1"


def test_the_traceback_is_a_field_and_the_record_one_line() -> None:
    try:
        raise ValueError("bad\nvalue")
    except ValueError:
        record = logging.LogRecord("x", logging.ERROR, __file__, 1, "failed", None, sys.exc_info())
    line = logs.JsonFormatter().format(record)
    assert "\n" not in line
    out = json.loads(line)
    assert out["message"] == "failed"
    assert out["exception"].startswith("Traceback")
    assert "ValueError: bad\nvalue" in out["exception"]


def test_configure_writes_json_lines_naming_the_worker() -> None:
    root = logging.getLogger()
    saved, level = root.handlers[:], root.level
    for h in saved:  # as in a fresh process: no handler yet
        root.removeHandler(h)
    stream = io.StringIO()
    try:
        logs.configure("DEBUG", "json", worker=2, stream=stream)
        logging.getLogger("samzamp.w").debug("in a worker")
        assert logs.current() == logs.LogSetup("DEBUG", "json")
        logs.configure("INFO", "text", stream=stream)  # replaces what it installed
        logging.getLogger("samzamp.w").debug("not shown")
        logging.getLogger("samzamp.w").info("as text")
    finally:
        for h in root.handlers[:]:
            root.removeHandler(h)
        for h in saved:
            root.addHandler(h)
        root.setLevel(level)
    first, second = stream.getvalue().splitlines()
    assert json.loads(first) | {"time": ""} == {
        "time": "",
        "level": "DEBUG",
        "logger": "samzamp.w",
        "message": "in a worker",
        "worker": 2,
    }
    assert second.endswith(" INFO samzamp.w: as text")


def test_configure_leaves_a_root_logger_set_up_by_someone_else_alone() -> None:
    root = logging.getLogger()
    theirs = logging.NullHandler()
    root.addHandler(theirs)
    try:
        before = root.handlers[:]
        logs.configure("DEBUG", "json")
        assert root.handlers == before
        assert logs.current().format == "json"  # what the workers are told
    finally:
        root.removeHandler(theirs)


def test_an_unknown_format_is_refused() -> None:
    with pytest.raises(ValueError, match="choose text or json"):
        logs.configure("INFO", "yaml")  # type: ignore[arg-type]


def test_announce_prints_the_line_or_a_json_record_of_it() -> None:
    out = io.StringIO()
    logs.announce("samzamp: embedded broker at 127.0.0.1:1", out)
    logs.configure("INFO", "json")
    logs.announce("samzamp: embedded broker at 127.0.0.1:1", out)
    text, record = out.getvalue().splitlines()
    assert text == "samzamp: embedded broker at 127.0.0.1:1"
    assert json.loads(record)["message"] == text
    assert json.loads(record)["level"] == "INFO"
