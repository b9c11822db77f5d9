"""librdkafka's own log lines: through Python logging (the ``librdkafka`` logger), never raw on
stderr; and ``make demo`` stops its clients before its broker, so none of them reports a lost
connection ("Disconnected")."""

from __future__ import annotations

import logging
import re
import socket
import subprocess
import sys

import pytest
from kafka_util import ROOT, child_env, wait_until

from samzamp.systems.kafka import KafkaClientSettings, KafkaSystemProducer

pytestmark = pytest.mark.integration


def test_a_client_s_lines_reach_python_logging_not_stderr(
    caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as s:  # a port nothing listens on: the client logs its failed connects
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    caplog.set_level(logging.INFO, logger="librdkafka")
    producer = KafkaSystemProducer(KafkaClientSettings("kafka", f"127.0.0.1:{port}", "samzamp-logs-test"))
    try:
        wait_until(
            lambda: any(r.name == "librdkafka" and "Connect to" in r.getMessage() for r in caplog.records),
            30,
            "librdkafka's connect failure in the log",
        )
    finally:
        producer.stop()
    record = next(r for r in caplog.records if r.name == "librdkafka" and "Connect to" in r.getMessage())
    assert record.levelno == logging.ERROR  # syslog level 3
    assert "samzamp-logs-test-producer" in record.getMessage()  # the client that said it
    assert not re.search(r"^%\d\|", capfd.readouterr().err, re.MULTILINE)  # nothing raw


# Runs ``make demo``'s main with librdkafka's lines at INFO on stderr, and, as the demo's broker
# stops, says how many connections to it this process still holds.
_DEMO = """
import logging, sys, psutil
from samzamp.cli import demo
from samzamp.systems.kafka import EmbeddedBroker

logging.getLogger("librdkafka").setLevel(logging.INFO)
logging.getLogger("librdkafka").addHandler(logging.StreamHandler(sys.stderr))
stop = EmbeddedBroker.stop

def checked_stop(self):
    if self.process is not None:
        held = [
            c for c in psutil.Process().net_connections("tcp")
            if c.raddr and c.raddr.port == self.port and c.status == psutil.CONN_ESTABLISHED
        ]
        print(f"connections to the broker as it stops: {len(held)}", flush=True)
    stop(self)

EmbeddedBroker.stop = checked_stop
sys.exit(demo.main())
"""


def test_make_demo_closes_every_client_before_its_broker_stops() -> None:
    r = subprocess.run(
        [sys.executable, "-c", _DEMO],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
        cwd=ROOT,
        env=child_env(),
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "all counts correct" in r.stdout
    assert "connections to the broker as it stops: 0" in r.stdout, r.stdout
    assert "Disconnected" not in r.stdout + r.stderr
