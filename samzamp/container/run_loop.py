"""The event loop of one container: choose -> route to its task -> run the task's next op, repeated.

On asyncio, in the container's main thread. A slice handles up to ``SLICE`` envelopes back to back
(the inline fast path never touches asyncio), then yields so that callbacks from other threads,
coroutine tasks and timers run; with nothing to do it waits for a wake-up or task.max.idle.ms.

Per task, ``TaskState.next_op`` decides what may run; timers only raise flags (``timers``). A due
window, commit or stop waits for the task's messages in flight, and the task is asked to
``make_way`` meanwhile. A task's last op is its end of stream (``on_end_of_stream``) or its drain
(``drain``); a windowable task gets one last window() first (before end of stream only with
task.window.on.end.of.stream). Then it votes to shut down, and the container stops when every task
voted (``task_set``), as Samza's RunLoop does. Commits run in ``commits``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Callable

from samzamp.api.collector import RequestScope
from samzamp.commit.group_offsets import GroupOffsets
from samzamp.commit.topic_checkpoint import TopicCheckpointManager
from samzamp.config.settings import TaskSettings
from samzamp.consume.lane import BroadcastLane, Lane, lane_ssp
from samzamp.consume.packed import messages_in
from samzamp.consume.system_consumers import SystemConsumers
from samzamp.container.commits import Commits
from samzamp.container.drain import ContainerDrain
from samzamp.container.run_loop_task import RunLoopTask
from samzamp.container.task_set import TaskSet
from samzamp.container.task_state import TaskOp
from samzamp.container.timers import TaskTimers
from samzamp.metrics.registry import MetricsRegistry
from samzamp.task.coordinator import ReadableCoordinator

__all__ = ["RunLoop", "RunLoopTask"]

log = logging.getLogger(__name__)

# A slice ends after this many envelopes or this much time, whichever comes first, so that timers
# (window, commit) and completions from other threads are never held back for long.
SLICE = 256
SLICE_S = 0.005


class RunLoop:
    """Drives the container's tasks (see the module docstring). Event loop thread only."""

    def __init__(
        self,
        consumers: SystemConsumers,
        checkpoints: TopicCheckpointManager,
        settings: TaskSettings,
        metrics: MetricsRegistry,
        loop: asyncio.AbstractEventLoop,
        group_offsets: GroupOffsets | None = None,
    ) -> None:
        """``group_offsets``: where each checkpoint's input offsets go for lag tools (None: nowhere)."""
        self._consumers = consumers
        self._settings = settings
        self._loop = loop
        self._clock = clock = time.monotonic
        self._task_set = tasks = TaskSet(settings.broadcast_inputs, loop, settings.shutdown_ms, self.abort)
        self.tasks = tasks.tasks  # the one collection of tasks (in the order they joined), changed in place
        self._commits = commits = Commits(
            checkpoints,
            consumers,
            tasks,
            loop,
            metrics,
            self.task_ready,
            self.abort,
            group_offsets,
            asynchronous=settings.commit_stores_async,
        )
        self._drain = ContainerDrain(
            consumers, commits, tasks, settings, metrics, loop, self.abort, self.request_shutdown
        )
        self.drained_tasks = self._drain.drained_tasks  # task -> final checkpoint, once drained
        self._timers = TaskTimers(settings, loop, lambda: self.shutdown_requested, self.task_ready)
        # task.consumer.batch.size: how many messages of one SSP a task takes per choice.
        self._run_limit = max(1, settings.consumer_batch_size)
        self._ready: set[RunLoopTask] = set()
        self._dirty: list[Callable[[], None]] = []
        self._waiter: asyncio.Future[None] | None = None
        self._running = False
        self.error: BaseException | None = None
        self.shutdown_requested = False
        self.draining = False
        # Whether this processor may process now (None: always). A standalone processor's lease on
        # its ZooKeeper session: while it does not hold, slices do nothing.
        self.fence: Callable[[], bool] | None = None
        self.m_envelopes = metrics.counter("SamzaContainerMetrics", "process-envelopes")
        self.m_window_calls = metrics.counter("SamzaContainerMetrics", "window-calls")
        self._busy_s = 0.0  # time spent running slices, of the time since ``_started``
        self._started = clock()
        metrics.gauge(
            "SamzaContainerMetrics",
            "event-loop-utilization",
            fn=lambda: round(self._busy_s / max(1e-9, clock() - self._started), 3),
        )
        metrics.gauge("SamzaContainerMetrics", "task-count", fn=lambda: len(self.tasks))

    # -- membership -----------------------------------------------------------------------------
    def add_task(self, ti: RunLoopTask) -> None:
        """Take a task on, before ``run`` or while it runs (its SSPs are not in the consumers yet).
        A task with changelogged stores commits first (as Samza's transactional state does): a kill
        before its first timed commit then reverts what it wrote since, rather than finding no
        checkpoint ("keep the state") and counting those inputs twice."""
        self._task_set.add(ti)
        if ti.logged_stores:
            ti.state.request_commit()
        if self._running:
            self._timers.start(ti)

    def remove_task(self, ti: RunLoopTask) -> asyncio.Future[None]:
        """Stop a task while the others run (its SSPs left the consumers); the future is done once it
        left the loop. What is queued for it is dropped (its next owner starts from its checkpoint);
        what is in flight finishes, then a final commit runs, as a shutdown's does (``TaskSet.leave``)."""
        fut, already = self._task_set.leave(ti)
        if not already:
            self._timers.stop(ti)
            self._drain.forget(ti)
            self.task_ready(ti)
        return fut

    def _departed(self, ti: RunLoopTask) -> None:
        """A leaving task's final commit is done: it leaves the loop."""
        self._ready.discard(ti)
        if self._task_set.depart(ti):
            self.shutdown_requested = True
        self.wake()

    # -- wake-ups and requests ------------------------------------------------------------------
    def wake(self) -> None:
        w = self._waiter
        if w is not None and not w.done():
            w.set_result(None)

    def task_ready(self, ti: RunLoopTask) -> None:
        self._ready.add(ti)
        self.wake()

    def abort(self, error: BaseException) -> None:
        if self.error is None:
            self.error = error
        self.wake()

    def request_shutdown(self) -> None:
        self.shutdown_requested = True
        self.wake()

    def on_requests(self, ti: RunLoopTask, coordinator: ReadableCoordinator) -> None:
        """Apply a coordinator's commit/shutdown requests (after its message was released in order)."""
        if coordinator.commit_requested:
            targets = list(self.tasks) if coordinator.commit_scope is RequestScope.ALL_TASKS_IN_CONTAINER else [ti]
            for t in targets:
                t.state.request_commit()
                self._ready.add(t)
        if coordinator.shutdown_requested:
            if self._drain.operators_drained(ti):
                self._ready.add(ti)  # its DRAIN op, for the final commit
            elif coordinator.shutdown_scope is RequestScope.ALL_TASKS_IN_CONTAINER:
                log.info("task %r requested shutdown of all tasks", ti.name)
                self.shutdown_requested = True
            elif self._task_set.vote(ti, "every task voted to shut down"):
                self.shutdown_requested = True
        self.wake()

    def mark_dirty(self, flush: Callable[[], None]) -> None:
        """A worker's task collected messages to send: call its ``flush`` at the end of this slice."""
        self._dirty.append(flush)

    # -- drain ----------------------------------------------------------------------------------
    def drain(self, notification: str) -> None:
        """Drain the container: stop fetching, process what was fetched, drain every task, stop. May
        be called before ``run`` (a notification found at start): then nothing is processed."""
        if self.stopping:
            return
        self.draining = True
        self._drain.begin(notification)
        if not self.tasks:  # nothing to drain (a standalone processor may hold no task): drained
            log.info("every task is drained (this container holds none)")
            self.shutdown_requested = True
        self.wake()

    def join_drain(self, tasks: list[RunLoopTask], marked: set[Lane]) -> None:
        """``tasks`` arrived during the drain; ``marked``: their lanes that got drain markers at once."""
        for ti in tasks:
            self._drain.join(ti, marked)
            self._ready.add(ti)
        self.wake()

    @property
    def stopping(self) -> bool:
        """Draining, asked to shut down, or failed."""
        return self.draining or self.shutdown_requested or self.error is not None

    @property
    def running(self) -> bool:
        """Whether ``run`` is running its loop (from its start until it stops or fails)."""
        return self._running

    @property
    def takes_tasks(self) -> bool:
        """Whether tasks may still come and go: running or draining (a drain takes a task over where
        its checkpoint is), not once asked to shut down or failed."""
        return not self.shutdown_requested and self.error is None

    @property
    def drain_complete(self) -> bool:
        """Every task was drained (not merely stopped)."""
        return self.draining and self._drain.complete()

    # -- the loop -------------------------------------------------------------------------------
    async def run(self) -> None:
        """Run until shutdown or failure. Raises the failure after stopping (no commit on failure)."""
        for ti in self.tasks:
            self._timers.start(ti)
        self._running = True
        self._started = self._clock()
        try:
            while self.error is None and not self.shutdown_requested:
                t0 = self._clock()
                progressed = self._run_slice()
                self._busy_s += self._clock() - t0
                if progressed:
                    await asyncio.sleep(0)
                    continue
                self._consumers.idle()
                self._waiter = self._loop.create_future()
                # asyncio.timeout, not wait_for: on Python 3.11 wait_for loses a cancellation of this
                # task that arrives as the waiter completes (a stop() during start-up is a cancel).
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self._settings.max_idle_ms / 1000 or None):
                        await self._waiter
                self._waiter = None
            if self.error is None:
                await self._shutdown()
        finally:
            self._running = False
            self._timers.stop()
            self._drain.cancel_timers()
            self._task_set.end(self.error)
        if self.error is not None:
            self._commits.cancel()
            raise self.error

    def _run_slice(self) -> bool:
        if self.fence is not None and not self.fence():
            return False  # not allowed to process now: nothing is dispatched, committed or windowed
        progressed = False
        consumers = self._consumers
        choose = consumers.choose
        by_lane = self._task_set.by_lane
        run_task = self._run_task
        clock = self._clock
        run_limit = self._run_limit
        envelopes = self.m_envelopes
        deadline = clock() + SLICE_S
        deadline_ns = time.monotonic_ns() + int(SLICE_S * 1e9)  # runs end with the slice
        refill = consumers.refill
        fenced = self.fence is not None
        refill()
        for i in range(SLICE):
            # Time is checked only once something was chosen: a refill that took the whole slice
            # (a poll waiting for the GIL) must not make a slice with work in it look idle.
            if i and clock() > deadline:
                break
            chosen = choose()
            if chosen is None:
                refill()
                chosen = choose()
                if chosen is None:
                    break
            progressed = True
            lane, raw = chosen
            ti = by_lane[lane]
            if raw[0] >= 0 and ti.state.can_process():
                # The common case: process (or hand to its worker) this envelope and the lane's next ones.
                ssp = lane.ssp if isinstance(lane, BroadcastLane) else lane
                envelopes.count += ti.process_run(ssp, raw, consumers.buffer(lane), run_limit, deadline_ns, fenced)
                consumers.try_update(lane)
            else:
                ti.state.enqueue(chosen)  # behind what the task is still working on (or a marker)
                if raw[0] >= 0:
                    envelopes.count += messages_in(raw)
                run_task(ti)
            if self.error is not None or self.shutdown_requested:
                # A shutdown request stops new process calls right after its message; what was
                # already dispatched to workers still goes out, so that it can complete.
                self._flush_batches()
                return True
        while self._ready and self.error is None:
            run_task(self._ready.pop())
            progressed = True
        self._flush_batches()
        return progressed

    def _flush_batches(self) -> None:
        dirty = self._dirty
        if dirty and self.error is None:
            self._dirty = []
            for flush in dirty:
                try:
                    flush()
                except BaseException as e:
                    self.abort(e)
                    return

    def _run_task(self, ti: RunLoopTask) -> None:
        """Run ``ti``'s next ops until it has none (or one that answers later)."""
        st = ti.state
        while self.error is None:
            op = st.next_op()
            try:
                if op is TaskOp.PROCESS:
                    lane, raw, redo = st.pop_pending()
                    if not redo:  # else given back by a worker: the chooser already moved past it
                        if raw[0] < 0:
                            self._drain.control_marker(ti, lane, raw[0])
                            continue
                        self._consumers.try_update(lane)
                    ti.dispatch(lane_ssp(lane), raw)
                elif op is TaskOp.COMMIT:
                    self._commits.start(ti)
                elif op is TaskOp.WINDOW:
                    st.start_window()
                    self.m_window_calls.count += 1
                    ti.start_window(self._window_done)
                    if st.window_in_flight:
                        return  # a worker runs it; _window_done comes later
                elif op is TaskOp.END_OF_STREAM:
                    if self._settings.window_on_end_of_stream and st.request_final_window(ti.windowable):
                        continue
                    st.start_end_of_stream()
                    ti.start_end_of_stream(self._end_of_stream_done)
                    return
                elif op is TaskOp.DRAIN:
                    self._drain.arm_timer(ti)
                    if st.request_final_window(ti.windowable):
                        continue
                    if st.drain_hook_ran:  # its intermediate streams drained since: the final commit
                        st.start_last_hook()
                        self._drain.hook_done(ti, None)
                        return
                    st.start_drain()
                    ti.start_drain(self._drain.hook_done)
                    return
                else:
                    if st.waits_for_in_flight():
                        ti.make_way()
                    elif st.idle and self._task_set.is_leaving(ti) and not st.need_commit:
                        self._commits.start(ti, functools.partial(self._departed, ti))
                    return
            except BaseException as e:
                if op is TaskOp.WINDOW:
                    st.done_window()
                self.abort(e)
                return

    def _window_done(self, ti: RunLoopTask, coordinator: ReadableCoordinator | None) -> None:
        """A task's window() returned (on this thread, or reported by its worker)."""
        ti.state.done_window()
        if coordinator is not None and coordinator.requested:
            self.on_requests(ti, coordinator)
        self.task_ready(ti)

    def _end_of_stream_done(self, ti: RunLoopTask, coordinator: ReadableCoordinator | None) -> None:
        log.info("task %r reached the end of every input", ti.name)
        ti.state.done_last_hook()
        assert coordinator is not None
        if coordinator.commit_requested:
            self._commits.start(ti)
        self.on_requests(ti, coordinator)

    async def _shutdown(self) -> None:
        """Stop consuming, finish in-flight work (window not forced), final commit of every task."""
        log.info("shutting down: finishing in-flight work")
        self._timers.stop()
        self._drain.cancel_timers()  # a stop during a drain ends it the ordinary way
        self._consumers.stop_fetching()
        for ti in self.tasks:
            ti.state.stop()
            if ti.state.waits_for_in_flight():
                try:
                    ti.make_way()
                except BaseException as e:
                    self.abort(e)
        deadline = self._clock() + self._settings.shutdown_ms / 1000
        while self.error is None:
            while self._ready:
                self._run_task(self._ready.pop())
            self._flush_batches()
            if all(t.state.idle for t in self.tasks) and not self._commits.in_flight:
                break
            if self._clock() > deadline:
                busy = [t.name for t in self.tasks if not t.state.idle]
                log.warning("task.shutdown.ms passed with work still in flight in %s; committing what completed", busy)
                break
            self._waiter = self._loop.create_future()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._waiter, 0.05)
            self._waiter = None
        if self.error is not None:
            return
        for ti in list(self.tasks):
            if not ti.state.commit_in_flight and ti.name not in self.drained_tasks:
                leaving = self._task_set.is_leaving(ti)
                self._commits.start(ti, functools.partial(self._departed, ti) if leaving else None)
        while self._commits.in_flight and self.error is None:
            await asyncio.wait(set(self._commits.in_flight))
        log.info("final commit done")
