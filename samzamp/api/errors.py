"""The exception tree. Every error samzamp raises derives from ``SamzampError``::

SamzampError
├── ConfigError            a config key is missing, malformed or contradicts another (exit code 2)
├── SerdeError             a key or message could not be (de)serialized
├── TaskError              user code failed: names the task, SSP and offset
│   └── CallbackTimeoutError   a process callback did not complete within task.callback.timeout.ms
├── CheckpointError        a checkpoint could not be read or written
├── SystemFailureError     a system (Kafka) failed in a way samzamp cannot recover from
├── WorkerError            a worker process died or could not start: names the worker and its tasks
├── StoreError             a store's local files could not be read or written (a full disk, an I/O error):
│                          names the store, the task and the directory, and what to do
├── IllegalCallbackStateError  complete()/failure() called twice on one callback
├── MissingExtraError (samzamp.extras)  an optional dependency is missing: names the extra (exit code 2)
└── IpcError (samzamp.ipc)  the shared-memory rings: WouldBlock, QueueClosed, PeerGone, EndOfQueue, SendTimeout
"""

from __future__ import annotations

__all__ = [
    "CallbackTimeoutError",
    "CheckpointError",
    "ConfigError",
    "IllegalCallbackStateError",
    "SamzampError",
    "SerdeError",
    "StoreError",
    "SystemFailureError",
    "TaskError",
    "WorkerError",
]


class SamzampError(Exception):
    """Root of every error samzamp raises."""


class ConfigError(SamzampError):
    """A config key is missing, malformed, unknown or contradicts another key.

    ``key`` names the offending key; the message says what is wrong and what to do.
    """

    def __init__(self, key: str, problem: str) -> None:
        super().__init__(f"config error: {key}: {problem}")
        self.key = key
        self.problem = problem


class SerdeError(SamzampError):
    """A key or message could not be serialized or deserialized."""


class TaskError(SamzampError):
    """A task's own code raised, or reported failure through its callback."""


class CallbackTimeoutError(TaskError):
    """A process callback was not completed within task.callback.timeout.ms."""


class CheckpointError(SamzampError):
    """A checkpoint could not be read, decoded or written."""


class SystemFailureError(SamzampError):
    """A system (e.g. Kafka) failed in a way samzamp cannot recover from."""


class IllegalCallbackStateError(SamzampError):
    """A TaskCallback was completed or failed more than once."""


class WorkerError(SamzampError):
    """A worker process (job.container.thread.pool.size >= 2) died or could not start.

    The message names the worker, its pid and its tasks; nothing it had not completed is checkpointed.
    """


class StoreError(SamzampError):
    """A store's local files could not be read or written: a full disk, an I/O error, files LMDB
    cannot open safely.

    The message is one line: the store and task (where known), the directory, what failed and what
    to do. ``store``, ``task``, ``directory``, ``problem`` and ``advice`` hold its parts; ``<name>``
    in the advice stands for the store's name until it is known.
    """

    def __init__(
        self, directory: str, problem: str, advice: str, store: str | None = None, task: str | None = None
    ) -> None:
        self.directory = directory
        self.problem = problem
        self.advice = advice
        self.store = store
        self.task = task
        who = f"store {store!r}" if store is not None else "store"
        if task is not None:
            who += f" of task {task!r}"
        shown = advice if store is None else advice.replace("<name>", store)
        super().__init__(f"{who} in {directory}: {problem}; {shown}")

    def of(self, store: str | None = None, task: str | None = None) -> StoreError:
        """This error naming ``store`` and ``task`` where it did not name them yet."""
        named = StoreError(self.directory, self.problem, self.advice, self.store or store, self.task or task)
        named.__cause__ = self.__cause__
        return named
