"""Input offsets in the consumer group, for lag tools (task.checkpoint.commit.group.offsets), against
the real broker: after a clean stop the group holds checkpoint + 1 of every input partition (the
minimum over the key buckets of a partition), and lag read the way a lag tool does is 0; through a
SIGKILL loop the group is never ahead of the checkpoints."""

from __future__ import annotations

import random
import time
from collections import defaultdict
from pathlib import Path

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient
from kafka_util import (
    Container,
    count_lines,
    end_offsets,
    job_toml,
    read_checkpoint_records,
    records,
    seed_input,
    wait_until,
    write_config,
)

from samzamp.api.envelope import SystemStreamPartition as SSP
from samzamp.commit.checkpoint import decode_checkpoint, decode_key
from samzamp.consume.key_bucket import key_bucket
from samzamp.systems.kafka import KafkaClientSettings
from samzamp.systems.kafka.codes import PARTITION_EOF
from samzamp.systems.kafka.group_offsets import KafkaGroupOffsets

pytestmark = pytest.mark.integration

PARTITIONS = 4


def _group_offsets(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    """What ``AdminClient.list_consumer_group_offsets`` says the group committed, per partition (a
    partition with no commit is left out)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    request = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in range(partitions)])
    result = admin.list_consumer_group_offsets([request])[group].result(timeout=30)
    return {tp.partition: tp.offset for tp in result.topic_partitions if tp.offset >= 0}


def _checkpointed(bootstrap: str, job: str) -> dict[tuple[int, int], int]:
    """(partition, key bucket) -> the last processed offset of each SSP's newest checkpoint."""
    out: dict[tuple[int, int], int] = {}
    for cp in read_checkpoint_records(bootstrap, job):
        for o in cp.input_offsets:
            out[(o.partition, o.key_bucket)] = o.offset
    return out


def _next_to_read(checkpointed: dict[tuple[int, int], int]) -> dict[int, int]:
    """Partition -> where a restart reads it from: the lowest checkpoint among its key buckets, + 1."""
    by_partition: dict[int, list[int]] = defaultdict(list)
    for (p, _kb), o in checkpointed.items():
        by_partition[p].append(o)
    return {p: min(os) + 1 for p, os in by_partition.items()}


def _config(tmp_path: Path, job: str, topic: str, task: str) -> Path:
    rec = tmp_path / "rec"
    rec.mkdir(exist_ok=True)
    return write_config(tmp_path / "job.toml", job_toml(job, f"recording_tasks:{task}", topic, rec))


@pytest.mark.parametrize("pool", [1, 2], ids=lambda n: f"pool{n}")
def test_after_a_clean_stop_the_group_holds_checkpoint_plus_one_and_lag_is_zero(
    broker, unique, tmp_path: Path, pool: int
) -> None:
    n = 4_000
    bootstrap = broker.bootstrap_servers
    topic, job = f"in-{unique}", f"lag-{unique}"
    seed_input(bootstrap, topic, PARTITIONS, n)
    cfg = _config(tmp_path, job, topic, "OrderTask")
    c = Container(cfg, bootstrap, f"job.container.thread.pool.size={pool}", log=tmp_path / "c.log")
    wait_until(lambda: count_lines(tmp_path / "rec") >= n, 120, f"{n} processed messages", c)
    assert c.stop() == 0, c.log_text()[-3000:]

    expected = _next_to_read(_checkpointed(bootstrap, job))
    assert expected == {p: n // PARTITIONS for p in range(PARTITIONS)}  # every message checkpointed
    committed = _group_offsets(bootstrap, f"samzamp-{job}-1", topic, PARTITIONS)
    assert committed == expected
    # Lag as a lag tool computes it: the end of each partition minus the group's offset. The end is
    # read to EOF (Tansu answers ListOffsets low, see ARCHITECTURE.md).
    ends = end_offsets(bootstrap, topic, list(range(PARTITIONS)))
    assert {p: ends[p] - committed[p] for p in range(PARTITIONS)} == dict.fromkeys(range(PARTITIONS), 0)


def test_the_group_named_in_the_consumer_config_gets_them_and_the_key_turns_it_off(
    broker, unique, tmp_path: Path
) -> None:
    n = 400
    bootstrap = broker.bootstrap_servers
    topic = f"in-{unique}"
    seed_input(bootstrap, topic, PARTITIONS, n)
    for job, overrides, group in [
        (f"named-{unique}", ["systems.kafka.consumer.group.id=lag-tools"], "lag-tools"),
        (f"off-{unique}", ["task.checkpoint.commit.group.offsets=false"], None),
    ]:
        (tmp_path / job).mkdir()
        cfg = _config(tmp_path / job, job, topic, "OrderTask")
        c = Container(cfg, bootstrap, *overrides, log=tmp_path / f"{job}.log")
        wait_until(lambda j=job: count_lines(tmp_path / j / "rec") >= n, 120, f"{n} processed messages", c)
        assert c.stop() == 0, c.log_text()[-3000:]
        assert _next_to_read(_checkpointed(bootstrap, job)) == {p: n // PARTITIONS for p in range(PARTITIONS)}
        default_group = _group_offsets(bootstrap, f"samzamp-{job}-1", topic, PARTITIONS)
        assert default_group == {}, "offsets went to the default group"
        if group is not None:
            assert _group_offsets(bootstrap, group, topic, PARTITIONS) == {
                p: n // PARTITIONS for p in range(PARTITIONS)
            }


def test_with_key_buckets_the_group_holds_the_slowest_bucket(broker, unique, tmp_path: Path) -> None:
    """job.elasticity.factor = 2, one partition: bucket 1's messages are slow (in a worker of their
    own), so at the stop bucket 0's checkpoint is far ahead of bucket 1's: the group gets bucket 1's."""
    n = 20_000
    bootstrap = broker.bootstrap_servers
    topic, job = f"in-{unique}", f"buckets-{unique}"
    seed_input(bootstrap, topic, 1, n)
    bucket0 = sum(1 for i in range(n) if key_bucket(str(i).encode(), i, 2) == 0)
    cfg = _config(tmp_path, job, topic, "KeyBucketTask")
    c = Container(
        cfg,
        bootstrap,
        "job.elasticity.factor=2",
        "job.container.thread.pool.size=2",
        "job.container.worker.batch.size=16",
        "test.busy.us=1000",
        "test.busy.bucket=1",
        log=tmp_path / "c.log",
    )
    rec = tmp_path / "rec"
    wait_until(lambda: count_lines(rec, "V 0 0 ") >= bucket0, 120, "every message of bucket 0 processed", c)
    assert c.stop() == 0, c.log_text()[-3000:]

    checkpointed = _checkpointed(bootstrap, job)
    assert checkpointed[(0, 0)] > checkpointed[(0, 1)] + 100, checkpointed  # else the test proves nothing
    assert _group_offsets(bootstrap, f"samzamp-{job}-1", topic, 1) == {0: checkpointed[(0, 1)] + 1}


class _Watch:
    """The job's group offsets and checkpoints, read again and again while it runs: one admin
    client, and the checkpoint topic read on from where the last read ended."""

    def __init__(self, bootstrap: str, job: str, topic: str) -> None:
        self._bootstrap = bootstrap
        self._group = ConsumerGroupTopicPartitions(
            f"samzamp-{job}-1", [TopicPartition(topic, p) for p in range(PARTITIONS)]
        )
        self._admin = AdminClient({"bootstrap.servers": bootstrap})
        self._topic = f"__samza_checkpoint_ver_1_for_{job}_1"
        self._read_to = 0  # the checkpoint topic's offsets below this are in ``checkpointed``
        self.checkpointed: dict[tuple[int, int], int] = {}

    def group(self) -> dict[int, int]:
        result = self._admin.list_consumer_group_offsets([self._group])[self._group.group_id].result(timeout=30)
        return {tp.partition: tp.offset for tp in result.topic_partitions if tp.offset >= 0}

    def next_to_read(self) -> dict[int, int]:
        """From the checkpoints up to the topic's end now (its end-of-partition event: a new reader
        each time, as a reader that reached the end once says so only after new records)."""
        c = Consumer(
            {
                "bootstrap.servers": self._bootstrap,
                "group.id": "test-watch",
                "enable.partition.eof": True,
                "fetch.wait.max.ms": 10,
            }
        )
        c.assign([TopicPartition(self._topic, 0, self._read_to)])
        deadline = time.monotonic() + 30
        try:
            while True:
                assert time.monotonic() < deadline, "the checkpoint topic's end was not reached"
                for m in c.consume(1000, 0.1):
                    err = m.error()
                    if err is not None:
                        if err.code() == PARTITION_EOF:
                            return _next_to_read(self.checkpointed)
                        continue
                    self._read_to = m.offset() + 1
                    key = decode_key(m.key())
                    assert key is not None
                    for o in decode_checkpoint(key.task_name, m.value()).input_offsets:
                        self.checkpointed[(o.partition, o.key_bucket)] = o.offset
        finally:
            c.close()

    def check(self, what: str) -> dict[int, int]:
        """The group offsets, once checked against the checkpoints. The group is read first: as
        checkpoints only move forward, a group offset past a later checkpoint + 1 was past the
        checkpoint of its own time too."""
        committed = self.group()
        next_to_read = self.next_to_read()
        ahead = {p: (o, next_to_read.get(p)) for p, o in committed.items() if o > next_to_read.get(p, 0)}
        assert not ahead, f"{what}: group offset ahead of checkpoint + 1 (partition: (group, checkpoint + 1)): {ahead}"
        return committed


def test_through_a_sigkill_loop_the_group_is_never_ahead_of_the_checkpoints(broker, unique, tmp_path: Path) -> None:
    n = 20_000
    kills = 5
    bootstrap = broker.bootstrap_servers
    topic, job = f"in-{unique}", f"kills-{unique}"
    seed_input(bootstrap, topic, PARTITIONS, n)
    cfg = _config(tmp_path, job, topic, "OrderTask")
    rec = tmp_path / "rec"
    rng = random.Random(33)
    watch = _Watch(bootstrap, job, topic)
    samples = []  # what the group held at each check before the last run

    def covered() -> bool:
        return len({(p, o) for _, p, o in records(rec)}) >= n

    for run in range(kills + 1):
        c = Container(cfg, bootstrap, "task.commit.ms=50", "test.busy.us=200", log=tmp_path / f"c{run}.log")
        c.wait_started()  # the checkpoint topic exists
        if run < kills:
            # Killed after a random share of the input, once this run has checkpointed (its tasks
            # record that as K lines), the group and the checkpoints checked all along.
            target = count_lines(rec) + rng.randint(n // 40, n // (kills + 2))
            checkpoints_before = count_lines(rec, "K ")
            deadline = time.monotonic() + 120
            while (count_lines(rec) < target or count_lines(rec, "K ") <= checkpoints_before) and not covered():
                assert c.alive(), c.log_text()[-3000:]
                assert time.monotonic() < deadline, f"run {run} made no progress\n{c.log_text()[-3000:]}"
                samples.append(watch.check(f"run {run}, running"))
            c.kill()
            samples.append(watch.check(f"after kill {run + 1}"))
        else:
            wait_until(covered, 180, "every message processed", c)
            assert c.stop() == 0, c.log_text()[-3000:]
    assert sum(1 for s in samples if s) >= kills, (
        f"the group held offsets in only {sum(1 for s in samples if s)} checks"
    )
    assert watch.check("after the clean stop") == {p: n // PARTITIONS for p in range(PARTITIONS)}


def test_commits_given_back_to_back_reach_the_group_in_order(broker, unique) -> None:
    """KafkaGroupOffsets directly: 300 commits without waiting; each is answered, and the group ends
    at the last, never an older one after a newer (one request at a time, the waiting ones merged)."""
    bootstrap = broker.bootstrap_servers
    topic = f"in-{unique}"
    seed_input(bootstrap, topic, 2, 10)
    clients = KafkaClientSettings("kafka", bootstrap, f"samzamp-order-{unique}")
    committer = KafkaGroupOffsets(clients, f"order-{unique}")
    answers: list[str | None] = []
    for i in range(300):
        committer.commit({SSP("kafka", topic, i % 2): i}, answers.append)
    committer.stop(30)
    assert answers == [None] * 300
    assert _group_offsets(bootstrap, f"order-{unique}", topic, 2) == {0: 298, 1: 299}
    late: list[str | None] = []
    committer.commit({SSP("kafka", topic, 0): 1}, late.append)  # after stop: refused, said
    assert late == ["the committer is stopped"]
