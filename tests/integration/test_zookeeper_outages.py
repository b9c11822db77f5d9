"""ZooKeeper away under a running standalone job, against the real ZooKeeper and broker.

A job of two processors (``samzamp-container`` processes p1 and p2, session timeout 6 s) counts the
words of an input that keeps arriving in a changelogged store, and records who processed which
message when (``OwnershipCountTask``), while its ZooKeeper is

- stopped (SIGTERM by its pid) for 1 s and started again on its port and data: nothing moves and
  processing goes on;
- stopped for 15 s and started again: each processor stops processing when its lease ends (the
  tasks' own records show nothing processed past it), waits, and goes on with the same tasks once
  ZooKeeper answers, since a restarted server keeps its sessions;
- frozen (SIGSTOP) past the session timeout, then continued: likewise fenced; a processor whose
  session expired meanwhile abandons its tasks and joins again.

Each time every message is processed in the end, each task by one processor at a time, and the
counts in the stores are exact. The module has a ZooKeeper of its own, which every test leaves
serving: the session's is shared with other tests.
"""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka_util import counts_store, create_topic, wait_until
from standalone_util import (
    InputFlow,
    Processor,
    Record,
    ZkView,
    changelog_counts,
    check_ownership,
    input_counts,
    missing_offsets,
    ownership_records,
    standalone_config,
)

from samzamp.coordinator.zk.job_coordinator import LEASE_SHARE
from samzamp.coordinator.zk.server import EmbeddedZooKeeper
from samzamp.systems.kafka import EmbeddedBroker

PARTITIONS = 4
SESSION_MS = 6000
LEASE_NS = int(LEASE_SHARE * SESSION_MS * 1_000_000)
# A message under way when the lease ends still finishes: at most a slice (5 ms), on a busy machine.
SLACK_NS = 250_000_000
RECONNECTED = "connected to ZooKeeper again"
EXPIRED = "its ZooKeeper session expired"
PAUSED = "processing paused"


class OutageServer:
    """The module's own ZooKeeper: stopped by its pid and started again on the same port and data
    directory (so its sessions survive), or frozen and continued. Each step returns its time on
    CLOCK_MONOTONIC, the tasks' clock: when ZooKeeper was surely gone, or could first answer again."""

    def __init__(self, work: Path) -> None:
        self._work = work
        self.server = EmbeddedZooKeeper(die_with_parent=True, work_dir=work).start()
        self.port = self.server.port
        self.connect_string = self.server.connect_string
        self._frozen = False

    def stop(self) -> tuple[int, int]:
        """SIGTERM, and wait for the process to end: when it was told to stop, and when it was gone."""
        stopping = time.monotonic_ns()
        self.server.stop()
        return stopping, time.monotonic_ns()

    def start(self) -> int:
        starting = time.monotonic_ns()
        self.server = EmbeddedZooKeeper(die_with_parent=True, work_dir=self._work, port=self.port).start()
        return starting

    def freeze(self) -> int:
        assert self.server.pid is not None
        os.kill(self.server.pid, signal.SIGSTOP)
        self._frozen = True
        return time.monotonic_ns()

    def thaw(self) -> int:
        assert self.server.pid is not None
        continued = time.monotonic_ns()
        os.kill(self.server.pid, signal.SIGCONT)
        self._frozen = False
        return continued

    def ensure_serving(self) -> None:
        if self._frozen:
            self.thaw()
        if self.server.process is None:
            self.start()

    def close(self) -> None:
        if self._frozen:
            self.thaw()
        self.server.stop()


@pytest.fixture(scope="module")
def module_zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OutageServer]:
    z = OutageServer(tmp_path_factory.mktemp("zookeeper"))
    try:
        yield z
    finally:
        z.close()


@pytest.fixture
def zk(module_zookeeper: OutageServer) -> Iterator[OutageServer]:
    """The module's ZooKeeper, serving again after the test, whatever the test left it in."""
    yield module_zookeeper
    module_zookeeper.ensure_serving()


class CountingJob:
    """p1 at location A and p2 at B, each with its own store directory (two machines), counting the
    words of an input that keeps arriving; started and placed (every task in one of them)."""

    def __init__(self, tmp_path: Path, unique: str, bootstrap: str, zk_connect: str) -> None:
        self.bootstrap = bootstrap
        self.topic = f"in-{unique}"
        self.changelog = f"counts-log-{unique}"
        create_topic(bootstrap, self.topic, PARTITIONS)
        name = f"zko-{unique}"
        self.cfg, self.rec = standalone_config(
            tmp_path,
            name,
            self.topic,
            zk_connect,
            session_ms=SESSION_MS,
            task_class="recording_tasks:OwnershipCountTask",
            extra=counts_store(f"kafka.{self.changelog}"),
            top="test.busy.us = 200",
        )
        self.view = ZkView(zk_connect, name)
        self.flow = InputFlow(bootstrap, self.topic, PARTITIONS)
        self.procs = [
            Processor(self.cfg, bootstrap, pid, loc, f"job.logged.store.base.dir={tmp_path / f'state-{loc}'}")
            for pid, loc in (("p1", "A"), ("p2", "B"))
        ]
        self.version, self.owners = self.view.wait_stable(self.procs)
        self.version_at_end = 0
        self.applied_at_end: dict[str, list[int]] = {}
        assert sorted(len(ts) for ts in self.owners.values()) == [2, 2], self.owners

    def close(self) -> None:
        self.flow.stop()
        self.view.close()

    def records(self) -> list[Record]:
        return ownership_records(self.rec)

    def wait_processing(self, since_ns: int) -> None:
        """Until every task processed a message that it started after ``since_ns``."""

        def processed() -> bool:
            self.check_alive()
            return {r.partition for r in self.records() if r.start_ns > since_ns} == set(range(PARTITIONS))

        wait_until(processed, 60, "every task to process")

    def check_alive(self) -> None:
        for p in self.procs:
            assert p.alive(), f"{p.pid} exited ({p.proc.returncode}):\n{p.log_text()[-3000:]}"

    def tenures(self, before_ns: int) -> dict[str, str]:
        """Task object (instance) -> its processor, of every tenure that processed before ``before_ns``."""
        return {r.instance: r.processor for r in self.records() if r.start_ns < before_ns}

    def finish(self) -> tuple[list[Record], int]:
        """Stop the input, wait until every message was processed, stop both processors (each must
        stop cleanly); the records, and how many messages were written."""
        written = self.flow.stop()

        def all_processed() -> bool:
            self.check_alive()
            return not missing_offsets(self.records(), written, PARTITIONS)

        wait_until(all_processed, 120, "every message")
        # Read before the stops: the first processor to leave makes the leader publish a model for
        # the one left, which says nothing about the outage.
        latest = self.view.latest()
        assert latest is not None
        self.version_at_end = latest[0]
        self.applied_at_end = {str(p.pid): p.applied() for p in self.procs}
        for p in self.procs:
            assert p.stop() == 0, p.log_text()[-3000:]
        return self.records(), written

    def check_same_model(self) -> None:
        """No task moved: the job model at the end (before the stops) is still the one of the start,
        the only one each applied."""
        logs = "\n".join(f"--- {p.pid}:\n{p.log_text()[-4000:]}" for p in self.procs)
        assert self.version_at_end == self.version, (
            f"job model version {self.version_at_end} was published after {self.version}:\n{logs}"
        )
        assert self.applied_at_end == {str(p.pid): [self.version] for p in self.procs}, self.applied_at_end

    def check_counts(self, written: int) -> None:
        """The stores' committed counts are exactly the input's."""
        latest = self.view.latest()
        assert latest is not None
        assert changelog_counts(self.bootstrap, self.changelog, latest[1]) == input_counts(written, PARTITIONS)


def check_fenced(records: list[Record], gone_ns: int, back_ns: int) -> None:
    """No task processed a message past its processor's lease while ZooKeeper was away: each
    processor's last heartbeat went out before ``gone_ns``, so its lease ended LEASE_SHARE of the
    session after that at the latest (its session, SESSION_MS after). Nothing can renew a lease
    before ``back_ns``."""
    lease_end = gone_ns + LEASE_NS + SLACK_NS
    late = [r for r in records if r.end_ns > lease_end and r.start_ns < back_ns]
    assert not late, (
        f"{len(late)} messages processed past the lease ({(lease_end - gone_ns) / 1e9:.2f} s after ZooKeeper "
        f"went away) before it was back ({(back_ns - gone_ns) / 1e9:.2f} s after): {late[:3]}"
    )


def processed_once(records: list[Record]) -> None:
    repeated = [k for k, n in Counter((r.partition, r.offset) for r in records).items() if n > 1]
    assert not repeated, f"processed twice: {repeated[:10]}"


def test_zookeeper_stopped_for_1s_moves_no_task_and_processing_goes_on(
    broker: EmbeddedBroker, zk: OutageServer, unique: str, tmp_path: Path
) -> None:
    job = CountingJob(tmp_path, unique, broker.bootstrap_servers, zk.connect_string)
    try:
        job.wait_processing(0)
        stopping, gone = zk.stop()
        time.sleep(1.0)  # the outage
        back = zk.start()
        tenures = job.tenures(gone)
        # Each finds its session alive again (a reconnection to a server that is still starting can
        # take a few seconds: within the session timeout, which the model check below holds it to);
        # then processing goes on.
        wait_until(
            lambda: all(RECONNECTED in p.log_text() for p in job.procs),
            SESSION_MS / 1000 + 10,
            "each processor to reach ZooKeeper again",
        )
        job.wait_processing(time.monotonic_ns())
        records, written = job.finish()
        job.check_same_model()
        job.check_counts(written)
    finally:
        job.close()
    check_fenced(records, gone, back)
    for p in job.procs:
        assert RECONNECTED in p.log_text(), p.log_text()[-3000:]
        during = [r for r in records if r.processor == p.pid and stopping < r.start_ns < back]
        assert during, f"{p.pid} processed nothing while ZooKeeper was stopped"
    assert {r.instance: r.processor for r in records} == tenures, "a task started again"
    processed_once(records)
    check_ownership(records)


def test_zookeeper_stopped_for_15s_fences_the_processors_which_then_go_on_with_their_tasks(
    broker: EmbeddedBroker, zk: OutageServer, unique: str, tmp_path: Path
) -> None:
    """The restarted server keeps the sessions (it times each anew from its start): each processor
    finds its session alive, so it held its tasks rightly and goes on with them."""
    job = CountingJob(tmp_path, unique, broker.bootstrap_servers, zk.connect_string)
    try:
        job.wait_processing(0)
        _, gone = zk.stop()
        time.sleep(15.0)  # the outage
        job.check_alive()  # each waits for ZooKeeper, processing nothing
        for p in job.procs:
            assert PAUSED in p.log_text(), p.log_text()[-3000:]
        back = zk.start()
        tenures = job.tenures(gone)
        job.wait_processing(back)
        records, written = job.finish()
        job.check_same_model()
        job.check_counts(written)
    finally:
        job.close()
    check_fenced(records, gone, back)
    for p in job.procs:
        assert RECONNECTED in p.log_text(), p.log_text()[-3000:]
        assert EXPIRED not in p.log_text(), p.log_text()[-3000:]
    assert {r.instance: r.processor for r in records} == tenures, "a task started again"
    processed_once(records)
    check_ownership(records)


def test_zookeeper_frozen_past_the_session_timeout_fences_the_processors_and_each_task_runs_once_after(
    broker: EmbeddedBroker, zk: OutageServer, unique: str, tmp_path: Path
) -> None:
    """SIGSTOP of the server for longer than the session timeout, then SIGCONT. On waking it expires
    the sessions it has not heard from, unless a processor's reconnection reaches it first: either
    way each processor stayed fenced, and learns which from ZooKeeper. Whose session expired
    abandons its tasks without a commit and joins again; they run on from their checkpoints."""
    job = CountingJob(tmp_path, unique, broker.bootstrap_servers, zk.connect_string)
    try:
        job.wait_processing(0)
        logged = {p.pid: len(p.log_text()) for p in job.procs}
        frozen = zk.freeze()
        time.sleep(SESSION_MS / 1000 + 3)  # the outage: past the session timeout and a tick
        job.check_alive()
        for p in job.procs:
            assert PAUSED in p.log_text(), p.log_text()[-3000:]
        tenures = job.tenures(frozen)
        thawed = zk.thaw()

        def told() -> bool:
            return all(
                RECONNECTED in p.log_text()[logged[p.pid] :] or EXPIRED in p.log_text()[logged[p.pid] :]
                for p in job.procs
            )

        wait_until(told, 60, "each processor to learn its session's fate")
        expired = {str(p.pid) for p in job.procs if EXPIRED in p.log_text()}
        if expired:  # they joined again: a new version places every task once more
            _, owners = job.view.wait_stable(job.procs, after=job.version)
            assert sorted(t for ts in owners.values() for t in ts) == [f"Partition {p}" for p in range(PARTITIONS)]
        job.wait_processing(thawed)
        records, written = job.finish()
        if not expired:
            job.check_same_model()
        job.check_counts(written)
    finally:
        job.close()
    check_fenced(records, frozen, thawed)
    check_ownership(records)
    if expired:
        abandoned = [
            r for r in records if tenures.get(r.instance) in expired and r.end_ns > frozen + LEASE_NS + SLACK_NS
        ]
        assert not abandoned, f"a processor whose session expired processed its old tasks again: {abandoned[:3]}"
    else:
        assert {r.instance: r.processor for r in records} == tenures, "a task started again"
        processed_once(records)
