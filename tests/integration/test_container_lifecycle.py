"""Failure, signals and coordinator requests, against the real broker."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest
from kafka_util import (
    Container,
    count_lines,
    job_toml,
    read_checkpoints,
    seed_input,
    wait_until,
    write_config,
)

pytestmark = pytest.mark.integration


def test_task_exception_stops_non_zero_naming_task_ssp_offset(broker, unique, tmp_path: Path) -> None:
    topic, job = f"in-{unique}", f"fail-{unique}"
    seed_input(broker.bootstrap_servers, topic, 1, 5000)
    cfg = write_config(tmp_path / "job.toml", job_toml(job, "recording_tasks:FailingTask", topic, tmp_path))
    c = Container(cfg, broker.bootstrap_servers, "task.commit.ms=20", log=tmp_path / "c.log")
    assert c.proc.wait(timeout=60) == 1
    line = [x for x in c.log_text().splitlines() if x.startswith("samzamp run: failed")]
    assert len(line) == 1, c.log_text()[-2000:]
    assert "'Partition 0'" in line[0]
    assert f"SystemStreamPartition [kafka, {topic}, 0] offset 3000" in line[0]
    assert "boom at m3000" in line[0]
    offsets = [o[0] for _, o in read_checkpoints(broker.bootstrap_servers, job)]
    assert 1000 in offsets, "the commit requested at m1000 was not written"
    assert max(offsets) < 3000, "checkpointed past the failed message"


def test_second_signal_exits_at_once_while_work_is_in_flight(broker, unique, tmp_path: Path) -> None:
    topic, job = f"in-{unique}", f"stuck-{unique}"
    seed_input(broker.bootstrap_servers, topic, 1, 10)
    cfg = write_config(tmp_path / "job.toml", job_toml(job, "recording_tasks:StuckTask", topic, tmp_path))
    c = Container(cfg, broker.bootstrap_servers, "task.shutdown.ms=60000", log=tmp_path / "c.log")
    wait_until(lambda: count_lines(tmp_path, "S ") >= 1, 60, "the stuck message to start", c)
    c.proc.send_signal(signal.SIGTERM)
    wait_until(lambda: "SIGTERM: stopping" in c.log_text(), 30, "the first signal to be handled", c)
    assert c.alive(), "the container must wait for in-flight work after one signal"
    t0 = time.monotonic()
    c.proc.send_signal(signal.SIGTERM)
    assert c.proc.wait(timeout=10) == 128 + signal.SIGTERM
    assert time.monotonic() - t0 < 5


def test_coordinator_commit_covers_exactly_to_the_message_and_shutdown_all_stops(
    broker, unique, tmp_path: Path
) -> None:
    topic, job = f"in-{unique}", f"coord-{unique}"
    seed_input(broker.bootstrap_servers, topic, 1, 1000)
    cfg = write_config(tmp_path / "job.toml", job_toml(job, "recording_tasks:CoordinatorTask", topic, tmp_path))
    c = Container(cfg, broker.bootstrap_servers, "task.commit.ms=-1", log=tmp_path / "c.log")
    assert c.proc.wait(timeout=60) == 0, c.log_text()[-2000:]
    offsets = [o[0] for _, o in read_checkpoints(broker.bootstrap_servers, job)]
    assert offsets[0] == 100  # the requested commit: exactly up to m100
    assert offsets[-1] >= 200  # the final commit of the clean shutdown
