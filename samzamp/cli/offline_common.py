"""What the offline (Spark) commands share beyond samzamp.cli.common: the store and Spark master
arguments and exit code 3.

Exit codes: 0 done; 1 failed; 2 bad config or arguments, or PySpark missing (samzamp[offline]);
3 a store directory is held by a live process.
"""

from __future__ import annotations

import argparse
import sys

from samzamp.cli.common import EXIT_CONFIG, EXIT_FAILED, EXIT_OK, add_job_config, add_log_level, report_failure
from samzamp.storage.dirs import StoreLockedError

__all__ = ["EXIT_CONFIG", "EXIT_FAILED", "EXIT_LOCKED", "EXIT_OK", "add_job_arguments", "exit_code"]

EXIT_LOCKED = 3


def add_job_arguments(p: argparse.ArgumentParser, store_help: str) -> None:
    """The job's config, the store, the Spark master, overrides and the log level."""
    add_job_config(p)
    p.add_argument("--store", required=True, help=store_help)
    p.add_argument("--master", default="local[*]", help="Spark master (default local[*])")
    add_log_level(p, "WARNING")


def exit_code(prog: str, error: BaseException) -> int:
    """Report ``error`` on one line of stderr and return the command's exit code for it."""
    if isinstance(error, StoreLockedError):
        print(f"{prog}: refused: {error}; stop the container that holds it first", file=sys.stderr, flush=True)
        return EXIT_LOCKED
    return report_failure(prog, error)
