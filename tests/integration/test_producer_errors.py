"""task.drop.producer.errors against the real broker, for an output the producer refuses at send time
(larger than its message.max.bytes, so confluent-kafka's produce() raises): with the key, the output
is dropped, logged and counted and the job goes on; without it, the container exits 1 naming the
task, SSP and offset, and no checkpoint reaches that message. Inline and in worker processes."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from kafka_util import (
    Container,
    create_topic,
    job_toml,
    read_all,
    read_checkpoints,
    records,
    wait_until,
    write_config,
)

pytestmark = pytest.mark.integration

PARTITIONS = 2
POISONED = 1  # the partition that carries the oversized message
BEFORE = 50  # messages of each partition before it: the poison is at offset BEFORE of POISONED
AFTER = 30  # and after it
MAX_BYTES = 4000  # the job's producer message.max.bytes
POISON = "x" * (3 * MAX_BYTES)

POOLS = pytest.mark.parametrize("pool", [1, 2], ids=lambda n: f"pool{n}")


def _produce(bootstrap: str, topic: str, partition: int, values: list[str], first: int) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i, v in enumerate(values, start=first):
        p.produce(topic, v.encode(), str(i).encode(), partition=partition)
    assert p.flush(30) == 0


def _seed(bootstrap: str, topic: str, first: int, count: int) -> None:
    for partition in range(PARTITIONS):
        _produce(bootstrap, topic, partition, [f"m{partition}-{i}" for i in range(first, first + count)], first)


def _job(tmp_path: Path, job: str, topic: str, out: str) -> tuple[Path, Path]:
    rec = tmp_path / "rec"
    rec.mkdir()
    extra = f'[streams.{out}]\nsamza.key.serde = "string"\nsamza.msg.serde = "string"\n'
    cfg = write_config(
        tmp_path / "job.toml",
        job_toml(job, "recording_tasks:OrderTask", topic, rec, extra, top=f'test.output = "{out}"'),
    )
    return cfg, rec


def _checkpointed(bootstrap: str, job: str) -> dict[int, int]:
    last: dict[int, int] = {}
    for _task, offsets in read_checkpoints(bootstrap, job):
        last.update(offsets)
    return last


def _metrics(c: Container) -> list[dict[str, Any]]:
    return [json.loads(m) for m in re.findall(r" metrics (\{.*\})$", c.log_text(), re.MULTILINE)]


class _Run:
    """One forwarding job: its input and output topics, config and container."""

    def __init__(self, bootstrap: str, tmp_path: Path, unique: str, pool: int, *overrides: str) -> None:
        self.bootstrap = bootstrap
        self.job = f"senderr-{unique}"
        self.topic, self.out = f"in-{unique}", f"out-{unique}"
        create_topic(bootstrap, self.topic, PARTITIONS)
        create_topic(bootstrap, self.out, PARTITIONS)
        _seed(bootstrap, self.topic, 0, BEFORE)
        cfg, self.rec = _job(tmp_path, self.job, self.topic, self.out)
        self.c = Container(
            cfg,
            bootstrap,
            f"job.container.thread.pool.size={pool}",
            f"systems.kafka.producer.message.max.bytes={MAX_BYTES}",
            *overrides,
            log=tmp_path / "container.log",
        )
        # The poison comes after a checkpoint covers everything before it, so that "no checkpoint
        # past it" is tested against a checkpoint that exists.
        wait_until(
            lambda: _checkpointed(bootstrap, self.job).get(POISONED, -1) >= BEFORE - 1,
            120,
            "a checkpoint of the messages before the poison",
            self.c,
        )
        _produce(bootstrap, self.topic, POISONED, [POISON], BEFORE)
        _produce(
            bootstrap,
            self.topic,
            POISONED,
            [f"m{POISONED}-{i}" for i in range(BEFORE + 1, BEFORE + 1 + AFTER)],
            BEFORE + 1,
        )

    def processed(self, partition: int) -> set[int]:
        return {o for _, p, o in records(self.rec) if p == partition}


@POOLS
def test_an_output_over_message_max_bytes_is_dropped_counted_and_the_job_goes_on(
    broker, unique, tmp_path: Path, pool: int
) -> None:
    bs = broker.bootstrap_servers
    run = _Run(bs, tmp_path, unique, pool, "task.drop.producer.errors=true", "metrics.log.interval.ms=200")
    c = run.c
    last = BEFORE + AFTER  # the last offset of POISONED
    wait_until(lambda: last in run.processed(POISONED), 120, "the messages after the poison processed", c)
    assert run.processed(POISONED) == set(range(last + 1))  # the poison's process() returned too
    # Every output but the poison's is delivered, those after it included.
    wanted = {f"m{p}-{i}" for p in range(PARTITIONS) for i in range(BEFORE)}
    wanted |= {f"m{POISONED}-{i}" for i in range(BEFORE + 1, last + 1)}
    wait_until(
        lambda: {m.value().decode() for m in read_all(bs, run.out, list(range(PARTITIONS)))} >= wanted,
        60,
        "every output but the poison's delivered",
        c,
    )
    # The job goes on past the poison: a checkpoint covers it.
    wait_until(lambda: _checkpointed(bs, run.job).get(POISONED, -1) >= last, 60, "a checkpoint past the poison", c)
    # In the container's registry, wherever the task ran (a worker's counts reach it as Metrics frames).
    wait_until(
        lambda: any(m.get("SystemProducersMetrics", {}).get("producer-send-failed") == 1 for m in _metrics(c)),
        30,
        "producer-send-failed = 1 in a metrics report",
        c,
    )
    assert c.stop() == 0, c.log_text()[-3000:]
    log = c.log_text()
    dropped = [line for line in log.splitlines() if "dropped an output" in line]
    assert len(dropped) == 1, log[-3000:]
    assert f"task 'Partition {POISONED}'" in dropped[0]
    assert f"kafka.{run.out}" in dropped[0]
    assert "Message size too large" in dropped[0]
    assert "(1 failed outputs in this process so far)" in dropped[0]
    outputs = [m.value().decode() for m in read_all(bs, run.out, list(range(PARTITIONS)))]
    assert POISON not in outputs
    assert len(outputs) == len(set(outputs)) == len(wanted)


@POOLS
def test_an_output_over_message_max_bytes_fails_the_task_naming_task_ssp_and_offset(
    broker, unique, tmp_path: Path, pool: int
) -> None:
    bs = broker.bootstrap_servers
    run = _Run(bs, tmp_path, unique, pool)
    c = run.c
    assert c.proc.wait(timeout=60) == 1, c.log_text()[-3000:]
    log = c.log_text()
    expected = (
        f"task 'Partition {POISONED}' failed processing SystemStreamPartition [kafka, {run.topic}, {POISONED}] "
        f"offset {BEFORE}: "
    )
    assert expected in log, log[-3000:]
    failure = log[log.index(expected) :].splitlines()[0]
    assert "Message size too large" in failure
    assert "task.drop.producer.errors" in failure
    assert BEFORE not in run.processed(POISONED)
    checkpointed = _checkpointed(bs, run.job)
    assert checkpointed[POISONED] == BEFORE - 1, f"checkpointed past the poison: {checkpointed}"


@POOLS
def test_sends_held_back_by_a_full_producer_queue_are_timed_in_the_containers_metrics(
    broker, unique, tmp_path: Path, pool: int
) -> None:
    """An output producer whose local queue holds one message: each send finds the last one not yet
    acknowledged and waits for it, so the sends that waited are counted in the container's
    SystemProducersMetrics producer-buffer-wait-ns, wherever the task ran, and every output arrives."""
    bs = broker.bootstrap_servers
    job, topic, out = f"bufwait-{unique}", f"in-{unique}", f"out-{unique}"
    create_topic(bs, topic, PARTITIONS)
    create_topic(bs, out, PARTITIONS)
    _seed(bs, topic, 0, BEFORE)
    cfg, _ = _job(tmp_path, job, topic, out)
    c = Container(
        cfg,
        bs,
        f"job.container.thread.pool.size={pool}",
        "systems.kafka.producer.queue.buffering.max.messages=1",
        "systems.kafka.producer.linger.ms=0",
        "metrics.log.interval.ms=200",
        log=tmp_path / "container.log",
    )
    wanted = {f"m{p}-{i}" for p in range(PARTITIONS) for i in range(BEFORE)}
    wait_until(
        lambda: {m.value().decode() for m in read_all(bs, out, list(range(PARTITIONS)))} >= wanted,
        60,
        "every output delivered",
        c,
    )

    def waits() -> dict[str, int]:
        reports = [m.get("SystemProducersMetrics", {}).get("producer-buffer-wait-ns") for m in _metrics(c)]
        return next((r for r in reversed(reports) if r and r["count"] > 0), {})

    wait_until(lambda: bool(waits()), 30, "producer-buffer-wait-ns counted in a metrics report", c)
    timed = waits()
    assert 1 <= timed["count"] <= PARTITIONS * BEFORE  # at most one per send that waited
    assert 0 < timed["avg"] <= timed["max"]
    assert c.stop() == 0, c.log_text()[-3000:]
