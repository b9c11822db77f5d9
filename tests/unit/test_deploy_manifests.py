"""The deployment artefacts keep what docs/operations/deployment.md promises, without a cluster.

The Kubernetes manifests (deploy/kubernetes/*.yaml) are parsed; the job.toml in the ConfigMap is
validated by samzamp's own config checks after ``${NAME}`` interpolation with the environment each
pod would have (the downward API's pod name included); the systemd unit and the Dockerfile are read
as text (and the unit by ``systemd-analyze verify``). Each promise is one check; each check is also
run on a copy broken on purpose, where it must fail.
"""

from __future__ import annotations

import copy
import re
import shlex
import shutil
import subprocess
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from samzamp.api.errors import ConfigError
from samzamp.cli import drain
from samzamp.config import Config, load_config, validate
from samzamp.config.settings import JobSettings

ROOT = Path(__file__).resolve().parents[2]
KUBERNETES = ROOT / "deploy" / "kubernetes"
UNIT = ROOT / "deploy" / "systemd" / "samzamp@.service"
DOCKERFILE = ROOT / "Dockerfile"
DEFAULT_SHUTDOWN_MS = 30000  # task.shutdown.ms when a job does not set it


@dataclass
class Deployment:
    """Everything under deploy/ and the Dockerfile, parsed; a test may change a copy."""

    manifests: dict[str, dict[str, Any]]  # by kind
    unit: dict[str, dict[str, list[str]]]  # section -> key -> values
    dockerfile: str

    def kind(self, kind: str) -> dict[str, Any]:
        return self.manifests[kind]

    @property
    def pod(self) -> dict[str, Any]:
        spec: dict[str, Any] = self.kind("StatefulSet")["spec"]["template"]["spec"]
        return spec

    @property
    def processor(self) -> dict[str, Any]:
        (container,) = self.pod["containers"]
        return container  # type: ignore[no-any-return]

    @property
    def drain_pod(self) -> dict[str, Any]:
        spec: dict[str, Any] = self.kind("CronJob")["spec"]["jobTemplate"]["spec"]["template"]["spec"]
        return spec

    @property
    def drain_container(self) -> dict[str, Any]:
        (container,) = self.drain_pod["containers"]
        return container  # type: ignore[no-any-return]

    def job_toml(self) -> str:
        return str(self.kind("ConfigMap")["data"]["job.toml"])


def _read_unit(text: str) -> dict[str, dict[str, list[str]]]:
    sections: dict[str, dict[str, list[str]]] = {}
    current: dict[str, list[str]] | None = None
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            current = sections.setdefault(line.strip("[]"), {})
            continue
        assert current is not None, f"{line!r} comes before any section"
        key, _, value = line.partition("=")
        current.setdefault(key.strip(), []).append(value.strip())
    return sections


def load() -> Deployment:
    manifests: dict[str, dict[str, Any]] = {}
    for path in sorted(KUBERNETES.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            assert doc["kind"] not in manifests, f"{path.name}: a second {doc['kind']}"
            manifests[doc["kind"]] = doc
    assert set(manifests) == {"ConfigMap", "StatefulSet", "Service", "CronJob"}, sorted(manifests)
    return Deployment(manifests, _read_unit(UNIT.read_text(encoding="utf-8")), DOCKERFILE.read_text(encoding="utf-8"))


def _pod_env(container: dict[str, Any], pod_name: str) -> dict[str, str]:
    """The environment the container gets: plain values, and the downward API's pod name."""
    env: dict[str, str] = {}
    for var in container.get("env", []):
        if "value" in var:
            env[var["name"]] = str(var["value"])
        else:
            field = var["valueFrom"]["fieldRef"]["fieldPath"]
            assert field == "metadata.name", f"env {var['name']}: only the pod's name is known here, not {field}"
            env[var["name"]] = pod_name
    return env


def _config(d: Deployment, tmp_path: Path, container: dict[str, Any], pod_name: str) -> tuple[Config, JobSettings]:
    path = tmp_path / "job.toml"
    path.write_text(d.job_toml(), encoding="utf-8")
    config = load_config(path, env=_pod_env(container, pod_name))
    return config, validate(config)


def _processor_config(d: Deployment, tmp_path: Path) -> Config:
    name = d.kind("StatefulSet")["metadata"]["name"]
    return _config(d, tmp_path, d.processor, f"{name}-0")[0]


def _mount(container: dict[str, Any], path: str) -> dict[str, Any] | None:
    """The volume mount that holds ``path`` (the deepest one)."""
    holding = [m for m in container.get("volumeMounts", []) if Path(path).is_relative_to(m["mountPath"])]
    return max(holding, key=lambda m: len(m["mountPath"]), default=None)


def _config_path(d: Deployment, container: dict[str, Any], path: str) -> None:
    """``path`` is the ConfigMap's job.toml as mounted in ``container``."""
    mount = _mount(container, path)
    assert mount is not None, f"{path} is on no volume"
    pod = d.pod if container is d.processor else d.drain_pod
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    assert volume.get("configMap", {}).get("name") == d.kind("ConfigMap")["metadata"]["name"], volume
    assert Path(path).relative_to(mount["mountPath"]) == Path("job.toml")


def _shutdown_ms(config: Config) -> int:
    return config.get_int("task.shutdown.ms", DEFAULT_SHUTDOWN_MS)


# The checks: each is what the docs promise about one setting.


def check_job_config_validates(d: Deployment, tmp_path: Path) -> None:
    config, settings = _config(d, tmp_path, d.processor, "samzamp-word-count-0")
    assert config.get_str("job.coordinator.factory") == "zk", "the manifests are for a standalone job"
    assert settings.prometheus is not None
    # The drain's pod has its own name; its config must validate as well.
    _config(d, tmp_path, d.drain_container, "samzamp-word-count-drain-29000000-x1y2z")


def check_store_volume_is_the_logged_store_base_dir(d: Deployment, tmp_path: Path) -> None:
    base = _processor_config(d, tmp_path).get_str("job.logged.store.base.dir")
    assert base is not None, "job.logged.store.base.dir is unset: the stores would be in the image's working dir"
    claims = {t["metadata"]["name"] for t in d.kind("StatefulSet")["spec"]["volumeClaimTemplates"]}
    mounts = {m["mountPath"]: m["name"] for m in d.processor["volumeMounts"]}
    assert mounts.get(base) in claims, f"job.logged.store.base.dir {base} is not a volumeClaimTemplate's mount"
    scratch = _processor_config(d, tmp_path).get_str("job.non-logged.store.base.dir") or "state"
    assert _mount(d.processor, scratch) is not None, f"job.non-logged.store.base.dir {scratch} is on no volume"


def check_processor_id_and_location_come_from_the_pod(d: Deployment, tmp_path: Path) -> None:
    raw = tomllib.loads(d.job_toml())["processor"]
    from_pod = {
        v["name"]
        for v in d.processor["env"]
        if v.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == "metadata.name"
    }
    for key in ("id", "location.id"):
        value = raw.get(key) if key == "id" else raw.get("location", {}).get("id")
        m = re.fullmatch(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}", str(value))
        assert m, f"processor.{key} = {value!r}: not one environment variable"
        assert m.group(1) in from_pod, f"processor.{key}: {m.group(1)} is not the pod's name (downward API)"
    config = _processor_config(d, tmp_path)
    assert config.get_str("processor.id") == config.get_str("processor.location.id") == "samzamp-word-count-0"


def check_grace_period_exceeds_task_shutdown(d: Deployment, tmp_path: Path) -> None:
    shutdown = _shutdown_ms(_processor_config(d, tmp_path))
    assert d.pod["terminationGracePeriodSeconds"] * 1000 > shutdown


def check_readiness_probe_is_healthz_on_the_prometheus_port(d: Deployment, tmp_path: Path) -> None:
    port = _processor_config(d, tmp_path).get_int("metrics.prometheus.port", -1)
    probe = d.processor["readinessProbe"]["httpGet"]
    assert probe["path"] == "/healthz"
    named = {p["name"]: p["containerPort"] for p in d.processor.get("ports", [])}
    assert named.get(probe["port"], probe["port"]) == port, f"probe port {probe['port']} != {port}"
    assert "livenessProbe" not in d.processor, "a liveness probe on /healthz would kill a pod that restores"


def check_headless_service_governs_the_statefulset(d: Deployment, tmp_path: Path) -> None:
    service = d.kind("Service")
    assert service["spec"].get("clusterIP") == "None", "not headless"
    assert d.kind("StatefulSet")["spec"]["serviceName"] == service["metadata"]["name"]
    labels = d.kind("StatefulSet")["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()


def check_cronjob_drains_the_same_config(d: Deployment, tmp_path: Path) -> None:
    entrypoint = _dockerfile_entrypoint(d.dockerfile)
    run = [*d.processor.get("command", entrypoint), *d.processor["args"]]
    cron = [*d.drain_container.get("command", entrypoint), *d.drain_container["args"]]
    assert run[:2] == ["samzamp", "run"], run
    assert cron[:2] == ["samzamp", "drain"], cron
    args = drain.build_parser().parse_args(cron[2:])
    assert args.config == run[2], f"the drain reads {args.config}, the processors {run[2]}"
    _config_path(d, d.processor, run[2])
    _config_path(d, d.drain_container, args.config)
    assert args.wait, "without --wait the CronJob reports success before anything drained"
    deadline = d.kind("CronJob")["spec"]["jobTemplate"]["spec"]["activeDeadlineSeconds"]
    assert args.timeout < deadline, "Kubernetes would kill the drain before it reports its own timeout"
    assert d.drain_container["image"] == d.processor["image"]
    # The drain finds the run the processors run: same job, same ZooKeeper, same app.run.id.
    name = d.kind("StatefulSet")["metadata"]["name"]
    processors = _config(d, tmp_path, d.processor, f"{name}-0")[1]
    drainer = _config(d, tmp_path, d.drain_container, f"{name}-drain")[1]
    for what in ("name", "id", "run_id"):
        assert getattr(drainer, what) == getattr(processors, what), f"the drain's {what} is not the processors'"
    assert processors.zk is not None
    assert drainer.zk is not None
    assert drainer.zk.connect == processors.zk.connect, "the drain looks for the run in another ZooKeeper"


def check_containers_run_as_non_root(d: Deployment, tmp_path: Path) -> None:
    user = _dockerfile_user(d.dockerfile)
    for pod in (d.pod, d.drain_pod):
        context = pod["securityContext"]
        assert context["runAsNonRoot"] is True
        assert context["runAsUser"] not in (0, None)
        assert str(context["runAsUser"]) == user.split(":")[0], "runAsUser is not the image's user"


def check_unit_restarts_on_failure_but_not_on_bad_config(d: Deployment, tmp_path: Path) -> None:
    service = d.unit["Service"]
    assert service["Restart"] == ["on-failure"]
    prevent = " ".join(service.get("RestartPreventExitStatus", [])).split()
    assert "2" in prevent, "a bad config (exit 2) would restart for ever"
    assert service["User"][0] not in ("root", "0")
    assert service["StateDirectory"], "the stores need a directory that outlives the process"
    command = shlex.split(service["ExecStart"][-1])
    assert Path(command[0]).name == "samzamp", command
    assert command[1:] == ["run", "/etc/samzamp/%i.toml"], command


def check_unit_stop_timeout_exceeds_task_shutdown(d: Deployment, tmp_path: Path) -> None:
    (timeout,) = d.unit["Service"]["TimeoutStopSec"]
    assert re.fullmatch(r"\d+", timeout), f"TimeoutStopSec={timeout}: write whole seconds"
    assert int(timeout) * 1000 > max(_shutdown_ms(_processor_config(d, tmp_path)), DEFAULT_SHUTDOWN_MS)


def _stages(dockerfile: str) -> list[str]:
    """The Dockerfile's stages: each from its FROM to the next."""
    parts = re.split(r"^(?=FROM\s)", dockerfile, flags=re.M)
    return [p for p in parts if p.startswith("FROM")]


def _dockerfile_user(dockerfile: str) -> str:
    users = re.findall(r"^USER\s+(\S+)", _stages(dockerfile)[-1], flags=re.M)
    assert users, "the runtime stage has no USER: it runs as root"
    return str(users[-1])


def _dockerfile_entrypoint(dockerfile: str) -> list[str]:
    entry = re.findall(r"^ENTRYPOINT\s+(.+)$", _stages(dockerfile)[-1], flags=re.M)
    assert entry, "the runtime stage has no ENTRYPOINT"
    value = yaml.safe_load(entry[-1])  # the exec form is a JSON array
    assert isinstance(value, list), f"ENTRYPOINT {entry[-1]}: use the exec form, so samzamp gets SIGTERM"
    return [str(v) for v in value]


def check_dockerfile(d: Deployment, tmp_path: Path) -> None:
    stages = _stages(d.dockerfile)
    assert len(stages) >= 2, "one stage: the compiler would ship in the image"
    build, runtime = stages[0], stages[-1]
    assert re.search(r"apt-get install[^\n]*\bgcc\b", build), "the build stage has no compiler"
    assert re.search(r"pip wheel[^\n]*--no-deps[^\n]* \.\s", build), "the build stage does not build samzamp's wheel"
    assert "gcc" not in runtime, "the runtime stage installs a compiler"
    assert "import samzamp._ring, samzamp._keyhash, samzamp._checksum" in runtime
    user = _dockerfile_user(d.dockerfile).split(":")[0]
    assert user not in ("root", "0"), f"USER {user}"
    assert _dockerfile_entrypoint(d.dockerfile) == ["samzamp"]
    volumes = re.findall(r"^VOLUME\s+(.+)$", runtime, flags=re.M)
    declared = [str(v) for spec in volumes for v in yaml.safe_load(spec)]
    base = _processor_config(d, tmp_path).get_str("job.logged.store.base.dir") or ""
    assert any(Path(base).is_relative_to(v) for v in declared), f"{base} is under no VOLUME of {declared}"


CHECKS: list[Callable[[Deployment, Path], None]] = [
    check_job_config_validates,
    check_store_volume_is_the_logged_store_base_dir,
    check_processor_id_and_location_come_from_the_pod,
    check_grace_period_exceeds_task_shutdown,
    check_readiness_probe_is_healthz_on_the_prometheus_port,
    check_headless_service_governs_the_statefulset,
    check_cronjob_drains_the_same_config,
    check_containers_run_as_non_root,
    check_unit_restarts_on_failure_but_not_on_bad_config,
    check_unit_stop_timeout_exceeds_task_shutdown,
    check_dockerfile,
]


@pytest.mark.parametrize("check", CHECKS, ids=[c.__name__.removeprefix("check_") for c in CHECKS])
def test_the_deployment_keeps_its_promise(check: Callable[[Deployment, Path], None], tmp_path: Path) -> None:
    check(load(), tmp_path)


def _toml(d: Deployment, old: str, new: str) -> None:
    text = d.job_toml()
    assert old in text, old
    d.kind("ConfigMap")["data"]["job.toml"] = text.replace(old, new)


def _docker(d: Deployment, old: str, new: str) -> None:
    assert old in d.dockerfile, old
    d.dockerfile = d.dockerfile.replace(old, new)


def _env(d: Deployment, name: str, value: str, container: str = "processor") -> None:
    for var in (d.processor if container == "processor" else d.drain_container)["env"]:
        if var["name"] == name:
            var.clear()
            var.update(name=name, value=value)


# A manifest broken in one way, and the check that must notice it.
BROKEN: dict[str, tuple[Callable[[Deployment, Path], None], Callable[[Deployment], None]]] = {
    "unknown key": (check_job_config_validates, lambda d: _toml(d, "shutdown.ms =", "shutdown.mss =")),
    "drain of another run": (
        check_cronjob_drains_the_same_config,
        lambda d: _env(d, "SAMZAMP_RUN_ID", "2026-01-01-1", container="drain"),
    ),
    "env var the pod lacks": (
        check_job_config_validates,
        lambda d: _toml(d, '"${SAMZAMP_ZK_CONNECT}"', '"${SAMZAMP_ZK}"'),
    ),
    "store elsewhere": (
        check_store_volume_is_the_logged_store_base_dir,
        lambda d: _toml(d, 'logged.store.base.dir = "/var/lib/samzamp/stores"', 'logged.store.base.dir = "/data"'),
    ),
    "store on an emptyDir": (
        check_store_volume_is_the_logged_store_base_dir,
        lambda d: _toml(
            d, 'logged.store.base.dir = "/var/lib/samzamp/stores"', 'logged.store.base.dir = "/var/lib/samzamp/scratch"'
        ),
    ),
    "fixed processor.id": (
        check_processor_id_and_location_come_from_the_pod,
        lambda d: _toml(d, 'id = "${POD_NAME}"', 'id = "p1"'),
    ),
    "location from a plain variable": (
        check_processor_id_and_location_come_from_the_pod,
        lambda d: _env(d, "POD_NAME", "samzamp-word-count-0"),
    ),
    "grace too short": (
        check_grace_period_exceeds_task_shutdown,
        lambda d: d.pod.update(terminationGracePeriodSeconds=30),
    ),
    "probe path": (
        check_readiness_probe_is_healthz_on_the_prometheus_port,
        lambda d: d.processor["readinessProbe"]["httpGet"].update(path="/metrics"),
    ),
    "probe port": (
        check_readiness_probe_is_healthz_on_the_prometheus_port,
        lambda d: _toml(d, "port = 9404", "port = 9405"),
    ),
    "service with a cluster IP": (
        check_headless_service_governs_the_statefulset,
        lambda d: d.kind("Service")["spec"].pop("clusterIP"),
    ),
    "drain of another config": (
        check_cronjob_drains_the_same_config,
        lambda d: d.drain_container.update(args=["drain", "/etc/samzamp/other.toml", "--wait"]),
    ),
    "drain without --wait": (
        check_cronjob_drains_the_same_config,
        lambda d: d.drain_container.update(args=["drain", "/etc/samzamp/job.toml", "--timeout", "600"]),
    ),
    "drain with a bad option": (
        check_cronjob_drains_the_same_config,
        lambda d: d.drain_container.update(args=["drain", "/etc/samzamp/job.toml", "--wait", "--timeout", "ten"]),
    ),
    "cronjob runs as root": (
        check_containers_run_as_non_root,
        lambda d: d.drain_pod["securityContext"].update(runAsUser=0),
    ),
    "unit restarts a bad config": (
        check_unit_restarts_on_failure_but_not_on_bad_config,
        lambda d: d.unit["Service"].update(RestartPreventExitStatus=["3"]),
    ),
    "unit as root": (
        check_unit_restarts_on_failure_but_not_on_bad_config,
        lambda d: d.unit["Service"].update(User=["root"]),
    ),
    "unit stops too soon": (
        check_unit_stop_timeout_exceeds_task_shutdown,
        lambda d: d.unit["Service"].update(TimeoutStopSec=["20"]),
    ),
    "one stage": (check_dockerfile, lambda d: setattr(d, "dockerfile", _stages(d.dockerfile)[-1])),
    "image as root": (check_dockerfile, lambda d: _docker(d, "USER 10001:10001", "USER root")),
    "shell entrypoint": (check_dockerfile, lambda d: _docker(d, 'ENTRYPOINT ["samzamp"]', "ENTRYPOINT samzamp")),
    "no extension check": (check_dockerfile, lambda d: _docker(d, "import samzamp._ring, ", "import ")),
}


@pytest.mark.parametrize("broken", list(BROKEN))
def test_each_check_fails_on_a_broken_copy(broken: str, tmp_path: Path) -> None:
    check, breaks = BROKEN[broken]
    d = copy.deepcopy(load())
    breaks(d)
    # A failed check; a config error from samzamp's validation; argparse's exit on a bad drain option.
    with pytest.raises((AssertionError, ConfigError, SystemExit)):
        check(d, tmp_path)


def _verify(unit_text: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """``systemd-analyze verify`` on an instance of the template, its ExecStart pointed at an executable
    that exists here (verify checks that it does)."""
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed here")
    stub = tmp_path / "samzamp"
    stub.write_text("#!/bin/sh\n")
    stub.chmod(0o755)
    unit = tmp_path / "samzamp@word-count.service"
    unit.write_text(unit_text.replace("/opt/samzamp/bin/samzamp", str(stub)))
    r = subprocess.run([analyze, "verify", str(unit)], capture_output=True, text=True, timeout=60, check=False)
    if r.returncode != 0 and "bus" in r.stderr.lower():
        pytest.skip(f"systemd-analyze verify cannot run here: {r.stderr.strip()}")
    return r


def test_systemd_analyze_verifies_the_unit(tmp_path: Path) -> None:
    r = _verify(UNIT.read_text(encoding="utf-8"), tmp_path)
    # verify warns (an unknown key, a bad value) without failing: a clean unit prints nothing.
    assert (r.returncode, r.stderr) == (0, ""), r.stderr


def test_systemd_analyze_finds_a_broken_unit(tmp_path: Path) -> None:
    text = UNIT.read_text(encoding="utf-8").replace("Restart=on-failure", "Restart=on-failur")
    r = _verify(text, tmp_path)
    assert "on-failur" in r.stderr, r.stderr
