"""Out-of-order completions -> the low watermark of fully processed messages (Samza's TaskCallbackManager).

Every process call gets a per-task sequence number. Callbacks are released strictly in sequence
order: a completed callback waits while any earlier one is incomplete. Only released callbacks move
a task's last processed offsets, so a checkpoint never covers a message that is not done. The release
stops right after a callback that requested a commit, so that commit covers exactly up to it.
"""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING, Any

from samzamp.api.errors import IllegalCallbackStateError
from samzamp.api.task import TaskCallback

if TYPE_CHECKING:
    from samzamp.api.envelope import SystemStreamPartition

__all__ = ["TaskCallbackImpl", "TaskCallbackManager"]


class TaskCallbackImpl(TaskCallback):
    """The callback of one process call. complete()/failure() may come from any thread; ``deliver``
    routes them onto the event loop (the task instance supplies it)."""

    __slots__ = ("_done", "coordinator", "deliver", "offset", "seq", "ssp", "started_ns", "timer")

    def __init__(
        self, deliver: Any, seq: int, ssp: SystemStreamPartition, offset: int, coordinator: Any, started_ns: int
    ) -> None:
        self.deliver = deliver
        self.seq = seq
        self.ssp = ssp
        self.offset = offset
        self.coordinator = coordinator
        self.started_ns = started_ns
        self.timer: Any = None
        self._done = False

    def complete(self) -> None:
        if self._done:
            self.deliver(
                self, IllegalCallbackStateError(f"callback for {self.ssp} offset {self.offset} completed twice")
            )
            return
        self._done = True
        self.deliver(self, None)

    def failure(self, error: BaseException) -> None:
        if self._done:
            self.deliver(
                self,
                IllegalCallbackStateError(
                    f"callback for {self.ssp} offset {self.offset} failed after completion: {error!r}"
                ),
            )
            return
        self._done = True
        self.deliver(self, error)


class TaskCallbackManager:
    """Releases completed callbacks in sequence order (the low watermark)."""

    __slots__ = ("_heap", "_in_order", "next_seq", "next_release")

    def __init__(self, max_concurrency: int) -> None:
        self._in_order = max_concurrency == 1
        self._heap: list[tuple[int, TaskCallbackImpl]] = []
        self.next_seq = 0
        self.next_release = 0

    def new_seq(self) -> int:
        seq = self.next_seq
        self.next_seq += 1
        return seq

    def release(self, cb: TaskCallbackImpl) -> list[TaskCallbackImpl]:
        """Record ``cb`` as complete; return the callbacks now releasable, in sequence order."""
        if self._in_order and cb.seq == self.next_release and not self._heap:
            self.next_release += 1
            return [cb]
        heapq.heappush(self._heap, (cb.seq, cb))
        return self.release_held()

    def release_held(self) -> list[TaskCallbackImpl]:
        """Release what a previous commit request held back."""
        out = []
        heap = self._heap
        while heap and heap[0][0] == self.next_release:
            _, head = heapq.heappop(heap)
            self.next_release += 1
            out.append(head)
            if head.coordinator is not None and head.coordinator.commit_requested:
                break  # the commit covers exactly up to this message
        return out
