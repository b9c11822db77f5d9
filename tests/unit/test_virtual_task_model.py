"""Virtual tasks in the job model and their checkpoints: Samza's task names with key buckets, the
broadcast inputs every task reads, and where a task starts when job.elasticity.factor changed
(split: the ancestor's offset; merge: the smallest of a whole factor's descendants)."""

from __future__ import annotations

import pytest

from samzamp.api.envelope import SystemStream, SystemStreamPartition
from samzamp.api.errors import ConfigError
from samzamp.commit.checkpoint import CheckpointV1, SSPOffset
from samzamp.commit.elasticity import check_state_factor, starting_checkpoints
from samzamp.config.config import Config
from samzamp.config.settings import JobSettings
from samzamp.coordinator.job_model_calculator import job_model
from samzamp.model.grouper import TaskName, parse_task_name, task_order, virtual_task_name
from samzamp.model.job_model import TaskModel

IN = [SystemStreamPartition("kafka", "in", p) for p in range(2)]
BC = SystemStreamPartition("kafka", "bc", 0)


@pytest.mark.parametrize(
    ("name", "parsed"),
    [
        ("Partition 3", TaskName("Partition 3", 0, 1)),
        ("Partition 3_1_4", TaskName("Partition 3", 1, 4)),
        ("SystemStreamPartition [kafka, in, 3]", TaskName("SystemStreamPartition [kafka, in, 3]", 0, 1)),
        ("SystemStreamPartition [kafka, my_in_2, 3, 1]_4", TaskName("SystemStreamPartition [kafka, my_in_2, 3]", 1, 4)),
    ],
)
def test_task_names_round_trip(name: str, parsed: TaskName) -> None:
    assert parse_task_name(name) == parsed
    assert virtual_task_name(*parsed) == name


@pytest.mark.parametrize("grouper", ["GroupByPartition", "GroupBySystemStreamPartition"])
def test_each_partition_splits_into_factor_tasks_each_reading_one_bucket_and_every_broadcast_partition(
    grouper: str,
) -> None:
    model, history = job_model(grouper, [*IN, BC], factor=2, broadcast={BC})
    if grouper == "GroupByPartition":
        assert list(model.tasks) == ["Partition 0_0_2", "Partition 0_1_2", "Partition 1_0_2", "Partition 1_1_2"]
    else:
        assert list(model.tasks) == [f"SystemStreamPartition [kafka, in, {p}, {kb}]_2" for p in (0, 1) for kb in (0, 1)]
    for name, task in model.tasks.items():
        me = parse_task_name(name)
        assert me.factor == 2
        assert task.ssps[-1] == BC  # read whole by every task
        (mine,) = task.ssps[:-1]
        assert mine.key_bucket == me.key_bucket
    assert BC not in history.ssp_tasks  # no task owns a broadcast partition
    assert sorted(model.tasks, key=task_order) == list(model.tasks)
    assert [model.tasks[n].changelog_partition for n in model.tasks] == [0, 1, 2, 3]


def test_factor_one_keeps_the_plain_names() -> None:
    model, _ = job_model("GroupByPartition", IN, factor=1)
    assert list(model.tasks) == ["Partition 0", "Partition 1"]


def test_expansion_at_a_new_factor_keeps_a_partitions_task_by_its_plain_name() -> None:
    # Partition 3 joined "Partition 1" (3 % 2) at factor 1; at factor 2 its buckets go to Partition 1's buckets.
    _, history = job_model("GroupByPartition", IN)
    _, history = job_model("GroupByPartition", [*IN, *(IN[0]._replace(partition=p) for p in (2, 3))], history)
    model, _ = job_model("GroupByPartition", [IN[0]._replace(partition=p) for p in range(4)], history, factor=2)
    assert {s for s in model.tasks["Partition 1_1_2"].ssps} == {
        IN[0]._replace(partition=p, key_bucket=1) for p in (1, 3)
    }


def _cp(
    task: str, offsets: dict[SystemStreamPartition, int], markers: dict[str, str] | None = None, at: int = 1
) -> CheckpointV1:
    entries = [SSPOffset(s.system, s.stream, s.partition, o, s.key_bucket) for s, o in offsets.items()]
    return CheckpointV1(f"{at}-000000", task, entries, markers or {})


def _task(name: str) -> TaskModel:
    me = parse_task_name(name)
    return TaskModel(name, (IN[0]._replace(key_bucket=me.key_bucket if me.factor > 1 else -1), BC))


def _b(kb: int) -> SystemStreamPartition:
    return IN[0]._replace(key_bucket=kb)


def test_split_inherits_the_ancestors_offset_for_every_ssp_broadcast_included() -> None:
    last = {
        "Partition 0_1_2": _cp("Partition 0_1_2", {_b(1): 40, BC: 7}),
        "Partition 0_0_2": _cp("Partition 0_0_2", {_b(0): 30, BC: 9}),
    }
    got = starting_checkpoints([_task("Partition 0_3_4"), _task("Partition 0_0_4")], last)
    assert got["Partition 0_3_4"] == {_b(3): 40, BC: 7}
    assert got["Partition 0_0_4"] == {_b(0): 30, BC: 9}


def test_merge_takes_the_smallest_of_a_whole_factor_of_descendants() -> None:
    last = {
        "Partition 0_1_4": _cp("Partition 0_1_4", {_b(1): 50}),
        "Partition 0_3_4": _cp("Partition 0_3_4", {_b(3): 35}),
        "Partition 0_1_2": _cp("Partition 0_1_2", {_b(1): 20}),  # its own, older than the descendants'
    }
    assert starting_checkpoints([_task("Partition 0_1_2")], last)["Partition 0_1_2"] == {_b(1): 35}
    # A descendant that never checkpointed says nothing beyond the ancestors: back to the task's own.
    del last["Partition 0_3_4"]
    assert starting_checkpoints([_task("Partition 0_1_2")], last)["Partition 0_1_2"] == {_b(1): 20}


def test_factor_one_is_every_factors_ancestor() -> None:
    last = {"Partition 0": _cp("Partition 0", {IN[0]: 99})}
    assert starting_checkpoints([_task("Partition 0_2_4")], last)["Partition 0_2_4"] == {_b(2): 99}


def test_a_factor_neither_dividing_nor_divided_is_refused_unless_offsets_are_reset() -> None:
    last = {"Partition 0_1_2": _cp("Partition 0_1_2", {_b(1): 40})}
    with pytest.raises(ConfigError) as e:
        starting_checkpoints([_task("Partition 0_1_3")], last)
    assert e.value.key == "job.elasticity.factor"
    assert "neither divides the other" in str(e.value)
    assert starting_checkpoints([_task("Partition 0_1_3")], last, reset=[SystemStream("kafka", "in")]) == {
        "Partition 0_1_3": {}
    }
    # Once the task has checkpoints of its own (a run with reset offsets), it starts from them.
    last["Partition 0_1_3"] = _cp("Partition 0_1_3", {_b(1): 45})
    assert starting_checkpoints([_task("Partition 0_1_3")], last)["Partition 0_1_3"] == {_b(1): 45}


def test_state_written_under_another_factor_since_must_be_rebucketed() -> None:
    old = {"Partition 0_1_2": _cp("Partition 0_1_2", {_b(1): 40}, {"counts": "12"}, at=5)}
    with pytest.raises(ConfigError) as e:
        check_state_factor([_task("Partition 0_1_4")], old, {"counts"})
    assert e.value.key == "job.elasticity.factor"
    assert "samzamp rebucket-stores job.toml --from-factor 2" in str(e.value)
    check_state_factor([_task("Partition 0_1_4")], old, set())  # no changelogged store: nothing to lose
    # Its own state, newer than the other factor's: it starts; older: the other factor's is newer state.
    check_state_factor(
        [_task("Partition 0_1_4")],
        {**old, "Partition 0_1_4": _cp("Partition 0_1_4", {}, {"counts": "3"}, at=6)},
        {"counts"},
    )
    with pytest.raises(ConfigError):
        check_state_factor(
            [_task("Partition 0_1_4")],
            {**old, "Partition 0_1_4": _cp("Partition 0_1_4", {}, {"counts": "3"}, at=4)},
            {"counts"},
        )


BASE = {"job.name": "j", "task.class": "a:B", "task.inputs": ["kafka.in"], "systems.kafka.samza.factory": "kafka"}


def test_broadcast_inputs_in_samzas_forms() -> None:
    st = JobSettings.from_config(Config({**BASE, "task.broadcast.inputs": ["kafka.bc#0", "kafka.in#[2-3]"]})).task
    assert st.broadcast_inputs == {BC, SystemStreamPartition("kafka", "in", 2), SystemStreamPartition("kafka", "in", 3)}
    assert st.broadcast_only == {SystemStream("kafka", "bc")}
    assert SystemStream("kafka", "bc") in st.inputs


@pytest.mark.parametrize("bad", ["kafka.bc", "kafka.bc#x", "kafka.bc#[3-1]", "nosuch.bc#0"])
def test_a_bad_broadcast_input_names_the_key(bad: str) -> None:
    with pytest.raises(ConfigError) as e:
        JobSettings.from_config(Config({**BASE, "task.broadcast.inputs": [bad]}))
    assert e.value.key == "task.broadcast.inputs"
