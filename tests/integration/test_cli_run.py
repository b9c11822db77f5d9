"""``samzamp-container`` as a first-time user runs it: the installed console script, in the directory
that holds the job's task module, against the real broker; and what a failing task prints."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from kafka_util import seed_input

pytestmark = pytest.mark.integration

TIMEOUT_S = 90
CONSOLE_SCRIPT = Path(sys.executable).parent / "samzamp-container"  # what pip installed, not bin/

TASKS = """
from samzamp import RequestScope, StreamTask


class StopAtFirst(StreamTask):
    def process(self, envelope, collector, coordinator):
        coordinator.shutdown(RequestScope.ALL_TASKS_IN_CONTAINER)


class Boom(StreamTask):
    def process(self, envelope, collector, coordinator):
        raise ValueError(f"boom at {envelope.message}")
"""


def _job(tmp_path: Path, job: str, task_class: str, topic: str, bootstrap: str, pool: int = 1) -> Path:
    cfg = tmp_path / "job.toml"
    cfg.write_text(f"""
[job]
name = "{job}"
default.system = "kafka"
container.thread.pool.size = {pool}

[task]
class = "{task_class}"
inputs = ["kafka.{topic}"]

[systems.kafka]
samza.factory = "kafka"
bootstrap.servers = "{bootstrap}"
default.stream.samza.offset.default = "oldest"

[streams.{topic}]
samza.key.serde = "string"
samza.msg.serde = "string"

[metrics]
log.interval.ms = 0
""")
    return cfg


def _container(tmp_path: Path, cfg: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The console script, run in ``tmp_path`` (where the task module is) with nothing on PYTHONPATH."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SAMZAMP_LOG_LEVEL")}
    return subprocess.run(
        [str(CONSOLE_SCRIPT), str(cfg), *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )


@pytest.mark.parametrize("pool", [1, 2], ids=["in-process", "worker-processes"])
def test_console_script_imports_the_task_module_from_the_current_directory(
    broker, unique, tmp_path: Path, pool: int
) -> None:
    module = f"cwd_tasks_{unique}"
    (tmp_path / f"{module}.py").write_text(TASKS)
    topic = f"in-{unique}"
    seed_input(broker.bootstrap_servers, topic, 1, 3)
    cfg = _job(tmp_path, f"cwd-{unique}", f"{module}:StopAtFirst", topic, broker.bootstrap_servers, pool)
    r = _container(tmp_path, cfg)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "container stopped cleanly" in r.stderr


def test_a_failing_task_is_one_line_on_stderr_and_its_traceback_only_at_debug(broker, unique, tmp_path: Path) -> None:
    module = f"cwd_tasks_{unique}"
    (tmp_path / f"{module}.py").write_text(TASKS)
    topic = f"in-{unique}"
    seed_input(broker.bootstrap_servers, topic, 1, 3)
    expected = (
        f"samzamp run: failed: task 'Partition 0' failed processing SystemStreamPartition "
        f"[kafka, {topic}, 0] offset 0: ValueError: boom at m0"
    )

    quiet = _container(tmp_path, _job(tmp_path, f"boom-{unique}", f"{module}:Boom", topic, broker.bootstrap_servers))
    assert quiet.returncode == 1, quiet.stderr[-3000:]
    assert "Traceback" not in quiet.stderr, quiet.stderr[-3000:]
    reports = [line for line in quiet.stderr.splitlines() if line.startswith("samzamp")]
    assert reports == [expected], quiet.stderr[-3000:]

    errors_only = _container(tmp_path, tmp_path / "job.toml", "--log-level", "error")
    assert errors_only.returncode == 1
    assert errors_only.stderr == expected + "\n"

    debug = _container(tmp_path, tmp_path / "job.toml", "--log-level", "DEBUG")
    assert debug.returncode == 1
    assert "Traceback (most recent call last):" in debug.stderr
    assert 'raise ValueError(f"boom at {envelope.message}")' in debug.stderr  # the task's own frame
    assert debug.stderr.splitlines()[-1] == expected
