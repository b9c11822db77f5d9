"""One task of the container on the event loop: messages in, completions and offsets out.

The task itself (decode, process, hooks, commit steps, error policy) runs in its ``TaskRuntime``;
this host adds what only the loop has: the dispatch adapters (async tasks, callbacks and their
timeouts), the low watermark of completed messages and the hand-off of requests to the run loop.

All methods run on the event loop thread. Callbacks completed on other threads are routed back onto
the loop before they touch any state here.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any, cast

from samzamp import logs
from samzamp.api.envelope import SystemStream, SystemStreamPartition
from samzamp.api.errors import CallbackTimeoutError
from samzamp.collect.completions import TaskCallbackImpl, TaskCallbackManager
from samzamp.consume.packed import Buffered
from samzamp.container.run_loop_task import HookDone
from samzamp.container.task_base import TaskBase
from samzamp.dispatch.adapters import CoroutineAdapter, InlineSyncAdapter, RunnableTask, adapt_task
from samzamp.metrics.registry import MetricsRegistry
from samzamp.model.control_state import ControlState
from samzamp.model.job_model import TaskModel
from samzamp.storage.manager import RestoreReport, TaskStorage
from samzamp.systems.base import RawMessage
from samzamp.task.coordinator import ReadableCoordinator
from samzamp.task.runtime import RUN_MARKER, RUN_REQUESTED, TaskRuntime
from samzamp.task.start import TaskStarter

__all__ = ["TaskInstance"]


class TaskInstance(TaskBase):
    """A task run by this process, on the loop thread (sync tasks) or through callbacks (async
    tasks): ``start`` it before dispatching to it."""

    runtime: TaskRuntime  # from ``start`` on
    runnable: RunnableTask

    def __init__(
        self,
        name: str,
        ssps: frozenset[SystemStreamPartition],
        checkpointed: dict[SystemStreamPartition, int],
        starter: TaskStarter,
        *,
        max_concurrency: int,
        callback_timeout_ms: int,
        logged_stores: frozenset[str] = frozenset(),
        intermediate: frozenset[SystemStream] = frozenset(),
        metrics: MetricsRegistry,
        loop: asyncio.AbstractEventLoop,
        on_ready: Callable[[TaskInstance], None],
        on_abort: Callable[[BaseException], None],
        on_requests: Callable[[TaskInstance, ReadableCoordinator], None],
        adapt: Callable[[Any, asyncio.AbstractEventLoop], RunnableTask] = adapt_task,
    ) -> None:
        """``starter`` starts the task of a model (``task.start.start_task``, bound to this
        container's systems); ``adapt`` gives the task object the loop's call shape."""
        super().__init__(name, ssps, max_concurrency, checkpointed, metrics, logged_stores, intermediate)
        self._starter = starter
        self._adapt = adapt
        self.callbacks = TaskCallbackManager(max_concurrency)
        self._timeout_s = callback_timeout_ms / 1000 if callback_timeout_ms > 0 else 0.0
        self._loop = loop
        self._loop_thread = threading.get_ident()
        self._on_ready = on_ready
        self._on_abort = on_abort
        self._on_requests = on_requests
        self._inline = False

    @property
    def task(self) -> Any:
        return self.runtime.task

    @property
    def storage(self) -> TaskStorage | None:
        return self.runtime.storage

    # -- lifetime -------------------------------------------------------------------------------
    async def start(self, model: TaskModel) -> list[RestoreReport]:
        """Start the task here (``task.start.start_task``: stores restored on a thread, init on the
        loop thread); the restore reports."""
        if model.name != self.name or frozenset(model.ssps) != self.ssps:
            raise ValueError(f"task {self.name!r} cannot be started from the model of task {model.name!r}")
        runtime, reports = await self._starter(model)
        self.runtime = runtime
        self.runnable = self._adapt(runtime.task, self._loop)
        # Sync tasks run inline take the fast path; every other kind goes through TaskCallbacks.
        self._inline = isinstance(self.runnable, InlineSyncAdapter)
        runtime.counted = (self.m_process_calls, self.m_processed, self.m_process_ns)
        return reports

    async def stop(self) -> None:
        """The task leaves: close it, then its stores (on the loop thread, as at shutdown)."""
        self.close()

    def abandon(self) -> None:
        """The loop ended: an async task's calls still running are cancelled."""
        if isinstance(self.runnable, CoroutineAdapter):
            self.runnable.cancel_all()

    def release(self) -> None:
        """The container failed: the task's stores close without a commit; the task is not closed."""
        self.runtime.release()

    def close(self) -> None:
        """Close the task and its stores."""
        self.runtime.close()

    # -- process --------------------------------------------------------------------------------
    def dispatch(self, ssp: SystemStreamPartition, raw: Buffered) -> None:
        """Start processing one message (the state said PROCESS). Never a packed run: the fetch
        packs runs only when every task runs in a worker process."""
        if self._inline:
            self.process_run(ssp, raw, deque(), 1, 0)
            return
        offset = raw[0]
        try:
            envelope = self.runtime.envelope(self.runtime.index_of[ssp], cast(RawMessage, raw))
        except Exception as e:
            self._on_abort(e)
            return
        if envelope is None:  # dropped: completes at once, in order with the others
            cb = TaskCallbackImpl(self._deliver, self.callbacks.new_seq(), ssp, offset, None, time.perf_counter_ns())
            self.state.messages_started(1)
            cb.complete()
            return
        coordinator = ReadableCoordinator()
        cb = TaskCallbackImpl(self._deliver, self.callbacks.new_seq(), ssp, offset, coordinator, time.perf_counter_ns())
        self.state.messages_started(1)
        self.m_process_calls.count += 1
        if self._timeout_s:
            cb.timer = self._loop.call_later(self._timeout_s, self._timed_out, cb)
        scope = logs.enter_task(self.name)  # a coroutine started here keeps it: what it logs names the task
        try:
            self.runnable.process_async(envelope, self.runtime.collector, coordinator, cb)
        finally:
            logs.leave_task(scope)

    @property
    def windowable(self) -> bool:
        return self.runtime.windowable

    def process_run(
        self,
        ssp: SystemStreamPartition,
        first: Buffered,
        buffer: deque[Buffered],
        limit: int,
        deadline_ns: int,
        fenced: bool = False,
    ) -> int:
        """Process ``first`` and then up to ``limit - 1`` more messages of ``ssp`` straight from its
        fetch buffer, in order, until ``deadline_ns`` (time.monotonic_ns) passes (the state said
        PROCESS). A task that is not run inline takes one. A control marker (end of stream, drain)
        ends a run and stays first in the buffer. A coordinator request is handed to the run loop
        before the next message, as a one-message run would. ``fenced``: the run also ends before a
        message once the clock passes ``deadline_ns``: a pause between two messages (SIGSTOP, a frozen
        VM) counts in neither's process time, and a processor continued past its lease must not start
        the next (the run loop checks the lease before each slice). Returns how many messages it took.
        """
        if not self._inline:  # runs on asyncio or calls back: one message through the callback path
            self.dispatch(ssp, first)
            return 1
        rt = self.runtime
        buffer.appendleft(first)
        # The deadline bounds the run's process time (decoding aside, which the limit bounds).
        budget_ns = deadline_ns - time.monotonic_ns()
        try:
            # The buffer holds messages only (never packed runs: see ``dispatch``), so its length
            # ends the run on a count rather than on popleft's IndexError (an exception per run).
            next_raw = cast("Callable[[], RawMessage]", buffer.popleft)
            if fenced:
                next_raw = _until(deadline_ns, next_raw)
            run = min(limit, len(buffer))
            outcome = rt.process_run(rt.index_of[ssp], next_raw, run, budget_ns if budget_ns > 0 else 0)
        except Exception as e:
            self._on_abort(e)
            outcome = -1
        if outcome == RUN_MARKER:  # it stays first in the buffer
            buffer.appendleft(rt.marker)  # type: ignore[arg-type]
        if rt.run_offset >= 0:
            self.last_processed[ssp] = rt.run_offset
        if outcome == RUN_REQUESTED:
            self._on_requests(self, rt.requests)
        return rt.run_taken + (outcome < 0)

    def _deliver(self, cb: TaskCallbackImpl, error: BaseException | None) -> None:
        if threading.get_ident() == self._loop_thread:
            self._on_complete(cb, error)
        else:
            self._loop.call_soon_threadsafe(self._on_complete, cb, error)

    def _timed_out(self, cb: TaskCallbackImpl) -> None:
        cb.timer = None
        cb.failure(
            CallbackTimeoutError(
                f"callback for {cb.ssp} offset {cb.offset} timed out after {self._timeout_s * 1000:.0f} ms"
            )
        )

    def _on_complete(self, cb: TaskCallbackImpl, error: BaseException | None) -> None:
        if cb.timer is not None:
            cb.timer.cancel()
            cb.timer = None
        if error is not None and not self.runtime.is_ignored(error):
            self._on_abort(self.failure(error, cb.ssp, cb.offset))
            return
        self.state.messages_done(1)
        self.m_process_ns.update(time.perf_counter_ns() - cb.started_ns)
        self._release(self.callbacks.release(cb))
        self._on_ready(self)

    def _release(self, released: list[TaskCallbackImpl]) -> None:
        last = self.last_processed
        for rcb in released:
            last[rcb.ssp] = rcb.offset
            coordinator = rcb.coordinator
            if coordinator is None:  # a dropped message: taken, never processed
                continue
            self.m_processed.count += 1
            if coordinator.requested:
                self._on_requests(self, coordinator)

    def failure(
        self, error: BaseException, ssp: SystemStreamPartition | None = None, offset: int | None = None
    ) -> BaseException:
        return self.runtime.failure(error, ssp, offset)

    # -- window / end of stream -----------------------------------------------------------------
    def window(self) -> ReadableCoordinator | None:
        """Run window() (the state said WINDOW); returns the coordinator with the task's requests."""
        if not self.runtime.windowable:
            return None
        start = time.perf_counter_ns()
        self.m_window_calls.count += 1
        coordinator = self.runtime.window()
        self.m_window_ns.update(time.perf_counter_ns() - start)
        return coordinator

    def end_of_stream(self) -> ReadableCoordinator:
        return self.runtime.end_of_stream()

    def enter_drain_mode(self, callback_timeout_ms: int) -> None:
        """While draining, callbacks started from now on time out after task.callback.drain.timeout.ms
        (when set; Samza's rule), so a drain cannot wait forever on one message."""
        if callback_timeout_ms > 0:
            self._timeout_s = callback_timeout_ms / 1000

    def on_drain(self) -> ReadableCoordinator:
        return self.runtime.on_drain()

    # -- the shape the run loop drives (shared with WorkerTaskProxy) -------------------------
    def start_window(self, done: HookDone) -> None:
        """Run window() now and report to ``done`` before returning (a worker's task reports later)."""
        done(self, self.window())

    def start_end_of_stream(self, done: HookDone) -> None:
        done(self, self.end_of_stream())

    def start_drain(self, done: HookDone) -> None:
        done(self, self.on_drain())

    def make_way(self) -> None:
        """Nothing to hurry: a sync task's process() returns before the loop goes on, and an async
        task's callbacks are bounded by task.callback.timeout.ms."""

    # -- commit steps where the task runs (samzamp.commit.pipeline) -------------------------------
    async def before_commit(self) -> ControlState | None:
        return self.runtime.before_commit()

    async def flush_and_freeze_stores(self, *, asynchronous: bool) -> dict[str, str]:
        # Step 3 runs on the event loop thread on purpose: librdkafka's flush waits until the whole
        # queue is empty, including messages sent while it waits. Blocking the loop (a few ms) stops
        # the loop's tasks from sending meanwhile, so the flush is a barrier that ends.
        self.runtime.flush_producers()
        if self.runtime.storage is None:  # no store: no thread hop (thousands a commit round)
            return {}
        step = self.runtime.freeze_stores if asynchronous else self.runtime.commit_stores
        return await asyncio.to_thread(step)

    @property
    def applying_stores(self) -> bool:
        return self.runtime.stores_frozen

    async def apply_stores(self) -> None:
        # The writes go to LMDB on a thread while the task runs on the loop: reads of the store on
        # this thread meanwhile see the frozen writes over LMDB (``storage.store``).
        rt = self.runtime
        if not rt.stores_frozen:
            return
        await asyncio.to_thread(rt.apply_stores)
        rt.settle_stores()

    def _tell_checkpoint(self, offsets: dict[SystemStreamPartition, int]) -> None:
        self.runtime.on_checkpoint(offsets)

    def after_commit(self) -> None:
        """A commit request may have held completed callbacks back: release them now."""
        self._release(self.callbacks.release_held())


def _until(deadline_ns: int, take: Callable[[], RawMessage]) -> Callable[[], RawMessage]:
    """``take``, which ends the run (an empty buffer's IndexError, nothing taken) once the monotonic
    clock is past ``deadline_ns``."""

    def next_raw() -> RawMessage:
        if _now_ns() > deadline_ns:
            raise IndexError("the run's time is up")
        return take()

    return next_raw


_now_ns = time.monotonic_ns  # the clock a fenced run ends by (a test's to move)
