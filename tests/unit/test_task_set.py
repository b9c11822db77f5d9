"""The run loop's membership of tasks (``TaskSet``): the tasks stay in the order they joined while
any leave, in any order, and a task that departed reads no lane any more."""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, field

from samzamp.api.envelope import SystemStreamPartition
from samzamp.container.task_set import TaskSet


class _State:
    def leave(self) -> None:
        pass


@dataclass(eq=False)
class _Task:
    name: str
    ssps: frozenset[SystemStreamPartition]
    state: _State = field(default_factory=_State)
    checkpointed: dict[SystemStreamPartition, int] = field(default_factory=dict)


def test_departures_in_any_order_keep_the_others_in_the_order_they_joined() -> None:
    loop = asyncio.new_event_loop()
    try:
        ts = TaskSet(frozenset(), loop, 60_000, lambda e: None)
        tasks = [_Task(f"Partition {p}", frozenset({SystemStreamPartition("kafka", "in", p)})) for p in range(300)]
        for t in tasks:
            ts.add(t)  # type: ignore[arg-type]
        leaving = random.Random(7).sample(tasks, 200)
        expected = list(tasks)
        for t in leaving:
            ts.leave(t)  # type: ignore[arg-type]
            ts.depart(t)  # type: ignore[arg-type]
            expected.remove(t)  # what a list of the tasks would hold
            assert [t.name for t in ts.tasks] == [t.name for t in expected]
        assert {ts.by_lane[s].name for t in expected for s in t.ssps} == {t.name for t in expected}
        assert not any(s in ts.by_lane for t in leaving for s in t.ssps)
        for t in expected:
            ts.vote(t, "")  # type: ignore[arg-type]
        assert ts.vote(expected[0], "every task voted")  # type: ignore[arg-type]
    finally:
        loop.close()
