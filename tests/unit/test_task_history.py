"""The tasks' history: a task keeps its changelog partition across runs, new input partitions join
old tasks (input expansion), and task names sort by their numbers."""

from __future__ import annotations

import random

import pytest

from samzamp.api.envelope import SystemStreamPartition as SSP
from samzamp.coordinator.job_model_calculator import job_model
from samzamp.coordinator.metadata_store import CoordinatorStreamStore
from samzamp.coordinator.task_history import (
    CHANGELOG_NAMESPACE,
    SSP_NAMESPACE,
    TaskHistory,
    assign_changelog_partitions,
    read_task_history,
    record_task_history,
)
from samzamp.model.grouper import expand, group, task_order
from samzamp.systems.inmemory.system import InMemoryStreams, InMemorySystemAdmin, InMemorySystemProducer


def _ssps(n: int, stream: str = "in") -> list[SSP]:
    return [SSP("kafka", stream, p) for p in range(n)]


def _store() -> CoordinatorStreamStore:
    streams = InMemoryStreams()
    store = CoordinatorStreamStore(InMemorySystemAdmin(streams), InMemorySystemProducer(streams), "coord")
    store.create_topic()
    return store


def _read(store: CoordinatorStreamStore) -> TaskHistory:
    return read_task_history(store.namespace(CHANGELOG_NAMESPACE), store.namespace(SSP_NAMESPACE))


def _record(store: CoordinatorStreamStore, old: TaskHistory, new: TaskHistory) -> int:
    return record_task_history(store.namespace(CHANGELOG_NAMESPACE), store.namespace(SSP_NAMESPACE), old, new)


def test_task_names_sort_by_their_numbers() -> None:
    names = [f"Partition {p}" for p in (10, 2, 0, 11, 1)]
    assert sorted(names, key=task_order) == [
        "Partition 0",
        "Partition 1",
        "Partition 2",
        "Partition 10",
        "Partition 11",
    ]
    ssp_names = [str(s) for s in (SSP("kafka", "in", 10), SSP("kafka", "in", 9), SSP("kafka", "a", 12))]
    assert sorted(ssp_names, key=task_order) == [
        "SystemStreamPartition [kafka, a, 12]",
        "SystemStreamPartition [kafka, in, 9]",
        "SystemStreamPartition [kafka, in, 10]",
    ]


def test_a_new_job_maps_tasks_to_changelog_partitions_in_numeric_order() -> None:
    model, history = job_model("GroupByPartition", _ssps(12))
    assert {n: t.changelog_partition for n, t in model.tasks.items()} == {f"Partition {p}": p for p in range(12)}
    assert list(model.tasks) == [f"Partition {p}" for p in range(12)]
    assert history.changelog == {f"Partition {p}": p for p in range(12)}


def test_known_tasks_keep_their_partitions_and_new_ones_take_the_next_free() -> None:
    known = {"Partition 0": 3, "Partition 1": 0, "Partition 7": 5}  # as some earlier run recorded them
    out = assign_changelog_partitions(known, ["Partition 1", "Partition 10", "Partition 2", "Partition 0"])
    assert out == {"Partition 0": 3, "Partition 1": 0, "Partition 7": 5, "Partition 2": 6, "Partition 10": 7}


def test_new_input_partitions_join_the_task_of_partition_modulo_the_old_count() -> None:
    _, history = job_model("GroupByPartition", _ssps(4))
    model, after = job_model("GroupByPartition", _ssps(6), history)
    assert sorted(model.tasks) == [f"Partition {p}" for p in range(4)]
    assert model.tasks["Partition 0"].ssps == (SSP("kafka", "in", 0), SSP("kafka", "in", 4))
    assert model.tasks["Partition 1"].ssps == (SSP("kafka", "in", 1), SSP("kafka", "in", 5))
    assert {n: t.changelog_partition for n, t in model.tasks.items()} == {f"Partition {p}": p for p in range(4)}
    # Grown again from 6: the rule uses the recorded count (6); recorded SSPs stay where they are.
    model, _ = job_model("GroupByPartition", _ssps(8), after)
    assert model.tasks["Partition 0"].ssps == (SSP("kafka", "in", 0), SSP("kafka", "in", 4), SSP("kafka", "in", 6))
    assert model.tasks["Partition 1"].ssps == (SSP("kafka", "in", 1), SSP("kafka", "in", 5), SSP("kafka", "in", 7))


def test_without_expansion_new_partitions_are_new_tasks_on_new_changelog_partitions() -> None:
    _, history = job_model("GroupByPartition", _ssps(10))
    model, _ = job_model("GroupByPartition", _ssps(12), history, expansion=False)
    assert {n: t.changelog_partition for n, t in model.tasks.items()} == {f"Partition {p}": p for p in range(12)}


def test_expansion_under_group_by_system_stream_partition_and_a_new_stream() -> None:
    grouper = "GroupBySystemStreamPartition"
    previous = {ssp: name for name, members in group(grouper, _ssps(2)).items() for ssp in members}
    tasks = expand(grouper, [*_ssps(4), *_ssps(1, "other")], previous)
    assert tasks[str(SSP("kafka", "in", 0))] == {SSP("kafka", "in", 0), SSP("kafka", "in", 2)}
    assert tasks[str(SSP("kafka", "in", 1))] == {SSP("kafka", "in", 1), SSP("kafka", "in", 3)}
    assert tasks[str(SSP("kafka", "other", 0))] == {SSP("kafka", "other", 0)}  # a new stream: the grouper's


def test_the_history_round_trips_through_the_coordinator_stream_and_only_new_entries_are_written() -> None:
    store = _store()
    _, first = job_model("GroupByPartition", _ssps(4))
    assert _record(store, TaskHistory(), first) == 8  # 4 tasks, 4 SSPs
    assert _read(store) == first
    _, second = job_model("GroupByPartition", _ssps(6), _read(store))
    assert _record(store, first, second) == 2  # SSPs 4 and 5, which joined old tasks; no new task
    assert _read(store) == second
    with pytest.raises(ValueError, match="Partition 0"):
        _record(store, second, TaskHistory(second.ssp_tasks, {**second.changelog, "Partition 0": 9}))


def test_a_task_never_gets_another_tasks_changelog_partition_over_many_restarts() -> None:
    """Twenty starts with the inputs growing and shrinking, expansion on and off: once a task has
    a changelog partition it keeps it, and no two tasks ever share one."""
    rng = random.Random(7)
    store = _store()
    seen: dict[str, int] = {}
    for _ in range(20):
        counts = {"a": rng.randint(1, 12), "b": rng.randint(1, 6)}
        ssps = [s for stream, n in counts.items() for s in _ssps(n, stream)]
        known = _read(store)
        model, history = job_model("GroupByPartition", ssps, known, expansion=rng.random() < 0.5)
        _record(store, known, history)
        for name, task in model.tasks.items():
            assert seen.setdefault(name, task.changelog_partition) == task.changelog_partition, name
        partitions = list(history.changelog.values())
        assert len(partitions) == len(set(partitions))
        assert {s for t in model.tasks.values() for s in t.ssps} == set(ssps)  # every input has a task
    assert len(seen) > 4, "the inputs never grew: the test did not add tasks"
