"""End of stream through an application's intermediate stream across two processors of a standalone
job (real broker and ZooKeeper): with a bounded input (``streams.<id>.samza.bounded``) each task
reads its partitions to where they ended when it started, every producer task's end of stream goes
through the intermediate topic to its aggregate partition and on to the others, the windows emit at
end of stream, and both processors exit 0 by themselves."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import Producer
from kafka_util import create_topic, read_all
from standalone_util import Processor, ZkView
from test_application import app_toml

from samzamp.serde.intermediate import END_OF_STREAM, EndOfStreamMessage, aggregate_partition, decode_control

pytestmark = pytest.mark.integration

PARTITIONS = 4
PER_PARTITION = 300
KEYS = 40


def test_a_bounded_application_ends_by_itself_across_two_processors(
    broker, zookeeper, unique: str, tmp_path: Path
) -> None:
    bootstrap = broker.bootstrap_servers
    job, events, out = f"eos-{unique}", f"events-{unique}", f"out-{unique}"
    create_topic(bootstrap, events, PARTITIONS)
    create_topic(bootstrap, out, 1)
    producer = Producer({"bootstrap.servers": bootstrap})
    for p in range(PARTITIONS):
        for seq in range(PER_PARTITION):
            value = {"k": f"k{(seq * 7 + p) % KEYS}", "src": p, "seq": seq}
            producer.produce(events, json.dumps(value).encode(), partition=p)
    assert producer.flush(30) == 0
    config = tmp_path / "job.toml"
    config.write_text(
        app_toml(job, "graph_apps:SessionItemsApp", {"events": (events, PARTITIONS), "out": (out, 1)}, tmp_path / "s")
        + f"""
[job.coordinator]
factory = "zk"
zk.connect = "{zookeeper.connect_string}"
zk.session.timeout.ms = 4000
zk.consensus.timeout.ms = 20000

[job.debounce]
time.ms = 300
"""
    )
    bounded = "streams.events.samza.bounded=true"
    view = ZkView(zookeeper.connect_string, job)
    processors = [Processor(config, bootstrap, f"p{i}", f"L{i}", bounded) for i in range(2)]
    try:
        view.wait_stable(processors)
        for p in processors:
            assert p.proc.wait(timeout=120) == 0, p.log_text()[-4000:]
    finally:
        for p in processors:
            p.stop()
        view.close()
    logs = "\n".join(p.log_text() for p in processors)
    panes = [json.loads(m.value()) for m in read_all(bootstrap, out, [0])]
    items = Counter((src, seq) for pane in panes for src, seq in pane["items"])
    assert items == Counter((p, i) for p in range(PARTITIONS) for i in range(PER_PARTITION)), logs[-3000:]
    keys = Counter(pane["key"] for pane in panes)
    assert keys == Counter({f"k{k}": 1 for k in range(KEYS)})  # each window fired once, at end of stream
    intermediate = f"{job}-1-partition_by-by-key"
    named = [
        msg.task_name
        for m in read_all(bootstrap, intermediate, [aggregate_partition(intermediate, PARTITIONS)])
        if m.value()[0] == END_OF_STREAM
        and isinstance(msg := decode_control(END_OF_STREAM, m.value()[1:]), EndOfStreamMessage)
        and msg.task_name is not None
    ]
    assert set(named) == {f"Partition {p}" for p in range(PARTITIONS)}, named
    # Each processor ran tasks of the job: the end of stream crossed between them.
    for p in processors:
        ended = set(re.findall(r"task '(Partition \d+)' reached the end of every input", p.log_text()))
        assert ended, f"{p.pid} ran no task to its end:\n{p.log_text()[-3000:]}"
