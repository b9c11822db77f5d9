"""Drain of an application in one container, against the real broker: the drain goes through the
intermediate stream (each task's drain message after its flush, the aggregate partition's copies),
every window emits what it holds once and deletes it, the container exits 0 drained, and the next
deployment, with a changed intermediate schema (docs/drain.md's upgrade recipe), goes on exactly where
the drain stopped and never meets a record of the old schema."""

from __future__ import annotations

import json
import re
import threading
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from kafka_util import Container, create_topic, read_all, read_checkpoint_records, run_drain, wait_until
from test_application import app_toml

from samzamp.serde.intermediate import DRAIN, DrainMessage, aggregate_partition, decode_control

pytestmark = pytest.mark.integration

PARTITIONS = 4
KEYS = 40
APP = "graph_apps:SessionItemsApp"
APP_V2 = "graph_apps:SessionItemsAppV2"  # the same, its intermediate records of another shape
FAST_MONITOR = "job.drain-monitor.poll.interval.ms=200"


class Feeder:
    """Writes ``{"k", "src", "seq"}`` records to every partition in turn until stopped; seq is the
    record's offset (the feeder is the partition's only writer)."""

    def __init__(self, bootstrap: str, topic: str, start: dict[int, int] | None = None) -> None:
        self.topic = topic
        self.next = dict(start or dict.fromkeys(range(PARTITIONS), 0))
        self._stop = threading.Event()
        self._producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            for p in range(PARTITIONS):
                for _ in range(10):
                    seq = self.next[p]
                    value = {"k": f"k{(seq * 7 + p) % KEYS}", "src": p, "seq": seq}
                    self._producer.produce(self.topic, json.dumps(value).encode(), partition=p)
                    self.next[p] = seq + 1
            self._producer.flush(30)
            self._stop.wait(0.02)

    def stop(self) -> dict[int, int]:
        self._stop.set()
        self._thread.join(60)
        return self.next


def _panes(bootstrap: str, topic: str) -> list[dict]:
    return [json.loads(m.value()) for m in read_all(bootstrap, topic, [0])]


@pytest.mark.parametrize(("pool", "factor"), [(0, 1), (2, 2)], ids=["inline", "workers-and-key-buckets"])
def test_a_drained_application_emits_every_window_once_and_the_next_run_goes_on_exactly(
    broker, unique: str, tmp_path: Path, pool: int, factor: int
) -> None:
    bootstrap = broker.bootstrap_servers
    job, events, out = f"ad-{unique}", f"events-{unique}", f"out-{unique}"
    create_topic(bootstrap, events, PARTITIONS)
    create_topic(bootstrap, out, 1)
    config = tmp_path / "job.toml"
    intermediate = f"{job}-1-partition_by-by-key"
    overrides = (FAST_MONITOR, f"job.container.thread.pool.size={pool}", f"job.elasticity.factor={factor}")
    written: dict[int, int] | None = None
    runs: list[tuple[list[dict], dict[int, int], list[str]]] = []  # per run: panes, drain points, named drains
    for run in range(2):
        # docs/drain.md's upgrade recipe: drain, deploy the changed intermediate schema, start.
        app = APP if run == 0 else APP_V2
        config.write_text(app_toml(job, app, {"events": (events, PARTITIONS), "out": (out, 1)}, tmp_path / "state"))
        feeder = Feeder(bootstrap, events, written)
        c = Container(config, bootstrap, *overrides, log=tmp_path / f"c{run}.log")
        try:
            before = len(_panes(bootstrap, out))
            wanted = _records_in(bootstrap, intermediate) + 500
            wait_until(lambda: _records_in(bootstrap, intermediate) >= wanted, 60, "records re-keyed", c)  # noqa: B023
            r = run_drain(config, bootstrap, "--wait", "--timeout", "60")
            assert r.returncode == 0, (r.stdout, r.stderr, c.log_text()[-4000:])
            assert c.proc.wait(timeout=60) == 0, c.log_text()[-4000:]
        finally:
            written = feeder.stop()
            c.stop()
        run_id = re.search(r"run id (\S+) ", c.log_text())
        assert run_id is not None
        final: dict[int, int] = {}
        for cp in read_checkpoint_records(bootstrap, job):
            for o in cp.input_offsets:
                if o.stream == events:
                    final[o.partition] = o.offset
        runs.append((_panes(bootstrap, out)[before:], final, _named_drains(bootstrap, intermediate, run_id.group(1))))

    suffix = [""] if factor == 1 else [f"_{b}_{factor}" for b in range(factor)]
    producers = sorted(f"Partition {p}{s}" for p in range(PARTITIONS) for s in suffix)
    start = dict.fromkeys(range(PARTITIONS), 0)
    for n, (panes, final, named) in enumerate(runs):
        # What the run's panes hold is exactly the records from where it started to its drain
        # points, each once; each key emitted one pane; every producer task's drain message came.
        items = Counter((src, seq) for pane in panes for src, seq in pane["items"])
        expected = Counter((p, i) for p in range(PARTITIONS) for i in range(start[p], final[p] + 1))
        missing, extra = sorted(set(expected) - set(items)), sorted(set(items) - set(expected))
        assert items == expected, f"run {n}: missing {missing[:10]}, extra {extra[:10]}"
        keys = Counter(pane["key"] for pane in panes)
        assert max(keys.values()) == 1, f"run {n}: keys with more than one pane {[k for k, c in keys.items() if c > 1]}"
        assert sorted(named) == producers, f"run {n}: named drain messages {named}"
        start = {p: final[p] + 1 for p in range(PARTITIONS)}


def _records_in(bootstrap: str, topic: str) -> int:
    """How many records ``topic`` holds (0 before it exists)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "test-count"})
    try:
        total = 0
        for p in range(PARTITIONS):
            try:
                _low, high = c.get_watermark_offsets(TopicPartition(topic, p), timeout=5)
            except KafkaException:
                return 0
            total += max(0, high)
        return total
    finally:
        c.close()


def _named_drains(bootstrap: str, intermediate: str, run_id: str) -> list[str]:
    """The task names of the named drain messages of ``run_id`` in the aggregate partition."""
    named = []
    for m in read_all(bootstrap, intermediate, [aggregate_partition(intermediate, PARTITIONS)]):
        if m.value()[0] == DRAIN:
            msg = decode_control(DRAIN, m.value()[1:])
            assert isinstance(msg, DrainMessage)
            if msg.task_name is not None and msg.run_id == run_id:
                named.append(msg.task_name)
    return named


def test_a_drain_requested_before_start_processes_what_the_intermediate_topic_holds_and_no_source(
    broker, unique: str, tmp_path: Path
) -> None:
    """AT-A5: a run SIGKILLed with re-keyed records in its intermediate topic that no checkpoint
    covers; its drain is requested while it is down. The container that comes back continues the
    run and drains at start: it processes no source record, every record the intermediate topic
    holds reaches a window, and every window emits once."""
    bootstrap = broker.bootstrap_servers
    job, events, out = f"ad0-{unique}", f"events-{unique}", f"out-{unique}"
    create_topic(bootstrap, events, PARTITIONS)
    create_topic(bootstrap, out, 1)
    config = tmp_path / "job.toml"
    config.write_text(app_toml(job, APP, {"events": (events, PARTITIONS), "out": (out, 1)}, tmp_path / "state"))
    intermediate = f"{job}-1-partition_by-by-key"
    feeder = Feeder(bootstrap, events)
    # No timed commit: the intermediate records are covered by no checkpoint when the kill comes.
    c = Container(config, bootstrap, FAST_MONITOR, "task.commit.ms=600000", log=tmp_path / "c0.log")
    try:
        wanted = _records_in(bootstrap, intermediate) + 500
        wait_until(lambda: _records_in(bootstrap, intermediate) >= wanted, 60, "records re-keyed", c)
        c.kill()
    finally:
        feeder.stop()
    r = run_drain(config, bootstrap)
    assert r.returncode == 0, (r.stdout, r.stderr)
    c = Container(config, bootstrap, FAST_MONITOR, log=tmp_path / "c1.log")
    assert c.proc.wait(timeout=90) == 0, c.log_text()[-4000:]
    log = c.log_text()
    assert "found at start" in log
    points = json.loads(re.findall(r"drain point: (\{.*\})", log)[0])
    assert points, log[-3000:]
    assert all(offset is None for offset in points.values()), points  # no source record fetched
    re_keyed = Counter(
        tuple(json.loads(m.value()[1:]))
        for m in read_all(bootstrap, intermediate, list(range(PARTITIONS)))
        if m.value()[0] == 0
    )
    panes = _panes(bootstrap, out)
    items = Counter((src, seq) for pane in panes for src, seq in pane["items"])
    assert items == re_keyed, (sorted(set(re_keyed) - set(items))[:10], sorted(set(items) - set(re_keyed))[:10])
    keys = Counter(pane["key"] for pane in panes)
    assert max(keys.values()) == 1, keys
