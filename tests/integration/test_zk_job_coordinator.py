"""ZkJobCoordinator's protocol against the real ZooKeeper, with processors in this process whose
listeners record what they were told when: a task's new owner starts it only after its old owner
stopped it, whatever that takes."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from samzamp.config.standalone import ZkSettings
from samzamp.coordinator.zk import job_models
from samzamp.coordinator.zk.client import connect
from samzamp.coordinator.zk.job_coordinator import ZkJobCoordinator
from samzamp.coordinator.zk.keys import ZkKeys, ensure_root
from samzamp.metrics.registry import MetricsRegistry
from samzamp.model.job_model import ContainerModel, JobModel, TaskModel

TASKS = {f"Partition {p}": TaskModel(f"Partition {p}", ()) for p in range(6)}
RELEASE_S = 1.0  # how long a processor takes to stop the tasks it gives up


class Member:
    """A processor: runs what it is given, takes RELEASE_S to stop tasks, logs (time, event, tasks)."""

    def __init__(self, connect: str, job: str, pid: str, log: list[tuple[float, str, str, frozenset[str]]]) -> None:
        self.pid = pid
        self.running: frozenset[str] = frozenset()
        self.errors: list[BaseException] = []
        self.versions: list[int] = []  # the versions applied, in order
        self.applied = asyncio.Event()
        self._log = log
        settings = ZkSettings(connect=connect, session_timeout_ms=3000, debounce_ms=200, consensus_timeout_ms=20000)
        self.coordinator = ZkJobCoordinator(settings, ZkKeys(job, "1"), pid, f"loc-{pid}", self, MetricsRegistry())

    def calculate(self) -> JobModel:
        """The job's tasks; the leader groups them onto its processors itself."""
        return JobModel(1, TASKS)

    async def on_job_model_expired(self, model: JobModel) -> list[str] | None:
        leaving = self.running - set(model.tasks)
        if leaving:
            await asyncio.sleep(RELEASE_S)
            self.running -= leaving
            self._log.append((time.monotonic(), "stopped", self.pid, frozenset(leaving)))
        return sorted(leaving)

    async def on_new_job_model(self, model: JobModel) -> list[str] | None:
        arriving = set(model.tasks) - self.running
        self._log.append((time.monotonic(), "started", self.pid, frozenset(arriving)))
        self.running = frozenset(model.tasks)
        self.versions.append(model.generation)  # the version the coordinator published
        self.applied.set()
        return sorted(arriving)

    def on_coordinator_failure(self, error: BaseException) -> None:
        self.errors.append(error)

    def fence(self, lease_valid: Callable[[], bool]) -> None:
        pass

    def on_lease(self, until: float) -> None:
        pass


async def _until(cond, within_s: float, what: str) -> None:
    """Poll ``cond`` (set by the coordinators' listeners on this loop) until it holds."""
    deadline = time.monotonic() + within_s
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


def test_a_task_starts_at_its_new_owner_only_after_its_old_owner_stopped_it(zookeeper, unique) -> None:
    async def main() -> list[tuple[float, str, str, frozenset[str]]]:
        log: list[tuple[float, str, str, frozenset[str]]] = []
        a = Member(zookeeper.connect_string, f"proto-{unique}", "a", log)
        b = Member(zookeeper.connect_string, f"proto-{unique}", "b", log)
        await a.coordinator.start(a)
        await _until(lambda: a.running == set(TASKS), 30, "a to run every task")
        await b.coordinator.start(b)
        await _until(lambda: len(a.running) == 3 and len(b.running) == 3, 30, "a and b to share the tasks")
        await b.coordinator.stop()
        await _until(lambda: a.running == set(TASKS), 30, "a to run every task again")
        await a.coordinator.stop()
        assert not a.errors
        assert not b.errors
        return log

    log = asyncio.run(main())
    moves = [(t, pid, tasks) for t, what, pid, tasks in log if what == "started" and tasks]
    stops = [(t, pid, tasks) for t, what, pid, tasks in log if what == "stopped"]
    # b's start of the tasks a gave up came after a finished stopping them (RELEASE_S later).
    handed = [(t, tasks) for t, pid, tasks in moves if pid == "b"]
    assert len(handed) == 1
    assert len(handed[0][1]) == 3
    stopped_by_a = [t for t, pid, tasks in stops if pid == "a" and tasks == handed[0][1]]
    assert len(stopped_by_a) == 1
    assert stopped_by_a[0] <= handed[0][0]


def test_the_last_ten_job_models_and_barriers_are_kept(zookeeper, unique) -> None:
    client = connect(zookeeper.connect_string, 10000, 10000)
    try:
        keys = ZkKeys(f"keep-{unique}", "1")
        ensure_root(client, keys)
        model = JobModel(0, TASKS, {"a": ContainerModel("a", "A", tuple(TASKS))})
        for _ in range(13):
            version = job_models.publish(client, keys, model)
            job_models.cleanup(client, keys, version)
        assert version == 13
        assert sorted(int(n) for n in client.get_children(keys.job_models_dir)) == list(range(4, 14))
        assert len(client.get_children(keys.barriers_dir)) == job_models.KEEP
        assert job_models.read_job_model(client, keys, 13).containers == model.containers
        assert job_models.read_job_model(client, keys, 13).generation == 13
    finally:
        client.stop()
        client.close()


def test_a_processor_restarted_under_the_same_id_waits_for_a_version_of_its_own(zookeeper, unique) -> None:
    """The version current when it registers was computed for its predecessor (same processor.id):
    running it could overlap with a newer version that the leader computes without it."""

    async def main() -> tuple[int, Member]:
        log: list[tuple[float, str, str, frozenset[str]]] = []
        job = f"again-{unique}"
        leader = Member(zookeeper.connect_string, job, "leader", log)
        await leader.coordinator.start(leader)
        first = Member(zookeeper.connect_string, job, "x", log)
        await first.coordinator.start(first)
        await _until(lambda: len(first.running) == 3, 30, "x to run its share")
        before = first.versions[-1]
        await first.coordinator.stop()  # its node goes at once; a new one with its id comes at once
        again = Member(zookeeper.connect_string, job, "x", log)
        await again.coordinator.start(again)
        await _until(lambda: len(again.running) == 3, 30, "the new x to run its share")
        await again.coordinator.stop()
        await leader.coordinator.stop()
        assert not again.errors
        assert not leader.errors
        return before, again

    before, again = asyncio.run(main())
    assert again.versions
    assert min(again.versions) > before, again.versions
