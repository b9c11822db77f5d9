"""``RunLoopTask``: one task as the container drives it, wherever it runs (Samza's RunLoopTask).

Two hosts implement it: ``TaskInstance`` (on the loop thread, or on asyncio for async tasks and
callbacks) and ``WorkerTaskProxy`` (the task runs in a worker process). The container and the run
loop see only this protocol: operations, and facts they read but never write. The task's readiness
(``state``) changes only through ``TaskState``'s transitions.

Every call comes from the event loop thread. A ``done`` callback may be called before the call that
took it returns (a task on this thread) or later (a worker's answer), always on the loop thread.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from samzamp.api.envelope import SystemStreamPartition
from samzamp.consume.packed import Buffered
from samzamp.container.task_state import TaskState
from samzamp.metrics.registry import Counter, Timer
from samzamp.model.control_state import ControlState
from samzamp.model.job_model import TaskModel
from samzamp.storage.manager import RestoreReport
from samzamp.task.coordinator import ReadableCoordinator

__all__ = ["HookDone", "RunLoopTask"]

# Called once a task's window, end-of-stream or drain hook returned: the task and its requests (None:
# window() of a task that is not windowable).
HookDone = Callable[[Any, ReadableCoordinator | None], None]


class RunLoopTask(Protocol):
    # -- facts ----------------------------------------------------------------------------------
    @property
    def name(self) -> str: ...

    @property
    def ssps(self) -> frozenset[SystemStreamPartition]: ...

    @property
    def state(self) -> TaskState: ...

    @property
    def windowable(self) -> bool: ...

    @property
    def logged_stores(self) -> frozenset[str]:
        """The stores whose changelog markers every checkpoint must carry."""

    checkpointed_control: ControlState | None  # that of the last checkpoint written (or started from)

    @property
    def checkpointed(self) -> Mapping[SystemStreamPartition, int]:
        """The offsets of the last checkpoint written (or the one the task started from)."""

    @property
    def last_processed(self) -> Mapping[SystemStreamPartition, int]:
        """The low watermark of completed messages, per SSP."""

    @property
    def m_processed(self) -> Counter: ...

    @property
    def m_window_calls(self) -> Counter: ...

    @property
    def m_commit_calls(self) -> Counter: ...

    @property
    def m_commit_ns(self) -> Timer: ...

    # -- lifetime -------------------------------------------------------------------------------
    async def start(self, model: TaskModel) -> list[RestoreReport]:
        """Build the task, restore its stores from ``model``'s markers and call init, where it runs;
        the restore reports. Raises what failed (the task's init, a restore, its worker's death)."""

    async def stop(self) -> None:
        """The task leaves while the container runs on: close it and its stores (their locks are
        released). Nothing of it is in flight: its work and final commit are done."""

    def abandon(self) -> None:
        """The loop ended: stop waiting for anything the task still has outstanding."""

    def release(self) -> None:
        """The container failed: let go of the task's stores where this process runs it, without a
        commit (their uncommitted writes are dropped, their directories unlocked), so that a later
        container of this process can start the task again: a processor that joins its job again
        after its membership expired may well be given it back. The task's close() is not called,
        as for a task in a killed worker."""

    def close(self) -> None:
        """The container ended cleanly: close the task where this process runs it (a worker closes
        its own tasks when it stops)."""

    # -- process --------------------------------------------------------------------------------
    def process_run(
        self,
        ssp: SystemStreamPartition,
        first: Buffered,
        buffer: deque[Buffered],
        limit: int,
        deadline_ns: int,
        fenced: bool = False,
    ) -> int:
        """Process (or send) ``first`` and up to ``limit - 1`` more of ``ssp``'s buffered messages
        (the state said PROCESS); a control marker ends the run and stays first in ``buffer``.
        ``fenced``: the processor may process only while its lease holds (``RunLoop.fence``), so a
        run done here ends once the clock passes ``deadline_ns``, between messages too.
        Returns how many messages it took."""

    def dispatch(self, ssp: SystemStreamPartition, raw: Buffered) -> None:
        """Process (or send) one pending entry (the state said PROCESS)."""

    def make_way(self) -> None:
        """A window, commit or stop of the task is due and waits for its messages in flight: cut that
        wait short where the task can (a worker yields what it has not started)."""

    def catch_up(self, ssp: SystemStreamPartition, offset: int) -> None:
        """Nothing of ``ssp`` before ``offset`` is left for the task: its low watermark may move there."""

    # -- hooks ----------------------------------------------------------------------------------
    def start_window(self, done: HookDone) -> None: ...

    def start_end_of_stream(self, done: HookDone) -> None: ...

    def start_drain(self, done: HookDone) -> None: ...

    def enter_drain_mode(self, callback_timeout_ms: int) -> None:
        """While draining, calls started from now on time out after task.callback.drain.timeout.ms."""

    # -- commit (samzamp.commit.pipeline's steps) -----------------------------------------------
    async def before_commit(self) -> ControlState | None: ...

    def snapshot_offsets(self) -> dict[SystemStreamPartition, int]: ...

    async def flush_and_freeze_stores(self, *, asynchronous: bool) -> dict[str, str]: ...

    @property
    def applying_stores(self) -> bool: ...

    async def apply_stores(self) -> None: ...

    def checkpoint_written(self, offsets: dict[SystemStreamPartition, int], control: ControlState | None) -> None: ...

    def after_commit(self) -> None:
        """The commit is done: release what it held back."""
