"""Virtual tasks (job.elasticity.factor) against the real broker: every key's messages reach exactly
one task, the task of the key's bucket, in offset order, whatever runs the tasks (inline, one
worker, two workers); every input is processed exactly once in a clean run."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest
from confluent_kafka import Producer
from kafka_util import Container, create_topic, job_toml, wait_until, write_config

from samzamp.consume.key_bucket import key_bucket

pytestmark = pytest.mark.integration


def produce_keyed(bootstrap: str, topic: str, partitions: int, keys: int, per_key: int) -> dict[int, int]:
    """``keys`` keys ``k<j>``, ``per_key`` messages each (interleaved), key j on partition j % partitions;
    returns partition -> messages written."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    counts: dict[int, int] = defaultdict(int)
    for seq in range(per_key):
        for j in range(keys):
            p.produce(topic, f"{seq}".encode(), f"k{j}".encode(), partition=j % partitions)
            counts[j % partitions] += 1
        p.poll(0)
    assert p.flush(30) == 0
    return dict(counts)


def task_records(record_dir: Path, kind: str = "V") -> dict[str, list[list[str]]]:
    """Task name (as in its record file's name) -> its records of ``kind`` in the order written."""
    out: dict[str, list[list[str]]] = defaultdict(list)
    for f in sorted(record_dir.glob("*.log")):
        task = f.name.rsplit(".", 2)[0].replace("_", " ", 1)
        out[task].extend(line.split()[1:] for line in f.read_text().splitlines() if line.startswith(kind + " "))
    return dict(out)


def virtual_job(tmp_path: Path, unique: str, topic: str, extra: str = "") -> tuple[Path, Path]:
    rec = tmp_path / "rec"
    rec.mkdir(exist_ok=True)
    cfg = write_config(
        tmp_path / "job.toml",
        job_toml(f"vt-{unique}", "recording_tasks:KeyBucketTask", topic, rec, extra=extra),
    )
    return cfg, rec


def _processed(rec: Path) -> int:
    return sum(len(r) for r in task_records(rec).values())


@pytest.mark.parametrize("pool", [0, 1, 2])
@pytest.mark.parametrize("factor", [2, 4])
@pytest.mark.parametrize("partitions", [1, 4])
def test_every_key_reaches_exactly_its_buckets_task_in_order(
    broker, unique, tmp_path: Path, partitions: int, factor: int, pool: int
) -> None:
    topic = f"in-{unique}"
    create_topic(broker.bootstrap_servers, topic, partitions)
    written = produce_keyed(broker.bootstrap_servers, topic, partitions, keys=200, per_key=10)
    total = sum(written.values())
    cfg, rec = virtual_job(tmp_path, unique, topic)
    c = Container(
        cfg,
        broker.bootstrap_servers,
        f"job.elasticity.factor={factor}",
        f"job.container.thread.pool.size={pool}",
        log=tmp_path / "run.log",
    )
    wait_until(lambda: _processed(rec) >= total, 120, "every message processed", c)
    assert c.stop() == 0, c.log_text()[-3000:]

    by_task = task_records(rec)
    expected_tasks = {f"Partition {p}_{kb}_{factor}" for p in range(partitions) for kb in range(factor)}
    assert set(by_task) == expected_tasks
    seen: dict[tuple[int, int], str] = {}
    owner: dict[str, str] = {}
    for task, rows in by_task.items():
        last_offset: dict[int, int] = {}
        for partition_s, bucket_s, offset_s, key in rows:
            partition, bucket, offset = int(partition_s), int(bucket_s), int(offset_s)
            assert task == f"Partition {partition}_{bucket}_{factor}", (task, partition, bucket)
            assert bucket == key_bucket(key.encode(), offset, factor), f"{key} is not of bucket {bucket}"
            assert owner.setdefault(key, task) == task, f"key {key} reached {owner[key]} and {task}"
            assert offset > last_offset.get(partition, -1), f"{task}: offset {offset} after {last_offset[partition]}"
            last_offset[partition] = offset
            assert (partition, offset) not in seen, (
                f"{(partition, offset)} processed by {seen[(partition, offset)]} and {task}"
            )
            seen[(partition, offset)] = task
    assert {p: sum(1 for q, _ in seen if q == p) for p in range(partitions)} == written
    assert len(owner) == 200
