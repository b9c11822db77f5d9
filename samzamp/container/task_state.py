"""Per-task readiness: which operation a task may run next (Samza's AsyncTaskState.nextOp).

Priority when ready: COMMIT > WINDOW > END_OF_STREAM > DRAIN > PROCESS.
- commit, window, end-of-stream and drain wait until no message of the task is in flight and nothing else
  is in flight, and block new process calls until they are done (the seeds' happens-before rules);
- process runs while fewer than task.max.concurrency messages are in flight and no window or commit
  is in flight or due (a due window/commit stops new process calls so that it is not starved).
"""

from __future__ import annotations

import enum
from collections import deque

from samzamp.consume.lane import Lane
from samzamp.consume.packed import Buffered

__all__ = ["TaskState", "TaskOp"]


class TaskOp(enum.Enum):
    NO_OP = 0
    PROCESS = 1
    WINDOW = 2
    COMMIT = 3
    END_OF_STREAM = 4
    DRAIN = 5


class TaskState:
    __slots__ = (
        "commit_in_flight",
        "complete",
        "drained",
        "end_of_stream",
        "final_window_done",
        "hook_in_flight",
        "max_concurrency",
        "messages_in_flight",
        "need_commit",
        "need_window",
        "pending",
        "redo",
        "stopping",
        "window_in_flight",
    )

    def __init__(self, max_concurrency: int) -> None:
        self.max_concurrency = max_concurrency
        self.pending: deque[tuple[Lane, Buffered]] = deque()
        # How many entries at the front of ``pending`` a worker gave back (sent, then skipped after a
        # request): they left the chooser long ago, so dispatching them again must not advance it.
        self.redo = 0
        self.messages_in_flight = 0
        self.need_window = False
        self.need_commit = False
        self.window_in_flight = False
        self.commit_in_flight = False
        self.end_of_stream = False  # every SSP of the task reached its end
        self.drained = False  # every SSP of the task passed its drain marker
        self.final_window_done = False  # the last window() before on_drain / on_end_of_stream ran
        self.hook_in_flight = False  # on_end_of_stream or on_drain is running (maybe in a worker)
        self.complete = False  # end of stream or drain handled: the task takes no more work
        self.stopping = False  # the container is shutting down: no new process calls

    def next_op(self) -> TaskOp:
        if self.complete:
            return TaskOp.NO_OP
        busy = self.window_in_flight or self.commit_in_flight or self.hook_in_flight
        idle = self.messages_in_flight == 0 and not busy
        if self.need_commit:
            return TaskOp.COMMIT if idle else TaskOp.NO_OP
        if self.need_window:
            return TaskOp.WINDOW if idle else TaskOp.NO_OP
        if self.end_of_stream and not self.pending:
            return TaskOp.END_OF_STREAM if idle else TaskOp.NO_OP
        if self.drained and not self.pending and not self.stopping:  # a stop ends a drain not begun
            return TaskOp.DRAIN if idle else TaskOp.NO_OP
        if self.pending and self._may_process():
            return TaskOp.PROCESS
        return TaskOp.NO_OP

    def _may_process(self) -> bool:
        """Whether one more message may start now, the rule ``next_op`` applies to PROCESS."""
        return not (
            self.complete
            or self.need_commit
            or self.need_window
            or self.window_in_flight
            or self.commit_in_flight
            or self.stopping
        ) and (self.messages_in_flight < self.max_concurrency)

    def can_process(self) -> bool:
        """``next_op`` would say PROCESS for a message if one were pending (and nothing is): the
        loop may hand the task a message straight from the chooser."""
        return not self.pending and self._may_process()

    def waits_for_in_flight(self) -> bool:
        """A commit, window or stop is due and waits for messages of the task still in flight."""
        return self.messages_in_flight > 0 and (self.need_commit or self.need_window or self.stopping)

    @property
    def idle(self) -> bool:
        return (
            self.messages_in_flight == 0
            and not self.window_in_flight
            and not self.commit_in_flight
            and not self.hook_in_flight
        )
