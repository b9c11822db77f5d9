"""Every example in configs/ runs as-is: it starts its own embedded broker and stops cleanly."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
from kafka_util import ROOT, wait_until

pytestmark = pytest.mark.integration

CONFIGS = sorted((ROOT / "configs").glob("*.toml"))


@pytest.mark.parametrize("config", CONFIGS, ids=[c.stem for c in CONFIGS])
def test_example_config_runs_on_its_embedded_broker(config: Path, tmp_path: Path) -> None:
    log = tmp_path / "c.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "samzamp.cli.container", str(config), "--set", "metrics.log.interval.ms=0"],
            stdout=out,
            stderr=out,
            cwd=str(ROOT),
            env=dict(os.environ),
        )

    def text() -> str:
        return log.read_text()

    try:
        wait_until(lambda: "starting offsets" in text() or proc.poll() is not None, 60, "the job to start")
        assert proc.poll() is None, text()[-2000:]
        assert "samzamp: embedded broker at 127.0.0.1:" in text()
        children = psutil.Process(proc.pid).children(recursive=True)
        assert any("tansu" in " ".join(c.cmdline()) for c in children)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0, text()[-2000:]
        assert "container stopped cleanly" in text()
        assert not [c for c in children if c.is_running() and c.status() != psutil.STATUS_ZOMBIE], "broker left behind"
    finally:
        if proc.poll() is None:
            proc.kill()
