"""Starting a task: build its runtime, open and restore its stores, call init. Both hosts start a
task with ``start_task``, so the sequence is written once: the container for a task on its loop,
a worker process for a task it is given.

The restore may block for long (it reads the changelog): ``blocking`` says how the host runs it
(``asyncio.to_thread`` on the event loop; ``run_here`` in a worker, which has nothing else to do
meanwhile). With ``run_here`` the coroutine never suspends, and ``run_sync`` runs it to its result
without an event loop, so the task's init in a worker runs exactly as in a plain function call.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from samzamp.config.settings import JobSettings
from samzamp.metrics.registry import MetricsRegistry
from samzamp.model.job_model import TaskModel
from samzamp.storage.manager import RestoreReport, TaskStorage
from samzamp.systems.base import SystemProducer
from samzamp.task.runtime import SerdesOf, TaskFactory, TaskRuntime, build_task_runtime

__all__ = ["Blocking", "TaskStarter", "run_here", "run_sync", "start_task"]

T = TypeVar("T")

# How a host runs a call that may block for long: it returns the call's result.
Blocking = Callable[[Callable[[], list[RestoreReport]]], Awaitable[list[RestoreReport]]]
# A host's way to start the task of a model: its runtime, started, and its stores' restore reports.
TaskStarter = Callable[[TaskModel], Awaitable[tuple[TaskRuntime, list[RestoreReport]]]]


async def run_here(call: Callable[[], T]) -> T:
    """``Blocking`` for a host with nothing else to run meanwhile: call it now."""
    return call()


def run_sync(coroutine: Coroutine[Any, Any, T]) -> T:
    """The result of a coroutine that never suspends (``start_task`` with ``run_here``)."""
    try:
        coroutine.send(None)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    coroutine.close()
    raise RuntimeError("run_sync: the coroutine waited for something; it needs an event loop")


async def start_task(
    settings: JobSettings,
    model: TaskModel,
    task_factory: TaskFactory,
    producers: dict[str, SystemProducer],
    serdes_of: SerdesOf,
    metrics: MetricsRegistry,
    storage: Callable[[TaskModel], TaskStorage],
    *,
    blocking: Blocking = run_here,
    fallback_system: str | None = None,
) -> tuple[TaskRuntime, list[RestoreReport]]:
    """Start task ``model`` (this task, with its checkpoint's markers): build its runtime, open and
    restore its stores (``storage`` makes them, when the job has any), then init it; the runtime
    and one restore report per store. Raises what failed, naming the task."""
    runtime = build_task_runtime(
        settings.task, model, task_factory, producers, serdes_of, metrics, fallback_system=fallback_system
    )
    reports: list[RestoreReport] = []
    if settings.stores:
        reports = await blocking(functools.partial(runtime.open_stores, storage(model)))
    runtime.init(settings.config)
    return runtime, reports
