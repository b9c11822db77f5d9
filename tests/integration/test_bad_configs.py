"""Acceptance: broken configs make ``samzamp run`` (and its alias ``samzamp-container``) exit 2 with one line that names the key.

Each case derives a broken config from a valid base and runs the real CLI in a subprocess. Every one
must fail in validation, before anything connects: the base points at 127.0.0.1:9, which is never
contacted (a case that got that far would not exit 2 with a config error).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from bad_configs import CASES, Case, base_values, render
from confluent_kafka import Producer
from kafka_util import create_topic

from samzamp.config import load_config, validate
from samzamp.config.settings import checkpoint_topic_name

pytestmark = pytest.mark.integration

TIMEOUT_S = 60


def _run(path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "samzamp.cli.container", str(path), *args],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )


def test_cases_are_distinct_and_enough() -> None:
    assert len({c.id for c in CASES}) == len(CASES)
    assert len({(repr(sorted(c.set.items())), c.drop, c.args, c.raw) for c in CASES}) == len(CASES)
    assert len(CASES) >= 26 + 15


def test_base_config_is_valid(tmp_path: Path) -> None:
    # Otherwise every case below could fail for the base's fault, not its own.
    path = Case("base", None).write(tmp_path)
    settings = validate(load_config(path))
    assert settings.name == "word-count"
    assert settings.systems["kafka"].bootstrap_servers == "127.0.0.1:9"


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_config_exits_2_with_one_line_naming_the_key(tmp_path: Path, case: Case) -> None:
    path = case.write(tmp_path)
    proc = _run(path, *case.args)
    stderr = proc.stderr.strip()
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 2, f"exit {proc.returncode}\nstdout: {proc.stdout}\nstderr: {proc.stderr}"
    lines = stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    line = lines[0]
    key = str(path) if case.key is None else case.key
    assert line.startswith(f"samzamp run: config error: {key}: "), line
    assert proc.stdout == ""


def test_a_checkpoint_topic_of_samza_s_records_exits_2_naming_what_to_do(
    broker: Any, unique: str, tmp_path: Path
) -> None:
    # A job moved from Samza under its old job.name and job.id: its checkpoint topic holds Samza's
    # records only. Starting would silently begin at samza.offset.default; it must stop instead.
    job = f"moved-{unique}"
    bootstrap = broker.bootstrap_servers
    topic = checkpoint_topic_name(job, "1")
    create_topic(bootstrap, topic, 1)
    create_topic(bootstrap, f"lines-{unique}", 2)
    producer = Producer({"bootstrap.servers": bootstrap})
    for p in range(2):
        key = {
            "systemstreampartition-grouper-factory": "org.apache.samza.container.grouper.stream.GroupByPartitionFactory",
            "taskName": f"Partition {p}",
            "type": "checkpoint",
        }
        ssp = f"SystemStreamPartition [kafka, lines-{unique}, {p}]"
        value = {ssp: {"system": "kafka", "stream": f"lines-{unique}", "partition": str(p), "offset": "41"}}
        producer.produce(topic, json.dumps(value).encode(), json.dumps(key).encode(), partition=0)
    assert producer.flush(30) == 0

    values = base_values()
    values.update(
        {
            "job.name": job,
            "task.inputs": [f"kafka.lines-{unique}"],
            "systems.kafka.bootstrap.servers": bootstrap,
            "metrics.log.interval.ms": 0,
            "job.factory.class": "org.apache.samza.job.yarn.YarnJobFactory",  # kept from the Samza job
        }
    )
    path = tmp_path / "job.toml"
    path.write_text(render(values), encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, "-m", "samzamp.cli.container", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 2, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(
        f"samzamp run: config error: job.id: checkpoint topic {topic} holds Apache Samza's checkpoints "
        "(2 task(s), e.g. 'Partition 0'), which samzamp cannot read"
    ), last
    assert "another job.id" in last
    # Samza's keys samzamp does not use were named once at start, as warnings.
    warned = [line for line in proc.stderr.splitlines() if "config warning: job.factory.class" in line]
    assert len(warned) == 1, proc.stderr
    assert "WARNING" in warned[0]
