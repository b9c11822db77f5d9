"""What every command does before it touches a job: --version, --log-level, --help, one-line errors,
and a missing extra named. The commands run as a user runs them (``python -m``, a subprocess)."""

from __future__ import annotations

import importlib
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from samzamp import __version__
from samzamp.api.errors import ConfigError, TaskError
from samzamp.cli.common import report_failure
from samzamp.extras import OFFLINE, Extra, MissingExtraError, require

ROOT = Path(__file__).resolve().parents[2]
CONFIG = str(ROOT / "configs" / "word-count.toml")
TIMEOUT_S = 60

# prog (the name a command runs as, its alias's too) -> module; the Spark commands' required
# options, so only the option under test can be wrong.
COMMANDS = {
    "samzamp run": ("samzamp.cli.container", []),
    "samzamp drain": ("samzamp.cli.drain", []),
    "samzamp compact-changelog": ("samzamp.cli.compact_changelog", ["--store", "s", "--output", "out"]),
    "samzamp restore-stores": ("samzamp.cli.restore_stores", ["--store", "s"]),
    "samzamp rebucket-stores": ("samzamp.cli.rebucket_stores", ["--from-factor", "1"]),
}


def _run(module: str, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
        cwd=ROOT,
        env=env,
    )


@pytest.mark.parametrize("prog", [*COMMANDS, "samzamp broker"])
def test_version_prints_the_one_version_and_exits_0(prog: str) -> None:
    module = COMMANDS[prog][0] if prog in COMMANDS else "samzamp.cli.broker"
    r = _run(module, "--version")
    assert r.returncode == 0, r.stderr
    assert r.stdout == f"samzamp {__version__}\n"  # one distribution, one version: whichever command asks


def test_the_version_is_the_distributions() -> None:
    from importlib.metadata import version

    assert version("samzamp") == __version__


def test_broker_help_prints_usage_instead_of_starting_a_broker() -> None:
    r = _run("samzamp.cli.broker", "--help")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("usage: samzamp broker [-h] [--version]")
    assert not [line for line in r.stdout.splitlines() if line.startswith("bootstrap.servers=")]  # no ready line


@pytest.mark.parametrize("prog", COMMANDS)
def test_a_bad_log_level_is_one_line_and_exit_2(prog: str) -> None:
    module, required = COMMANDS[prog]
    r = _run(module, CONFIG, *required, "--log-level", "verbose")
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr
    assert r.stderr.count("\n") == 1, r.stderr
    assert r.stderr.startswith(f"{prog}: error: argument --log-level: invalid level 'verbose': choose DEBUG, INFO,")


def test_a_bad_log_level_from_the_environment_says_where_it_came_from() -> None:
    env = {**os.environ, "SAMZAMP_LOG_LEVEL": "loud"}
    r = _run("samzamp.cli.drain", CONFIG, env=env)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert r.stderr.count("\n") == 1, r.stderr
    assert "invalid level 'loud' (from $SAMZAMP_LOG_LEVEL)" in r.stderr


@pytest.mark.parametrize("prog", COMMANDS)
def test_a_bad_log_format_is_one_line_and_exit_2(prog: str) -> None:
    module, required = COMMANDS[prog]
    r = _run(module, CONFIG, *required, "--log-format", "xml")
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert (
        r.stderr
        == f"{prog}: error: argument --log-format: invalid format 'xml': choose text or json (see {prog} --help)\n"
    )


def test_a_bad_log_format_from_the_environment_says_where_it_came_from() -> None:
    r = _run("samzamp.cli.drain", CONFIG, env={**os.environ, "SAMZAMP_LOG_FORMAT": "yaml"})
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "invalid format 'yaml' (from $SAMZAMP_LOG_FORMAT)" in r.stderr


def test_a_failure_in_the_json_format_is_one_json_line() -> None:
    # A config error (a missing task class) from a real command: stderr holds only JSON records.
    r = _run(
        "samzamp.cli.container",
        CONFIG,
        "--set",
        "task.class=nowhere:Task",
        "--log-format",
        "JSON",
        "--log-level",
        "debug",
    )
    assert r.returncode == 2, (r.stdout, r.stderr)
    records = [json.loads(line) for line in r.stderr.splitlines()]
    assert records[-1]["level"] == "ERROR"
    assert records[-1]["logger"] == "samzamp run"
    assert records[-1]["message"].startswith("samzamp run: config error: task.class: cannot import module 'nowhere'")
    assert any("exception" in rec for rec in records)  # the traceback, at DEBUG, as a field


@pytest.mark.parametrize("prog", COMMANDS)
@pytest.mark.parametrize(("given", "level"), [("debug", "DEBUG"), ("Info", "INFO"), ("WARNING", "WARNING")])
def test_log_level_is_case_insensitive(prog: str, given: str, level: str) -> None:
    module, required = COMMANDS[prog]
    args = importlib.import_module(module).build_parser().parse_args([CONFIG, *required, "--log-level", given])
    assert args.log_level == level


def test_report_failure_is_one_line_with_the_traceback_at_debug(
    capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="samzamp.cli")
    try:
        raise ValueError("first line\nsecond line")
    except ValueError as e:
        code = report_failure("prog", e)
    assert code == 1
    err = capsys.readouterr().err
    assert err == "prog: failed: ValueError: first line ... (the whole message with --log-level debug)\n"
    [record] = caplog.records
    assert record.levelno == logging.DEBUG
    assert record.exc_info is not None
    assert "second line" in caplog.text  # the whole message, with the traceback, in the debug log


@pytest.mark.parametrize(
    ("error", "code", "line"),
    [
        (ConfigError("task.class", "is required"), 2, "prog: config error: task.class: is required"),
        (MissingExtraError(OFFLINE), 2, "prog: needs PySpark: pip install 'samzamp[offline]'"),
        (TaskError("task 'Partition 0' failed"), 1, "prog: failed: task 'Partition 0' failed"),
        (KeyError("x"), 1, "prog: failed: KeyError: 'x'"),
    ],
)
def test_report_failure_exit_codes(capsys: pytest.CaptureFixture[str], error: Exception, code: int, line: str) -> None:
    assert report_failure("prog", error) == code
    assert capsys.readouterr().err == line + "\n"


def test_require_names_the_extra() -> None:
    require(Extra("sys", "the standard library", "never"))  # installed: no error
    with pytest.raises(MissingExtraError) as e:
        require(Extra("samzamp_no_such_module", "a thing", "thing"), ", or do without")
    assert str(e.value) == "needs a thing: pip install 'samzamp[thing]', or do without"


@pytest.mark.parametrize("prog", ["samzamp compact-changelog", "samzamp restore-stores", "samzamp rebucket-stores"])
def test_spark_commands_without_pyspark_exit_2_naming_the_extra(
    prog: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(Extra, "installed", lambda self: self is not OFFLINE)
    monkeypatch.setattr(sys, "path", list(sys.path))  # main puts the cwd on it
    module, required = COMMANDS[prog]
    assert importlib.import_module(module).main([CONFIG, *required]) == 2
    assert capsys.readouterr().err == f"{prog}: needs PySpark: pip install 'samzamp[offline]'\n"
