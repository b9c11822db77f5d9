"""``samzamp-container job.toml [--set key=value ...] [--log-level LEVEL]``: run one container of a job.

Task modules named by task.class are imported from the current directory first, as ``python -m``
would. A failure is one line on stderr; ``--log-level debug`` also logs its traceback.

Exit codes:
    0    stopped cleanly (signal, every task voted to shut down, or all inputs ended)
    1    a task or a system failed; the message names the task, SSP and offset
    2    the config is invalid (one line names the key), the checkpoint topic holds only Apache
         Samza's checkpoints, or a Kafka system without bootstrap.servers needs the embedded broker
         and samzamp[embedded] is not installed
    130  a second SIGINT arrived during shutdown: exited at once (143 for SIGTERM)
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import platform
import signal
import sys

from samzamp._version import __version__
from samzamp.cli.common import EXIT_OK, add_job_config, add_log_level, new_parser, report_failure, setup
from samzamp.config import load_config, parse_overrides, validate
from samzamp.container.container import SamzaContainer

__all__ = ["main"]

PROG = "samzamp-container"

log = logging.getLogger("samzamp")


def _parser() -> argparse.ArgumentParser:
    p = new_parser(PROG, "Run one container of a samzamp job.")
    add_job_config(p)
    add_log_level(p, "INFO")
    return p


async def _run(container: SamzaContainer) -> None:
    loop = asyncio.get_running_loop()
    signals_seen = 0

    def on_signal(signum: int) -> None:
        nonlocal signals_seen
        signals_seen += 1
        if signals_seen > 1:
            os.write(2, f"samzamp: second {signal.Signals(signum).name}: exiting at once\n".encode())
            os._exit(128 + signum)
        log.info("%s: stopping (send it again to exit at once)", signal.Signals(signum).name)
        if container.run_loop is not None:
            container.run_loop.request_shutdown()
        elif main_task is not None:
            main_task.cancel()

    main_task = asyncio.current_task()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal, sig)
    try:
        await container.run()
    except asyncio.CancelledError:
        log.info("stopped during start-up")


def main(argv: list[str] | None = None) -> int:
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
        asyncio.run(_run(SamzaContainer(settings, freeze_gc_after_start=True)))
    except Exception as e:
        return report_failure(PROG, e)
    log.info("container stopped cleanly")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
