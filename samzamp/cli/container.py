"""``samzamp run job.toml [--set key=value ...]`` (alias ``samzamp-container``): run one container of a job.

Task modules named by task.class are imported from the current directory first, as ``python -m``
would. A failure is one line on stderr; ``--log-level debug`` also logs its traceback. The exit
codes are in ``EXIT_CODES`` (``samzamp run --help`` shows them).

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
from samzamp.cli.common import (
    EXIT_CONFIG,
    EXIT_FAILED,
    EXIT_OK,
    add_job_config,
    add_log_level,
    load_job,
    new_parser,
    report_failure,
    setup,
)
from samzamp.processor.stream_processor import StreamProcessor

__all__ = ["EXIT_CODES", "PROG", "build_parser", "main"]

# The alias samzamp-container runs as this too, so that its every line is the subcommand's.
PROG = "samzamp run"

EXIT_CODES = {
    EXIT_OK: "stopped cleanly (signal, every task voted to shut down, or all inputs ended)",
    EXIT_FAILED: "a task or a system failed; the line names the task, SSP and offset",
    EXIT_CONFIG: "the config is invalid (the line names the key), the checkpoint topic holds only Apache "
    "Samza's checkpoints, or a Kafka system without bootstrap.servers needs samzamp[embedded]",
    130: "a second SIGINT arrived during shutdown: exited at once (143 for SIGTERM)",
}

log = logging.getLogger("samzamp")


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    """The arguments of ``samzamp run``: the job's config, ``--set`` overrides and the log options."""
    p = new_parser(
        prog,
        "Run one container (processor) of a samzamp job until it is stopped or its inputs end.",
        examples=[
            f"{prog} configs/word-count.toml",
            f"{prog} job.toml --set systems.kafka.bootstrap.servers=kafka:9092 --set job.id=2",
        ],
        exit_codes=EXIT_CODES,
    )
    add_job_config(p)
    add_log_level(p, "INFO")
    return p


def main(argv: list[str] | None = None, prog: str = PROG) -> int:
    """``samzamp run`` with ``argv`` (default: ``sys.argv[1:]``); returns its exit code. Every line
    it writes starts with ``prog``, the name it runs as (its alias passes none: the same name)."""
    # A crash in native code (LMDB, librdkafka, the rings) prints every thread's Python stack on
    # stderr before the process dies, instead of dying without a word.
    faulthandler.enable()
    args = setup(build_parser(prog), argv)
    try:
        settings = load_job(args)
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
        return report_failure(prog, e)
    log.info("container stopped cleanly")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
