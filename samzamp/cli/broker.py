"""``samzamp-broker``: run the embedded broker (Tansu, memory only) on 127.0.0.1 until interrupted.

Prints ``bootstrap.servers=127.0.0.1:<port>`` once it is ready, for jobs run with
``--set systems.kafka.bootstrap.servers=...``. Exit codes: 0 after SIGINT/SIGTERM, 1 if it cannot start.
"""

from __future__ import annotations

import signal
import sys
import threading

from samzamp.api.errors import SamzampError
from samzamp.systems.kafka.embedded import EmbeddedBroker

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    del argv
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    try:
        broker = EmbeddedBroker(die_with_parent=True).start()
    except SamzampError as e:
        print(f"samzamp-broker: {e}", file=sys.stderr)
        return 1
    print(f"bootstrap.servers={broker.bootstrap_servers}", flush=True)
    try:
        stop.wait()
    finally:
        broker.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
