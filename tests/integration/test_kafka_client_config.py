"""Acceptance: the common client block ``systems.<s>.kafka.*`` reaches every Kafka client samzamp
creates, and ``${NAME}`` in a config value is read from the environment.

The evidence comes from librdkafka, not from samzamp: the job's common block sets ``debug = "conf"``,
which makes every client instance print its effective configuration to stderr when it is created::

    %7|<time>|CONF|<client.id>#<type>-<n>| [thrd:app]:   <property> = <value>

and a harmless non-default ``client.rack`` whose value comes from an environment variable, so each
dump also shows the interpolation reached the client. Every client kind has its own default
client.id (``samzamp-<job>-<id>[-<process>]-<kind>``), so the dumps say which kind carried the block.
A client built without the block prints no dump, and its kind's case fails naming it.

The real commands run as subprocesses against the embedded broker: ``samzamp-container`` with pool
size 0 and 2 (worker processes' producers, changelog producers and restore readers), a changelogged
store and the drain monitor on; ``samzamp-drain --wait``; and the offline commands
(``samzamp-compact-changelog --to-topic`` and ``samzamp-restore-stores``) in Spark local mode, whose
executors' stderr reaches the command's stderr, so the Spark tasks' own clients are checked too.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kafka_util import (
    ROOT,
    Container,
    child_env,
    count_lines,
    create_topic,
    job_toml,
    run_drain,
    seed_input,
    wait_until,
    write_config,
)

pytestmark = pytest.mark.integration

RACK_VAR = "SAMZAMP_TEST_CLIENT_RACK"
SECRET_VAR = "SAMZAMP_TEST_KAFKA_PASSWORD"
RACK = f"rack-from-env-{os.getpid()}"
SECRET = f"never-printed-{os.getpid()}"
MESSAGES = 20

# One line of librdkafka's configuration dump, through the "librdkafka" logger at DEBUG (in a worker
# process, or not): (client instance, property, value).
_CONF = re.compile(
    r" DEBUG (?:worker-\d+ )?librdkafka: CONF \[(?P<instance>[^]]+)\] \[thrd:app\]:   (?P<key>\S+) = (?P<value>.*)$"
)

CONTAINER_KINDS = ["admin", "consumer", "producer", "checkpoint-producer", "end-offsets", "metadata-reader"]
CLIENTS: list[tuple[str, str]] = [
    *[("pool-0", k) for k in [*CONTAINER_KINDS, "changelog-producer", "changelog-reader"]],
    *[("pool-2", k) for k in CONTAINER_KINDS],
    *[("pool-2", f"worker-{w}-{k}") for w in (0, 1) for k in ("producer", "changelog-producer", "changelog-reader")],
    *[("drain", f"drain-{k}") for k in ("admin", "metadata-reader", "producer")],
    *[("offline", f"offline-{k}") for k in ("admin", "metadata-reader", "changelog-reader", "changelog-writer")],
]


def dumps(text: str) -> dict[str, dict[str, str]]:
    """librdkafka client instance (``<client.id>#<type>-<n>``) -> the configuration it printed."""
    out: dict[str, dict[str, str]] = {}
    for line in text.splitlines():
        m = _CONF.search(line)
        if m:
            out.setdefault(m["instance"], {})[m["key"]] = m["value"]
    return out


@dataclass
class Run:
    job: str
    output: str  # everything the scenario's commands printed


class Runs:
    """Each scenario runs once, on first use, and its output is kept for every case that needs it."""

    def __init__(self, broker: Any, tmp: pytest.TempPathFactory) -> None:
        self.broker = broker
        self.tmp = tmp
        self.runs: dict[str, Run] = {}
        self.pool0: tuple[Path, Path, str] | None = None  # config, tmp dir, job of the pool-0 run

    def get(self, scenario: str) -> Run:
        if scenario not in self.runs:
            if scenario in ("pool-0", "pool-2", "drain"):
                pool = 2 if scenario == "pool-2" else 0
                self.runs[f"pool-{pool}"], drain = self._container(pool)
                if pool == 0:
                    self.runs["drain"] = drain
            else:
                self.runs["offline"] = self._offline()
        return self.runs[scenario]

    def _container(self, pool: int) -> tuple[Run, Run]:
        tmp = self.tmp.mktemp(f"pool{pool}")
        bootstrap = self.broker.bootstrap_servers
        n = f"{pool}-{os.getpid()}-{len(self.runs)}"
        job, topic, idle = f"cc{n}", f"cc-in-{n}", f"cc-idle-{n}"
        seed_input(bootstrap, topic, 2, MESSAGES)
        create_topic(bootstrap, idle, 1)  # starts at the upcoming message: the end-offsets reader runs
        rec = tmp / "rec"
        rec.mkdir()
        extra = f"""
[streams.{idle}]
samza.offset.default = "upcoming"
samza.msg.serde = "string"

[stores.counts]
factory = "lmdb"
changelog = "kafka.cc-changelog-{n}"
key.serde = "string"
msg.serde = "long"

[systems.kafka.kafka]
bootstrap.servers = "{bootstrap}"
debug = "conf"
client.rack = "${{{RACK_VAR}}}"
sasl.password = "${{{SECRET_VAR}}}"
"""
        # A literal ${ (written $${): a worker that read the container's resolved config as a
        # reference again would fail on the unset variable. The drain monitor polls every 200 ms
        # rather than 10 s: the drain below then ends the run at once (its clients are the same).
        top = f"""
"job.logged.store.base.dir" = "{tmp / "state"}"
"job.container.thread.pool.size" = {pool}
"job.drain-monitor.poll.interval.ms" = 200
"test.literal" = "$${{SAMZAMP_TEST_SURELY_UNSET}}"
"""
        cfg = write_config(tmp / "job.toml", job_toml(job, "recording_tasks:StoreCountTask", topic, rec, extra, top))
        log = tmp / "container.log"
        with _env():
            c = Container(cfg, bootstrap, f"task.inputs=kafka.{topic},kafka.{idle}", log=log)
            wait_until(lambda: count_lines(rec) >= MESSAGES, 180, "every message processed", c)
            drain = run_drain(cfg, bootstrap, "--wait", "--timeout", "120")
        assert drain.returncode == 0, drain.stdout + drain.stderr
        assert c.proc.wait(timeout=60) == 0, c.log_text()[-3000:]
        if pool == 0:
            self.pool0 = (cfg, tmp, job)
        return Run(job, c.log_text()), Run(job, drain.stdout + drain.stderr)

    def _offline(self) -> Run:
        self.get("pool-0")
        assert self.pool0 is not None
        cfg, tmp, job = self.pool0
        # The two commands run side by side (each starts its own Spark JVM): neither reads what the
        # other writes (the snapshot and the compacted topic; the restored store directories).
        started: list[tuple[str, subprocess.Popen[str]]] = []
        out = []
        try:
            for module, args in [
                ("compact_changelog", ["--output", str(tmp / "snapshot"), "--to-topic", f"cc-compacted-{job}"]),
                ("restore_stores", ["--set", f"job.logged.store.base.dir={tmp / 'restored'}"]),
            ]:
                with _env():
                    proc = subprocess.Popen(
                        [sys.executable, "-m", f"samzamp.cli.{module}", str(cfg), "--store", "counts", "--master",
                         "local[1]", *args],
                        cwd=str(ROOT), env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                    )  # fmt: skip
                started.append((module, proc))
            for module, proc in started:
                stdout, stderr = proc.communicate(timeout=300)
                assert proc.returncode == 0, f"{module}: {stdout}\n{stderr[-3000:]}"
                out.append(stdout + stderr)
        finally:
            for _, proc in started:
                if proc.poll() is None:
                    proc.kill()
                    proc.communicate()
        return Run(job, "\n".join(out))


class _env:
    """The variables the job's config refers to, set while its commands start, and DEBUG logs."""

    def __enter__(self) -> None:
        self.mp = pytest.MonkeyPatch()
        self.mp.setenv(RACK_VAR, RACK)
        self.mp.setenv(SECRET_VAR, SECRET)
        # samzamp logs each client's settings at DEBUG (redacted): the secret check covers that too.
        self.mp.setenv("SAMZAMP_LOG_LEVEL", "DEBUG")

    def __exit__(self, *exc: object) -> None:
        self.mp.undo()


@pytest.fixture(scope="module")
def runs(broker: Any, tmp_path_factory: pytest.TempPathFactory) -> Runs:
    return Runs(broker, tmp_path_factory)


@pytest.mark.parametrize(("scenario", "client"), CLIENTS, ids=[f"{s}:{c}" for s, c in CLIENTS])
def test_every_client_kind_carries_the_common_block(runs: Runs, scenario: str, client: str) -> None:
    run = runs.get(scenario)
    client_id = f"samzamp-{run.job}-1-{client}"
    seen = dumps(run.output)
    mine = {name: conf for name, conf in seen.items() if name.startswith(client_id + "#")}
    assert mine, f"no librdkafka client with client.id {client_id} printed its configuration; seen: {sorted(seen)}"
    for name, conf in mine.items():
        assert conf.get("client.rack") == RACK, (name, conf)  # the common block, its value from ${...}
        assert conf.get("sasl.password") == "[redacted]", (name, conf)  # the secret reached it; librdkafka hid it
        assert conf.get("metadata.broker.list") == runs.broker.bootstrap_servers, (name, conf)
    # Admin clients get only the common block; consumers and producers only their own.
    kind = (
        "producer" if client.endswith(("producer", "writer")) else "admin" if client.endswith("admin") else "consumer"
    )
    expected = {"admin": "producer", "producer": "producer", "consumer": "consumer"}[kind]  # librdkafka's type
    assert all(name.split("#")[1].startswith(expected + "-") for name in mine), sorted(mine)


@pytest.mark.parametrize("scenario", ["pool-0", "pool-2", "drain", "offline"])
def test_the_secret_is_never_printed(runs: Runs, scenario: str) -> None:
    output = runs.get(scenario).output
    assert re.search(r"DEBUG samzamp.systems.kafka.client_config: kafka \S+ client of system 'kafka': .*"
                     r"'sasl.password': '\[redacted\]'", output)  # fmt: skip
    assert SECRET not in output


IDEMPOTENT: list[tuple[str, str]] = [
    ("pool-0", "producer"),
    ("pool-0", "changelog-producer"),
    *[("pool-2", f"worker-{w}-{k}") for w in (0, 1) for k in ("producer", "changelog-producer")],
]


@pytest.mark.parametrize(("scenario", "client"), IDEMPOTENT, ids=[f"{s}:{c}" for s, c in IDEMPOTENT])
def test_output_and_changelog_producers_are_idempotent(runs: Runs, scenario: str, client: str) -> None:
    """librdkafka's own dump: idempotence on, with the acks it requires (all). librdkafka itself then
    caps the requests in flight at 5 and retries until message.timeout.ms."""
    run = runs.get(scenario)
    client_id = f"samzamp-{run.job}-1-{client}"
    mine = {name: conf for name, conf in dumps(run.output).items() if name.startswith(client_id + "#")}
    assert mine, f"no librdkafka client with client.id {client_id} printed its configuration"
    for name, conf in mine.items():
        assert conf.get("enable.idempotence") == "true", (name, conf.get("enable.idempotence"))
        assert conf.get("request.required.acks") == "-1", (name, conf.get("request.required.acks"))  # all


BASE_TOML = """\
[job]
name = "env-check"

[task]
class = "samzamp.examples.word_count:WordCountTask"
inputs = ["kafka.lines"]

[systems.kafka]
samza.factory = "kafka"
bootstrap.servers = "127.0.0.1:9"

[systems.kafka.kafka]
sasl.username = "${SAMZAMP_TEST_KAFKA_USER}"
"""


@pytest.mark.parametrize("where", ["file", "set"])
def test_a_missing_variable_exits_2_naming_the_key(tmp_path: Path, where: str) -> None:
    path = tmp_path / "job.toml"
    missing = "SAMZAMP_TEST_SURELY_UNSET"
    text = BASE_TOML + (f'sasl.password = "${{{missing}}}"\n' if where == "file" else "")
    path.write_text(text)
    args = ["--set", f"systems.kafka.kafka.sasl.password=x${{{missing}}}"] if where == "set" else []
    env = {**child_env(), "SAMZAMP_TEST_KAFKA_USER": "user-value-not-printed"}
    env.pop(missing, None)
    proc = subprocess.run(
        [sys.executable, "-m", "samzamp.cli.container", str(path), *args],
        cwd=str(ROOT), env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"samzamp run: config error: systems.kafka.kafka.sasl.password: refers to environment variable "
        f"{missing}, which is not set; set it (or write $${{ for a literal ${{)"
    ]
    assert "user-value-not-printed" not in proc.stdout + proc.stderr
