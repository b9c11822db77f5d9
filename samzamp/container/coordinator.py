"""The TaskCoordinator handed to each process/window/end-of-stream call; the loop reads its requests."""

from __future__ import annotations

from samzamp.api.collector import RequestScope, TaskCoordinator

__all__ = ["ReadableCoordinator"]


class ReadableCoordinator(TaskCoordinator):
    __slots__ = ("commit_requested", "commit_scope", "shutdown_requested", "shutdown_scope")

    def __init__(self) -> None:
        self.commit_requested = False
        self.commit_scope = RequestScope.CURRENT_TASK
        self.shutdown_requested = False
        self.shutdown_scope = RequestScope.CURRENT_TASK

    def commit(self, scope: RequestScope = RequestScope.CURRENT_TASK) -> None:
        self.commit_requested = True
        if scope is RequestScope.ALL_TASKS_IN_CONTAINER:
            self.commit_scope = scope

    def shutdown(self, scope: RequestScope = RequestScope.CURRENT_TASK) -> None:
        self.shutdown_requested = True
        if scope is RequestScope.ALL_TASKS_IN_CONTAINER:
            self.shutdown_scope = scope

    @property
    def has_requests(self) -> bool:
        return self.commit_requested or self.shutdown_requested
