"""What the offline (Spark) commands share: their common arguments, logging and exit codes.

Exit codes: 0 done; 1 failed; 2 bad config or arguments; 3 a store directory is held by a live process.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from samzamp.api.errors import ConfigError, SamzampError
from samzamp.storage.dirs import StoreLockedError

__all__ = ["EXIT_CONFIG", "EXIT_FAILED", "EXIT_LOCKED", "EXIT_OK", "add_job_arguments", "exit_code", "setup_logging"]

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_CONFIG = 2
EXIT_LOCKED = 3

log = logging.getLogger("samzamp.offline")


def add_job_arguments(p: argparse.ArgumentParser, store_help: str) -> None:
    """The job's config, the store, the Spark master, overrides and the log level."""
    p.add_argument("config", help="the job's TOML config")
    p.add_argument("--store", required=True, help=store_help)
    p.add_argument("--master", default="local[*]", help="Spark master (default local[*])")
    p.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE", help="override a config key"
    )
    p.add_argument("--log-level", default=os.environ.get("SAMZAMP_LOG_LEVEL", "WARNING"))


def setup_logging(level: str) -> None:
    logging.basicConfig(
        level=level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )


def exit_code(prog: str, error: BaseException) -> int:
    """Report ``error`` on one line of stderr and return the command's exit code for it."""
    if isinstance(error, ConfigError):
        print(f"{prog}: {error}", file=sys.stderr)
        return EXIT_CONFIG
    if isinstance(error, StoreLockedError):
        print(f"{prog}: refused: {error}; stop the container that holds it first", file=sys.stderr)
        return EXIT_LOCKED
    if isinstance(error, SamzampError):
        print(f"{prog}: failed: {error}", file=sys.stderr)
        return EXIT_FAILED
    log.exception("%s failed", prog)
    print(f"{prog}: failed: {type(error).__name__}", file=sys.stderr)
    return EXIT_FAILED
