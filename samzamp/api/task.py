"""The task interfaces a job author implements. A task class mixes in what it needs::

    class WordCount(StreamTask, InitableTask, WindowableTask):
        def init(self, context): ...
        def process(self, envelope, collector, coordinator): ...
        def window(self, collector, coordinator): ...

Concurrency contract (Samza's guaranteed semantics for a task's calls, from its Async API and
Multithreading guide; the container's event loop enforces them):

- process/process_async is invoked in order, one task instance at a time, from the container's
  event loop (or, for a synchronous task with job.container.thread.pool.size >= 2, from the one worker
  process that owns the task).
- With task.max.concurrency = 1, a message's completion happens before the next process call.
- window(), commit, on_end_of_stream and on_drain run only when no process call of the task is in flight, and
  no process call starts until they are done.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any

from samzamp.api.collector import MessageCollector, TaskCoordinator
from samzamp.api.envelope import IncomingMessageEnvelope

if TYPE_CHECKING:
    from samzamp.api.context import TaskContext

__all__ = [
    "AsyncStreamTask",
    "CheckpointListenerTask",
    "ClosableTask",
    "DrainListenerTask",
    "EndOfStreamListenerTask",
    "InitableTask",
    "StreamTask",
    "TaskCallback",
    "WindowableTask",
]


class TaskCallback(ABC):
    """Completes one process_async call. Call exactly one of the two methods, exactly once.

    Both are safe to call from any thread. Calling either a second time fails the container with
    IllegalCallbackStateError, as Samza does.
    """

    __slots__ = ()

    @abstractmethod
    def complete(self) -> None:
        """The message is fully processed: its outputs have been sent."""

    @abstractmethod
    def failure(self, error: BaseException) -> None:
        """Processing failed: the container stops without checkpointing past this message."""


class StreamTask(ABC):
    """A synchronous task: ``process`` returns when the message is fully processed."""

    @abstractmethod
    def process(
        self, envelope: IncomingMessageEnvelope, collector: MessageCollector, coordinator: TaskCoordinator
    ) -> None:
        """Process one message. Raising stops the container (no checkpoint past this message)."""


class AsyncStreamTask(ABC):
    """An asynchronous task, run on the container's event loop.

    Either implement ``process_async(envelope, collector, coordinator, callback)`` and call
    ``callback.complete()`` (from any thread) when done, or implement it as an ``async def`` without
    the callback parameter: the coroutine is awaited and its return completes the message.
    At most task.max.concurrency messages of one task are in flight at once.
    """

    @abstractmethod
    def process_async(
        self,
        envelope: IncomingMessageEnvelope,
        collector: MessageCollector,
        coordinator: TaskCoordinator,
        *callback: TaskCallback,
    ) -> Awaitable[Any] | None:
        """Start processing one message; complete it through ``callback`` or by returning a coroutine."""


class InitableTask(ABC):
    """A task that needs setup: ``init`` runs once, before the first message, after stores are restored."""

    @abstractmethod
    def init(self, context: TaskContext) -> None:
        """Prepare the task. ``context`` gives the task name, its SSPs, the config and its stores."""


class WindowableTask(ABC):
    """A task called every task.window.ms, exclusive with process."""

    @abstractmethod
    def window(self, collector: MessageCollector, coordinator: TaskCoordinator) -> None:
        """Emit windowed results. No process call is in flight while this runs."""


class ClosableTask(ABC):
    """A task with resources to release: ``close`` runs once at shutdown, after the final commit."""

    @abstractmethod
    def close(self) -> None:
        """Release resources."""


class EndOfStreamListenerTask(ABC):
    """A task told when every one of its input partitions has reached its end (bounded inputs)."""

    @abstractmethod
    def on_end_of_stream(self, collector: MessageCollector, coordinator: TaskCoordinator) -> None:
        """All inputs ended. The task then votes to shut down; call coordinator.commit() to checkpoint."""


class DrainListenerTask(ABC):
    """A task told when the job is drained (``bin/samzamp-drain``; Samza's DrainListenerTask).

    On a drain the container stops fetching, the task processes every message the container had
    already fetched for it, and then, in this order: ``window()`` once more if the task is windowable
    (the watermark went to infinity: emit what windows hold), ``on_drain``, a final blocking commit,
    and ``close()``. The container exits 0 once every task is drained.
    """

    @abstractmethod
    def on_drain(self, collector: MessageCollector, coordinator: TaskCoordinator) -> None:
        """Every input of the task is drained: emit what is left. No process call is in flight."""


class CheckpointListenerTask(ABC):
    """A task told about its commits (like Flink's snapshotState / notifyCheckpointComplete).

    ``before_commit`` runs at the start of the task's commit, exclusive with process and window: the
    place to move buffered in-memory state into a store so the checkpoint covers it.
    ``on_checkpoint`` runs once the checkpoint has been written, with the offsets it recorded.
    """

    @abstractmethod
    def before_commit(self) -> None:
        """The task is about to be checkpointed; no process call is in flight."""

    def on_checkpoint(self, offsets: dict[Any, int]) -> None:  # noqa: B027 - optional hook
        """The checkpoint is durable. ``offsets`` maps each SSP to its last processed offset."""
