"""How a worker is named in what the pool says: a worker may hold thousands of tasks, so its
description (errors, its exit) names a few and counts the rest, and what is said once per task
names the worker alone (naming all its tasks in each such line cost a start-up tasks squared)."""

from __future__ import annotations

from samzamp.dispatch.process.pool import WorkerHandle


def test_a_worker_of_many_tasks_is_described_by_its_first_few() -> None:
    w = WorkerHandle(1, 1 << 16)
    w.pid = 42
    w.task_names = {i: f"Partition {i}" for i in range(2_000)}
    shown = ", ".join(f"'Partition {i}'" for i in range(8))
    assert w.describe() == f"worker 1 (pid 42; tasks {shown} and 1992 more)"
    assert w.short() == "worker 1 (pid 42)"


def test_a_worker_of_a_few_tasks_is_described_by_all_of_them() -> None:
    w = WorkerHandle(0, 1 << 16)
    w.pid = 7
    assert w.describe() == "worker 0 (pid 7; no tasks)"
    w.task_names = {i: f"T{i}" for i in range(8)}
    assert w.describe() == f"worker 0 (pid 7; tasks {', '.join(repr(f'T{i}') for i in range(8))})"
