"""README's Getting Started, followed as a user would, in a venv made from the built wheel.

The wheel is built once per module (``python -m build --wheel``). In an empty directory the test
writes the README's ``<!-- file: PATH -->`` blocks, then runs the README's shell blocks of the
section as written, each line through bash:

- the install block (``python3 -m venv .venv && . .venv/bin/activate``, ``pip install ...``), with
  the one change that the requirement ``samzamp[...]`` names the built wheel (``samzamp[...] @
  file:///...whl``) instead of the package index; pip fetches the rest from the index (its cache);
- the run block, each command after ``. .venv/bin/activate``: a command ending in ``&`` is started
  in the background (the broker: its first line gives the address that replaces ``127.0.0.1:PORT``
  in later commands), every other one must either finish with 0 (the test step) or be the job,
  which keeps running once it logs its starting offsets;
- the transcript's ``python try_it.py ...``, whose output must be exactly the README's.

``python3`` is this interpreter and the checkout's venv is off PATH, and nothing runs from the
source tree, so the job imports the installed samzamp, never this checkout.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from kafka_util import ROOT, wait_until
from readme_blocks import README, Block, blocks

pytestmark = pytest.mark.integration

BUILD_TIMEOUT_S = 300
INSTALL_TIMEOUT_S = 300
TIMEOUT_S = 120
ADDRESS_PLACEHOLDER = "127.0.0.1:PORT"
# The README's requirement for samzamp, with or without extras, quoted as a shell word.
REQUIREMENT = re.compile(r"'samzamp(\[[a-z,]+\])?'")


def _section_blocks() -> list[Block]:
    """The blocks of README's "## Getting started" section, in order."""
    lines = README.read_text(encoding="utf-8").splitlines()
    start = lines.index("## Getting started") + 1
    end = next((i for i in range(start, len(lines)) if lines[i].startswith("## ")), len(lines))
    return [b for b in blocks() if start < b.line <= end]


def _shell_blocks() -> tuple[Block, Block]:
    """Getting Started's install block and its run block."""
    shell = [b for b in _section_blocks() if b.lang == "sh"]
    assert len(shell) == 2, f"Getting started should have two sh blocks (install, run), has {len(shell)}"
    install, run = shell
    assert "pip install" in install.body, install.body
    return install, run


def _commands(block: Block) -> list[str]:
    """The block's command lines, comments dropped."""
    out = []
    for line in block.body.splitlines():
        command = line.split("#", 1)[0].strip()
        if command:
            out.append(command)
    return out


def _transcript() -> tuple[list[str], list[str]]:
    """The README's try_it.py run: its arguments and the lines it prints."""
    for b in _section_blocks():
        first, *rest = b.body.splitlines()
        if b.lang == "text" and first.startswith("$ python try_it.py "):
            return shlex.split(first[2:])[3:], rest
    raise AssertionError("README.md's Getting started has no transcript of try_it.py")


def _write_project(root: Path) -> list[str]:
    written = []
    for b in _section_blocks():
        if b.file is not None:
            path = root / b.file
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(b.body, encoding="utf-8")
            written.append(b.file)
    return written


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """samzamp's wheel, built from this checkout (its C extensions compiled)."""
    out = tmp_path_factory.mktemp("wheel")
    r = subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--outdir", str(out), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT_S,
        check=False,
    )
    assert r.returncode == 0, f"python -m build --wheel failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    (found,) = out.glob("samzamp-*.whl")
    return found


@dataclass
class Shell:
    """bash in the user's project directory, with a PATH on which ``python3`` is this interpreter
    and the checkout's venv is not."""

    cwd: Path
    env: dict[str, str]

    @classmethod
    def for_project(cls, cwd: Path, bin_dir: Path) -> Shell:
        bin_dir.mkdir()
        (bin_dir / "python3").symlink_to(os.path.realpath(sys.executable))
        checkout_bin = str(Path(sys.executable).parent)
        path = [p for p in os.environ.get("PATH", "").split(os.pathsep) if p and p != checkout_bin]
        env = {
            k: v
            for k, v in os.environ.items()
            if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTEST_ADDOPTS") and not k.startswith("SAMZAMP_")
        }
        env["PATH"] = os.pathsep.join([str(bin_dir), *path])
        return cls(cwd, env)

    def script(self, text: str, timeout: float) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", "-e", "-c", text],
            cwd=self.cwd,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def start(self, command: str, out: int | Path) -> subprocess.Popen[str]:
        """``command`` in the activated venv; ``exec`` makes it the process a signal reaches (Ctrl-C)."""
        argv = ["bash", "-c", f". .venv/bin/activate && exec {command}"]
        if isinstance(out, Path):
            with open(out, "w") as f:
                return subprocess.Popen(argv, cwd=self.cwd, env=self.env, stdout=f, stderr=subprocess.STDOUT, text=True)
        return subprocess.Popen(argv, cwd=self.cwd, env=self.env, stdout=out, text=True)


def _stop(proc: subprocess.Popen[str], sig: signal.Signals) -> int:
    if proc.poll() is None:
        proc.send_signal(sig)
    try:
        return proc.wait(TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise


@pytest.fixture
def shell(tmp_path: Path) -> Shell:
    project = tmp_path / "project"
    project.mkdir()
    return Shell.for_project(project, tmp_path / "bin")


def test_getting_started_runs_as_written_from_the_wheel(wheel: Path, shell: Shell, tmp_path: Path) -> None:
    project = shell.cwd
    assert sorted(_write_project(project)) == ["job.toml", "tests/test_wordcount.py", "try_it.py", "wordcount/task.py"]
    install, run = _shell_blocks()

    # Install, as written, but samzamp from the wheel.
    script, substitutions = REQUIREMENT.subn(lambda m: f"'samzamp{m.group(1) or ''} @ {wheel.as_uri()}'", install.body)
    assert substitutions == 1, f"the install block should name samzamp once:\n{install.body}"
    installed = shell.script(script, INSTALL_TIMEOUT_S)
    assert installed.returncode == 0, installed.stdout[-3000:] + installed.stderr[-3000:]
    where = shell.script(". .venv/bin/activate && python -c 'import samzamp; print(samzamp.__file__)'", TIMEOUT_S)
    assert where.returncode == 0, where.stderr
    assert Path(where.stdout.strip()).is_relative_to(project / ".venv"), f"samzamp imported from {where.stdout}"

    background: list[subprocess.Popen[str]] = []
    job: subprocess.Popen[str] | None = None
    job_log = tmp_path / "job.log"
    address: str | None = None
    ran_tests = False
    try:
        for command in _commands(run):
            if address is not None:
                command = command.replace(ADDRESS_PLACEHOLDER, address)
            assert ADDRESS_PLACEHOLDER not in command, f"{command!r} needs the broker's address, started after it"
            if command.endswith("&"):
                broker = shell.start(command[:-1].strip(), subprocess.PIPE)
                background.append(broker)
                assert broker.stdout is not None
                line = broker.stdout.readline()
                m = re.fullmatch(r"bootstrap\.servers=(127\.0\.0\.1:\d+)\n", line)
                assert m, f"{command!r} printed {line!r}"
                address = m.group(1)
                continue
            assert job is None, f"{command!r} comes after the job, which runs until Ctrl-C"
            proc = shell.start(command, job_log)
            wait_until(
                lambda p=proc: p.poll() is not None or "starting offsets" in job_log.read_text(),
                TIMEOUT_S,
                f"{command!r} to finish, or to start the job",
            )
            output = job_log.read_text()
            if proc.poll() is None:
                job = proc
                continue
            assert proc.returncode == 0, f"{command!r} exited {proc.returncode}:\n{output[-3000:]}"
            if "pytest" in command:
                assert "1 passed" in output, output[-3000:]
                ran_tests = True
        assert ran_tests, "the run block runs no test step"
        assert address is not None, "the run block starts no broker"
        assert job is not None, "the run block starts no job"

        args, printed = _transcript()
        tried = shell.script(f". .venv/bin/activate && python try_it.py {shlex.join([address, *args])}", TIMEOUT_S)
        assert tried.returncode == 0, tried.stderr + job_log.read_text()[-3000:]
        assert tried.stdout.splitlines() == printed
    finally:
        job_code = _stop(job, signal.SIGINT) if job is not None else None  # Ctrl-C
        broker_codes = [_stop(p, signal.SIGTERM) for p in background]
        for p in background:
            if p.stdout is not None:
                p.stdout.close()
    assert job_code == 0, job_log.read_text()[-3000:]
    assert broker_codes == [0], "the broker did not stop cleanly on SIGTERM"
    assert (project / "state" / "counts").is_dir(), "the store was not kept where the README says"
