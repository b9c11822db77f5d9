"""One task of the container: decode -> dispatch -> completions -> offsets, plus its window and commit.

All methods run on the event loop thread. Callbacks completed on other threads are routed back onto
the loop before they touch any state here.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from samzamp.api.collector import MessageCollector, TaskCoordinator
from samzamp.api.context import TaskContext
from samzamp.api.envelope import IncomingMessageEnvelope, SystemStreamPartition
from samzamp.api.errors import CallbackTimeoutError
from samzamp.api.serde import Serde
from samzamp.api.task import ClosableTask, DrainListenerTask, EndOfStreamListenerTask, InitableTask, WindowableTask
from samzamp.collect.collector import TaskCollector
from samzamp.collect.completions import TaskCallbackImpl, TaskCallbackManager
from samzamp.commit import pipeline
from samzamp.container.task_base import TaskBase
from samzamp.dispatch.adapters import InlineSyncAdapter, RunnableTask
from samzamp.metrics.registry import MetricsRegistry
from samzamp.storage.manager import TaskStorage
from samzamp.systems.base import RawMessage
from samzamp.task.coordinator import ReadableCoordinator
from samzamp.task.failures import deserialization_error, is_ignored, task_failure

__all__ = ["TaskInstance"]

_NO_MORE: deque[RawMessage] = deque()  # a run of one message: nothing more to take

log = logging.getLogger(__name__)


class TaskInstance(TaskBase):
    def __init__(
        self,
        name: str,
        ssps: frozenset[SystemStreamPartition],
        task: Any,
        runnable: RunnableTask,
        collector: TaskCollector,
        serdes: dict[SystemStreamPartition, tuple[Serde | None, Serde | None]],
        checkpointed: dict[SystemStreamPartition, int],
        *,
        max_concurrency: int,
        callback_timeout_ms: int,
        drop_deserialization_errors: bool,
        drop_producer_errors: bool,
        ignored_exceptions: tuple[str, ...],
        metrics: MetricsRegistry,
        loop: asyncio.AbstractEventLoop,
        on_ready: Callable[[TaskInstance], None],
        on_abort: Callable[[BaseException], None],
        on_requests: Callable[[TaskInstance, ReadableCoordinator], None],
    ) -> None:
        super().__init__(name, ssps, max_concurrency, checkpointed, metrics)
        self.drop_producer_errors = drop_producer_errors
        self.task = task
        self.runnable = runnable
        self.collector = collector
        self.callbacks = TaskCallbackManager(max_concurrency)
        self.storage: TaskStorage | None = None  # the task's stores, when the job has any
        self._decoders = {
            s: (None if k is None else k.from_bytes, None if m is None else m.from_bytes)
            for s, (k, m) in serdes.items()
        }
        self._timeout_s = callback_timeout_ms / 1000 if callback_timeout_ms > 0 else 0.0
        self._drop_deser = drop_deserialization_errors
        self._ignored = ignored_exceptions
        self._loop = loop
        self._loop_thread = threading.get_ident()
        self._on_ready = on_ready
        self._on_abort = on_abort
        self._on_requests = on_requests
        # Sync tasks run inline take the fast path; every other kind goes through TaskCallbacks.
        self._inline: Callable[..., None] | None = runnable.process if isinstance(runnable, InlineSyncAdapter) else None
        self._coordinator = ReadableCoordinator()
        self.m_deser_errors = metrics.counter("SystemConsumersMetrics", "deserialization error")

    # -- lifecycle ------------------------------------------------------------------------------
    def init(self, context: TaskContext) -> None:
        if isinstance(self.task, InitableTask):
            self.task.init(context)

    def close(self) -> None:
        if isinstance(self.task, ClosableTask):
            self.task.close()

    # -- process --------------------------------------------------------------------------------
    def dispatch(self, ssp: SystemStreamPartition, raw: RawMessage) -> None:
        """Start processing one message (the state said PROCESS)."""
        if self._inline is not None:
            self.process_run(ssp, raw, _NO_MORE, 1, 0)
            return
        offset, key_bytes, value_bytes, ts = raw
        key_dec, msg_dec = self._decoders[ssp]
        try:
            key = key_bytes if key_dec is None or key_bytes is None else key_dec(key_bytes)
            message = value_bytes if msg_dec is None or value_bytes is None else msg_dec(value_bytes)
        except Exception as e:
            self._deserialization_failed(ssp, offset, e)
            return
        size = (len(key_bytes) if key_bytes else 0) + (len(value_bytes) if value_bytes else 0)
        envelope = IncomingMessageEnvelope(ssp, offset, key, message, size, ts)
        coordinator = ReadableCoordinator()
        cb = TaskCallbackImpl(self._deliver, self.callbacks.new_seq(), ssp, offset, coordinator, time.perf_counter_ns())
        self.state.messages_in_flight += 1
        self.m_process_calls.count += 1
        if self._timeout_s:
            cb.timer = self._loop.call_later(self._timeout_s, self._timed_out, cb)
        self.runnable.process_async(envelope, self.collector, coordinator, cb)

    @property
    def windowable(self) -> bool:
        return isinstance(self.task, WindowableTask)

    def process_run(
        self, ssp: SystemStreamPartition, first: RawMessage, buffer: deque[RawMessage], limit: int, deadline_ns: int
    ) -> int:
        """Process ``first`` and then up to ``limit - 1`` more messages of ``ssp`` straight from its
        fetch buffer, in order, until ``deadline_ns`` (perf_counter_ns) passes (the state said PROCESS).
        A task that is not run inline takes one. A control marker (end of stream, drain) ends a run.

        This is the per-message path with the per-message overheads hoisted: one loop, locals for
        everything it touches, metrics applied once per run. A run stops early at an end-of-stream
        marker (left in the buffer), at a coordinator request (handled before the next message, as
        a one-message run would) and at a failure. Returns how many messages it took.
        """
        process = self._inline
        if process is None:  # runs on asyncio or calls back: one message through the callback path
            self.dispatch(ssp, first)
            return 1
        # A sync task on the loop thread completes when process returns: the callback machinery
        # (sequence numbers, thread hand-off) has nothing to do and is skipped.
        key_dec, msg_dec = self._decoders[ssp]
        collector = self.collector
        coordinator = self._coordinator
        clock = time.perf_counter_ns
        envelope_of = IncomingMessageEnvelope
        total_ns = max_ns = n = started = 0
        taken = 1
        done = -1  # offset of the last message completed in this run
        raw = first
        try:
            while True:
                offset, key_bytes, value_bytes, ts = raw
                if offset < 0:  # a control marker ends the run; it stays first in the buffer
                    buffer.appendleft(raw)
                    return taken - 1
                try:
                    key = key_bytes if key_dec is None or key_bytes is None else key_dec(key_bytes)
                    message = value_bytes if msg_dec is None or value_bytes is None else msg_dec(value_bytes)
                except Exception as e:
                    if not self._deserialization_failed(ssp, offset, e):
                        return taken
                    done = offset
                else:
                    size = (len(key_bytes) if key_bytes else 0) + (len(value_bytes) if value_bytes else 0)
                    started = clock()
                    try:
                        process(envelope_of(ssp, offset, key, message, size, ts), collector, coordinator)
                    except Exception as e:
                        if not self._is_ignored(e):
                            self._on_abort(self.failure(e, ssp, offset))
                            return taken
                    ns = clock() - started
                    total_ns += ns
                    if ns > max_ns:
                        max_ns = ns
                    n += 1
                    done = offset
                    if coordinator.requested:
                        self.last_processed[ssp] = offset
                        self._coordinator = ReadableCoordinator()
                        self._on_requests(self, coordinator)
                        return taken
                if taken >= limit or not buffer or started > deadline_ns:
                    return taken
                raw = buffer.popleft()
                taken += 1
        finally:
            if done >= 0:
                self.last_processed[ssp] = done
            self.m_process_calls.count += n
            self.m_processed.count += n
            t = self.m_process_ns
            t.count += n
            t.total_ns += total_ns
            if max_ns > t.max_ns:
                t.max_ns = max_ns

    def _deserialization_failed(self, ssp: SystemStreamPartition, offset: int, error: Exception) -> bool:
        """A message that cannot be decoded: drop it (True, go on) or fail the container (False)."""
        if self._drop_deser:
            self.m_deser_errors.count += 1
            log.warning("task %r: dropped %s offset %d: cannot deserialize: %s", self.name, ssp, offset, error)
            self._complete_skipped(ssp, offset)
            return True
        self._on_abort(deserialization_error(self.name, ssp, offset, error))
        return False

    def _complete_skipped(self, ssp: SystemStreamPartition, offset: int) -> None:
        if self._inline is not None:
            self.last_processed[ssp] = offset
            return
        cb = TaskCallbackImpl(self._deliver, self.callbacks.new_seq(), ssp, offset, None, time.perf_counter_ns())
        self.state.messages_in_flight += 1
        cb.complete()

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
        if error is not None and not self._is_ignored(error):
            self._on_abort(self.failure(error, cb.ssp, cb.offset))
            return
        self.state.messages_in_flight -= 1
        self.m_process_ns.update(time.perf_counter_ns() - cb.started_ns)
        self._release(self.callbacks.release(cb))
        self._on_ready(self)

    def _release(self, released: list[TaskCallbackImpl]) -> None:
        last = self.last_processed
        for rcb in released:
            last[rcb.ssp] = rcb.offset
            self.m_processed.count += 1
            coordinator = rcb.coordinator
            if coordinator is not None and coordinator.has_requests:
                self._on_requests(self, coordinator)

    def after_commit(self) -> None:
        """A commit request may have held completed callbacks back: release them now."""
        self._release(self.callbacks.drain())

    def _is_ignored(self, error: BaseException) -> bool:
        return is_ignored(error, self._ignored)

    def failure(
        self, error: BaseException, ssp: SystemStreamPartition | None = None, offset: int | None = None
    ) -> BaseException:
        return task_failure(self.name, error, ssp, offset)

    # -- window / end of stream -----------------------------------------------------------------
    def window(self) -> ReadableCoordinator | None:
        """Run window() (the state said WINDOW); returns the coordinator with the task's requests."""
        if not isinstance(self.task, WindowableTask):
            return None
        start = time.perf_counter_ns()
        self.m_window_calls.count += 1
        coordinator = self._run_hook(self.task.window)
        self.m_window_ns.update(time.perf_counter_ns() - start)
        return coordinator

    def _run_hook(self, hook: Callable[[MessageCollector, TaskCoordinator], None] | None) -> ReadableCoordinator:
        """Call window / on_end_of_stream / on_drain (None: the task has no such hook). An exception
        listed in task.ignored.exceptions is ignored, as Samza's TaskInstanceExceptionHandler does
        for all three; any other fails the task."""
        coordinator = ReadableCoordinator()
        if hook is not None:
            try:
                hook(self.collector, coordinator)
            except Exception as e:
                if not self._is_ignored(e):
                    raise self.failure(e) from e
        return coordinator

    def end_of_stream(self) -> ReadableCoordinator:
        task = self.task
        coordinator = self._run_hook(task.on_end_of_stream if isinstance(task, EndOfStreamListenerTask) else None)
        coordinator.shutdown()
        return coordinator

    def enter_drain_mode(self, callback_timeout_ms: int) -> None:
        """While draining, callbacks started from now on time out after task.callback.drain.timeout.ms
        (when set; Samza's rule), so a drain cannot wait forever on one message."""
        if callback_timeout_ms > 0:
            self._timeout_s = callback_timeout_ms / 1000

    def on_drain(self) -> ReadableCoordinator:
        task = self.task
        return self._run_hook(task.on_drain if isinstance(task, DrainListenerTask) else None)

    # -- the shape the run loop drives (shared with RemoteTaskInstance) -------------------------
    def start_window(self, done: Callable[[TaskInstance, ReadableCoordinator | None], None]) -> None:
        """Run window() now and report to ``done`` before returning (a worker's task reports later)."""
        done(self, self.window())

    def start_end_of_stream(self, done: Callable[[TaskInstance, ReadableCoordinator], None]) -> None:
        done(self, self.end_of_stream())

    def start_drain(self, done: Callable[[TaskInstance, ReadableCoordinator], None]) -> None:
        done(self, self.on_drain())

    def make_way(self) -> None:
        """Nothing to hurry: a sync task's process() returns before the loop goes on, and an async
        task's callbacks are bounded by task.callback.timeout.ms."""

    async def prepare_commit(self) -> tuple[dict[SystemStreamPartition, int], dict[str, str]]:
        """Commit steps 1-4 (before_commit, offsets, flush producers, flush stores) where the task runs."""
        return await pipeline.prepare_local_commit(self)

    def checkpoint_written(self, offsets: dict[SystemStreamPartition, int]) -> None:
        """Commit step 6: tell the task."""
        pipeline.on_checkpoint(self, offsets)
