"""``--log-format json`` and ``--log-level`` against the real broker, in the container and in its
worker processes: every line they print parses as JSON, and the level reaches the workers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from kafka_util import Container, count_lines, job_toml, seed_input, wait_until, write_config

pytestmark = pytest.mark.integration

PARTITIONS = 2


def _run(broker, unique: str, tmp_path: Path, *args: str) -> str:
    """A word count of 200 messages by LoggingTask over 2 workers, stopped cleanly; what it printed."""
    n = 200
    topic, job = f"in-{unique}", f"logs-{unique}"
    seed_input(broker.bootstrap_servers, topic, PARTITIONS, n)
    rec = tmp_path / "rec"
    rec.mkdir()
    cfg = write_config(tmp_path / "job.toml", job_toml(job, "recording_tasks:LoggingTask", topic, rec))
    c = Container(cfg, broker.bootstrap_servers, "job.container.thread.pool.size=2", log=tmp_path / "c.log", args=args)
    wait_until(lambda: count_lines(rec) >= n, 120, f"{n} processed messages", c)
    assert c.stop() == 0, c.log_text()[-3000:]
    return c.log_text()


def test_json_lines_from_the_container_and_its_workers_with_the_level_given(broker, unique, tmp_path: Path) -> None:
    text = _run(broker, unique, tmp_path, "--log-format", "json", "--log-level", "DEBUG")
    records = []
    for line in text.splitlines():
        record = json.loads(line)  # every line: no raw librdkafka or print() line slips through
        assert isinstance(record, dict), line
        assert {"time", "level", "logger", "message"} <= record.keys(), line
        records.append(record)
    assert records
    assert all(r["time"].endswith("Z") for r in records)
    # The processor's id, once it has one (its coordinator is made after the systems start).
    started = next(i for i, r in enumerate(records) if "starting offsets" in r["message"])
    assert {r.get("processor") for r in records[started:]} == {"0"}
    workers = [r for r in records if "worker" in r]
    assert {r.get("processor") for r in workers} == {"0"}
    assert {r["worker"] for r in workers} == {0, 1}
    # --log-level DEBUG reached the workers: their own DEBUG records (the Kafka clients they make).
    assert any(r["level"] == "DEBUG" for r in workers), [r["message"] for r in workers][:20]
    # What a task logs names the task, in the worker that runs it; its traceback is a field.
    task_lines = [r for r in workers if r["logger"] == "test.task"]
    assert {r["task"] for r in task_lines} == {f"Partition {p}" for p in range(PARTITIONS)}
    assert {r["level"] for r in task_lines} == {"DEBUG", "INFO", "WARNING"}
    warnings = [r for r in task_lines if r["level"] == "WARNING"]
    assert all("ValueError: not really" in r["exception"] for r in warnings)


def test_text_lines_with_worker_debug_lines_at_debug(broker, unique, tmp_path: Path) -> None:
    text = _run(broker, unique, tmp_path, "--log-level", "debug")
    lines = text.splitlines()
    for w in range(2):
        assert any(f" DEBUG worker-{w} test.task: init of Partition " in line for line in lines), text[-3000:]
        assert any(f" DEBUG worker-{w} samzamp." in line for line in lines), text[-3000:]
    with pytest.raises(json.JSONDecodeError):
        json.loads(lines[0])
