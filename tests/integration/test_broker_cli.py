"""``bin/samzamp-broker``: prints its address once ready, serves Kafka requests, exits 0 on SIGTERM."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def test_broker_cli_serves_until_sigterm() -> None:
    proc = subprocess.Popen([str(ROOT / "bin" / "samzamp-broker")], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        assert line.startswith("bootstrap.servers=127.0.0.1:"), line
        admin = AdminClient({"bootstrap.servers": line.split("=", 1)[1]})
        assert admin.list_topics(timeout=10).brokers
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
