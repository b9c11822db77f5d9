"""The loop's side of a synchronous task that runs in a worker process (job.container.thread.pool.size >= 2).

What the loop sees is the same as for any task (``RunLoopTask``): dispatch, window, end of stream and
commit, with ``TaskState`` deciding what may run. The task lives in its worker between ``start``
(``AddTask``: restored and init'ed there) and ``stop`` (``RemoveTask``: closed there, its stores
closed and unlocked). Underneath:

- dispatched messages are batched per task and sent to the worker as ``Process`` frames at the end of
  each loop slice (or when a batch is full). The worker runs them one at a time, in order, so the task
  sees exactly what it would inline; the loop keeps them (in flight) until ``Processed`` says they are
  done, and only then moves the task's low watermark (``last_processed``);
- messages are sent ahead so the worker never waits for the loop, but only about
  ``frames.IN_FLIGHT_TARGET_NS`` of work ahead per worker, shared by its tasks (at least
  ``frames.TASK_MIN_SHARE_NS`` each; from each task's measured time per message, which one report
  raises by at most ``_MAX_RISE``; capped at ``in_flight_limit``);
- a message whose process() asks for a commit or shutdown ends its batch: the worker skips the rest of
  that *epoch*, and the loop takes every message still in flight back (to the front of the task's
  pending queue) and sends it again under the next epoch once the request was served. So a request
  is served right after its message, as it is inline;
- window, commit and shutdown wait until nothing of the task is in flight (Samza's exclusion
  rules). When one is due while messages are in flight, ``make_way`` asks the worker to yield: it
  stops at its next report and the rest is taken back the same way. So the wait is bounded by one
  report interval of work, not by how much was sent ahead (a whole batch before the task's first
  measurement, or far more than the target after it suddenly slowed down);
- window, end of stream, drain and commit are frames too; the worker answers each, in order.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from typing import Any

import msgspec

from samzamp.api.envelope import SystemStream, SystemStreamPartition
from samzamp.api.errors import SystemFailureError
from samzamp.consume.packed import Buffered, PackedRun, unpack
from samzamp.container.run_loop_task import HookDone
from samzamp.container.task_base import TaskBase
from samzamp.dispatch.process import frames as f
from samzamp.dispatch.process.pool import WorkerPool
from samzamp.metrics.registry import MetricsRegistry
from samzamp.model.control_state import ControlState
from samzamp.model.job_model import TaskModel
from samzamp.storage.manager import RestoreReport
from samzamp.systems.base import RawMessage
from samzamp.task.coordinator import ReadableCoordinator

__all__ = ["WorkerTaskProxy"]


# A report's time per message counts for at most this many times the task's average: a report far
# above the average is nearly always one call that a pause filled (the worker stopped, a VM stall, a
# long GC), not the typical message. Taken at face value it cut the bound to a few messages, and the
# worker then waited on the loop after each few for dozens of reports (a ramp of about half a second
# after every SIGCONT on bench/elasticity). A task that really slows down is still followed: its
# average can rise 1.6x a report (0.8 + 0.2 x 4).
_MAX_RISE = 4.0


class WorkerTaskProxy(TaskBase):
    """The loop's side of task ``name`` in worker ``worker`` of ``pool``: ``start`` it before
    dispatching to it, ``stop`` it once its in-flight work is done and finally committed."""

    def __init__(
        self,
        name: str,
        ssps: frozenset[SystemStreamPartition],
        windowable: bool,
        pool: WorkerPool,
        worker: int,
        checkpointed: dict[SystemStreamPartition, int],
        *,
        batch_size: int,
        in_flight_limit: int,
        logged_stores: frozenset[str] = frozenset(),
        intermediate: frozenset[SystemStream] = frozenset(),
        metrics: MetricsRegistry,
        on_ready: Callable[[Any], None],
        on_requests: Callable[[Any, ReadableCoordinator], None],
        on_dirty: Callable[[Callable[[], None]], None],
    ) -> None:
        # The in-flight bound starts at one batch and then follows the task's time per message.
        super().__init__(
            name, ssps, min(in_flight_limit, batch_size), checkpointed, metrics, logged_stores, intermediate
        )
        self._windowable = windowable
        self.worker = worker
        self._max_in_flight = in_flight_limit
        self._avg_ns = 0.0  # moving average of process() time per message
        self._pool = pool
        self._index = -1  # the task's index in its worker, once started
        self._ssp_index: dict[SystemStreamPartition, int] = {}  # as the worker names them: the model's order
        self._batch_size = batch_size
        # The batch not sent yet, in runs of one SSP's messages as the Process frame carries them.
        self._batch: list[tuple[int, list[RawMessage] | msgspec.Raw]] = []
        self._batch_len = 0
        # Everything in flight (sent or in the batch), in order, as runs: [ssp, messages, first not
        # done]. A report of n done moves through whole runs rather than message by message.
        self._in_flight: deque[list[Any]] = deque()
        self._epoch = 0
        self._yielding_epoch = -1  # the epoch the worker was asked to yield
        self._on_ready = on_ready
        self._on_requests = on_requests
        self._on_dirty = on_dirty
        self._window_done: HookDone | None = None
        self._eos_done: HookDone | None = None
        self._drain_done: HookDone | None = None
        # The answer to the commit step in flight (BeforeCommit or Commit): never two at once.
        self._commit_step: asyncio.Future[f.BeforeCommitDone | f.CommitReady] | None = None
        # The worker applies the stores' writes of the commit under way (its asynchronous phase):
        # done at ``StoresApplied``. Made when ``CommitReady`` says so, before anything reads on.
        self._applying: asyncio.Future[None] | None = None
        metrics.gauge(f"TaskName-{name}", "worker", fn=lambda: self.worker)

    @property
    def windowable(self) -> bool:
        return self._windowable

    # -- lifetime in the worker -----------------------------------------------------------------
    async def start(self, model: TaskModel) -> list[RestoreReport]:
        """Hand the task (``model``: this task, with its checkpoint's markers) to its worker and return
        once its stores are restored and its init ran there (``task.start.start_task``): the restore
        reports; raises what the worker failed with (the task's init, a restore, the worker's death)."""
        if model.name != self.name or frozenset(model.ssps) != self.ssps:
            raise ValueError(f"task {self.name!r} cannot be started from the model of task {model.name!r}")
        self._ssp_index = {s: i for i, s in enumerate(model.ssps)}
        self._index, reports = await self._pool.add_task(self.worker, model, self._on_frame)
        return reports

    async def stop(self) -> None:
        """Give the task up in its worker: its close() runs there, then its stores close and their
        locks are released, so that the task can start elsewhere. Nothing of it may be in flight:
        the loop finished its work and its final commit before."""
        if self.state.messages_in_flight or self._batch_len:
            raise SystemFailureError(
                f"task {self.name!r}: stopped with {self.state.messages_in_flight} messages in flight in its worker"
            )
        await self._pool.remove_task(self.worker, self._index)

    def abandon(self) -> None:
        """Nothing to cancel here: the processor stops (or kills) the workers."""

    def release(self) -> None:
        """Nothing to release here: a failed container's workers are killed, and their stores with them."""

    def close(self) -> None:
        """Nothing to close here: a worker closes the tasks it holds when it stops."""

    def process_run(
        self,
        ssp: SystemStreamPartition,
        first: Buffered,
        buffer: deque[Buffered],
        limit: int,
        deadline_ns: int,
        fenced: bool = False,
    ) -> int:
        """Dispatch ``first`` and up to ``limit - 1`` more of ``ssp``'s buffered messages (the state said
        PROCESS), as far as the in-flight bound and the batch allow; stops before a control marker.
        A packed run (at most task.consumer.batch.size messages) is taken from the chooser whole and
        handed to ``dispatch``, which splits it only past a small in-flight bound. ``fenced`` is the
        worker's to honour (its call slot's fence, ``dispatch.process.calls``)."""
        if isinstance(first, PackedRun):
            self.dispatch(ssp, first)
            return len(first.offsets)
        st = self.state
        n = min(limit, st.max_concurrency - st.messages_in_flight, self._batch_size - len(self._batch))
        run = [first]
        popleft = buffer.popleft
        for _ in range(min(n, len(buffer) + 1) - 1):
            raw = popleft()
            if raw[0] < 0:  # a control marker ends the run; it stays first in the buffer
                buffer.appendleft(raw)
                break
            run.append(raw)  # type: ignore[arg-type]  # a lane's buffer holds messages, or packed runs only
        return self._dispatch_run(ssp, run)

    # -- process --------------------------------------------------------------------------------
    def dispatch(self, ssp: SystemStreamPartition, raw: Buffered) -> None:
        """Send ``raw`` (the state said PROCESS). A packed run goes whole unless it would pass a small
        in-flight bound (``_goes_whole``): then what fits goes, and the rest waits first in the
        task's queue, as messages the chooser already moved past."""
        if not isinstance(raw, PackedRun):
            self._dispatch_run(ssp, [raw])
            return
        st = self.state
        n = st.max_concurrency - st.messages_in_flight
        if len(raw.offsets) <= n or self._goes_whole(raw):
            self._dispatch_run(ssp, raw)
            return
        # Past a slow task's small bound, where unpacking costs nothing next to the task's time: the
        # rest goes back to the front of the queue as a take-back gives messages back.
        messages = unpack(raw)
        st.requeue([(ssp, m) for m in messages[n:]])
        self._dispatch_run(ssp, messages[:n])

    def _goes_whole(self, run: PackedRun) -> bool:
        """Whether ``run`` goes whole past the in-flight bound: when the bound holds at least four such
        runs, so that it passes the bound by less than a quarter. Splitting it costs the loop more
        (decoding the run, encoding the rest again) than a bound that large gains from being exact;
        after a report frees room for a few runs and some messages, the last run would nearly
        always be split. A slow task's small bound (a few messages) is kept exactly."""
        return len(run.offsets) * 4 <= self.state.max_concurrency

    def _dispatch_run(self, ssp: SystemStreamPartition, run: list[RawMessage] | PackedRun) -> int:
        """Put ``run`` in flight and in the batch; returns how many messages it holds."""
        # ``run`` is shared by the batch and the in-flight runs from here on: never changed again.
        wire: list[RawMessage] | msgspec.Raw
        if isinstance(run, PackedRun):
            n = len(run.offsets)
            wire = msgspec.Raw(run.encoded)
        else:
            n = len(run)
            wire = run
        st = self.state
        st.messages_started(n)
        self._in_flight.append([ssp, run, 0])
        if not self._batch_len:
            self._on_dirty(self.flush)
        self._batch.append((self._ssp_index[ssp], wire))
        size = self._batch_len = self._batch_len + n
        if size >= self._batch_size or size * 2 >= st.max_concurrency:
            self.flush()
        return n

    def flush(self) -> None:
        """Send the batch collected so far (the loop calls this at the end of each slice)."""
        if self._batch_len:
            frame = f.encode(f.ProcessOut(self._index, self._epoch, self._batch))
            self._batch = []
            self._batch_len = 0
            self._pool.send(self.worker, frame)

    def _on_frame(self, frame: Any) -> None:
        if isinstance(frame, f.Processed):
            self._processed(frame)
        elif isinstance(frame, f.Requested):
            self._requested(frame)
        elif isinstance(frame, f.Yielded):
            if frame.epoch == self._epoch:  # else a request of that epoch took everything back already
                self._take_back()
            self._on_ready(self)
        elif isinstance(frame, f.WindowDone):
            self.m_window_calls.count += 1
            self.m_window_ns.update(frame.busy_ns)
            done, self._window_done = self._window_done, None
            assert done is not None
            done(self, _requests(frame))
        elif isinstance(frame, f.EndOfStreamDone):
            eos, self._eos_done = self._eos_done, None
            assert eos is not None
            eos(self, _requests(frame))
        elif isinstance(frame, f.DrainDone):
            drained, self._drain_done = self._drain_done, None
            assert drained is not None
            drained(self, _requests(frame))
        elif isinstance(frame, (f.BeforeCommitDone, f.CommitReady)):
            if isinstance(frame, f.CommitReady) and frame.applying:
                self._applying = asyncio.get_running_loop().create_future()
            fut = self._commit_step
            if fut is not None and not fut.done():
                fut.set_result(frame)
        elif isinstance(frame, f.StoresApplied):
            applying = self._applying
            if applying is not None and not applying.done():
                applying.set_result(None)

    def _processed(self, frame: f.Processed) -> None:
        n = left = frame.count
        in_flight = self._in_flight
        last = self.last_processed
        while left:
            entry = in_flight[0]
            ssp, run, first = entry
            size = _size(run)
            done = min(left, size - first)
            entry[2] = first + done
            last[ssp] = run.offsets[first + done - 1] if isinstance(run, PackedRun) else run[first + done - 1][0]
            if first + done == size:
                in_flight.popleft()
            left -= done
        self.state.messages_done(n)
        # Counted as the worker reports them done, not as they are sent: a message taken back and
        # sent again is one call, and the counter never goes down between two exports.
        self.m_process_calls.count += n
        self.count_processed(n, frame.busy_ns, frame.max_ns)
        if n:
            per = frame.busy_ns / n
            if self._avg_ns:
                per = min(per, _MAX_RISE * self._avg_ns)
            self._avg_ns = per if not self._avg_ns else 0.8 * self._avg_ns + 0.2 * per
            # The worker's tasks come and go: its queue is shared by those it holds now.
            share_ns = max(f.TASK_MIN_SHARE_NS, f.IN_FLIGHT_TARGET_NS / self._pool.tasks_on(self.worker))
            ahead = int(share_ns / max(self._avg_ns, 1.0))
            self.state.set_max_concurrency(max(2, min(self._max_in_flight, ahead)))
        self._on_ready(self)

    def _requested(self, frame: f.Requested) -> None:
        self._take_back()
        self._on_requests(self, _requests(frame))
        self._on_ready(self)

    def _take_back(self) -> None:
        """The worker skips the rest of this epoch: everything still in flight (sent or not) goes back
        to the front of the queue, in order, to be sent again under the next epoch."""
        self._give_back([(ssp, m) for ssp, messages, first in self._in_flight for m in _messages(messages)[first:]])
        self._in_flight.clear()
        self._batch = []
        self._batch_len = 0
        self._epoch += 1

    def _give_back(self, messages: list[tuple[SystemStreamPartition, RawMessage]]) -> None:
        self.state.give_back(messages)

    def make_way(self) -> None:
        """A window, commit or shutdown of this task is due and waits for its messages in flight: keep
        back what was not sent yet, and ask the worker to stop at its next report and yield the rest
        (``Yielded`` takes it back). Once per epoch."""
        if self._batch_len:
            # The batch's runs are the last in flight, and whole: none was reported done yet.
            kept = [self._in_flight.pop() for _ in self._batch]
            self._batch = []
            self._batch_len = 0
            self._give_back([(ssp, m) for ssp, messages, _ in reversed(kept) for m in _messages(messages)])
        if self.state.messages_in_flight and self._yielding_epoch != self._epoch:
            self._yielding_epoch = self._epoch
            self._pool.send(self.worker, f.encode(f.Yield(self._index, self._epoch)))

    # -- window, end of stream, commit ----------------------------------------------------------
    def start_window(self, done: HookDone) -> None:
        self._window_done = done
        self._pool.send(self.worker, f.encode(f.Window(self._index)))

    def start_end_of_stream(self, done: HookDone) -> None:
        self._eos_done = done
        self._pool.send(self.worker, f.encode(f.EndOfStream(self._index)))

    def enter_drain_mode(self, callback_timeout_ms: int) -> None:
        """While draining, the worker's process() calls time out after task.callback.drain.timeout.ms
        (when set), as callbacks do inline."""
        if callback_timeout_ms > 0:
            self._pool.time_calls(callback_timeout_ms, "task.callback.drain.timeout.ms")

    def start_drain(self, done: HookDone) -> None:
        self._drain_done = done
        self._pool.send(self.worker, f.encode(f.Drain(self._index)))

    async def before_commit(self) -> ControlState | None:
        done = await self._commit_step_in_worker(f.BeforeCommit(self._index))
        assert isinstance(done, f.BeforeCommitDone)
        return done.control

    async def flush_and_freeze_stores(self, *, asynchronous: bool) -> dict[str, str]:
        ready = await self._commit_step_in_worker(f.Commit(self._index, asynchronous))
        assert isinstance(ready, f.CommitReady)
        if ready.errors:  # the worker applied the commit's error policy (commit.flush_policy)
            raise SystemFailureError(ready.errors[0])
        return dict(ready.markers)

    @property
    def applying_stores(self) -> bool:
        return self._applying is not None

    async def apply_stores(self) -> None:
        """Wait for the worker's ``StoresApplied`` (a failure there fails the container through
        the pool, with the store and task named)."""
        applying = self._applying
        if applying is None:
            return
        try:
            await applying
        finally:
            self._applying = None

    async def _commit_step_in_worker(self, frame: f.BeforeCommit | f.Commit) -> f.BeforeCommitDone | f.CommitReady:
        """Send one commit step to the worker and wait for its answer (a failure there fails the
        container through the pool)."""
        if self._commit_step is not None:  # answers are matched by order: never two at once
            raise SystemFailureError(f"task {self.name!r}: a commit step started while another was in flight")
        self._commit_step = asyncio.get_running_loop().create_future()
        try:
            self._pool.send(self.worker, f.encode(frame))
            return await self._commit_step
        finally:
            self._commit_step = None

    def _tell_checkpoint(self, offsets: dict[SystemStreamPartition, int]) -> None:
        pairs = [(self._ssp_index[s], o) for s, o in offsets.items()]
        self._pool.send(self.worker, f.encode(f.Checkpointed(self._index, pairs)))

    def after_commit(self) -> None:
        pass  # completions are never held back for a commit here: a request ends its epoch instead


def _size(run: list[RawMessage] | PackedRun) -> int:
    return len(run.offsets) if isinstance(run, PackedRun) else len(run)


def _messages(run: list[RawMessage] | PackedRun) -> list[RawMessage]:
    return unpack(run) if isinstance(run, PackedRun) else run


def _requests(frame: f.WindowDone | f.EndOfStreamDone | f.DrainDone | f.Requested) -> ReadableCoordinator:
    """What a worker's answer says the task requested."""
    return ReadableCoordinator.from_flags(frame.commit, frame.commit_all, frame.shutdown, frame.shutdown_all)
