"""The container's drain (Samza SEP-31) and the control markers that reach a task's queue.

``begin`` stops fetching: each SSP's buffer ends with a watermark marker and a drain marker, and the
newest offset fetched per SSP is the drain point. A marker reaches the head of its task's queue
only after everything before it was dispatched (``control_marker``): an end-of-stream marker ends
that input; a drain marker counts the input as drained. Once a task passed every drain marker and
nothing of it is queued or in flight, the run loop's DRAIN op runs its last window and
``on_drain``; then (``hook_done``) a final commit, after which the task is drained and votes to
shut down. The three are bounded together by task.callback.drain.timeout.ms (``arm_timer``).

In a job with intermediate streams (an application's) only the source SSPs get markers; the
intermediate ones are read on. A task that reads intermediate streams runs its DRAIN op twice: once
its sources passed their markers (last window, on_drain: its operators send their drain messages
down the intermediate streams; then a commit), and again once its operators drained every
intermediate SSP it reads and asked to shut down (``operators_drained``): the final commit alone.
Waiting between the two is for other tasks, maybe on other processors: no callback timeout bounds
it. A task that arrives during the drain (a rebalance) drains where its checkpoint is (``join``).

All methods run on the event loop thread.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import time
from collections.abc import Callable

from samzamp.api.envelope import SystemStreamPartition
from samzamp.api.errors import CallbackTimeoutError
from samzamp.config.settings import TaskSettings
from samzamp.consume.lane import Lane, lane_ssp
from samzamp.consume.packed import messages_in
from samzamp.consume.system_consumers import SystemConsumers
from samzamp.container.commits import Commits
from samzamp.container.run_loop_task import RunLoopTask
from samzamp.container.task_set import TaskSet
from samzamp.metrics.registry import MetricsRegistry
from samzamp.systems.base import DRAIN, END_OF_STREAM
from samzamp.task.coordinator import ReadableCoordinator

__all__ = ["ContainerDrain"]

log = logging.getLogger(__name__)


class ContainerDrain:
    """Whether the container drains, where the drain stops, and which tasks are drained."""

    def __init__(
        self,
        consumers: SystemConsumers,
        commits: Commits,
        tasks: TaskSet,
        settings: TaskSettings,
        metrics: MetricsRegistry,
        loop: asyncio.AbstractEventLoop,
        abort: Callable[[BaseException], None],
        all_drained: Callable[[], None],
    ) -> None:
        """A task drained votes to shut down (in ``tasks``); once every task has, ``all_drained``."""
        self._consumers = consumers
        self._commits = commits
        self._tasks = tasks
        self._all_drained = all_drained
        self._settings = settings
        self._metrics = metrics
        self._loop = loop
        self._abort = abort
        self.drain_point: dict[SystemStreamPartition, int | None] = {}  # the newest offset fetched per SSP
        self.drained_tasks: dict[str, dict[SystemStreamPartition, int]] = {}  # task -> final checkpoint
        self._started = 0.0
        self._timers: dict[str, asyncio.TimerHandle] = {}

    def begin(self, notification: str) -> None:
        """Stop fetching and mark each task's inputs whose buffers end with a drain marker."""
        tasks = self._tasks.with_lanes()
        self._started = time.monotonic()
        buffered = self._consumers.buffered() + sum(
            messages_in(raw) for t, _ in tasks for _, raw in t.state.pending if raw[0] >= 0
        )
        self.drain_point, marked = self._consumers.drain()
        for ti, lanes in tasks:
            ti.state.begin_drain({ssp for lane, ssp in lanes.items() if lane in marked})
            ti.enter_drain_mode(self._settings.drain_callback_timeout_ms)
        m = self._metrics
        m.gauge("SamzaContainerMetrics", "drain-started-ms").set(int(time.time() * 1000))
        m.gauge("SamzaContainerMetrics", "drain-buffered-messages").set(buffered)
        log.info("drain %s: fetching stopped with %d messages buffered", notification, buffered)
        # The newest offset fetched per SSP: the drain processes up to here (JSON, for tools and tests).
        log.info("drain point: %s", json.dumps({str(s): o for s, o in self.drain_point.items()}))

    def join(self, ti: RunLoopTask, marked: set[Lane]) -> None:
        """``ti`` arrived during the drain (a task taken over): ``marked`` are its lanes that got drain
        markers where they start. It drains there: it reads no source past its checkpoint."""
        ti.state.begin_drain({ssp for lane, ssp in self._tasks.lanes(ti).items() if lane in marked})
        ti.enter_drain_mode(self._settings.drain_callback_timeout_ms)
        log.info("task %r arrived during the drain: it drains where its checkpoint is", ti.name)

    def forget(self, ti: RunLoopTask) -> None:
        """``ti`` left the container (a new job model) before it drained: its next owner drains it."""
        self._cancel_timer(ti)

    def control_marker(self, ti: RunLoopTask, lane: Lane, marker: int) -> None:
        """A marker reached the head of ``ti``'s queue: everything before it was dispatched."""
        ssp = lane_ssp(lane)
        if marker == END_OF_STREAM:
            drained = ti.state.input_ended(ssp)
        else:
            # WATERMARK_MAX: the drain marker comes next. Its effect (windows emit what they hold)
            # is the DRAIN op's last window(), which also waits until nothing is queued or in flight.
            self._consumers.try_update(lane)
            drained = marker == DRAIN and ti.state.drain_marker_passed(ssp)
        if drained:
            log.info("task %r: every input reached its drain marker", ti.name)

    def complete(self) -> bool:
        """Every task was drained (not merely stopped)."""
        return all(
            t.name in self.drained_tasks or (not t.state.has_drain_markers and t.state.complete)
            for t in self._tasks.tasks
        )

    def arm_timer(self, ti: RunLoopTask) -> None:
        """task.callback.drain.timeout.ms bounds a task's drain op: last window, on_drain, final commit."""
        timeout_ms = self._settings.drain_callback_timeout_ms
        if timeout_ms > 0 and ti.name not in self._timers:
            self._timers[ti.name] = self._loop.call_later(timeout_ms / 1000, self._timed_out, ti)

    def _timed_out(self, ti: RunLoopTask) -> None:
        self._abort(
            CallbackTimeoutError(
                f"task {ti.name!r}: its drain (last window, on_drain, final commit) did not finish within "
                f"task.callback.drain.timeout.ms = {self._settings.drain_callback_timeout_ms} ms; no final commit"
            )
        )

    def hook_done(self, ti: RunLoopTask, coordinator: ReadableCoordinator | None) -> None:
        """The task's on_drain returned: its final commit, then it is drained. Its requests are not
        needed: the task commits and stops anyway.

        A task that reads intermediate streams is not done yet: its on_drain sent its drain
        messages down its intermediate streams, and it reads them on until its operators drained
        them (``operators_drained``; already, if it asked to shut down). It commits now, so that a
        restart finds its sources at their drain point with its drain messages sent. Waiting for
        the other tasks is no callback: task.callback.drain.timeout.ms bounds the final commit again."""
        st = ti.state
        st.done_last_hook()
        if not st.complete:
            self._cancel_timer(ti)
            if coordinator is not None and coordinator.shutdown_requested:
                st.intermediates_drained()
            log.info("task %r: its sources drained; reading its intermediate streams until they drain", ti.name)
            self._commits.start(ti)
            return
        self._commits.start(ti, functools.partial(self._task_drained, ti), drained=True)

    def operators_drained(self, ti: RunLoopTask) -> bool:
        """``ti`` asked to shut down. One that reads intermediate streams asks once its operators
        drained them (after its on_drain): its DRAIN op then makes the final commit. True if the
        request was taken so (it is no vote)."""
        st = ti.state
        if not st.drain_hook_ran or st.complete or st.hook_in_flight:
            return False
        st.intermediates_drained()
        return True

    def _cancel_timer(self, ti: RunLoopTask) -> None:
        timer = self._timers.pop(ti.name, None)
        if timer is not None:
            timer.cancel()

    def _task_drained(self, ti: RunLoopTask) -> None:
        """``ti``'s final commit after on_drain is done: record its final checkpoint; it votes."""
        self._cancel_timer(ti)
        self.drained_tasks[ti.name] = dict(ti.checkpointed)
        elapsed_ms = int((time.monotonic() - self._started) * 1000)
        self._metrics.gauge(f"TaskName-{ti.name}", "drain-ms").set(elapsed_ms)
        log.info(
            "task %r drained in %d ms; final checkpoint %s",
            ti.name,
            elapsed_ms,
            {str(s): o for s, o in sorted(ti.checkpointed.items())},
        )
        if self._tasks.vote(ti, "every task is drained"):
            self._all_drained()

    def cancel_timers(self) -> None:
        """A stop during a drain ends it the ordinary way (or the loop ended): no drain times out."""
        for h in self._timers.values():
            h.cancel()
        self._timers.clear()
