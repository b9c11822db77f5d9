"""How a tool tells whether a job's deployment runs (``samzamp.drain.deployment``), from its run
record, its standalone members, the record's pid when its host is this one, and drain notifications."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import msgspec
import pytest

from samzamp.coordinator.run_id import RUN_NAMESPACE, RunProcessor, RunRecord, RunState
from samzamp.drain.deployment import DeploymentState, read_deployment
from samzamp.drain.notification import DRAIN_NAMESPACE, write_drain_notification


class _Store:
    def __init__(self) -> None:
        self.values: dict[str, bytes] = {}

    def get(self, key: str) -> bytes | None:
        return self.values.get(key)

    def put(self, key: str, value: bytes) -> None:
        self.values[key] = value

    def put_all(self, values: dict[str, bytes]) -> None:
        self.values.update(values)

    def delete(self, key: str) -> None:
        self.values.pop(key, None)

    def all(self) -> dict[str, bytes]:
        return dict(self.values)


class _View:
    where = "somewhere"

    def __init__(self, record: RunRecord | None, members: int | None = None) -> None:
        self.stores: dict[str, _Store] = {RUN_NAMESPACE: _Store(), DRAIN_NAMESPACE: _Store()}
        self._members = members
        if record is not None:
            self.stores[RUN_NAMESPACE].put("current", msgspec.json.encode(record))

    def namespace(self, namespace: str) -> _Store:
        return self.stores[namespace]

    def exists(self) -> bool:
        return bool(self.stores[RUN_NAMESPACE].values)

    def prepare(self) -> None:
        pass

    def members(self) -> int | None:
        return self._members

    def processors(self) -> list[RunProcessor] | None:
        return None if self._members is None else [RunProcessor("p", "h", 1)] * self._members

    def close(self) -> None:
        pass


def _record(state: RunState, host: str | None = None, pid: int | None = None) -> RunRecord:
    return RunRecord("r1", state, 1, 2, host or socket.gethostname(), os.getpid() if pid is None else pid)


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


@pytest.mark.parametrize(
    ("record", "state", "checked"),
    [
        (None, DeploymentState.NEVER_RAN, True),
        (_record(RunState.STOPPED), DeploymentState.STOPPED, True),
        (_record(RunState.DRAINED), DeploymentState.DRAINED, True),
        (_record(RunState.FAILED), DeploymentState.FAILED, True),
        (_record(RunState.RUNNING), DeploymentState.RUNNING, True),  # this process: alive, on this host
        (_record(RunState.RUNNING, host="another-host"), DeploymentState.RUNNING, False),
    ],
)
def test_a_job_of_one_container_is_known_by_its_record_and_its_pid_on_this_host(
    record: RunRecord | None, state: DeploymentState, checked: bool
) -> None:
    d = read_deployment(_View(record))
    assert (d.state, d.checked) == (state, checked)
    assert d.runs is (state is DeploymentState.RUNNING)


def test_a_container_killed_on_this_host_leaves_a_running_record_that_reads_as_died() -> None:
    d = read_deployment(_View(_record(RunState.RUNNING, pid=_dead_pid())))
    assert d.state is DeploymentState.DIED
    assert not d.runs
    assert "gone from this host" in d.evidence


def test_a_standalone_job_runs_while_its_run_has_members() -> None:
    assert read_deployment(_View(_record(RunState.RUNNING, host="x"), members=2)).state is DeploymentState.RUNNING
    gone = read_deployment(_View(_record(RunState.RUNNING, host="x"), members=0))
    assert gone.state is DeploymentState.DIED
    assert "no processor is a member" in gone.evidence


def test_a_drain_requested_for_the_running_run_reads_as_draining() -> None:
    view = _View(_record(RunState.RUNNING))
    write_drain_notification(view.namespace(DRAIN_NAMESPACE), "another-run")
    assert read_deployment(view).state is DeploymentState.RUNNING
    n = write_drain_notification(view.namespace(DRAIN_NAMESPACE), "r1")
    d = read_deployment(view)
    assert d.state is DeploymentState.DRAINING
    assert d.runs
    assert d.drains == [n.uuid]
