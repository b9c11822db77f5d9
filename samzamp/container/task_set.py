"""The tasks the run loop drives (Kafka Streams' Tasks): which task reads each lane, which tasks are
leaving, and which voted to shut down.

A task joins before any of its lanes can be chosen (``add``) and may leave while the others run
(``leave``, then ``depart`` once its final commit is done). The container stops when every task
voted (Samza's RunLoop: a task votes with a shutdown request, its end of stream or its drain).
Event loop thread only.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from samzamp.api.envelope import SystemStreamPartition
from samzamp.api.errors import CallbackTimeoutError
from samzamp.commit.group_offsets import PartitionReaders
from samzamp.consume.lane import Lane, task_lanes
from samzamp.container.run_loop_task import RunLoopTask

__all__ = ["TaskSet"]

log = logging.getLogger(__name__)


class TaskSet:
    """Membership of the loop's tasks; ``tasks`` is the one collection of them (changed in place)."""

    def __init__(
        self,
        broadcast_inputs: frozenset[SystemStreamPartition],
        loop: asyncio.AbstractEventLoop,
        shutdown_ms: int,
        abort: Callable[[BaseException], None],
    ) -> None:
        self._broadcast = broadcast_inputs
        self._loop = loop
        self._shutdown_ms = shutdown_ms
        self._abort = abort
        # The tasks in the order they joined: a dict as an ordered set, as a departure must not walk
        # them (thousands leave at once in a rebalance).
        self.tasks: dict[RunLoopTask, None] = {}
        self.by_lane: dict[Lane, RunLoopTask] = {}  # the task of each lane (samzamp.consume.lane)
        self._lanes: dict[RunLoopTask, dict[Lane, SystemStreamPartition]] = {}
        self.readers = PartitionReaders()  # the tasks reading each input partition
        # Tasks leaving the container, each with what its remover awaits, and its deadline.
        self._leaving: dict[RunLoopTask, asyncio.Future[None]] = {}
        self._leave_timers: dict[RunLoopTask, asyncio.TimerHandle] = {}
        self._votes: set[str] = set()

    def lanes(self, ti: RunLoopTask) -> dict[Lane, SystemStreamPartition]:
        """Lane -> SSP of each SSP ``ti`` reads (a broadcast one through a lane of its own); none once
        it left."""
        return self._lanes.get(ti, {})

    def with_lanes(self) -> list[tuple[RunLoopTask, dict[Lane, SystemStreamPartition]]]:
        return [(ti, self._lanes[ti]) for ti in self.tasks]

    def add(self, ti: RunLoopTask) -> None:
        lanes = task_lanes(ti.name, ti.ssps, self._broadcast)
        taken = sorted(str(ssp) for lane, ssp in lanes.items() if lane in self.by_lane)
        if taken:
            raise ValueError(f"task {ti.name!r}: its input {taken} belongs to a task already running here")
        self._lanes[ti] = lanes
        for lane in lanes:
            self.by_lane[lane] = ti
        self.tasks[ti] = None
        self.readers.add(ti)

    # -- leaving --------------------------------------------------------------------------------
    def leave(self, ti: RunLoopTask) -> tuple[asyncio.Future[None], bool]:
        """Mark ``ti`` as leaving (what is queued for it is dropped, no new process calls); the future
        its remover awaits, and whether it was leaving already. It must depart within
        task.shutdown.ms, or the container fails: its next owner could otherwise run while it still does."""
        fut = self._leaving.get(ti)
        if fut is not None:
            return fut, True
        fut = self._leaving[ti] = self._loop.create_future()
        ti.state.leave()
        self._leave_timers[ti] = self._loop.call_later(self._shutdown_ms / 1000, self._leave_timed_out, ti)
        return fut, False

    def is_leaving(self, ti: RunLoopTask) -> bool:
        return ti in self._leaving

    def _leave_timed_out(self, ti: RunLoopTask) -> None:
        self._leave_timers.pop(ti, None)
        self._abort(
            CallbackTimeoutError(
                f"task {ti.name!r} did not stop within task.shutdown.ms = {self._shutdown_ms} ms while "
                "leaving this container (work still in flight); the container stops without checkpointing it"
            )
        )

    def depart(self, ti: RunLoopTask) -> bool:
        """A leaving task's final commit is done: it leaves the loop. True if every task left voted."""
        timer = self._leave_timers.pop(ti, None)
        if timer is not None:
            timer.cancel()
        del self.tasks[ti]
        self.readers.remove(ti)
        ti.state.leave()  # what was queued for it since it began leaving is dropped too
        for lane in self._lanes.pop(ti, {}):
            if self.by_lane.get(lane) is ti:
                del self.by_lane[lane]
        self._votes.discard(ti.name)
        # DEBUG: thousands of tasks leave at once in a rebalance; the container logs one line for them.
        if log.isEnabledFor(logging.DEBUG):
            checkpoint = {str(s): o for s, o in sorted(ti.checkpointed.items())}
            log.debug("task %r left: final checkpoint %s", ti.name, checkpoint)
        fut = self._leaving.pop(ti)
        if not fut.done():
            fut.set_result(None)
        return self._all_voted("every task voted to shut down")

    def end(self, error: BaseException | None) -> None:
        """The loop ended: no task leaves any more; their removers must not wait for it."""
        for h in self._leave_timers.values():
            h.cancel()
        self._leave_timers.clear()
        for fut in self._leaving.values():
            if not fut.done():
                fut.set_exception(error or RuntimeError("the run loop stopped"))

    # -- shutdown votes -------------------------------------------------------------------------
    def vote(self, ti: RunLoopTask, why: str) -> bool:
        """``ti`` votes to shut the container down; True once every task has (``why`` is logged then)."""
        self._votes.add(ti.name)
        return self._all_voted(why)

    def _all_voted(self, why: str) -> bool:
        if self.tasks and len(self._votes) == len(self.tasks):
            log.info("%s", why)
            return True
        return False
