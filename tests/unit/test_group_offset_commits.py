"""What each checkpoint commits to the consumer group for lag tools (samzamp.commit.group_offsets):
which partitions, which offset, who commits it, and how failures are handled."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import pytest

from samzamp.api.envelope import SystemStreamPartition as SSP
from samzamp.commit.group_offsets import LOG_EVERY_S, GroupOffsets, PartitionReaders
from samzamp.config import validate
from samzamp.config.config import Config
from samzamp.metrics.registry import MetricsRegistry
from samzamp.systems.kafka.client_config import KafkaClientSettings
from samzamp.systems.kafka.consumer import consumer_config, consumer_group


@dataclass
class Task:
    name: str
    ssps: frozenset[SSP]
    checkpointed: dict[SSP, int] = field(default_factory=dict)


@dataclass
class Committer:
    group: str = "g"
    calls: list[dict[SSP, int]] = field(default_factory=list)
    dones: list[Callable[[str | None], None]] = field(default_factory=list)

    def commit(self, offsets: Mapping[SSP, int], done: Callable[[str | None], None]) -> None:
        self.calls.append(dict(offsets))
        self.dones.append(done)

    def stop(self, timeout_s: float) -> None:
        pass


def _p(partition: int, bucket: int = -1, stream: str = "in") -> SSP:
    return SSP("kafka", stream, partition, bucket)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _offsets(committer: Committer | None = None, **kwargs) -> tuple[GroupOffsets, Committer, MetricsRegistry]:
    c = committer or Committer()
    metrics = MetricsRegistry()
    return GroupOffsets({"kafka": c}, metrics, **kwargs), c, metrics


def test_a_partition_gets_the_next_offset_after_its_checkpoint() -> None:
    g, c, _ = _offsets()
    t = Task("Partition 0", frozenset({_p(0), _p(1)}), {_p(0): 41, _p(1): 9})
    g.checkpointed(t, [t])
    assert c.calls == [{_p(0): 42, _p(1): 10}]


def test_an_unchanged_offset_is_not_sent_again_and_a_changed_one_is() -> None:
    g, c, _ = _offsets()
    t = Task("Partition 0", frozenset({_p(0), _p(1)}), {_p(0): 41, _p(1): 9})
    g.checkpointed(t, [t])
    g.checkpointed(t, [t])
    t.checkpointed = {_p(0): 50, _p(1): 9}
    g.checkpointed(t, [t])
    assert c.calls == [{_p(0): 42, _p(1): 10}, {_p(0): 51}]


def test_key_buckets_give_the_lowest_bucket_and_only_bucket_0_s_processor_commits() -> None:
    g, c, _ = _offsets(sole_processor=False)
    b0 = Task("Partition 0_0_2", frozenset({_p(0, 0)}), {_p(0, 0): 100})
    b1 = Task("Partition 0_1_2", frozenset({_p(0, 1)}), {_p(0, 1): 70})
    g.checkpointed(b0, [b0, b1])
    g.checkpointed(b1, [b0, b1])  # unchanged: the minimum is the same
    assert c.calls == [{_p(0): 71}]
    # A processor holding only bucket 1 of a partition commits nothing for it.
    g2, c2, _ = _offsets(sole_processor=False)
    g2.checkpointed(b1, [b1])
    assert c2.calls == []


def test_a_partition_whose_reader_has_no_checkpoint_for_it_is_left_alone() -> None:
    g, c, _ = _offsets()
    b0 = Task("Partition 0_0_2", frozenset({_p(0, 0)}), {_p(0, 0): 100})
    b1 = Task("Partition 0_1_2", frozenset({_p(0, 1)}), {})  # never processed anything
    g.checkpointed(b0, [b0, b1])
    assert c.calls == []


def test_a_broadcast_partition_gets_the_minimum_over_its_tasks_on_a_sole_processor_only() -> None:
    shared = _p(0, stream="rules")
    t0 = Task("Partition 0", frozenset({_p(0), shared}), {_p(0): 5, shared: 30})
    t1 = Task("Partition 1", frozenset({_p(1), shared}), {_p(1): 6, shared: 12})
    g, c, _ = _offsets(broadcast={shared})
    g.checkpointed(t0, [t0, t1])
    assert c.calls == [{_p(0): 6, shared: 13}]
    standalone, c2, _ = _offsets(broadcast={shared}, sole_processor=False)
    standalone.checkpointed(t0, [t0, t1])
    assert c2.calls == [{_p(0): 6}]


def test_only_systems_with_a_committer_are_committed() -> None:
    g, c, _ = _offsets()
    t = Task("Partition 0", frozenset({_p(0), SSP("mem", "in", 0)}), {_p(0): 1, SSP("mem", "in", 0): 1})
    g.checkpointed(t, [t])
    assert c.calls == [{_p(0): 2}]


def test_a_failure_is_counted_logged_once_a_minute_and_sent_again(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    g, c, metrics = _offsets(clock=clock)
    t = Task("Partition 0", frozenset({_p(0)}), {_p(0): 1})
    caplog.set_level(logging.WARNING, "samzamp.commit.group_offsets")
    for i in range(3):
        g.checkpointed(t, [t])
        c.dones[-1]("broker says no")
        assert len(c.calls) == i + 1  # forgotten after the failure: sent again
    assert metrics.counter("OffsetManagerMetrics", "group-commit-failures").count == 3
    assert len(caplog.records) == 1
    assert "kafka.in[0] to group 'g': broker says no" in caplog.records[0].getMessage()
    clock.now += LOG_EVERY_S
    g.checkpointed(t, [t])
    c.dones[-1]("still no")
    assert len(caplog.records) == 2
    assert "2 more failure(s)" in caplog.records[1].getMessage()


def test_a_committer_that_raises_never_fails_the_commit() -> None:
    class Raising(Committer):
        def commit(self, offsets: Mapping[SSP, int], done: Callable[[str | None], None]) -> None:
            raise RuntimeError("boom")

    g, _, metrics = _offsets(Raising())
    t = Task("Partition 0", frozenset({_p(0)}), {_p(0): 1})
    g.checkpointed(t, [t])
    assert metrics.counter("OffsetManagerMetrics", "group-commit-failures").count == 1


@pytest.mark.parametrize(
    ("extra", "group"),
    [
        ({}, "samzamp-wc-7"),
        ({"systems.kafka.consumer.group.id": "lag-tools"}, "lag-tools"),
        ({"systems.kafka.kafka.group.id": "everyone"}, "everyone"),
    ],
)
def test_offsets_go_to_the_group_the_input_consumer_is_in(extra: dict[str, str], group: str) -> None:
    settings = validate(
        Config(
            {
                "job.name": "wc",
                "job.id": "7",
                "task.class": "samzamp.examples.word_count:WordCountTask",
                "task.inputs": ["kafka.in"],
                "systems.kafka.samza.factory": "kafka",
                "systems.kafka.bootstrap.servers": "127.0.0.1:1",
                **extra,
            }
        )
    )
    clients = KafkaClientSettings.of("wc", "7", settings.systems["kafka"], "127.0.0.1:1")
    # KafkaGroupOffsets.group is consumer_group(clients, <the processor's default group>).
    assert consumer_group(clients, "samzamp-wc-7") == group
    assert consumer_config(clients, "consumer", "samzamp-wc-7")["group.id"] == group


def test_the_readers_index_kept_as_tasks_come_and_go_gives_what_the_task_list_gives() -> None:
    """The container keeps one index of partition -> readers (a commit then costs what its task
    reads); after tasks arrive and leave it must answer as the task list it stands for."""
    import random

    rnd = random.Random(7)
    tasks = [
        Task(f"t{i}", frozenset({_p(i % 5, i % 3 - 1 if i % 5 else -1), _p(9, stream="rules")}), {}) for i in range(30)
    ]
    for t in tasks:
        t.checkpointed = {s: rnd.randrange(100) for s in t.ssps}
    index = PartitionReaders()
    present: list[Task] = []
    for step in range(200):
        t = rnd.choice(tasks)
        if any(p is t for p in present):
            index.remove(t)
            present = [p for p in present if p is not t]
        else:
            index.add(t)
            present.append(t)
        if step % 10 or not present:
            continue
        fresh = PartitionReaders(present)
        for part in {_p(i) for i in range(5)} | {_p(9, stream="rules")}:
            assert [(r.name, s) for r, s in index.of(part)] == [(r.name, s) for r, s in fresh.of(part)]
        g, _, _ = _offsets(broadcast={_p(9, stream="rules")})
        for t in present:
            assert g.offsets(t, index) == g.offsets(t, present)
