"""The TaskCoordinator handed to each process/window/end-of-stream call; its host reads the requests.

Samza keeps it beside the task (``org.apache.samza.task.ReadableCoordinator``); here both hosts use it:
the loop reads it directly, and a worker reports its ``flags()`` for the loop to rebuild with ``from_flags``.
"""

from __future__ import annotations

from samzamp.api.collector import RequestScope, TaskCoordinator

__all__ = ["ReadableCoordinator"]


class ReadableCoordinator(TaskCoordinator):
    __slots__ = ("commit_requested", "commit_scope", "requested", "shutdown_requested", "shutdown_scope")

    def __init__(self) -> None:
        self.requested = False  # either request: one attribute for the per-message check
        self.commit_requested = False
        self.commit_scope = RequestScope.CURRENT_TASK
        self.shutdown_requested = False
        self.shutdown_scope = RequestScope.CURRENT_TASK

    def commit(self, scope: RequestScope = RequestScope.CURRENT_TASK) -> None:
        self.commit_requested = self.requested = True
        if scope is RequestScope.ALL_TASKS_IN_CONTAINER:
            self.commit_scope = scope

    def shutdown(self, scope: RequestScope = RequestScope.CURRENT_TASK) -> None:
        self.shutdown_requested = self.requested = True
        if scope is RequestScope.ALL_TASKS_IN_CONTAINER:
            self.shutdown_scope = scope

    def flags(self) -> tuple[bool, bool, bool, bool]:
        """(commit, commit for all tasks, shutdown, shutdown for all tasks): how a worker reports them."""
        return (
            self.commit_requested,
            self.commit_requested and self.commit_scope is RequestScope.ALL_TASKS_IN_CONTAINER,
            self.shutdown_requested,
            self.shutdown_requested and self.shutdown_scope is RequestScope.ALL_TASKS_IN_CONTAINER,
        )

    @classmethod
    def from_flags(cls, commit: bool, commit_all: bool, shutdown: bool, shutdown_all: bool) -> ReadableCoordinator:
        """The coordinator whose ``flags()`` these are (the loop's side of a worker's report)."""
        c = cls()
        if commit:
            c.commit(RequestScope.ALL_TASKS_IN_CONTAINER if commit_all else RequestScope.CURRENT_TASK)
        if shutdown:
            c.shutdown(RequestScope.ALL_TASKS_IN_CONTAINER if shutdown_all else RequestScope.CURRENT_TASK)
        return c
