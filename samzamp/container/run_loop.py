"""The event loop of one container: choose -> route to its task -> run the task's next op, repeated.

It runs on asyncio in the container's main thread. A slice handles up to ``SLICE`` envelopes back to
back (the inline fast path never touches asyncio), then yields so that callbacks from other threads,
coroutine tasks and timers run. With nothing to do it waits for a wake-up (new data, a completion,
a timer) or task.max.idle.ms.

Per task, ``TaskState.next_op`` decides what may run (commit > window > end-of-stream > drain >
process); window and commit timers only raise flags, so they never run concurrently with process.
A due window, commit or shutdown waits for the task's messages in flight; the task is asked to
``make_way`` meanwhile, so that work sent ahead to a worker does not hold it back.

End of stream: once every input of a task ended (bounded inputs) and nothing of it is queued or in
flight, its END_OF_STREAM op runs ``on_end_of_stream`` (then the task votes to shut down). With
task.window.on.end.of.stream, a windowable task first gets one last window(), the drain's
mechanism below: window() then on_end_of_stream(), so the hook sees what the window emitted, as
on_drain does.

Drain (``drain()``, Samza SEP-31): fetching stops and each SSP's buffer ends with a watermark marker
and a drain marker. Once a task passed every drain marker and nothing of it is queued or in flight,
its DRAIN op runs: one more window() for windowable tasks (the watermark went to infinity), then
``on_drain``, then a final commit that the loop waits for, then its vote to shut down. The
container stops when every task voted, as Samza's RunLoop does.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import time
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

from samzamp.api.collector import RequestScope
from samzamp.api.envelope import SystemStreamPartition
from samzamp.api.errors import CallbackTimeoutError
from samzamp.commit.pipeline import commit_task
from samzamp.commit.topic_checkpoint import TopicCheckpointManager
from samzamp.config.settings import TaskSettings
from samzamp.consume.lane import BroadcastLane, Lane, lane_ssp, task_lanes
from samzamp.consume.packed import Buffered, messages_in
from samzamp.consume.system_consumers import SystemConsumers
from samzamp.container.task_state import TaskOp, TaskState
from samzamp.metrics.registry import Counter, MetricsRegistry, Timer
from samzamp.systems.base import DRAIN, END_OF_STREAM
from samzamp.task.coordinator import ReadableCoordinator

__all__ = ["RunLoop", "RunLoopTask"]

log = logging.getLogger(__name__)


class RunLoopTask(Protocol):
    """One task as the loop drives it, wherever it runs (TaskInstance: on this thread or on asyncio;
    WorkerTaskProxy: in a worker process). All calls come from the loop thread."""

    name: str
    ssps: frozenset[SystemStreamPartition]
    state: TaskState
    processing_ssps: set[SystemStreamPartition]
    drain_pending: set[SystemStreamPartition]
    drain_marked: set[SystemStreamPartition]
    last_processed: dict[SystemStreamPartition, int]
    checkpointed: dict[SystemStreamPartition, int]
    logged_stores: frozenset[str]
    m_commit_calls: Counter
    m_commit_ns: Timer

    @property
    def windowable(self) -> bool: ...

    def process_run(
        self, ssp: SystemStreamPartition, first: Buffered, buffer: deque[Buffered], limit: int, deadline_ns: int
    ) -> int: ...

    def dispatch(self, ssp: SystemStreamPartition, raw: Buffered) -> None: ...

    def start_window(self, done: Callable[[Any, ReadableCoordinator | None], None]) -> None: ...

    def start_end_of_stream(self, done: Callable[[Any, ReadableCoordinator], None]) -> None: ...

    def start_drain(self, done: Callable[[Any, ReadableCoordinator], None]) -> None: ...

    def enter_drain_mode(self, callback_timeout_ms: int) -> None: ...

    def make_way(self) -> None:
        """A window, commit or shutdown of the task is due and waits for its messages in flight:
        cut that wait short where the task can (a worker yields what it has not started)."""

    async def prepare_commit(self) -> tuple[dict[SystemStreamPartition, int], dict[str, str]]: ...

    def checkpoint_written(self, offsets: dict[SystemStreamPartition, int]) -> None: ...

    def after_commit(self) -> None: ...


# A slice ends after this many envelopes or this much time, whichever comes first, so that timers
# (window, commit) and completions from other threads are never held back for long.
SLICE = 256
SLICE_S = 0.005


class _Ticker:
    """Fixed-rate ticks (like scheduleAtFixedRate): the n-th tick is due at start + n * period; a
    tick that fell behind (a long window or commit) skips the missed ones and keeps the phase."""

    __slots__ = ("_fn", "_handle", "_loop", "_period", "_start")

    def __init__(self, loop: asyncio.AbstractEventLoop, period_s: float, fn: Callable[[], None]) -> None:
        self._loop = loop
        self._period = period_s
        self._fn = fn
        self._start = loop.time()
        self._handle = loop.call_at(self._start + period_s, self._tick, 1)

    def _tick(self, n: int) -> None:
        self._fn()
        due = self._start + (n + 1) * self._period
        now = self._loop.time()
        if due < now:
            n = int((now - self._start) / self._period)
            due = self._start + (n + 1) * self._period
        self._handle = self._loop.call_at(due, self._tick, n + 1)

    def cancel(self) -> None:
        self._handle.cancel()


class RunLoop:
    def __init__(
        self,
        tasks: list[RunLoopTask],
        consumers: SystemConsumers,
        checkpoints: TopicCheckpointManager,
        settings: TaskSettings,
        metrics: MetricsRegistry,
        loop: asyncio.AbstractEventLoop,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.tasks: list[RunLoopTask] = []
        # The task of each lane (samzamp.consume.lane).
        self._by_lane: dict[Lane, RunLoopTask] = {}
        self._lanes: dict[RunLoopTask, dict[Lane, SystemStreamPartition]] = {}
        self._consumers = consumers
        self._checkpoints = checkpoints
        self._settings = settings
        self._loop = loop
        self._clock = clock
        # task.consumer.batch.size: how many messages of one SSP a task takes per choice.
        self._run_limit = max(1, settings.consumer_batch_size)
        self._ready: set[RunLoopTask] = set()
        self._dirty: list[Callable[[], None]] = []
        self._waiter: asyncio.Future[None] | None = None
        self._tickers: dict[RunLoopTask, list[_Ticker]] = {}  # each task's window and commit timers
        self._running = False
        # Tasks leaving the container (``remove_task``), each with what its remover awaits.
        self._leaving: dict[RunLoopTask, asyncio.Future[None]] = {}
        self._leave_timers: dict[RunLoopTask, asyncio.TimerHandle] = {}
        self._commits: set[asyncio.Task[None]] = set()
        self._shutdown_votes: set[str] = set()
        self.error: BaseException | None = None
        self.shutdown_requested = False
        # Whether this processor may process now (None: always). A standalone processor's lease on
        # its ZooKeeper session: while it does not hold, slices do nothing.
        self.fence: Callable[[], bool] | None = None
        self.draining = False
        self.drained_tasks: dict[str, dict[SystemStreamPartition, int]] = {}  # task -> final checkpoint
        self.drain_point: dict[SystemStreamPartition, int | None] = {}
        self._drain_started = 0.0
        self._drain_timers: dict[str, asyncio.TimerHandle] = {}
        self._metrics = metrics
        self.m_envelopes = metrics.counter("SamzaContainerMetrics", "process-envelopes")
        self.m_commit_calls = metrics.counter("SamzaContainerMetrics", "commit-calls")
        self.m_window_calls = metrics.counter("SamzaContainerMetrics", "window-calls")
        self._busy_s = 0.0
        self._started = clock()
        metrics.gauge("SamzaContainerMetrics", "event-loop-utilization", fn=self._utilization)
        metrics.gauge("SamzaContainerMetrics", "task-count", fn=lambda: len(self.tasks))
        for ti in tasks:
            self._add_lanes(ti)
            self.tasks.append(ti)

    def lanes(self, ti: RunLoopTask) -> dict[Lane, SystemStreamPartition]:
        """Lane -> SSP of each SSP ``ti`` reads (a broadcast one through a lane of its own)."""
        return task_lanes(ti.name, ti.ssps, self._settings.broadcast_inputs)

    def _add_lanes(self, ti: RunLoopTask) -> None:
        lanes = self.lanes(ti)
        taken = sorted(str(ssp) for lane, ssp in lanes.items() if lane in self._by_lane)
        if taken:
            raise ValueError(f"task {ti.name!r}: its input {taken} belongs to a task already running here")
        self._lanes[ti] = lanes
        for lane in lanes:
            self._by_lane[lane] = ti

    def add_task(self, ti: RunLoopTask) -> None:
        """Take a task on, before ``run`` or while it runs (then its timers start now). Its SSPs must
        not be in the consumers yet: the loop must know their task before one of them is chosen.

        A task with changelogged stores commits before it processes anything (Samza commits once at
        start under transactional state): its first checkpoint records the cut of the state it was
        restored to, so a kill before its first timed commit reverts what it wrote since. Without
        that checkpoint the restart would see no checkpoint at all, which means "keep the state"
        (task.transactional.state.retain.existing.state), and count those inputs twice."""
        self._add_lanes(ti)
        if ti.logged_stores:
            ti.state.need_commit = True
        self.tasks.append(ti)
        if self._running:
            self._start_timers(ti)

    def remove_task(self, ti: RunLoopTask) -> asyncio.Future[None]:
        """Stop a task while the others run; the future is done once it left the loop.

        The caller removed its SSPs from the consumers first, so nothing new reaches it. Messages
        queued for it and not started are dropped: its checkpoint, which covers only messages that
        completed, is where its next owner starts. What is in flight finishes (a worker is asked
        to yield what it has not started), then a final commit runs, as a shutdown's does (no
        forced window). A task that cannot stop within task.shutdown.ms fails the container: its
        next owner could otherwise run while it still does.
        """
        fut = self._leaving.get(ti)
        if fut is not None:
            return fut
        fut = self._leaving[ti] = self._loop.create_future()
        st = ti.state
        st.stopping = True
        st.need_window = False
        st.pending.clear()
        st.redo = 0
        self._stop_timers(ti)
        self._leave_timers[ti] = self._loop.call_later(self._settings.shutdown_ms / 1000, self._leave_timed_out, ti)
        self.task_ready(ti)
        return fut

    def _leave_timed_out(self, ti: RunLoopTask) -> None:
        self._leave_timers.pop(ti, None)
        self.abort(
            CallbackTimeoutError(
                f"task {ti.name!r} did not stop within task.shutdown.ms = {self._settings.shutdown_ms} ms while "
                "leaving this container (work still in flight); the container stops without checkpointing it"
            )
        )

    def _leave(self, ti: RunLoopTask) -> None:
        """A leaving task is idle: its final commit, then it leaves the loop."""
        self._start_commit(ti, functools.partial(self._depart, ti))

    def _depart(self, ti: RunLoopTask) -> None:
        timer = self._leave_timers.pop(ti, None)
        if timer is not None:
            timer.cancel()
        self.tasks.remove(ti)
        for lane in self._lanes.pop(ti, {}):
            if self._by_lane.get(lane) is ti:
                del self._by_lane[lane]
        self._ready.discard(ti)
        ti.state.pending.clear()
        self._shutdown_votes.discard(ti.name)
        log.info("task %r left: final checkpoint %s", ti.name, {str(s): o for s, o in sorted(ti.checkpointed.items())})
        fut = self._leaving.pop(ti)
        if not fut.done():
            fut.set_result(None)
        if self.tasks and len(self._shutdown_votes) == len(self.tasks):
            log.info("every task voted to shut down")
            self.shutdown_requested = True
        self.wake()

    # -- wake-ups -------------------------------------------------------------------------------
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
            targets = self.tasks if coordinator.commit_scope is RequestScope.ALL_TASKS_IN_CONTAINER else [ti]
            for t in targets:
                t.state.need_commit = True
                self._ready.add(t)
        if coordinator.shutdown_requested:
            if coordinator.shutdown_scope is RequestScope.ALL_TASKS_IN_CONTAINER:
                log.info("task %r requested shutdown of all tasks", ti.name)
                self.shutdown_requested = True
            else:
                self._shutdown_votes.add(ti.name)
                if len(self._shutdown_votes) == len(self.tasks):
                    log.info("every task voted to shut down")
                    self.shutdown_requested = True
        self.wake()

    # -- timers ---------------------------------------------------------------------------------
    def _start_timers(self, ti: RunLoopTask) -> None:
        s = self._settings
        tickers = self._tickers.setdefault(ti, [])
        if s.window_ms > 0 and ti.windowable:
            tickers.append(_Ticker(self._loop, s.window_ms / 1000, functools.partial(self._flag, ti, window=True)))
        if s.commit_ms > 0:
            tickers.append(_Ticker(self._loop, s.commit_ms / 1000, functools.partial(self._flag, ti, commit=True)))

    def _flag(self, ti: RunLoopTask, window: bool = False, commit: bool = False) -> None:
        if self.shutdown_requested:
            return  # shutdown does not force a window; it ends with its own final commit
        if window:
            ti.state.need_window = True
        if commit:
            ti.state.need_commit = True
        self.task_ready(ti)

    def _stop_timers(self, ti: RunLoopTask | None = None) -> None:
        """Stop the window and commit timers of ``ti`` (of every task when None)."""
        for t in [ti] if ti is not None else list(self._tickers):
            for ticker in self._tickers.pop(t, ()):
                ticker.cancel()

    def _utilization(self) -> float:
        """Share of wall time spent running slices (Samza's event-loop-utilization)."""
        return round(self._busy_s / max(1e-9, self._clock() - self._started), 3)

    # -- the loop -------------------------------------------------------------------------------
    async def run(self) -> None:
        """Run until shutdown or failure. Raises the failure after stopping (no commit on failure)."""
        for ti in self.tasks:
            self._start_timers(ti)
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
                try:
                    await asyncio.wait_for(self._waiter, self._settings.max_idle_ms / 1000 or None)
                except TimeoutError:
                    pass
                finally:
                    self._waiter = None
            if self.error is None:
                await self._shutdown()
        finally:
            self._running = False
            self._stop_timers()
            for h in [*self._drain_timers.values(), *self._leave_timers.values()]:
                h.cancel()
            for fut in self._leaving.values():  # their removers must not wait for a loop that ended
                if not fut.done():
                    fut.set_exception(self.error or RuntimeError("the run loop stopped"))
        if self.error is not None:
            for c in self._commits:
                c.cancel()
            raise self.error

    def _run_slice(self) -> bool:
        if self.fence is not None and not self.fence():
            return False  # not allowed to process now: nothing is dispatched, committed or windowed
        progressed = False
        consumers = self._consumers
        choose = consumers.choose
        by_lane = self._by_lane
        run_task = self._run_task
        clock = self._clock
        run_limit = self._run_limit
        envelopes = self.m_envelopes
        deadline = clock() + SLICE_S
        deadline_ns = time.monotonic_ns() + int(SLICE_S * 1e9)  # runs end with the slice
        refill = consumers.refill
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
                envelopes.count += ti.process_run(ssp, raw, consumers.buffer(lane), run_limit, deadline_ns)
                consumers.try_update(lane)
            else:
                ti.state.pending.append(chosen)  # behind what the task is still working on (or a marker)
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

    def mark_dirty(self, flush: Callable[[], None]) -> None:
        """A worker's task collected messages to send: call its ``flush`` at the end of this slice."""
        self._dirty.append(flush)

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
        st = ti.state
        while self.error is None:
            op = st.next_op()
            if op is TaskOp.PROCESS:
                lane, raw = st.pending.popleft()
                if st.redo:  # given back by a worker (its SSP): the chooser already moved past it
                    st.redo -= 1
                elif raw[0] < 0:
                    self._control_marker(ti, lane, raw[0])
                    continue
                else:
                    self._consumers.try_update(lane)
                ti.dispatch(lane_ssp(lane), raw)
            elif op is TaskOp.COMMIT:
                self._start_commit(ti)
            elif op is TaskOp.WINDOW:
                st.need_window = False
                st.window_in_flight = True
                self.m_window_calls.count += 1
                try:
                    ti.start_window(self.window_done)
                except BaseException as e:
                    st.window_in_flight = False
                    self.abort(e)
                    return
                if st.window_in_flight:
                    return  # a worker runs it; window_done comes later
            elif op is TaskOp.END_OF_STREAM:
                if self._settings.window_on_end_of_stream and self._final_window(ti):
                    continue
                self._start_last_hook(ti, ti.start_end_of_stream, self.end_of_stream_done)
                return
            elif op is TaskOp.DRAIN:
                self._arm_drain_timer(ti)
                if self._final_window(ti):
                    continue
                self._start_last_hook(ti, ti.start_drain, self.drain_done)
                return
            else:
                if st.waits_for_in_flight():
                    self._make_way(ti)
                elif st.idle and ti in self._leaving and not st.need_commit:
                    self._leave(ti)
                return

    def _make_way(self, ti: RunLoopTask) -> None:
        try:
            ti.make_way()
        except BaseException as e:
            self.abort(e)

    def _final_window(self, ti: RunLoopTask) -> bool:
        """Before a task's last hook (end of stream, drain): flag one more window() for a windowable
        task, once; True if flagged. Its input is complete, so its windows emit what they hold."""
        st = ti.state
        if not ti.windowable or st.final_window_done:
            return False
        st.final_window_done = True
        st.need_window = True
        return True

    def _start_last_hook(
        self,
        ti: RunLoopTask,
        start: Callable[[Callable[[Any, ReadableCoordinator], None]], None],
        done: Callable[[Any, ReadableCoordinator], None],
    ) -> None:
        """Start the task's last hook (end of stream or drain): nothing else runs for it after this."""
        ti.state.complete = True
        ti.state.hook_in_flight = True
        try:
            start(done)
        except BaseException as e:
            self.abort(e)

    def _control_marker(self, ti: RunLoopTask, lane: Lane, marker: int) -> None:
        """A marker reached the head of the task's queue: everything before it was dispatched."""
        st = ti.state
        ssp = lane_ssp(lane)
        if marker == END_OF_STREAM:
            ti.processing_ssps.discard(ssp)
            if not ti.processing_ssps:
                st.end_of_stream = True
        else:
            # WATERMARK_MAX: the drain marker comes next. Its effect (windows emit what they hold)
            # is the DRAIN op's last window(), which also waits until nothing is queued or in flight.
            self._consumers.try_update(lane)
            if marker == DRAIN:
                ti.drain_pending.discard(ssp)
        # Drained: every drain marker passed, and every input without one (its bounded input had
        # ended when the drain began) reached its end.
        if ti.drain_marked and not ti.drain_pending and ti.processing_ssps <= ti.drain_marked and not st.drained:
            st.drained = True
            log.info("task %r: every input reached its drain marker", ti.name)

    def window_done(self, ti: RunLoopTask, coordinator: ReadableCoordinator | None) -> None:
        """A task's window() returned (on this thread, or reported by its worker)."""
        ti.state.window_in_flight = False
        if coordinator is not None and coordinator.requested:
            self.on_requests(ti, coordinator)
        self.task_ready(ti)

    def end_of_stream_done(self, ti: RunLoopTask, coordinator: ReadableCoordinator) -> None:
        log.info("task %r reached the end of every input", ti.name)
        ti.state.hook_in_flight = False
        if coordinator.commit_requested:
            self._start_commit(ti)
        self.on_requests(ti, coordinator)

    # -- drain ----------------------------------------------------------------------------------
    def drain(self, notification: str) -> None:
        """Drain the container: stop fetching, process what was fetched, drain every task, stop.

        May be called before ``run`` (a notification found at start): then nothing is processed.
        """
        if self.draining or self.shutdown_requested or self.error is not None:
            return
        self.draining = True
        self._drain_started = self._clock()
        buffered = self._consumers.buffered() + sum(
            messages_in(raw) for t in self.tasks for _, raw in t.state.pending if raw[0] >= 0
        )
        self.drain_point, marked = self._consumers.drain()
        for ti in self.tasks:
            ti.drain_marked = {ssp for lane, ssp in self._lanes[ti].items() if lane in marked}
            ti.drain_pending = set(ti.drain_marked)
            ti.enter_drain_mode(self._settings.drain_callback_timeout_ms)
        m = self._metrics
        m.gauge("SamzaContainerMetrics", "drain-started-ms").set(int(time.time() * 1000))
        m.gauge("SamzaContainerMetrics", "drain-buffered-messages").set(buffered)
        log.info("drain %s: fetching stopped with %d messages buffered", notification, buffered)
        # The newest offset fetched per SSP: the drain processes up to here (JSON, for tools and tests).
        log.info("drain point: %s", json.dumps({str(s): o for s, o in self.drain_point.items()}))
        if not self.tasks:  # nothing to drain (a standalone processor may hold no task): drained
            log.info("every task is drained (this container holds none)")
            self.shutdown_requested = True
        self.wake()

    @property
    def drain_complete(self) -> bool:
        """Every task was drained (not merely stopped)."""
        return self.draining and all(
            t.name in self.drained_tasks or (not t.drain_marked and t.state.complete) for t in self.tasks
        )

    def _arm_drain_timer(self, ti: RunLoopTask) -> None:
        """task.callback.drain.timeout.ms bounds a task's drain op: last window, on_drain, final commit."""
        timeout_ms = self._settings.drain_callback_timeout_ms
        if timeout_ms > 0 and ti.name not in self._drain_timers:
            self._drain_timers[ti.name] = self._loop.call_later(timeout_ms / 1000, self._drain_timed_out, ti)

    def _drain_timed_out(self, ti: RunLoopTask) -> None:
        self.abort(
            CallbackTimeoutError(
                f"task {ti.name!r}: its drain (last window, on_drain, final commit) did not finish within "
                f"task.callback.drain.timeout.ms = {self._settings.drain_callback_timeout_ms} ms; no final commit"
            )
        )

    def drain_done(self, ti: RunLoopTask, coordinator: ReadableCoordinator) -> None:
        """The task's on_drain returned: final commit (waited for), then its vote to shut down.
        The coordinator's requests are not needed: the task commits and stops anyway."""
        ti.state.hook_in_flight = False

        def committed() -> None:
            timer = self._drain_timers.pop(ti.name, None)
            if timer is not None:
                timer.cancel()
            self.drained_tasks[ti.name] = dict(ti.checkpointed)
            elapsed_ms = int((self._clock() - self._drain_started) * 1000)
            self._metrics.gauge(f"TaskName-{ti.name}", "drain-ms").set(elapsed_ms)
            log.info(
                "task %r drained in %d ms; final checkpoint %s",
                ti.name,
                elapsed_ms,
                {str(s): o for s, o in sorted(ti.checkpointed.items())},
            )
            self._shutdown_votes.add(ti.name)
            if len(self._shutdown_votes) == len(self.tasks):
                log.info("every task is drained")
                self.shutdown_requested = True
            self.wake()

        self._start_commit(ti, committed)

    def _start_commit(self, ti: RunLoopTask, then: Callable[[], None] | None = None) -> None:
        st = ti.state
        self._catch_up(ti)
        st.need_commit = False
        st.commit_in_flight = True
        self.m_commit_calls.count += 1
        ti.m_commit_calls.count += 1
        started = time.perf_counter_ns()

        async def run() -> None:
            try:
                await commit_task(ti, self._checkpoints)
            except Exception as e:
                self.abort(e)
                return
            finally:
                st.commit_in_flight = False
            ti.m_commit_ns.update(time.perf_counter_ns() - started)
            ti.after_commit()
            if then is not None:
                then()
            self.task_ready(ti)

        fut = self._loop.create_task(run())
        self._commits.add(fut)
        fut.add_done_callback(self._commits.discard)

    def _catch_up(self, ti: RunLoopTask) -> None:
        """Move ``ti``'s low watermark of each SSP it has finished everything fetched of up to the
        partition's fetched position (``SystemConsumers.caught_up_to``). This is what moves the
        checkpoint of a key bucket that gets few messages, or none: its partition is read from the
        lowest checkpoint among its buckets, so a bucket left behind would have every restart read
        the partition again from there. Only with nothing of ``ti`` in flight (a commit after
        task.shutdown.ms may have some) and nothing of the lane pending."""
        if ti.state.messages_in_flight:
            return
        pending = {lane for lane, _ in ti.state.pending}
        last = ti.last_processed
        for lane, ssp in self._lanes.get(ti, {}).items():
            if lane in pending:
                continue
            upto = self._consumers.caught_up_to(lane)
            if upto is not None and upto > last.get(ssp, -1):
                last[ssp] = upto

    # -- shutdown -------------------------------------------------------------------------------
    async def _shutdown(self) -> None:
        """Stop consuming, finish in-flight work (window not forced), final commit of every task."""
        log.info("shutting down: finishing in-flight work")
        self._stop_timers()
        for h in self._drain_timers.values():  # a stop during a drain ends it the ordinary way
            h.cancel()
        self._drain_timers.clear()
        self._consumers.stop_fetching()
        for ti in self.tasks:
            ti.state.stopping = True
            ti.state.need_window = False
            if ti.state.waits_for_in_flight():
                self._make_way(ti)
        deadline = self._clock() + self._settings.shutdown_ms / 1000
        while self.error is None:
            while self._ready:
                self._run_task(self._ready.pop())
            self._flush_batches()
            if all(t.state.idle for t in self.tasks) and not self._commits:
                break
            if self._clock() > deadline:
                busy = [t.name for t in self.tasks if not t.state.idle]
                log.warning("task.shutdown.ms passed with work still in flight in %s; committing what completed", busy)
                break
            self._waiter = self._loop.create_future()
            try:
                await asyncio.wait_for(self._waiter, 0.05)
            except TimeoutError:
                pass
            finally:
                self._waiter = None
        if self.error is not None:
            return
        for ti in list(self.tasks):
            if not ti.state.commit_in_flight and ti.name not in self.drained_tasks:
                self._start_commit(ti, functools.partial(self._depart, ti) if ti in self._leaving else None)
        while self._commits and self.error is None:
            await asyncio.wait(set(self._commits))
        log.info("final commit done")
