"""``samzamp-container job.toml [--set key=value ...]``: run one container of a job.

Exit codes:
    0    stopped cleanly (signal, every task voted to shut down, or all inputs ended)
    1    a task or a system failed; the message names the task, SSP and offset
    2    the config is invalid; one line names the key
    130  a second SIGINT arrived during shutdown: exited at once (143 for SIGTERM)
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys

from samzamp.api.errors import ConfigError, SamzampError
from samzamp.config import load_config, parse_overrides, validate
from samzamp.container.container import SamzaContainer

__all__ = ["main"]

log = logging.getLogger("samzamp")

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_CONFIG = 2


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="samzamp-container", description="Run one container of a samzamp job.")
    p.add_argument("config", help="the job's TOML config")
    p.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE", help="override a config key"
    )
    p.add_argument("--log-level", default=os.environ.get("SAMZAMP_LOG_LEVEL", "INFO"))
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
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )
    try:
        config = load_config(args.config, parse_overrides(args.overrides))
        settings = validate(config)
    except ConfigError as e:
        print(f"samzamp-container: {e}", file=sys.stderr)
        return EXIT_CONFIG
    container = SamzaContainer(settings, freeze_gc_after_start=True)
    try:
        asyncio.run(_run(container))
    except ConfigError as e:
        print(f"samzamp-container: {e}", file=sys.stderr)
        return EXIT_CONFIG
    except SamzampError as e:
        log.error("container failed: %s", e, exc_info=e.__cause__ is not None)
        print(f"samzamp-container: failed: {e}", file=sys.stderr)
        return EXIT_FAILED
    except Exception as e:
        log.exception("container failed")
        print(f"samzamp-container: failed: {type(e).__name__}: {e}", file=sys.stderr)
        return EXIT_FAILED
    log.info("container stopped cleanly")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
