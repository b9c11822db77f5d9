"""A drain through an application's operator graph, one task driven by hand: its drain message goes
out after everything it sent before is acknowledged, the aggregate partition counts each producer
once and copies the drain to the other partitions, windows emit once and delete their state, and
what the task counted comes back after a restart within the run (from its checkpoint's control
state) but not in another run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from samzamp import IncomingMessageEnvelope, OutgoingMessageEnvelope, SystemStream, TaskContext
from samzamp.api.envelope import SystemStreamPartition
from samzamp.config import Config, validate
from samzamp.model.job_model import IntermediateStreamModel, TaskModel
from samzamp.operators.factory import job_task_class
from samzamp.serde.intermediate import (
    MAX_WATERMARK,
    ControlMessage,
    DrainMessage,
    EndOfStreamMessage,
    WatermarkMessage,
    aggregate_partition,
)
from samzamp.serde.registry import JsonSerde
from samzamp.storage.lmdb import LmdbEngine
from samzamp.storage.store import LmdbKeyValueStore
from samzamp.systems.partitioner import murmur2_partition
from samzamp.task.coordinator import ReadableCoordinator

PARTITIONS = 4
TOPIC = "shop-1-partition_by-by-key"
MID = SystemStream("kafka", TOPIC)
EVENTS = SystemStreamPartition("kafka", "events", 0)
AGG = aggregate_partition(TOPIC, PARTITIONS)
RUN = "run-1"
STORE = "shop-1-window-items"


class LingeringProducer:
    """A collector whose records reach their partition's log only on ``flush`` or when its linger
    ends (``linger_ends``), except control records, which go at once: records to different
    partitions travel in different batches, so nothing orders them across partitions."""

    def __init__(self) -> None:
        self.logs: dict[int, list[Any]] = {p: [] for p in range(PARTITIONS)}
        self.held: list[tuple[int, Any]] = []
        self.out: list[Any] = []

    def send(self, envelope: OutgoingMessageEnvelope) -> None:
        if envelope.system_stream != MID:
            self.out.append((envelope.key, envelope.message))
            return
        if isinstance(envelope.message, ControlMessage):
            assert envelope.partition is not None
            self.logs[envelope.partition].append(envelope.message)
            return
        key = JsonSerde().to_bytes(envelope.key)
        partition = envelope.partition if envelope.partition is not None else murmur2_partition(key, PARTITIONS)
        self.held.append((partition, envelope.message))

    def flush(self, timeout_s: float) -> int:
        self.linger_ends()
        return 0

    def linger_ends(self) -> None:
        for partition, message in self.held:
            self.logs[partition].append(message)
        self.held.clear()


def _task(tmp_path: Path, name: str, ssps: list[SystemStreamPartition], model_extra: dict[str, Any]) -> Any:
    st = validate(
        Config(
            {
                "job.name": "shop",
                "job.id": "1",
                "job.default.system": "kafka",
                "systems.kafka.samza.factory": "kafka",
                "app.class": "high_level_apps:SessionItems",
            }
        )
    )
    stores = {
        STORE: LmdbKeyValueStore(STORE, LmdbEngine(tmp_path / name / STORE, sync=False), JsonSerde(), JsonSerde(), None)
    }
    model = TaskModel(
        name,
        tuple(ssps),
        intermediate={f"kafka.{TOPIC}": IntermediateStreamModel(PARTITIONS, 2)},
        **{"run_id": RUN, **model_extra},
    )
    task = job_task_class(st)()
    task.init(TaskContext(name, frozenset(ssps), st.config, stores, task_model=model))
    task.stores = stores
    return task


def _events(task: Any, collector: Any, n: int) -> None:
    for i in range(n):
        task.process(
            IncomingMessageEnvelope(EVENTS, i, None, {"k": f"k{i % 5}", "v": i}), collector, ReadableCoordinator()
        )


@pytest.mark.parametrize("flushed", [True, False], ids=["flushed", "without-the-flush"])
def test_the_drain_message_goes_out_after_every_record_the_task_sent_before_it(tmp_path: Path, flushed: bool) -> None:
    mid = [SystemStreamPartition("kafka", TOPIC, 0)]
    task = _task(tmp_path, "Partition 0", [EVENTS, *mid], {})
    producer = LingeringProducer()
    if not flushed:
        task.graph.ctx.flush = lambda before: None  # the send path as Samza's, which does not flush
    _events(task, producer, 40)
    task.on_drain(producer, ReadableCoordinator())
    # The aggregate partition's task copies the drain to the others as soon as it counted every
    # producer (here: this task's message is the last it waited for).
    [named] = [m for m in producer.logs[AGG] if isinstance(m, DrainMessage)]
    assert named == DrainMessage("Partition 0", RUN)
    for p in range(PARTITIONS):
        if p != AGG:
            producer.logs[p].append(DrainMessage(None, RUN))
    producer.linger_ends()
    late = {
        p: [
            m
            for m in log[next(i for i, m in enumerate(log) if isinstance(m, DrainMessage)) :]
            if not isinstance(m, ControlMessage)
        ]
        for p, log in producer.logs.items()
    }
    landed_late = sum(len(records) for records in late.values())
    if flushed:
        assert landed_late == 0, late
        # Every record, the task's watermark and drain message, and the 3 copies.
        assert sum(len(log) for log in producer.logs.values()) == 40 + 2 + PARTITIONS - 1
    else:
        assert landed_late > 0  # the premise: without the flush, lingering records land after the marker


def test_the_aggregate_partition_counts_each_producer_once_then_copies_and_the_windows_emit_once(
    tmp_path: Path,
) -> None:
    agg = SystemStreamPartition("kafka", TOPIC, AGG)
    task = _task(tmp_path, f"Partition {AGG}", [agg], {})
    producer = LingeringProducer()
    for i in range(6):
        task.process(IncomingMessageEnvelope(agg, i, f"k{i % 3}", i), producer, ReadableCoordinator())
    coordinator = ReadableCoordinator()
    task.on_drain(producer, coordinator)  # its sources (none here) drained: it waits for the producers
    assert not coordinator.shutdown_requested

    def control(offset: int, message: ControlMessage) -> ReadableCoordinator:
        c = ReadableCoordinator()
        task.process(IncomingMessageEnvelope(agg, offset, None, message), producer, c)
        return c

    assert not control(6, DrainMessage("Partition 1", "an-earlier-run")).shutdown_requested  # skipped, counted
    assert not control(7, DrainMessage("Partition 1", RUN)).shutdown_requested
    assert not control(8, DrainMessage("Partition 1", RUN)).shutdown_requested  # a name counts once
    assert producer.out == []  # nothing fires before the stream drained
    state = task.control_state()
    assert state is not None
    assert state.run_id == RUN
    assert [(c.partition, c.names, c.done) for c in state.drain] == [(AGG, ["Partition 1"], False)]
    done = control(9, DrainMessage("Partition 3", RUN))
    assert done.commit_requested
    assert done.shutdown_requested
    copies = {p: log for p, log in producer.logs.items() if log}
    assert copies == {p: [DrainMessage(None, RUN)] for p in range(PARTITIONS) if p != AGG}
    assert sorted(producer.out) == [("k0", [0, 3]), ("k1", [1, 4]), ("k2", [2, 5])]  # one pane per key
    with task.stores[STORE].all() as entries:
        assert list(entries) == []  # each window deleted: a tombstone each in its changelog
    metrics = task.graph.ctx.metrics.snapshot()[f"TaskName-Partition {AGG}"]
    assert (metrics["drain-messages-received"], metrics["foreign-drain-messages"]) == (4, 1)


def test_what_a_task_counted_comes_back_after_a_restart_in_its_run_only(tmp_path: Path) -> None:
    agg = SystemStreamPartition("kafka", TOPIC, AGG)
    task = _task(tmp_path, "a", [agg], {})
    producer = LingeringProducer()
    task.process(
        IncomingMessageEnvelope(agg, 0, None, DrainMessage("Partition 1", RUN)), producer, ReadableCoordinator()
    )
    saved = task.control_state()
    for s in task.stores.values():
        s.close()
    again = _task(tmp_path, "b", [agg], {"control": saved})
    c = ReadableCoordinator()
    again.on_drain(producer, c)
    again.process(IncomingMessageEnvelope(agg, 1, None, DrainMessage("Partition 3", RUN)), producer, c)
    assert c.shutdown_requested  # Partition 1's message, before the restart, still counts
    for s in again.stores.values():
        s.close()
    other_run = _task(tmp_path, "c", [agg], {"control": saved, "run_id": "run-2"})
    c = ReadableCoordinator()
    other_run.on_drain(producer, c)
    other_run.process(IncomingMessageEnvelope(agg, 1, None, DrainMessage("Partition 3", "run-2")), producer, c)
    assert not c.shutdown_requested  # another run's count starts afresh


def test_a_drain_sends_the_end_of_time_watermark_then_the_drain_message(tmp_path: Path) -> None:
    task = _task(tmp_path, "Partition 0", [EVENTS, SystemStreamPartition("kafka", TOPIC, 0)], {})
    producer = LingeringProducer()
    _events(task, producer, 3)
    task.on_drain(producer, ReadableCoordinator())
    assert producer.logs[AGG][-2:] == [WatermarkMessage("Partition 0", MAX_WATERMARK), DrainMessage("Partition 0", RUN)]


def test_the_watermark_is_the_least_over_the_producers_and_never_goes_back(tmp_path: Path) -> None:
    agg = SystemStreamPartition("kafka", TOPIC, AGG)
    task = _task(tmp_path, f"Partition {AGG}", [agg], {})
    producer = LingeringProducer()
    window = next(op for op in task.graph.ops if op.op_id == STORE)
    copies: list[int | None] = []
    for offset, (name, ts) in enumerate(
        [("Partition 1", 5), ("Partition 3", 3), ("Partition 1", 2), ("Partition 3", 9)]
    ):
        task.process(
            IncomingMessageEnvelope(agg, offset, None, WatermarkMessage(name, ts)), producer, ReadableCoordinator()
        )
        copies.append(window.watermark)
    # None until both producers reported; then their least; a producer's older watermark changes nothing.
    assert copies == [None, 3, 3, 5]
    other = (AGG + 1) % PARTITIONS
    assert producer.logs[other] == [WatermarkMessage(None, 3), WatermarkMessage(None, 5)]


def test_an_end_of_stream_counted_before_a_restart_still_counts(tmp_path: Path) -> None:
    agg = SystemStreamPartition("kafka", TOPIC, AGG)
    task = _task(tmp_path, "a", [agg], {})
    producer = LingeringProducer()
    task.process(IncomingMessageEnvelope(agg, 0, "k1", 1), producer, ReadableCoordinator())
    task.process(
        IncomingMessageEnvelope(agg, 1, None, EndOfStreamMessage("Partition 1")), producer, ReadableCoordinator()
    )
    saved = task.control_state()
    assert saved is not None
    assert [(c.names, c.done) for c in saved.end_of_stream] == [(["Partition 1"], False)]
    task.before_commit()
    for s in task.stores.values():
        s.commit(0)
        s.close()
    again = _task(tmp_path, "a", [agg], {"control": saved})
    c = ReadableCoordinator()
    again.process(IncomingMessageEnvelope(agg, 2, None, EndOfStreamMessage("Partition 3")), producer, c)
    assert c.shutdown_requested  # the end of stream completed with the name counted before
    assert producer.out == [("k1", [1])]  # the window, restored, emitted at end of stream
    for s in again.stores.values():
        s.close()


def test_a_task_whose_intermediate_stream_ended_before_a_restart_ends_after_it(tmp_path: Path) -> None:
    agg = SystemStreamPartition("kafka", TOPIC, AGG)
    task = _task(tmp_path, "a", [agg], {})
    producer = LingeringProducer()
    task.process(IncomingMessageEnvelope(agg, 0, "k1", 1), producer, ReadableCoordinator())
    task.before_commit()
    for s in task.stores.values():
        s.commit(0)  # the window is in the store; what comes next is not committed
    for offset, name in ((1, "Partition 1"), (2, "Partition 3")):
        task.process(
            IncomingMessageEnvelope(agg, offset, None, EndOfStreamMessage(name)), producer, ReadableCoordinator()
        )
    saved = task.control_state()
    assert saved is not None
    assert [c.done for c in saved.end_of_stream] == [True]
    for s in task.stores.values():
        s.close()  # a crash after the checkpoint that says so, before the store's last commit
    producer.out.clear()
    again = _task(tmp_path, "a", [agg], {"control": saved})
    c = ReadableCoordinator()
    again.window(producer, c)  # no end-of-stream message will come again: the task ends anyway
    assert c.shutdown_requested
    assert producer.out == [("k1", [1])]  # at least once: the window the store kept emits again


def test_a_task_restarted_after_its_drain_messages_were_checkpointed_does_not_send_them_again(tmp_path: Path) -> None:
    ssps = [EVENTS, SystemStreamPartition("kafka", TOPIC, 0)]
    task = _task(tmp_path, "Partition 0", ssps, {})
    producer = LingeringProducer()
    task.on_drain(producer, ReadableCoordinator())
    saved = task.control_state()
    assert saved is not None
    assert saved.sources_drained
    sent = list(producer.logs[AGG])
    assert DrainMessage("Partition 0", RUN) in sent
    for s in task.stores.values():
        s.close()
    again = _task(tmp_path, "Partition 0", ssps, {"control": saved})
    again.on_drain(producer, ReadableCoordinator())  # the restarted container drains it again
    assert producer.logs[AGG] == sent  # one drain message per producer task, restarts or not
    state = again.control_state()
    assert state is not None
    assert state.sources_drained
