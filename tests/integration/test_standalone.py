"""Standalone mode end to end: one job over several processors, coordinated by the real ZooKeeper,
reading the real broker. Each task writes who processed which offset when (``OwnershipTask``)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import msgspec
import psutil
import pytest
from kafka_util import ROOT, Container, child_env, counts_store, create_topic, wait_until
from standalone_util import (
    InputFlow,
    Processor,
    ZkView,
    changelog_counts,
    check_ownership,
    input_counts,
    missing_offsets,
    moved,
    ownership_records,
    standalone_config,
)

from samzamp.coordinator.zk.keys import ZkKeys, ensure_root
from samzamp.coordinator.zk.values import write_value

PARTITIONS = 8
ALL_TASKS = {f"Partition {p}" for p in range(PARTITIONS)}


def _owned_once(owners: dict[str, set[str]]) -> None:
    """Every task is owned by exactly one processor."""
    listed = [t for ts in owners.values() for t in ts]
    assert sorted(listed) == sorted(ALL_TASKS), owners


def _every_input_processed(flow: InputFlow, rec: Path, last: Processor) -> int:
    """Stop the input flow and wait until every offset it wrote was processed (by ``last`` or before
    it); how many messages it wrote, for the checks after."""
    written = flow.stop()
    wait_until(lambda: not missing_offsets(ownership_records(rec), written, PARTITIONS), 120, "every input", last)
    return written


def test_scale_out_and_in_moves_only_what_it_must(broker, zookeeper, unique, tmp_path: Path) -> None:
    bs = broker.bootstrap_servers
    topic = f"in-{unique}"
    create_topic(bs, topic, PARTITIONS)
    job = f"sa-{unique}"
    cfg, rec = standalone_config(tmp_path, job, topic, zookeeper.connect_string, top="test.busy.us = 200")
    view = ZkView(zookeeper.connect_string, job)
    flow = InputFlow(bs, topic, PARTITIONS)
    try:
        p1 = Processor(cfg, bs, "p1", "A")
        _, owners = view.wait_stable([p1])
        assert owners == {"p1": ALL_TASKS}
        steps = []
        p2 = Processor(cfg, bs, "p2", "B")
        _, after = view.wait_stable([p1, p2])
        steps.append(("p2 joins", moved(owners, after), 4))
        owners = after
        _owned_once(owners)
        p3 = Processor(cfg, bs, "p3", "C")
        _, after = view.wait_stable([p1, p2, p3])
        steps.append(("p3 joins", moved(owners, after), 2))  # 3 + 3 + 2: one from each of p1 and p2
        assert sorted(len(ts) for ts in after.values()) == [2, 3, 3]
        owners = after
        _owned_once(owners)
        leaving = len(owners["p1"])
        assert p1.stop() == 0, p1.log_text()[-3000:]
        _, after = view.wait_stable([p2, p3])
        steps.append(("p1 leaves", moved(owners, after), leaving))  # only p1's tasks move
        assert sorted(len(ts) for ts in after.values()) == [4, 4]
        owners = after
        _owned_once(owners)
        leaving = len(owners["p2"])
        assert p2.stop() == 0, p2.log_text()[-3000:]
        _, after = view.wait_stable([p3])
        steps.append(("p2 leaves", moved(owners, after), leaving))
        assert after == {"p3": ALL_TASKS}
        assert [(what, n) for what, n, _ in steps] == [(what, n) for what, _, n in steps]
        written = _every_input_processed(flow, rec, p3)
        assert p3.stop() == 0, p3.log_text()[-3000:]
    finally:
        flow.stop()
        view.close()
    records = ownership_records(rec)
    assert not missing_offsets(records, written, PARTITIONS)
    check_ownership(records)
    assert {r.processor for r in records} == {"p1", "p2", "p3"}


def test_failover_after_sigkill_of_the_leader_then_a_follower(broker, zookeeper, unique, tmp_path: Path) -> None:
    bs = broker.bootstrap_servers
    topic = f"in-{unique}"
    create_topic(bs, topic, PARTITIONS)
    job = f"fo-{unique}"
    session_ms, debounce_ms, consensus_ms = 2000, 300, 10000
    cfg, rec = standalone_config(
        tmp_path,
        job,
        topic,
        zookeeper.connect_string,
        session_ms=session_ms,
        debounce_ms=debounce_ms,
        consensus_ms=consensus_ms,
    )
    view = ZkView(zookeeper.connect_string, job)
    flow = InputFlow(bs, topic, PARTITIONS)
    # What a move may take: the session to expire, the debounce, and the consensus time the barrier
    # is given (it completes in milliseconds; the survivors then start their new tasks).
    bound_s = (session_ms + debounce_ms + consensus_ms) / 1000
    try:
        p1 = Processor(cfg, bs, "p1", "A")
        view.wait_stable([p1])  # p1 leads: it registered first
        p2 = Processor(cfg, bs, "p2", "B")
        p3 = Processor(cfg, bs, "p3", "C")
        _, owners = view.wait_stable([p1, p2, p3])
        assert "leads the job now" in p1.log_text()
        killed = time.monotonic()
        p1.kill()
        _, owners = view.wait_stable([p2, p3], timeout=bound_s)
        assert time.monotonic() - killed < bound_s
        _owned_once(owners)
        leader, follower = (p2, p3) if "leads the job now" in p2.log_text() else (p3, p2)
        assert "leads the job now" in leader.log_text()
        assert "leads the job now" not in follower.log_text()
        killed = time.monotonic()
        follower.kill()
        _, owners = view.wait_stable([leader], timeout=bound_s)
        assert time.monotonic() - killed < bound_s
        assert owners == {leader.pid: ALL_TASKS}
        written = _every_input_processed(flow, rec, leader)
        assert leader.stop() == 0, leader.log_text()[-3000:]
    finally:
        flow.stop()
        view.close()
    records = ownership_records(rec)
    assert not missing_offsets(records, written, PARTITIONS)
    check_ownership(records)


def test_unreachable_zookeeper_fails_within_the_connection_timeout(broker, unique, tmp_path: Path) -> None:
    bs = broker.bootstrap_servers
    topic = f"in-{unique}"
    create_topic(bs, topic, PARTITIONS)
    cfg, rec = standalone_config(tmp_path, f"un-{unique}", topic, "127.0.0.1:1")
    started = time.monotonic()
    c = Container(cfg, bs, "job.coordinator.zk.connection.timeout.ms=2000", log=tmp_path / "c.log")
    assert c.proc.wait(timeout=60) == 1
    # Start-up (imports, the broker's topics) comes on top of the 2 s the connection may take.
    assert time.monotonic() - started < 2 + 15
    assert "job.coordinator.zk.connect: no ZooKeeper answered at 127.0.0.1:1 within 2000 ms" in c.log_text()
    assert not list(rec.glob("*.log"))


def test_a_second_processor_with_the_same_id_exits(broker, zookeeper, unique, tmp_path: Path) -> None:
    bs = broker.bootstrap_servers
    topic = f"in-{unique}"
    create_topic(bs, topic, PARTITIONS)
    job = f"dup-{unique}"
    cfg, _ = standalone_config(tmp_path, job, topic, zookeeper.connect_string, session_ms=1000)
    view = ZkView(zookeeper.connect_string, job)
    try:
        first = Processor(cfg, bs, "same", "A")
        view.wait_stable([first])
        second = Processor(cfg, bs, "same", "B", run=1)
        assert second.proc.wait(timeout=60) == 1
        assert "processor.id 'same' is taken by a live processor of this job" in second.log_text()
        assert first.alive()
        assert first.stop() == 0
    finally:
        view.close()


def test_a_job_model_of_another_version_is_refused(broker, zookeeper, unique, tmp_path: Path) -> None:
    bs = broker.bootstrap_servers
    topic = f"in-{unique}"
    create_topic(bs, topic, PARTITIONS)
    job = f"old-{unique}"
    cfg, rec = standalone_config(tmp_path, job, topic, zookeeper.connect_string)
    view = ZkView(zookeeper.connect_string, job)
    try:
        keys = ZkKeys(job, "1")
        ensure_root(view.client, keys)
        write_value(view.client, keys.job_model(1), msgspec.json.encode({"format": "samzamp-job-model-0", "x": 1}))
        view.client.create(keys.job_model_version, b"1", makepath=True)
        c = Container(cfg, bs, log=tmp_path / "c.log")
        assert c.proc.wait(timeout=60) == 1, c.log_text()[-3000:]
    finally:
        view.close()
    text = c.log_text()
    assert (
        "holds coordination protocol version 'samzamp-job-model-0', this samzamp speaks 'samzamp-job-model-1'" in text
    )
    assert not any(f.read_text() for f in rec.glob("*.log"))


@pytest.mark.parametrize("pool", [1, 2])
def test_a_processor_paused_past_its_session_abandons_its_tasks_and_rejoins(
    broker, zookeeper, unique, tmp_path: Path, pool: int
) -> None:
    """SIGSTOP of the processor and its workers (a frozen machine) past its session; then SIGCONT."""
    bs = broker.bootstrap_servers
    topic = f"in-{unique}"
    create_topic(bs, topic, PARTITIONS)
    job = f"exp-{unique}"
    cfg, rec = standalone_config(
        tmp_path, job, topic, zookeeper.connect_string, session_ms=2000, top="test.busy.us = 200"
    )
    view = ZkView(zookeeper.connect_string, job)
    flow = InputFlow(bs, topic, PARTITIONS)
    try:
        p1 = Processor(cfg, bs, "p1", "A")
        view.wait_stable([p1])
        p2 = Processor(cfg, bs, "p2", "B", f"job.container.thread.pool.size={pool}")
        _, owners = view.wait_stable([p1, p2])
        theirs = {int(t.split()[1]) for t in owners["p2"]}
        wait_until(lambda: any(r.processor == "p2" for r in ownership_records(rec)), 60, "p2 to process", p2)
        workers = [c.pid for c in psutil.Process(p2.proc.pid).children()]
        assert len(workers) == (0 if pool == 1 else pool)
        frozen_pids = [*workers, p2.proc.pid]
        stopped = time.monotonic_ns()
        for pid in workers:
            os.kill(pid, signal.SIGSTOP)
        if workers:  # input that arrives now is handed to the frozen workers: work queued in them
            arrived = flow.count + 10 * PARTITIONS
            wait_until(lambda: flow.count >= arrived, 30, "more input")
        os.kill(p2.proc.pid, signal.SIGSTOP)
        all_frozen = time.monotonic_ns()
        view.wait_stable([p1], timeout=60)  # its session expired: p1 took its tasks over

        def p1_runs_theirs() -> bool:
            return any(
                r.processor == "p1" and r.partition in theirs and r.start_ns > stopped for r in ownership_records(rec)
            )

        wait_until(p1_runs_theirs, 60, "p1 to process p2's old tasks", p1)
        continued = time.monotonic_ns()
        for pid in frozen_pids:
            os.kill(pid, signal.SIGCONT)
        view.wait_stable([p1, p2], timeout=60)  # it rejoined as a new member
        assert "its ZooKeeper session expired" in p2.log_text()
        written = _every_input_processed(flow, rec, p1)
        assert p1.stop() == 0, p1.log_text()[-3000:]
        assert p2.stop() == 0, p2.log_text()[-3000:]
    finally:
        flow.stop()
        view.close()
    records = ownership_records(rec)
    before_pause = {r.instance for r in records if r.processor == "p2" and r.start_ns < stopped}
    assert before_pause
    late = [r for r in records if r.instance in before_pause and r.start_ns > continued]
    assert not late, f"p2 processed {len(late)} messages of its old tasks after it was continued: {late[:3]}"
    assert not missing_offsets(records, written, PARTITIONS)
    # The message a process of p2 was in the middle of when it was frozen ends when it is continued
    # (a frozen process cannot be interrupted); each runs one message at a time, so at most one such
    # message per process spans the pause. Nothing else of p2's overlaps another processor's work.
    frozen = [r for r in records if r.processor == "p2" and r.start_ns < all_frozen and r.end_ns > continued]
    assert len(frozen) <= max(1, pool), frozen
    check_ownership([r for r in records if r not in frozen])


def test_a_processor_whose_session_expired_opens_the_stores_of_the_tasks_it_gets_back(
    broker, zookeeper, unique, tmp_path: Path
) -> None:
    """The job's only processor, frozen past its session: it joins again in the same process and gets
    every task back, so it must have let go of their stores (closed, without a commit) when it
    abandoned them; the counts come out exact from their checkpoints."""
    bs = broker.bootstrap_servers
    topic, changelog = f"in-{unique}", f"counts-log-{unique}"
    create_topic(bs, topic, PARTITIONS)
    job = f"st-{unique}"
    cfg, rec = standalone_config(
        tmp_path,
        job,
        topic,
        zookeeper.connect_string,
        session_ms=2000,
        task_class="recording_tasks:OwnershipCountTask",
        extra=counts_store(f"kafka.{changelog}"),
        top="test.busy.us = 200",
    )
    view = ZkView(zookeeper.connect_string, job)
    flow = InputFlow(bs, topic, PARTITIONS)
    try:
        p1 = Processor(
            cfg, bs, "p1", "A", f"job.logged.store.base.dir={tmp_path / 'state'}", "metrics.log.interval.ms=3600000"
        )
        version, _ = view.wait_stable([p1])
        # Enough processed before the freeze that the abandoned tasks' counts would show in the
        # metrics of the ones p1 gets back, had they been kept.
        wait_until(lambda: len(ownership_records(rec)) >= 400, 60, "p1 to process 400 messages", p1)
        os.kill(p1.proc.pid, signal.SIGSTOP)
        wait_until(lambda: not view.client.get_children(view.keys.processors_dir), 30, "p1's session to expire")
        continued = time.monotonic_ns()
        os.kill(p1.proc.pid, signal.SIGCONT)
        _, owners = view.wait_stable([p1], after=version)
        assert owners == {"p1": ALL_TASKS}
        assert "its ZooKeeper session expired" in p1.log_text()
        written = _every_input_processed(flow, rec, p1)
        assert p1.stop() == 0, p1.log_text()[-3000:]
        latest = view.latest()
        assert latest is not None
        assert changelog_counts(bs, changelog, latest[1]) == input_counts(written, PARTITIONS)
    finally:
        flow.stop()
        view.close()
    records = ownership_records(rec)
    tenures = {r.instance for r in records if r.start_ns < continued}
    assert tenures
    late = [r for r in records if r.instance in tenures and r.start_ns > continued]
    assert not late, f"p1 processed {len(late)} messages of its abandoned tasks after it was continued: {late[:3]}"
    check_ownership(records)
    # The abandoned tasks' metrics went with them: the last metrics line (at the stop) counts no
    # more than the tasks it got back processed; kept, it would count the 400 and more before.
    (last,) = [json.loads(m) for m in re.findall(r"metrics (\{.*\})$", p1.log_text(), re.MULTILINE)]
    calls = sum(ms["process-calls"] for g, ms in last.items() if g.startswith("TaskName-"))
    returned = sum(1 for r in records if r.instance not in tenures)
    before = len(records) - returned
    assert before >= 400
    assert 0 < calls <= returned, (calls, returned, before)


def test_rebucketing_a_running_standalone_job_is_refused(broker, zookeeper, unique, tmp_path: Path) -> None:
    """Its run lives in ZooKeeper: a registered processor is a running job, whatever the coordinator
    stream says (to samzamp-rebucket-stores and to samzamp status, which shows its tasks)."""
    bs = broker.bootstrap_servers
    topic = f"in-{unique}"
    create_topic(bs, topic, PARTITIONS)
    job = f"rb-{unique}"
    cfg, _ = standalone_config(
        tmp_path,
        job,
        topic,
        zookeeper.connect_string,
        task_class="recording_tasks:StoreCountTask",
        top=f'"job.logged.store.base.dir" = "{tmp_path / "state"}"',
        extra=counts_store(f"kafka.counts-{unique}"),
    )
    view = ZkView(zookeeper.connect_string, job)
    try:
        p1 = Processor(cfg, bs, "p1", "A")
        view.wait_stable([p1])
        rebucket = [sys.executable, "-m", "samzamp.cli.rebucket_stores", str(cfg), "--set"]
        rebucket += [f"systems.kafka.bootstrap.servers={bs}", "--from-factor", "1", "--set", "job.elasticity.factor=2"]
        refused = subprocess.run(rebucket, cwd=str(ROOT), env=child_env(), capture_output=True, text=True, timeout=120)
        assert refused.returncode == 3, refused.stderr
        assert f"job {job}-1 is running (1 processor(s) registered in ZooKeeper" in refused.stderr
        # samzamp status sees it the same way, with the processor's tasks from ZooKeeper.
        status = [sys.executable, "-m", "samzamp", "status", str(cfg), "--json"]
        status += ["--set", f"systems.kafka.bootstrap.servers={bs}"]
        running = subprocess.run(status, cwd=str(ROOT), env=child_env(), capture_output=True, text=True, timeout=120)
        assert running.returncode == 0, running.stderr
        doc = json.loads(running.stdout)
        assert doc["state"] == "running"
        assert "1 processor(s) are members of the run" in doc["evidence"]
        assert [(p["processor_id"], set(p["tasks"])) for p in doc["processors"]] == [("p1", ALL_TASKS)]
        assert p1.stop() == 0
        stopped = subprocess.run(status, cwd=str(ROOT), env=child_env(), capture_output=True, text=True, timeout=120)
        assert stopped.returncode == 3, stopped.stderr
        assert json.loads(stopped.stdout)["state"] == "stopped"
    finally:
        view.close()
