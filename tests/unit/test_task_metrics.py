"""A task's own metrics (``context.metrics``, Samza's task metrics registry): counters, gauges and
timers in the task's group ``TaskName-<task>``, in the container's registry beside samzamp's, and
read back from a ``TestRunner`` result."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from samzamp import InitableTask, StreamTask, TaskContext
from samzamp.api.metrics import Counter, Gauge, TaskMetrics, Timer
from samzamp.testing import TestRunner


class WordMetricsTask(StreamTask, InitableTask):
    def init(self, context: TaskContext) -> None:
        self.words = context.metrics.counter("words")
        self.lines = context.metrics.timer("line-ns")
        self.longest = 0
        context.metrics.gauge("longest-line", fn=lambda: self.longest)
        self.last = context.metrics.gauge("last-word")
        context.metrics.gauge("broken", fn=lambda: 1 // 0)

    def process(self, envelope: Any, collector: Any, coordinator: Any) -> None:
        words = envelope.message.split()
        self.words.inc(len(words))
        self.lines.update(len(words) * 1000)
        self.longest = max(self.longest, len(words))
        self.last.set(words[-1])


def test_a_tasks_own_metrics_are_in_its_group_and_read_back_from_the_result(caplog: pytest.LogCaptureFixture) -> None:
    lines = ["a b c", "d e", "f g h i", "j"]
    with caplog.at_level(logging.WARNING):
        result = TestRunner(WordMetricsTask).add_input("lines", lines, partitions=2).run()
    assert result.tasks == ["Partition 0", "Partition 1"]
    per_task = [result.task_metrics(t) for t in result.tasks]
    assert sum(m["words"] for m in per_task) == 10
    assert sum(m["line-ns"]["count"] for m in per_task) == 4
    assert max(m["line-ns"]["max"] for m in per_task) == 4000
    assert max(m["longest-line"] for m in per_task) == 4
    assert {m["last-word"] for m in per_task} <= {"c", "e", "i", "j"}
    assert all(m["broken"] is None for m in per_task)
    # samzamp's metrics of the task sit beside them, in the same group
    assert sum(m["process-calls"] for m in per_task) == 4
    assert result.metrics["TaskName-Partition 0"] == per_task[0]
    failed = [r for r in caplog.records if "gauge 'broken' failed" in r.getMessage()]
    assert len(failed) == 2, "each task's failing gauge is logged once, not at each report"


def test_task_metrics_names_the_tasks_when_it_needs_one() -> None:
    result = TestRunner(WordMetricsTask).add_input("lines", ["a", "b"], partitions=2).run()
    with pytest.raises(KeyError, match="Partition 0"):
        result.task_metrics()
    with pytest.raises(KeyError, match="no task 'Partition 7'"):
        result.task_metrics("Partition 7")


class Claims(StreamTask, InitableTask):
    """Asks for a counter named by its config."""

    def init(self, context: TaskContext) -> None:
        context.metrics.counter(context.config["claim.name"])

    def process(self, envelope: Any, collector: Any, coordinator: Any) -> None:
        pass


@pytest.mark.parametrize("name", ["send-calls", "process-calls", "test-lines-0-offset"])
def test_samzamps_own_names_are_refused_naming_the_task(name: str) -> None:
    with pytest.raises(Exception, match=f"'Partition 0'.*{name!r} is one of samzamp's own metrics"):
        TestRunner(Claims, {"claim.name": name}).add_input("lines", ["a"]).run()


def test_one_name_is_one_kind_of_metric() -> None:
    metrics = TaskMetrics("T")
    c = metrics.counter("n")
    assert metrics.counter("n") is c
    with pytest.raises(ValueError, match="'n' of TaskName-T is a Counter, not a Gauge"):
        metrics.gauge("n")
    with pytest.raises(ValueError, match="non-empty string"):
        metrics.timer("")


def test_a_context_made_by_hand_has_metrics_of_its_own() -> None:
    context = TaskContext("Partition 0", frozenset(), {})
    words = context.metrics.counter("words")
    words.inc(3)
    assert isinstance(words, Counter)
    assert isinstance(context.metrics.gauge("g"), Gauge)
    assert isinstance(context.metrics.timer("t"), Timer)
    assert context.metrics.counter("words").count == 3


def test_a_counter_never_goes_down() -> None:
    c = TaskMetrics("T").counter("n")
    with pytest.raises(ValueError, match="only goes up"):
        c.inc(-1)
