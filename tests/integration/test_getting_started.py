"""README's Getting Started, followed as a user would: its files in an empty directory, its commands.

The files come from the README's ``<!-- file: PATH -->`` blocks; the commands are those of its
``samzamp-broker`` / ``samzamp-container`` / ``pytest`` block, run with this checkout's installed
console scripts from that directory (so the task package is found the way a user's would be); the
counts ``try_it.py`` prints must be exactly the README's transcript.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka_util import wait_until
from readme_blocks import blocks

pytestmark = pytest.mark.integration

BIN = Path(sys.executable).parent
TIMEOUT_S = 120


def _write_project(root: Path) -> list[str]:
    written = []
    for b in blocks():
        if b.file is not None:
            path = root / b.file
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(b.body, encoding="utf-8")
            written.append(b.file)
    return written


def _transcript() -> tuple[list[str], list[str]]:
    """The README's try_it.py run: its arguments and the lines it prints."""
    for b in blocks():
        first, *rest = b.body.splitlines()
        if b.lang == "text" and first.startswith("$ python try_it.py "):
            return shlex.split(first[2:])[3:], rest
    raise AssertionError("README.md has no transcript of try_it.py")


@pytest.fixture
def samzamp_broker() -> Iterator[str]:
    """``samzamp-broker`` as the README runs it; yields the address it prints."""
    proc = subprocess.Popen([str(BIN / "samzamp-broker")], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        m = re.fullmatch(r"bootstrap\.servers=(127\.0\.0\.1:\d+)\n", line)
        assert m, f"samzamp-broker printed {line!r}"
        yield m.group(1)
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(30)
        proc.stdout.close()
    assert code == 0, "samzamp-broker did not stop cleanly on SIGTERM"


def test_getting_started_runs_as_written(samzamp_broker: str, tmp_path: Path) -> None:
    project = tmp_path / "project"
    assert sorted(_write_project(project)) == ["job.toml", "tests/test_wordcount.py", "try_it.py", "wordcount/task.py"]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"

    tests = subprocess.run(
        [str(BIN / "python"), "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert tests.returncode == 0, tests.stdout + tests.stderr
    assert "1 passed" in tests.stdout

    log = tmp_path / "container.log"
    with open(log, "wb") as out:
        container = subprocess.Popen(
            [str(BIN / "samzamp-container"), "job.toml", "--set", f"systems.kafka.bootstrap.servers={samzamp_broker}"],
            cwd=project,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_until(
            lambda: "starting offsets" in log.read_text() or container.poll() is not None, TIMEOUT_S, "the job to start"
        )
        assert container.poll() is None, log.read_text()[-3000:]
        args, printed = _transcript()
        run = subprocess.run(
            [str(BIN / "python"), "try_it.py", samzamp_broker, *args],
            cwd=project,
            env=env,
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
        )
        assert run.returncode == 0, run.stderr + log.read_text()[-3000:]
        assert run.stdout.splitlines() == printed
    finally:
        container.send_signal(signal.SIGINT)
        code = container.wait(TIMEOUT_S)
    assert code == 0, log.read_text()[-3000:]
    assert (project / "state" / "counts").is_dir(), "the store was not kept where the README says"
