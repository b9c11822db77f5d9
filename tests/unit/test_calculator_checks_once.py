"""A JobModelCalculator checks the tasks against the checkpoints once for a set of tasks: a
standalone leader computes a model at each rebalance, and the same tasks need no second check."""

from __future__ import annotations

from typing import Any

import pytest

from samzamp.api.errors import ConfigError
from samzamp.config import Config, validate
from samzamp.coordinator import job_model_calculator
from samzamp.coordinator.job_model_calculator import JobModelCalculator
from samzamp.coordinator.metadata_store import CoordinatorStreamStore
from samzamp.coordinator.task_history import TaskHistory
from samzamp.model.job_model import JobModel
from samzamp.systems.inmemory.system import InMemoryStreams, InMemorySystemAdmin, InMemorySystemProducer


def _calculator(
    streams: InMemoryStreams, checked: list[list[str]], refusals: list[Exception] | None = None
) -> JobModelCalculator:
    """Its check records the tasks it is given, and raises the first of ``refusals`` left."""
    settings = validate(
        Config(
            {
                "job.name": "job",
                "job.default.system": "mem",
                "task.class": "samzamp.examples.word_count:WordCountTask",
                "task.inputs": ["mem.in", "mem.more"],
                "systems.mem.samza.factory": "inmemory",
            }
        )
    )
    metadata = CoordinatorStreamStore(InMemorySystemAdmin(streams), InMemorySystemProducer(streams), "coord")
    metadata.create_topic()

    def check(model: JobModel) -> None:
        checked.append(sorted(model.tasks))
        if refusals:
            raise refusals.pop(0)

    def changelogs(model: JobModel, history: TaskHistory) -> None:
        pass

    return JobModelCalculator(settings, {"mem": InMemorySystemAdmin(streams)}, metadata, check, changelogs)


def test_the_same_tasks_are_checked_once_and_other_tasks_again() -> None:
    streams = InMemoryStreams()
    streams.create("in", 2)
    checked: list[list[str]] = []
    calculator = _calculator(streams, checked)
    first = calculator.calculate()
    assert calculator.calculate() == first
    assert checked == [["Partition 0", "Partition 1"]]
    streams.create("more", 3)  # a third task arrives: the new set is checked
    assert sorted(calculator.calculate().tasks) == ["Partition 0", "Partition 1", "Partition 2"]
    assert checked == [["Partition 0", "Partition 1"], ["Partition 0", "Partition 1", "Partition 2"]]
    calculator.calculate()
    assert len(checked) == 2


def test_a_check_that_refused_is_made_again() -> None:
    streams = InMemoryStreams()
    streams.create("in", 2)
    checked: list[list[str]] = []
    calculator = _calculator(streams, checked, [ConfigError("job.elasticity.factor", "the checkpoints cannot follow")])
    with pytest.raises(ConfigError):
        calculator.calculate()
    calculator.calculate()
    assert len(checked) == 2


def test_the_tasks_are_computed_again_only_when_the_partitions_or_the_history_changed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    streams = InMemoryStreams()
    streams.create("in", 2)
    calculator = _calculator(streams, [])
    computed: list[int] = []
    compute = job_model_calculator.tasks_over_inputs

    def counted(*args: Any, **kwargs: Any) -> tuple[JobModel, TaskHistory]:
        computed.append(1)
        return compute(*args, **kwargs)

    monkeypatch.setattr(job_model_calculator, "tasks_over_inputs", counted)
    first = calculator.calculate()  # a new job: computed, and its history recorded
    assert calculator.calculate() == first  # computed from the history recorded
    assert calculator.calculate() == first
    assert len(computed) == 2
    # Another leader recorded a task meanwhile (its history grew): computed again, and the task
    # keeps the changelog partition recorded for it.
    other = _calculator(streams, [])
    streams.create("more", 3)
    assert other.calculate().tasks["Partition 2"].changelog_partition == 2
    assert len(computed) == 3
    streams.partitions.pop("more")
    again = calculator.calculate()
    assert len(computed) == 4
    assert again.tasks == first.tasks
    streams.create("more", 3)  # the partitions changed
    fresh = _calculator(streams, []).calculate()
    assert calculator.calculate() == fresh
    assert len(computed) == 6  # fresh's and this one's


def test_the_task_history_is_read_in_one_read_of_the_coordinator_stream(monkeypatch: pytest.MonkeyPatch) -> None:
    streams = InMemoryStreams()
    streams.create("in", 2)
    calculator = _calculator(streams, [])
    reads: list[int] = []
    read = CoordinatorStreamStore.read

    def counted(self: CoordinatorStreamStore) -> dict[tuple[str, str], bytes]:
        reads.append(1)
        return read(self)

    monkeypatch.setattr(CoordinatorStreamStore, "read", counted)
    calculator.calculate()
    assert len(reads) == 1
    assert sorted(calculator.calculate().tasks) == ["Partition 0", "Partition 1"]
    assert len(reads) == 2
