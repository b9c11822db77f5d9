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

import signal
import sys
import threading

from samzamp.cli.common import EXIT_OK, new_parser, report_failure
from samzamp.coordinator.zk.server import EmbeddedZooKeeper

__all__ = ["main"]

PROG = "samzamp-zookeeper"


def main(argv: list[str] | None = None) -> int:
    new_parser(PROG, "Run the embedded ZooKeeper (from pyspark's jars, on Java 17) on 127.0.0.1.").parse_args(argv)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    try:
        zookeeper = EmbeddedZooKeeper(die_with_parent=True).start()
    except Exception as e:
        return report_failure(PROG, e)
    print(f"job.coordinator.zk.connect={zookeeper.connect_string}", flush=True)
    try:
        stop.wait()
    finally:
        zookeeper.stop()
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
