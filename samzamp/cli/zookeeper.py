"""``samzamp zookeeper`` (alias ``samzamp-zookeeper``): run the embedded ZooKeeper (the real server,
from pyspark's jars, on Java 17) on 127.0.0.1 until interrupted.

Prints ``job.coordinator.zk.connect=127.0.0.1:<port>`` once it serves, for standalone jobs run with
``--set job.coordinator.zk.connect=...``. Its data lives in a temporary directory removed at exit.
Needs samzamp[offline] (pyspark ships the ZooKeeper jars) and Java ($JAVA_HOME/bin/java or on PATH).
The exit codes are in ``EXIT_CODES`` (``samzamp zookeeper --help`` shows them).
"""

from __future__ import annotations

import argparse
import sys

from samzamp.cli.common import EXIT_CONFIG, EXIT_FAILED, EXIT_OK, new_parser, serve_until_signalled
from samzamp.coordinator.zk.server import EmbeddedZooKeeper

__all__ = ["EXIT_CODES", "PROG", "build_parser", "main"]

# The alias samzamp-zookeeper runs as this too, so that its every line is the subcommand's.
PROG = "samzamp zookeeper"

EXIT_CODES = {
    EXIT_OK: "stopped by SIGINT/SIGTERM",
    EXIT_FAILED: "ZooKeeper could not start (no Java, or it did not serve: the line says why)",
    EXIT_CONFIG: "bad arguments, or samzamp[offline] is not installed (the line says what to install)",
}


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    """The arguments of ``samzamp zookeeper``: none but ``--help`` and ``--version``."""
    return new_parser(
        prog,
        "Run the embedded ZooKeeper (from pyspark's jars, on Java 17) on 127.0.0.1.",
        examples=[
            prog,
            f"samzamp run job.toml --set job.coordinator.zk.connect=127.0.0.1:PORT  # the port {prog} printed",
        ],
        exit_codes=EXIT_CODES,
    )


def main(argv: list[str] | None = None, prog: str = PROG) -> int:
    """``samzamp zookeeper`` with ``argv`` (default: ``sys.argv[1:]``); returns its exit code. Every line
    it writes starts with ``prog``, the name it runs as (its alias passes none: the same name)."""
    build_parser(prog).parse_args(argv)
    return serve_until_signalled(
        prog,
        lambda: EmbeddedZooKeeper(die_with_parent=True).start(),
        lambda zookeeper: f"job.coordinator.zk.connect={zookeeper.connect_string}",
    )


if __name__ == "__main__":
    sys.exit(main())
