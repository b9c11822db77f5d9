"""Against the real broker: the restores of several tasks, inline and in worker processes, show one
progress view on a terminal: one line, redrawn by the container alone, ended once."""

from __future__ import annotations

import os
import pty
import re
import signal
import subprocess
import sys
import threading
import tty
from pathlib import Path

import pytest
from confluent_kafka import Producer
from kafka_util import ROOT, child_env, counts_store, create_topic, job_toml, wait_until, write_config

pytestmark = pytest.mark.integration

PARTITIONS = 4
PER_TASK = 25_000  # two and a half of the restore's 10,000-record batches: progress is reported between


class OnTerminal:
    """``samzamp-container`` with stdout and stderr on a pseudo-terminal (raw: no "\\r" added),
    everything it writes there collected."""

    def __init__(self, config: Path, bootstrap: str, *overrides: str) -> None:
        master, slave = pty.openpty()
        tty.setraw(slave)
        env = child_env()
        env.pop("CI", None)  # CI=true turns terminal drawing off
        args = [sys.executable, "-m", "samzamp.cli.container", str(config)]
        for o in (f"systems.kafka.bootstrap.servers={bootstrap}", *overrides):
            args += ["--set", o]
        self.proc = subprocess.Popen(args, env=env, stdout=slave, stderr=slave, cwd=str(ROOT))
        os.close(slave)
        self._master = master
        self._chunks: list[bytes] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while True:
            try:
                chunk = os.read(self._master, 65536)
            except OSError:  # EIO: every writer closed the terminal
                return
            if not chunk:
                return
            self._chunks.append(chunk)

    def text(self) -> str:
        return b"".join(self._chunks).decode(errors="replace")

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout=60)
        self._reader.join(timeout=10)
        os.close(self._master)
        return code


def _changelog(bootstrap: str, topic: str) -> None:
    """PER_TASK counts in each partition of the changelog: the stores a full restore rebuilds."""
    create_topic(bootstrap, topic, PARTITIONS)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    for partition in range(PARTITIONS):
        for i in range(PER_TASK):
            p.produce(topic, key=f"k{i}".encode(), value=(i + 1).to_bytes(8, "big"), partition=partition)
            if i % 5000 == 0:
                p.poll(0)
    assert p.flush(60) == 0


@pytest.mark.parametrize("pool", [1, 2], ids=["inline", "pool2"])
def test_restores_of_several_tasks_show_one_progress_line_on_a_terminal(
    broker, unique: str, tmp_path: Path, pool: int
) -> None:
    topic, changelog = f"in-{unique}", f"counts-log-{unique}"
    create_topic(broker.bootstrap_servers, topic, PARTITIONS)
    _changelog(broker.bootstrap_servers, changelog)
    rec = tmp_path / "rec"
    rec.mkdir()
    top = f'"job.logged.store.base.dir" = "{tmp_path / "state"}"'
    extra = counts_store(f"kafka.{changelog}")
    cfg = write_config(
        tmp_path / "job.toml", job_toml(f"rp-{unique}", "recording_tasks:StoreCountTask", topic, rec, extra, top)
    )
    c = OnTerminal(cfg, broker.bootstrap_servers, f"job.container.thread.pool.size={pool}")
    try:
        wait_until(
            lambda: c.text().count("changelog records") >= PARTITIONS or c.proc.poll() is not None,
            120,
            "every store restored",
        )
    finally:
        code = c.stop()
    text = c.text()
    assert code == 0, text[-3000:]
    assert len(re.findall(rf"replayed {PER_TASK} changelog records", text)) == PARTITIONS, text[-3000:]
    # Everything drawn in place is the container's one view (each redraw clears the line and
    # leaves the cursor at its start): no per-store bar of any process.
    assert "\r" in text, text[-3000:]
    lines = [line for chunk in text.split("\n") for line in chunk.split("\r")]
    view = re.compile(r"\x1b\[K(restoring stores: \d+ of \d+ done, |restored \d+ stores: )")
    drawn = [line for line in lines if line.startswith("\x1b[K")]
    others = [line for line in lines if line and not line.startswith(("\x1b[K", "20"))]  # log lines start with the year
    assert not others, others[:5]
    assert all(view.match(d) for d in drawn), [d for d in drawn if not view.match(d)][:5]
    assert any("restoring stores:" in d for d in drawn), drawn
    # Each round of restores ends its line once, naming its stores: every task's store, once.
    ended = [int(n) for n in re.findall(r"\r\x1b\[Krestored (\d+) stores: [^\r\n]*\n", text)]
    assert sum(ended) == PARTITIONS, ended
