"""The task an application runs as (Samza's StreamOperatorTask): one per task name, holding the
task's ``OperatorGraph``. The runtime runs it as it runs any task: inline, in a worker process
(the graph is built there, from the same ``describe``), or as a virtual task.

``task_class`` binds the class to an application's plan; a graph with an ``async def`` runs as an
``AsyncStreamTask`` on the loop (bounded by task.max.concurrency), any other as a ``StreamTask``.
"""

from __future__ import annotations

from typing import Any, ClassVar

from samzamp.api.collector import MessageCollector, TaskCoordinator
from samzamp.api.context import TaskContext
from samzamp.api.envelope import IncomingMessageEnvelope
from samzamp.api.task import (
    AsyncStreamTask,
    CheckpointListenerTask,
    ClosableTask,
    DrainListenerTask,
    EndOfStreamListenerTask,
    InitableTask,
    StreamTask,
    WindowableTask,
)
from samzamp.config.application import ApplicationPlan
from samzamp.model.control_state import ControlState
from samzamp.operators.graph import OperatorGraph, check_plan

__all__ = ["AsyncOperatorGraphTask", "OperatorGraphTask", "task_class"]


class _GraphTaskBase(
    InitableTask, WindowableTask, EndOfStreamListenerTask, DrainListenerTask, CheckpointListenerTask, ClosableTask
):
    plan: ClassVar[ApplicationPlan]

    def __init__(self) -> None:
        self.graph = OperatorGraph(self.plan)

    def init(self, context: TaskContext) -> None:
        self.graph.init(context)

    def window(self, collector: MessageCollector, coordinator: TaskCoordinator) -> None:
        self.graph.window(collector, coordinator)

    def on_end_of_stream(self, collector: MessageCollector, coordinator: TaskCoordinator) -> None:
        self.graph.sources_ended(collector, coordinator)

    def on_drain(self, collector: MessageCollector, coordinator: TaskCoordinator) -> None:
        self.graph.sources_drained(collector, coordinator)

    def before_commit(self) -> None:
        self.graph.before_commit()

    def control_state(self) -> ControlState | None:
        """What the graph counted of its run's control messages: the checkpoint carries it."""
        return self.graph.control_state()

    def close(self) -> None:
        self.graph.close()


class OperatorGraphTask(_GraphTaskBase, StreamTask):
    """An application's graph as a synchronous task."""

    def process(
        self, envelope: IncomingMessageEnvelope, collector: MessageCollector, coordinator: TaskCoordinator
    ) -> None:
        self.graph.process(envelope, collector, coordinator)


class AsyncOperatorGraphTask(_GraphTaskBase, AsyncStreamTask):
    """An application's graph with ``async def`` operators, run on the container's loop."""

    async def process_async(  # type: ignore[override]
        self, envelope: IncomingMessageEnvelope, collector: MessageCollector, coordinator: TaskCoordinator
    ) -> Any:
        await self.graph.process_async(envelope, collector, coordinator)


def task_class(plan: ApplicationPlan) -> type:
    """The task class that runs ``plan``'s graph (checked: ``graph.check_plan``)."""
    check_plan(plan)
    base = AsyncOperatorGraphTask if plan.is_async() else OperatorGraphTask
    name = plan.app_class.replace(":", ".").rsplit(".", 1)[-1]
    return type(f"{name}Task", (base,), {"plan": plan, "__module__": __name__})
