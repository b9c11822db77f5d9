"""What a task calls back into while it runs: the collector for outputs and the coordinator."""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod

from samzamp.api.envelope import OutgoingMessageEnvelope

__all__ = ["MessageCollector", "RequestScope", "TaskCoordinator"]


class MessageCollector(ABC):
    """Sends a task's output messages.

    Contract: call ``send`` only from within process/window/on_end_of_stream (or, for an async task,
    before its callback completes). Sends are asynchronous; a commit covers a message only after
    every send made while processing it has been acknowledged by the system.
    """

    __slots__ = ()

    @abstractmethod
    def send(self, envelope: OutgoingMessageEnvelope) -> None:
        """Queue ``envelope`` for delivery to its system stream."""


class RequestScope(enum.Enum):
    """How far a coordinator request reaches."""

    CURRENT_TASK = "current-task"
    ALL_TASKS_IN_CONTAINER = "all-tasks-in-container"


class TaskCoordinator(ABC):
    """Lets a task ask the container to commit or to shut down.

    Requests made while processing a message take effect once that message is complete (and, with
    task.max.concurrency > 1, once every earlier message of the task is complete too). A commit
    requested during process covers exactly up to that message.
    """

    __slots__ = ()

    @abstractmethod
    def commit(self, scope: RequestScope = RequestScope.CURRENT_TASK) -> None:
        """Request a checkpoint of this task (or of every task in the container)."""

    @abstractmethod
    def shutdown(self, scope: RequestScope = RequestScope.CURRENT_TASK) -> None:
        """Vote to shut down. CURRENT_TASK is a vote: the container stops once every task has
        voted. ALL_TASKS_IN_CONTAINER stops the container (after pending commits)."""
