"""A broker that stops answering under load (SIGSTOP for 10 s, its own embedded broker): the
outputs of each key arrive once each and in the order the task sent them. The job's producers time
a request out after 2 s, so the pause spans several request timeouts. On this broker the check also
holds with idempotence turned off (no response was lost in our runs), so it guards the guarantee,
not the setting: ``test_kafka_client_config.py`` shows idempotence on in librdkafka's own dump."""

from __future__ import annotations

import os
import signal
import threading
from collections import defaultdict
from pathlib import Path

import pytest
from confluent_kafka import Producer
from kafka_util import Container, count_lines, create_topic, job_toml, read_all, wait_until, write_config

from samzamp.systems.kafka.embedded import EmbeddedBroker

pytestmark = pytest.mark.integration

PARTITIONS = 2
KEYS = 20
PAUSE_S = 10


class KeyedFeeder:
    """Writes ``key -> "key:n"`` (n counting per key) round the keys until stopped, idempotently
    itself, so the input holds each once in order."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.sent = 0
        self._stop = threading.Event()
        self._producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
        self._topic = topic
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            for _ in range(KEYS):
                key = f"k{self.sent % KEYS}"
                self._producer.produce(self._topic, f"{key}:{self.sent // KEYS}".encode(), key.encode())
                self.sent += 1
            self._producer.poll(0)
            self._stop.wait(0.01)

    def stop(self) -> int:
        self._stop.set()
        self._thread.join(30)
        assert self._producer.flush(60) == 0
        return self.sent


def test_a_broker_pause_under_load_repeats_and_reorders_no_key_s_outputs(tmp_path: Path, unique: str) -> None:
    pool = 2  # the outputs go through the workers' producers
    broker = EmbeddedBroker(die_with_parent=True).start()
    try:
        bootstrap = broker.bootstrap_servers
        topic, out = f"in-{unique}", f"out-{unique}"
        create_topic(bootstrap, topic, PARTITIONS)
        create_topic(bootstrap, out, PARTITIONS)
        rec = tmp_path / "rec"
        rec.mkdir()
        extra = f"""
[streams.{out}]
samza.key.serde = "string"
samza.msg.serde = "string"
"""
        top = f'test.output = "{out}"\n"job.container.thread.pool.size" = {pool}\n'
        cfg = write_config(
            tmp_path / "job.toml", job_toml(f"idem-{unique}", "recording_tasks:OrderTask", topic, rec, extra, top)
        )
        feeder = KeyedFeeder(bootstrap, topic)
        c = Container(cfg, bootstrap, "systems.kafka.producer.request.timeout.ms=2000", log=tmp_path / "c.log")
        try:
            wait_until(lambda: count_lines(rec) >= 2000, 60, "the job under load", c)
            os.kill(broker.process.pid, signal.SIGSTOP)
            try:
                threading.Event().wait(PAUSE_S)  # the fault itself: the broker answers nothing this long
            finally:
                os.kill(broker.process.pid, signal.SIGCONT)
            written = feeder.stop()
            wait_until(lambda: count_lines(rec) >= written, 120, "every input processed", c)
            assert c.stop() == 0, c.log_text()[-3000:]
        finally:
            feeder.stop()
            if c.alive():
                c.stop()
        by_key: dict[str, list[int]] = defaultdict(list)
        for m in read_all(bootstrap, out, list(range(PARTITIONS))):
            key, n = m.value().decode().split(":")
            by_key[key].append(int(n))
        for key, ns in sorted(by_key.items()):
            assert ns == list(range(len(ns))), f"{key}: outputs out of order or repeated: {ns[:50]}"
        assert sum(len(ns) for ns in by_key.values()) == written
    finally:
        broker.stop()
