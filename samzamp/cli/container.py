"""``samzamp-container job.toml [--set key=value ...] [--log-level LEVEL] [--log-format text|json]``: run one
container of a job.

Task modules named by task.class are imported from the current directory first, as ``python -m``
would. A failure is one line on stderr; ``--log-level debug`` also logs its traceback.

Exit codes:
    0    stopped cleanly (signal, every task voted to shut down, or all inputs ended)
    1    a task or a system failed; the message names the task, SSP and offset
    2    the config is invalid (one line names the key), the checkpoint topic holds only Apache
         Samza's checkpoints, or a Kafka system without bootstrap.servers needs the embedded broker
         and samzamp[embedded] is not installed
    130  a second SIGINT arrived during shutdown: exited at once (143 for SIGTERM)

A crash in native code (a fatal signal) prints each thread's Python stack on stderr (faulthandler).
"""

from __future__ import annotations

import argparse
import asyncio
import faulthandler
import logging
import platform
import sys

from samzamp._version import __version__
from samzamp.cli.common import EXIT_OK, add_job_config, add_log_level, new_parser, report_failure, setup
from samzamp.config import load_config, parse_overrides, validate
from samzamp.processor.stream_processor import StreamProcessor

__all__ = ["main"]

PROG = "samzamp-container"

log = logging.getLogger("samzamp")


def _parser() -> argparse.ArgumentParser:
    p = new_parser(PROG, "Run one container of a samzamp job.")
    add_job_config(p)
    add_log_level(p, "INFO")
    return p


def main(argv: list[str] | None = None, prog: str = PROG) -> int:
    # A crash in native code (LMDB, librdkafka, the rings) prints every thread's Python stack on
    # stderr before the process dies, instead of dying without a word.
    faulthandler.enable()
    args = setup(_parser(), argv)
    try:
        settings = validate(load_config(args.config, parse_overrides(args.overrides)))
        # The first log line (after the config: a bad one is a single line on stderr, nothing else).
        log.info(
            "samzamp %s (%s %s): job %s-%s from %s",
            __version__,
            platform.python_implementation(),
            platform.python_version(),
            settings.name,
            settings.id,
            args.config,
        )
        asyncio.run(StreamProcessor(settings, freeze_gc_after_start=True).run(handle_signals=True))
    except Exception as e:
        return report_failure(PROG, e)
    log.info("container stopped cleanly")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
