"""Drain and run ids of a standalone job, against the real ZooKeeper and broker: the processors of a
deployment share one run id (the first generates it, the others join it; a restarted processor
keeps it; a full restart after all stopped gets a new one), ``samzamp-drain --wait`` drains every
processor of the run, and the next deployment resumes right after the drained checkpoints, so that
across the two every input is processed exactly once."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest
from kafka_util import create_topic, produce, read_checkpoints, run_drain, wait_until
from kazoo.client import KazooClient
from standalone_util import InputFlow, Processor, ZkView, missing_offsets, ownership_records, standalone_config

from samzamp.config.standalone import ZkSettings
from samzamp.coordinator.run_id import RUN_NAMESPACE, RunAlreadyDrained, RunRecord, RunState, read_current_run
from samzamp.coordinator.zk.client import connect
from samzamp.coordinator.zk.keys import ZkKeys, ensure_root
from samzamp.coordinator.zk.metadata_store import ZkMetadataStores
from samzamp.coordinator.zk.runs import ZkRuns, run_members
from samzamp.drain.notification import DRAIN_NAMESPACE, read_drain_notifications

PARTITIONS = 8
FAST_MONITOR = "job.drain-monitor.poll.interval.ms=200"
SLOW_MONITOR = "job.drain-monitor.poll.interval.ms=8000"
RUN_ID = re.compile(r"run id (\S+) \(([^)]*)\)")


def run_id(p: Processor) -> tuple[str, str]:
    """The run id the processor logged at start, and how it was chosen."""
    m = RUN_ID.search(p.log_text())
    assert m, f"processor {p.pid} did not log its run id:\n{p.log_text()[-3000:]}"
    return m.group(1), m.group(2)


def current_run(view: ZkView) -> RunRecord | None:
    return read_current_run(ZkMetadataStores(view.client, view.keys).namespace(RUN_NAMESPACE))


def last_checkpoints(bootstrap: str, job: str) -> dict[int, int]:
    """Partition -> the offset of its task's newest checkpoint."""
    last: dict[int, int] = {}
    for _task, offsets in read_checkpoints(bootstrap, job):
        last.update(offsets)
    return last


def drain_all(cfg: Path, bootstrap: str, processors: list[Processor]) -> str:
    """``samzamp-drain --wait``; returns its output once every processor exited 0."""
    r = run_drain(cfg, bootstrap, "--wait", "--timeout", "120")
    logs = "\n".join(f"--- {p.pid}:\n{p.log_text()[-2000:]}" for p in processors)
    assert r.returncode == 0, (r.stdout, r.stderr, logs)
    assert " drained (" in r.stdout, r.stdout
    # --wait returned only once every processor of the run had drained and left it.
    for p in processors:
        text = p.log_text()
        assert "drain point: " in text, f"{p.pid} did not drain:\n{text[-3000:]}"
        assert re.search(r"left run \S+ \(drained\)|run \S+ drained", text), f"{p.pid} had not ended its drain"
    for p in processors:
        assert p.proc.wait(timeout=60) == 0, p.log_text()[-3000:]
    return r.stdout


def test_drain_stops_every_processor_and_the_next_deployment_resumes_exactly(
    broker, zookeeper, unique, tmp_path: Path
) -> None:
    bs = broker.bootstrap_servers
    topic = f"in-{unique}"
    create_topic(bs, topic, PARTITIONS)
    job = f"dr-{unique}"
    cfg, rec = standalone_config(tmp_path, job, topic, zookeeper.connect_string, top="test.busy.us = 300")
    view = ZkView(zookeeper.connect_string, job)
    flow = InputFlow(bs, topic, PARTITIONS, batch=200)
    try:
        # Started together: the lock makes exactly one of them first. p2 looks for a drain seldom:
        # p1 has drained and left long before p2 finds the notification, which must still be there.
        first = [Processor(cfg, bs, "p1", "A", FAST_MONITOR), Processor(cfg, bs, "p2", "B", SLOW_MONITOR)]
        view.wait_stable(first)
        ids = {p.pid: run_id(p) for p in first}
        run1 = ids["p1"][0]
        assert ids["p2"][0] == run1, ids
        assert sorted(how.split(":")[0] for _, how in ids.values()) == ["generated", "joined"], ids

        def both_busy() -> bool:
            records = ownership_records(rec)
            return len(records) >= 2000 and {r.processor for r in records} == {"p1", "p2"}

        wait_until(both_busy, 60, "both to process")

        # Drained while input flows.
        out = drain_all(cfg, bs, first)
        assert f"run {run1} drained" in out
        # Each left the run; only the last to leave ended it (and deleted the notification).
        left = [p for p in first if f"left run {run1} (drained): 1 other processor(s) still run it" in p.log_text()]
        ended = [p for p in first if f"run {run1} drained" in p.log_text()]
        assert [p.pid for p in left + ended] in (["p1", "p2"], ["p2", "p1"])
        assert "drain complete: removed 1 drain notification(s)" in ended[0].log_text()
        record = current_run(view)
        assert record is not None
        assert (record.run_id, record.state) == (run1, RunState.DRAINED)
        assert run_members(view.client, view.keys) == {}
        assert read_drain_notifications(ZkMetadataStores(view.client, view.keys).namespace(DRAIN_NAMESPACE)) == []

        drained = ownership_records(rec)
        checkpoint = last_checkpoints(bs, job)
        for p in range(PARTITIONS):
            # What the drained run processed, each offset once, is exactly what its checkpoints cover.
            offsets = sorted(r.offset for r in drained if r.partition == p)
            assert offsets == list(range(checkpoint[p] + 1)), f"partition {p}"

        written = flow.stop()
        produce(bs, topic, PARTITIONS, 10 * PARTITIONS, start=written)  # more input in every partition
        total = written + 10 * PARTITIONS

        second = [Processor(cfg, bs, "q1", "A", FAST_MONITOR), Processor(cfg, bs, "q2", "B", FAST_MONITOR)]
        view.wait_stable(second)
        ids2 = {p.pid: run_id(p) for p in second}
        run2 = ids2["q1"][0]
        assert ids2["q2"][0] == run2 != run1, ids2
        assert sorted(how.split(":")[0] for _, how in ids2.values()) == ["generated", "joined"], ids2
        wait_until(lambda: not missing_offsets(ownership_records(rec), total, PARTITIONS), 120, "every input")
        drain_all(cfg, bs, second)
    finally:
        flow.stop()
        view.close()

    records = ownership_records(rec)
    assert not missing_offsets(records, total, PARTITIONS)
    seen = Counter((r.partition, r.offset) for r in records)
    repeated = sorted(k for k, n in seen.items() if n > 1)
    assert not repeated, f"processed twice: {repeated[:10]} ({len(repeated)})"
    for p in range(PARTITIONS):
        resumed = min(r.offset for r in records if r.partition == p and r.processor in ("q1", "q2"))
        assert resumed == checkpoint[p] + 1, f"partition {p}: the next deployment began at {resumed}"


def test_a_processor_with_no_task_drains_too(broker, zookeeper, unique, tmp_path: Path) -> None:
    bs = broker.bootstrap_servers
    topic = f"in-{unique}"
    create_topic(bs, topic, 2)
    produce(bs, topic, 2, 200)
    job = f"dr0-{unique}"
    cfg, _ = standalone_config(tmp_path, job, topic, zookeeper.connect_string)
    view = ZkView(zookeeper.connect_string, job)
    try:
        processors = [
            Processor(cfg, bs, pid, loc, FAST_MONITOR) for pid, loc in (("p1", "A"), ("p2", "B"), ("p3", "C"))
        ]
        _, owners = view.wait_stable(processors)
        assert sorted(len(ts) for ts in owners.values()) == [0, 1, 1]
        drain_all(cfg, bs, processors)
        record = current_run(view)
        assert record is not None
        assert record.state is RunState.DRAINED
    finally:
        view.close()


def test_one_run_id_per_deployment_kept_across_restarts(broker, zookeeper, unique, tmp_path: Path) -> None:
    bs = broker.bootstrap_servers
    topic = f"in-{unique}"
    create_topic(bs, topic, PARTITIONS)
    job = f"rid-{unique}"
    cfg, _ = standalone_config(tmp_path, job, topic, zookeeper.connect_string, session_ms=2000)
    view = ZkView(zookeeper.connect_string, job)
    try:
        never = run_drain(cfg, bs)
        assert never.returncode == 3, never.stdout
        assert f"the job has no run in its ZooKeeper {view.keys.root}" in never.stdout

        p1 = Processor(cfg, bs, "p1", "A")
        view.wait_stable([p1])
        run1, how = run_id(p1)
        assert how == "generated"
        p2 = Processor(cfg, bs, "p2", "B")
        view.wait_stable([p1, p2])
        assert run_id(p2) == (run1, "joined: 1 other processor of the run running")

        p2.kill()  # a crash while p1 runs: the restarted processor keeps the run
        p2 = Processor(cfg, bs, "p2", "B", run=1)
        view.wait_stable([p1, p2])
        assert run_id(p2)[0] == run1

        assert p1.stop() == 0, p1.log_text()[-3000:]  # a clean stop while p2 runs does not end the run
        record = current_run(view)
        assert record is not None
        assert (record.run_id, record.state) == (run1, RunState.RUNNING)
        assert f"left run {run1} (stopped): 1 other processor(s) still run it" in p1.log_text()
        p1 = Processor(cfg, bs, "p1", "A", run=1)
        view.wait_stable([p1, p2])
        assert run_id(p1)[0] == run1

        assert p1.stop() == 0
        assert p2.stop() == 0  # the last one ends the run
        assert f"run {run1} stopped" in p2.log_text()
        record = current_run(view)
        assert record is not None
        assert (record.run_id, record.state) == (run1, RunState.STOPPED)
        stopped = run_drain(cfg, bs)
        assert stopped.returncode == 3, stopped.stdout
        assert f"no running deployment found (last: run {run1} stopped at" in stopped.stdout

        p1 = Processor(cfg, bs, "p1", "A", run=2)  # a full restart: a new deployment
        view.wait_stable([p1])
        run2, how = run_id(p1)
        assert how == "generated"
        assert run2 != run1
        assert p1.stop() == 0
    finally:
        view.close()


def test_the_run_id_rule_and_a_new_session(zookeeper, unique) -> None:
    """ZkRuns alone: first generates, the others join, the last ends the run; a run whose last
    processor failed goes on; a processor whose session expired joins again."""
    keys = ZkKeys(f"rule-{unique}", "1")
    zk = ZkSettings(zookeeper.connect_string, session_timeout_ms=2000, connection_timeout_ms=10000)

    def runs() -> tuple[ZkRuns, KazooClient]:
        client = connect(zk.connect, zk.session_timeout_ms, zk.connection_timeout_ms)
        ensure_root(client, keys)
        return ZkRuns(client, keys, None), client

    view = connect(zk.connect, 10000, 10000)
    store = ZkMetadataStores(view, keys).namespace(RUN_NAMESPACE)
    a, a_client = runs()
    b, _ = runs()
    try:
        ra, how_a = a.start(None)
        rb, how_b = b.start(None)
        assert how_a == "generated"
        assert (rb.run_id, how_b) == (ra.run_id, "joined: 1 other processor of the run running")

        # Another client closes a's session: a's member node goes; a joins again with a new session.
        before = run_members(view, keys)
        assert len(before) == 2
        session = a_client.client_id
        thief = KazooClient(hosts=zk.connect, client_id=session)
        thief.start(timeout=10)
        thief.stop()  # closes the session: a's member node goes with it
        thief.close()
        wait_until(lambda: (a_client.client_id or session)[0] != session[0], 30, "a new session")
        wait_until(lambda: len(run_members(view, keys)) == 2, 30, "a to join the run again")
        assert set(run_members(view, keys)) != set(before)

        assert b.end(rb, RunState.STOPPED)[1] == 1
        record = read_current_run(store)
        assert record is not None
        assert record.state is RunState.RUNNING
        ended, others = a.end(ra, RunState.FAILED)
        assert (ended.state, others) == (RunState.FAILED, 0)
        assert a.end(ended, RunState.STOPPED) == (ended, 0)  # once left, a second end records nothing
        record = read_current_run(store)
        assert record is not None
        assert record.state is RunState.FAILED
    finally:
        a.close()
        b.close()

    c, _ = runs()
    try:
        rc, how = c.start(None)
        assert (rc.run_id, how) == (ra.run_id, "continued: the run's last container failed without stopping")
        c.end(rc, RunState.STOPPED)
    finally:
        c.close()
    d, _ = runs()
    try:
        rd, how = d.start(None)
        assert how == "generated"
        assert rd.run_id != ra.run_id
        d.end(rd, RunState.DRAINED)
    finally:
        d.close()
    # A drained run is over: a processor started for it (app.run.id) is refused and never joins it.
    e, _ = runs()
    try:
        with pytest.raises(RunAlreadyDrained):
            e.start(rd.run_id)
        assert not run_members(view, keys)
        record = read_current_run(store)
        assert record is not None
        assert (record.run_id, record.state) == (rd.run_id, RunState.DRAINED)
    finally:
        e.close()
        view.stop()
        view.close()
