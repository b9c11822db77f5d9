"""What every samzamp command shares: ``--version``, ``--log-level`` and ``--log-format``, the job's
config arguments and its settings checked as the container checks them, user code importable from the
current directory, and failures reported on one line.

A command's ``prog`` is the name it runs as, ``samzamp run``; an alias script (``samzamp-container``)
runs as its subcommand, so every line it writes is the subcommand's.

A failure a command reports is one line on stderr, ``<prog>: failed: <what>`` (or ``<prog>: <config
error>``); its traceback goes to the log at DEBUG (``--log-level debug`` shows it). With
``--log-format json`` that line is a JSON record too (level ERROR, logger ``<prog>``), so that every
line a command writes parses as JSON.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import textwrap
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import NoReturn, Protocol, TypeVar

from samzamp import logs
from samzamp._version import __version__
from samzamp.api.errors import ConfigError, SamzampError
from samzamp.config import JobSettings, load_config, parse_overrides, validate
from samzamp.extras import MissingExtraError

__all__ = [
    "EXIT_CONFIG",
    "EXIT_FAILED",
    "EXIT_OK",
    "EXIT_STATE",
    "EXIT_TIMEOUT",
    "LOG_LEVELS",
    "add_job_config",
    "add_log_level",
    "load_job",
    "new_parser",
    "parser_actions",
    "report_failure",
    "serve_until_signalled",
    "setup",
    "user_code_from_cwd",
]

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_CONFIG = 2  # also: arguments argparse rejects, and a missing extra
EXIT_STATE = 3  # the job's state forbids it: none runs (status, drain), or one runs (checkpoints set)
EXIT_TIMEOUT = 4  # waited, and what was waited for did not happen in time

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
EPILOG_WIDTH = 100  # an exit code's explanation wraps here (argparse leaves the epilog as written)
LOG_LEVEL_ENV = "SAMZAMP_LOG_LEVEL"
LOG_FORMAT_ENV = "SAMZAMP_LOG_FORMAT"

log = logging.getLogger("samzamp.cli")


class _Parser(argparse.ArgumentParser):
    """An argument error is one line, like every other error a command reports (not usage + error)."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_CONFIG, f"{self.prog}: error: {message} (see {self.prog} --help)\n")

    def actions(self) -> list[argparse.Action]:
        """Every option, positional and subparsers action, in the order they were added."""
        return list(self._actions)


class _HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """The description and epilog as written (examples, exit codes); an option's default is shown
    unless its help already says it, or it has none (None, False, an empty list)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        if "default" in text or default in (None, False, [], argparse.SUPPRESS) or not action.option_strings:
            return text
        return f"{text} (default: {default})"


def new_parser(
    prog: str,
    description: str,
    *,
    examples: Sequence[str] = (),
    exit_codes: Mapping[int, str] | None = None,
) -> argparse.ArgumentParser:
    """A parser for ``prog`` with ``--version`` (prints ``samzamp <version>`` and exits 0: one
    distribution, one version, whichever command asks); an argument error is one line on stderr and
    exit 2. ``--help`` ends with the ``examples`` (command lines) and the ``exit_codes``, and shows
    each option's default. Its subparsers (``add_subparsers``) are built the same way."""
    epilog = ""
    if examples:
        epilog += "examples:\n" + "".join(f"  {line}\n" for line in examples)
    if exit_codes:
        epilog += ("\n" if epilog else "") + "exit codes:\n"
        epilog += "".join(
            textwrap.fill(
                what, EPILOG_WIDTH, initial_indent=f"  {code:<4} ", subsequent_indent=" " * 7, break_on_hyphens=False
            )
            + "\n"
            for code, what in sorted(exit_codes.items())
        )
    p = _Parser(prog=prog, description=description, epilog=epilog or None, formatter_class=_HelpFormatter)
    p.add_argument("--version", action="version", version=f"samzamp {__version__}")
    return p


def parser_actions(p: argparse.ArgumentParser) -> list[argparse.Action]:
    """The actions of a parser ``new_parser`` built (argparse has no public list of them): what shell
    completion and the docs read. TypeError for a parser built otherwise."""
    if not isinstance(p, _Parser):
        msg = f"parser {p.prog!r} was not built by samzamp.cli.common.new_parser"
        raise TypeError(msg)
    return p.actions()


def _log_level(text: str) -> str:
    level = text.strip().upper()
    if level not in LOG_LEVELS:
        source = f" (from ${LOG_LEVEL_ENV})" if os.environ.get(LOG_LEVEL_ENV) == text else ""
        raise argparse.ArgumentTypeError(f"invalid level {text!r}{source}: choose {', '.join(LOG_LEVELS)} (any case)")
    return level


def _log_format(text: str) -> str:
    fmt = text.strip().lower()
    if fmt not in logs.LOG_FORMATS:
        source = f" (from ${LOG_FORMAT_ENV})" if os.environ.get(LOG_FORMAT_ENV) == text else ""
        raise argparse.ArgumentTypeError(f"invalid format {text!r}{source}: choose {' or '.join(logs.LOG_FORMATS)}")
    return fmt


def add_log_level(p: argparse.ArgumentParser, default: str) -> None:
    """``--log-level`` (case-insensitive, one of LOG_LEVELS); the default is $SAMZAMP_LOG_LEVEL, else
    ``default``. And ``--log-format`` (text or json; default $SAMZAMP_LOG_FORMAT, else text). A bad
    value, given or from the environment, is an argument error: one line, exit 2. Both reach the
    job's worker processes."""
    p.add_argument(
        "--log-level",
        type=_log_level,
        default=os.environ.get(LOG_LEVEL_ENV, default),
        choices=LOG_LEVELS,  # checked after _log_level: for shell completion, which reads choices
        metavar="{" + ",".join(LOG_LEVELS) + "}",
        help=f"log threshold, any case (default: ${LOG_LEVEL_ENV}, else {default}); DEBUG shows tracebacks",
    )
    p.add_argument(
        "--log-format",
        type=_log_format,
        default=os.environ.get(LOG_FORMAT_ENV, "text"),
        choices=logs.LOG_FORMATS,  # checked after _log_format: for shell completion
        metavar="{" + ",".join(logs.LOG_FORMATS) + "}",
        help=f"text, or json: one JSON object per line, for log collectors (default: ${LOG_FORMAT_ENV}, else text)",
    )


def add_job_config(p: argparse.ArgumentParser) -> None:
    """The job's TOML config and repeatable ``--set KEY=VALUE`` overrides."""
    p.add_argument("config", help="the job's TOML config")
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config key; repeat it for several keys (the last --set of a key wins)",
    )


def load_job(args: argparse.Namespace) -> JobSettings:
    """The job's settings from ``add_job_config``'s arguments, checked as the container checks them
    before it connects to anything: every key, the serdes, and task.class imported (or app.class's
    ``describe`` run). ConfigError names the first bad key."""
    return validate(load_config(args.config, parse_overrides(args.overrides)))


def user_code_from_cwd() -> None:
    """Put the current directory first on sys.path, as ``python -m`` does, so a task.class (or a serde)
    names a module beside the job; an installed console script would otherwise find only its own bin/."""
    cwd = os.getcwd()
    if sys.path[:1] not in ([""], [cwd]):
        sys.path.insert(0, cwd)


def setup(p: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """Parse ``argv``, configure logging to stderr at ``--log-level`` in ``--log-format``, and make
    user code importable from the current directory: the start of every command that loads a job."""
    args = p.parse_args(argv)
    logs.configure(args.log_level, args.log_format)
    user_code_from_cwd()
    return args


def _one_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if len(lines) <= 1:
        return lines[0] if lines else ""
    return f"{lines[0]} ... (the whole message with --log-level debug)"


def report_failure(prog: str, error: BaseException) -> int:
    """Report ``error`` as one line on stderr (its traceback to the log at DEBUG) and return the
    exit code for it: 2 for a config error or a missing extra, 1 for anything else."""
    log.debug("%s: %s", prog, type(error).__name__, exc_info=error)
    if isinstance(error, ConfigError | MissingExtraError):
        line, code = f"{prog}: {_one_line(str(error))}", EXIT_CONFIG
    elif isinstance(error, SamzampError):
        line, code = f"{prog}: failed: {_one_line(str(error))}", EXIT_FAILED
    else:
        what = _one_line(str(error))
        line = f"{prog}: failed: {type(error).__name__}" + (f": {what}" if what else "")
        code = EXIT_FAILED
    if logs.current().format == "json":
        record = logging.LogRecord(prog, logging.ERROR, __file__, 0, line, None, None)
        line = logs.JsonFormatter().format(record)
    print(line, file=sys.stderr, flush=True)
    return code


class _Service(Protocol):
    def stop(self) -> None: ...


S = TypeVar("S", bound=_Service)


def serve_until_signalled(prog: str, start: Callable[[], S], ready_line: Callable[[S], str]) -> int:
    """Run what ``start`` starts (an embedded broker, ZooKeeper) until SIGINT or SIGTERM, printing
    ``ready_line`` of it once it serves; stop it then. The exit code: EXIT_OK, or ``report_failure``'s
    when it cannot start."""
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    try:
        service = start()
    except Exception as e:
        return report_failure(prog, e)
    logs.announce(ready_line(service))
    try:
        stop.wait()
    finally:
        service.stop()
    return EXIT_OK
