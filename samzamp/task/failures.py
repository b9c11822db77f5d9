"""What a task's exception becomes, wherever the task runs (loop thread, worker process): ignored
(task.ignored.exceptions) or a TaskError naming the task, SSP and offset."""

from __future__ import annotations

from samzamp.api.envelope import SystemStreamPartition
from samzamp.api.errors import SerdeError, StoreError, TaskError

__all__ = ["deserialization_error", "is_ignored", "task_failure"]


def is_ignored(error: BaseException, ignored: tuple[str, ...]) -> bool:
    """True if task.ignored.exceptions names the error's class or a base class (short or dotted name), or is ``*``."""
    if not ignored:
        return False
    if "*" in ignored:
        return True
    mro = type(error).__mro__
    names = {c.__name__ for c in mro} | {f"{c.__module__}.{c.__qualname__}" for c in mro}
    return any(n in names for n in ignored)


def task_failure(
    task_name: str, error: BaseException, ssp: SystemStreamPartition | None = None, offset: int | None = None
) -> BaseException:
    """The error that stops the container: names the task and, for process(), the SSP and offset.
    A store's failing files are not the task's failure: they stay a ``StoreError``, naming the task."""
    if isinstance(error, TaskError):
        return error
    if isinstance(error, StoreError):
        return error.of(task=task_name)
    where = f" processing {ssp} offset {offset}" if ssp is not None else ""
    err = TaskError(f"task {task_name!r} failed{where}: {type(error).__name__}: {error}")
    err.__cause__ = error
    return err


def deserialization_error(task_name: str, ssp: SystemStreamPartition, offset: int, error: Exception) -> SerdeError:
    """A message that cannot be decoded (and task.drop.deserialization.errors is off)."""
    return SerdeError(
        f"cannot deserialize the message at {ssp} offset {offset} for task {task_name!r}: "
        f"{type(error).__name__}: {error} "
        "(check streams.<id>.samza.key.serde / msg.serde, or set task.drop.deserialization.errors=true)"
    )
