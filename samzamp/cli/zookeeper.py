"""``samzamp-zookeeper``: run the embedded ZooKeeper (the real server, from pyspark's jars, on Java 17)
on 127.0.0.1 until interrupted.

Prints ``job.coordinator.zk.connect=127.0.0.1:<port>`` once it serves, for standalone jobs run with
``--set job.coordinator.zk.connect=...``. Its data lives in a temporary directory removed at exit.
Needs samzamp[offline] (pyspark ships the ZooKeeper jars) and Java ($JAVA_HOME/bin/java or on PATH).

Exit codes:
    0    stopped by SIGINT/SIGTERM
    1    ZooKeeper could not start (no Java, or it did not serve: the line says why)
    2    bad arguments, or samzamp[offline] is not installed (the line says what to install)
"""

from __future__ import annotations

import sys

from samzamp.cli.common import new_parser, serve_until_signalled
from samzamp.coordinator.zk.server import EmbeddedZooKeeper

__all__ = ["main"]

PROG = "samzamp-zookeeper"


def main(argv: list[str] | None = None, prog: str = PROG) -> int:
    new_parser(PROG, "Run the embedded ZooKeeper (from pyspark's jars, on Java 17) on 127.0.0.1.").parse_args(argv)
    return serve_until_signalled(
        PROG,
        lambda: EmbeddedZooKeeper(die_with_parent=True).start(),
        lambda zookeeper: f"job.coordinator.zk.connect={zookeeper.connect_string}",
    )


if __name__ == "__main__":
    sys.exit(main())
