"""Per-task readiness: which operation a task may run next, and the transitions that change it
(Samza's AsyncTaskState: nextOp, startWindow/doneWindow, startCommit/doneCommit, ...).

Priority when ready: COMMIT > WINDOW > END_OF_STREAM > DRAIN > PROCESS.
- commit, window, end-of-stream and drain wait until no message of the task is in flight and nothing else
  is in flight, and block new process calls until they are done (Samza's exclusion rules: a window or
  commit never runs concurrently with process, nor with each other);
- process runs while fewer than task.max.concurrency messages are in flight and no window or commit
  is in flight or due (a due window/commit stops new process calls so that it is not starved).
- a commit is in flight only for its synchronous phase (``commit_in_flight``); its asynchronous
  phase (``commit_applying``: the stores' writes made durable, then the checkpoint) runs while the
  task processes and windows. The next commit, end of stream and drain wait for it to finish (one
  asynchronous phase per task at a time). A commit due meanwhile stops new process calls as any due
  commit does (a task's commit request commits before its next message), and starts once the last
  one's asynchronous phase and the messages in flight are done.

Only this module writes the state: the run loop and the task's host change it through the
transitions below and read its facts. All calls come from the event loop thread.
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Collection, Iterable, Sequence

from samzamp.api.envelope import SystemStream, SystemStreamPartition
from samzamp.consume.lane import Lane
from samzamp.consume.packed import Buffered

__all__ = ["TaskOp", "TaskState"]


class TaskOp(enum.Enum):
    NO_OP = 0
    PROCESS = 1
    WINDOW = 2
    COMMIT = 3
    END_OF_STREAM = 4
    DRAIN = 5


class TaskState:
    """What one task is doing and may do next; see the module docstring."""

    __slots__ = (
        "_drain_marked",
        "_drain_pending",
        "_processing",
        "commit_applying",
        "commit_in_flight",
        "complete",
        "drain_hook_ran",
        "drained",
        "end_of_stream",
        "final_window_done",
        "hook_in_flight",
        "max_concurrency",
        "messages_in_flight",
        "need_commit",
        "need_window",
        "pending",
        "reads_intermediate",
        "redo",
        "stopping",
        "window_in_flight",
    )

    def __init__(
        self,
        max_concurrency: int,
        ssps: Iterable[SystemStreamPartition] = (),
        intermediate: Collection[SystemStream] = (),
    ) -> None:
        """``intermediate``: the job's intermediate streams. Their SSPs get no end-of-stream marker
        from their system: the task's end of stream is that of its other (source) SSPs, and a task
        reading an intermediate SSP goes on after it, until its operators vote to shut down."""
        self.max_concurrency = max_concurrency
        # Chosen messages (and control markers) the task could not take yet, in order.
        self.pending: deque[tuple[Lane, Buffered]] = deque()
        # How many entries at the front of ``pending`` a worker gave back (sent, then skipped after a
        # request): they left the chooser long ago, so dispatching them again must not advance it.
        self.redo = 0
        self.messages_in_flight = 0
        self.need_window = False
        self.need_commit = False
        self.window_in_flight = False
        self.commit_in_flight = False
        self.commit_applying = False  # a commit's asynchronous phase runs (see the module docstring)
        self.end_of_stream = False  # every SSP of the task reached its end
        self.drained = False  # every SSP of the task passed its drain marker: the DRAIN op is due
        # on_drain ran, and the task reads intermediate streams on until its operators drained them
        # (``intermediates_drained``): its drain comes through those streams, from other tasks.
        self.drain_hook_ran = False
        self.final_window_done = False  # the last window() before on_drain / on_end_of_stream was flagged
        self.hook_in_flight = False  # on_end_of_stream or on_drain is running (maybe in a worker)
        self.complete = False  # end of stream or drain handled: the task takes no more work
        self.stopping = False  # the container is shutting down (or the task leaves): no new process calls
        ssps = set(ssps)
        self._processing = {s for s in ssps if s.system_stream not in intermediate}  # sources not yet ended
        self.reads_intermediate = len(self._processing) < len(ssps)
        # While draining: the SSPs that got drain markers, and those whose marker the task has not reached.
        self._drain_marked: frozenset[SystemStreamPartition] = frozenset()
        self._drain_pending: set[SystemStreamPartition] = set()

    # -- what may run next ----------------------------------------------------------------------
    def next_op(self) -> TaskOp:
        if self.complete:
            return TaskOp.NO_OP
        busy = self.window_in_flight or self.commit_in_flight or self.hook_in_flight
        idle = self.messages_in_flight == 0 and not busy
        settled = idle and not self.commit_applying  # and no commit's asynchronous phase runs
        if self.need_commit:
            return TaskOp.COMMIT if settled else TaskOp.NO_OP
        if self.need_window:
            return TaskOp.WINDOW if idle else TaskOp.NO_OP
        if self.end_of_stream and not self.pending:
            return TaskOp.END_OF_STREAM if settled else TaskOp.NO_OP
        if self.drained and not self.pending and not self.stopping:  # a stop ends a drain not begun
            return TaskOp.DRAIN if settled else TaskOp.NO_OP
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
        """Nothing of the task runs: no message, window, hook or commit (either phase)."""
        return (
            self.messages_in_flight == 0
            and not self.window_in_flight
            and not self.commit_in_flight
            and not self.commit_applying
            and not self.hook_in_flight
        )

    @property
    def has_drain_markers(self) -> bool:
        """Some input of the task got a drain marker (a drain began while it had unended inputs)."""
        return bool(self._drain_marked)

    # -- messages -------------------------------------------------------------------------------
    def messages_started(self, n: int) -> None:
        """``n`` messages were dispatched (to the task, or to its worker)."""
        self.messages_in_flight += n

    def messages_done(self, n: int) -> None:
        """``n`` messages in flight completed (or were taken back)."""
        self.messages_in_flight -= n

    def set_max_concurrency(self, n: int) -> None:
        """How many messages may be in flight from now on (a worker's task follows its measured pace)."""
        self.max_concurrency = n

    def enqueue(self, chosen: tuple[Lane, Buffered]) -> None:
        """A chosen message (or control marker) waits behind what the task is working on."""
        self.pending.append(chosen)

    def pop_pending(self) -> tuple[Lane, Buffered, bool]:
        """The next pending entry, and whether it was given back (``requeue``): the chooser moved
        past it long ago."""
        lane, raw = self.pending.popleft()
        if self.redo:
            self.redo -= 1
            return lane, raw, True
        return lane, raw, False

    def requeue(self, entries: Sequence[tuple[SystemStreamPartition, Buffered]]) -> None:
        """Put messages the chooser already moved past back in front of ``pending``, in order: they go
        out again before anything chosen later."""
        self.pending.extendleft(reversed(entries))  # an SSP is its own lane
        self.redo += len(entries)

    def give_back(self, entries: Sequence[tuple[SystemStreamPartition, Buffered]]) -> None:
        """Messages in flight that will not complete where they went (a worker skipped them): no
        longer in flight, and first to go again (``requeue``)."""
        self.messages_in_flight -= len(entries)
        self.requeue(entries)

    # -- window, commit, last hooks -------------------------------------------------------------
    def request_window(self) -> None:
        self.need_window = True

    def request_commit(self) -> None:
        self.need_commit = True

    def start_window(self) -> None:
        self.need_window = False
        self.window_in_flight = True

    def done_window(self) -> None:
        self.window_in_flight = False

    def start_commit(self) -> None:
        self.need_commit = False
        self.commit_in_flight = True

    def commit_synced(self) -> None:
        """The commit's synchronous phase is done: the task may process while its asynchronous
        phase runs."""
        self.commit_in_flight = False
        self.commit_applying = True

    def done_commit(self) -> None:
        """The commit is done (either phase ended it, or it failed)."""
        self.commit_in_flight = False
        self.commit_applying = False

    def request_final_window(self, windowable: bool) -> bool:
        """Before the task's last hook (end of stream, drain): flag one more window() for a windowable
        task, once; True if flagged. Its input is complete, so its windows emit what they hold."""
        if not windowable or self.final_window_done:
            return False
        self.final_window_done = True
        self.need_window = True
        return True

    def start_end_of_stream(self) -> None:
        """on_end_of_stream starts: the task's last op, unless it reads intermediate streams,
        which it goes on processing (its end comes with theirs)."""
        if self.reads_intermediate:
            self.end_of_stream = False
            self.hook_in_flight = True
        else:
            self.start_last_hook()

    def start_drain(self) -> None:
        """on_drain starts: the task's last op, unless it reads intermediate streams: it goes on
        processing them until its operators drained (``intermediates_drained``), and then its DRAIN
        op comes again, for the final commit alone."""
        if self.reads_intermediate and not self.drain_hook_ran:
            self.drained = False
            self.drain_hook_ran = True
            self.hook_in_flight = True
        else:
            self.start_last_hook()

    def intermediates_drained(self) -> None:
        """The task's operators drained every intermediate stream it reads (after its on_drain): the
        DRAIN op is due again."""
        self.drained = True

    def start_last_hook(self) -> None:
        """on_end_of_stream or on_drain starts: nothing else runs for the task after it."""
        self.complete = True
        self.hook_in_flight = True

    def done_last_hook(self) -> None:
        self.hook_in_flight = False

    def stop(self) -> None:
        """The container stops: no new process calls, no forced window; what is in flight finishes."""
        self.stopping = True
        self.need_window = False

    def leave(self) -> None:
        """The task leaves the container: ``stop``, and what is queued for it is dropped (its next
        owner starts from its checkpoint)."""
        self.stop()
        self.pending.clear()
        self.redo = 0

    # -- inputs: end of stream and drain markers ------------------------------------------------
    def input_ended(self, ssp: SystemStreamPartition) -> bool:
        """``ssp``'s end-of-stream marker reached the task; True if the task became drained by it."""
        self._processing.discard(ssp)
        if not self._processing:
            self.end_of_stream = True
        return self._check_drained()

    def begin_drain(self, marked: set[SystemStreamPartition]) -> None:
        """A drain began: ``marked`` are the task's SSPs whose buffers end with a drain marker. A task
        that reads intermediate streams and no source still being read has its sources drained at
        once: its DRAIN op is due, after which it waits for its intermediate streams' drain."""
        self._drain_marked = frozenset(marked)
        self._drain_pending = set(marked)
        if not marked and self.reads_intermediate and not self._processing:
            self.drained = True

    def drain_marker_passed(self, ssp: SystemStreamPartition) -> bool:
        """``ssp``'s drain marker reached the task; True if the task became drained by it."""
        self._drain_pending.discard(ssp)
        return self._check_drained()

    def _check_drained(self) -> bool:
        # Drained: every drain marker passed, and every input without one (its bounded input had
        # ended when the drain began) reached its end.
        if self.drained or not self._drain_marked or self._drain_pending:
            return False
        if not self._processing <= self._drain_marked:
            return False
        self.drained = True
        return True
