"""The worker pool: N worker processes for the container's synchronous tasks (job.container.thread.pool.size).

Each worker gets two rings (loop -> worker, worker -> loop). It starts with no task; the loop hands
it tasks and takes them back at any time (``add_task``, ``remove_task``: the ``AddTask`` and
``RemoveTask`` frames), each under an index never used before in that worker, and decides where a
task goes with ``placement``.

The loop side never blocks: frames to a worker go into its outbox and are pushed without waiting;
when a ring is full the rest waits for the worker to make room (the ring's space fd on the event
loop), and the tasks' in-flight limits stop the loop from producing more meanwhile. Frames from a
worker are read when its ring's data fd becomes readable.

Process boundaries, both ways:
- a worker that dies (any signal, any exit before ``Stop``) is seen at once through a pidfd on the
  event loop; the pool reads what the worker sent before dying, logs how it ended (exit code or
  signal), then fails the container with a ``WorkerError`` naming the worker, its pid, how it ended
  and its tasks, unless a ``Failed`` frame it sent explains it. A start, ``add_task`` or
  ``remove_task`` awaited on that worker fails with the same error rather than waiting forever;
- a worker that closed its end of the loop's ring is exiting: frames for it are dropped. Why it
  went (the ``Failed`` frame it sent before it closed, or its exit) reaches the loop next, through
  its ring's fd and its pidfd; a send that raised instead would make the closed ring the
  container's failure, ahead of the worker's own;
- the container dying kills its workers: each sets PR_SET_PDEATHSIG(SIGKILL), and a worker blocked on
  a ring notices the container is gone within ~100 ms anyway.

Workers are started with fork+exec (``subprocess``): no Kafka client or thread of the container is
inherited, whenever they are started.

What the workers' tasks count (``Metrics`` frames) is added to the container's registry here, as it
arrives, so every export of that registry shows it (see frames.py for when a worker sends it).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import signal
import subprocess
import sys
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import msgspec
import psutil

from samzamp import logs
from samzamp.api.envelope import SystemStreamPartition
from samzamp.api.errors import CallbackTimeoutError, ConfigError, SerdeError, TaskError, WorkerError
from samzamp.dispatch.process import frames as f
from samzamp.dispatch.process.calls import CallSlot
from samzamp.ipc import EndOfQueue, PeerGone, Ring, create_ring
from samzamp.metrics.deltas import apply_deltas
from samzamp.metrics.registry import MetricsRegistry
from samzamp.model.job_model import TaskModel
from samzamp.storage.manager import RestoreReport
from samzamp.storage.restore_progress import RestoreProgress

__all__ = ["WorkerHandle", "WorkerPool", "failure_of"]

log = logging.getLogger(__name__)

FrameHandler = Callable[[Any], None]

WORKER_ARGV = (sys.executable, "-m", "samzamp.worker")  # how a worker process is started
_DESCRIBED_TASKS = 8  # the tasks a worker's description names (``WorkerHandle.describe``)


def failure_of(frame: f.Failed) -> BaseException:
    """The error a task's ``Failed`` frame stands for: its type crosses as a name, so a message that
    cannot be decoded is a ``SerdeError`` as it is inline; anything else is a ``TaskError``."""
    return SerdeError(frame.message) if frame.kind == "SerdeError" else TaskError(frame.message)


class WorkerHandle:
    """The loop's side of one worker: its process, rings, outbox and the tasks it holds, by index."""

    def __init__(self, index: int, ring_bytes: int) -> None:
        self.index = index
        self.to_worker: Ring = create_ring(ring_bytes)
        self.from_worker: Ring = create_ring(ring_bytes)
        self.tx = self.to_worker.sender()
        self.rx = self.from_worker.receiver()
        self.calls = CallSlot.create()  # the process() call it is in (task.callback.timeout.ms)
        self.outbox: deque[bytes] = deque()
        # Per task index, while the worker holds the task (from add_task until TaskRemoved).
        self.task_names: dict[int, str] = {}
        self.task_ssps: dict[int, tuple[SystemStreamPartition, ...]] = {}  # in the worker's SSP order
        self.handlers: dict[int, FrameHandler] = {}
        self.next_task = 0  # the next task's index: never one used before in this worker's life
        self.adding: dict[int, asyncio.Future[list[RestoreReport]]] = {}  # AddTask sent, TaskAdded not yet come
        self.removing: dict[int, asyncio.Future[None]] = {}  # RemoveTask sent, TaskRemoved not yet come
        self.error: BaseException | None = None  # why it ended, when it did not end by Stop
        self.process: subprocess.Popen[bytes] | None = None
        self.pid = 0
        self.pidfd = -1
        self.ready: asyncio.Future[None] | None = None
        self.stopped: asyncio.Future[None] | None = None
        self.stopping = False
        self.exited = False
        self.released = False
        self.waiting_for_room = False
        self.receiver_closed = False  # it closed its end of the loop's ring: it is exiting
        self.reported = False  # it sent a Failed frame: its exit is the consequence, not the news
        self.messages = 0
        self.busy_ns = 0

    def describe(self) -> str:
        """The worker and (the first few of) its tasks, for errors and its exit."""
        names = self.task_names
        if not names:
            return f"worker {self.index} (pid {self.pid}; no tasks)"
        # A worker may hold thousands: a message naming them all would be longer than useful.
        shown = ", ".join(repr(n) for n in itertools.islice(names.values(), _DESCRIBED_TASKS))
        more = f" and {len(names) - _DESCRIBED_TASKS} more" if len(names) > _DESCRIBED_TASKS else ""
        return f"worker {self.index} (pid {self.pid}; tasks {shown}{more})"

    def short(self) -> str:
        """The worker alone, for what is said once per task (its tasks come and go one by one)."""
        return f"worker {self.index} (pid {self.pid})"


class WorkerPool:
    """Starts, feeds, supervises and stops the container's worker processes. Loop thread only."""

    def __init__(
        self,
        size: int,
        ring_bytes: int,
        loop: asyncio.AbstractEventLoop,
        metrics: MetricsRegistry,
        on_failure: Callable[[BaseException], None],
        restores: RestoreProgress | None = None,
    ) -> None:
        """``restores``: the processor's view of its restores, where the workers' reports go."""
        self.workers = [WorkerHandle(i, ring_bytes) for i in range(size)]
        self._loop = loop
        self._metrics = metrics
        self._restores = restores if restores is not None else RestoreProgress(metrics)
        self._on_failure = on_failure
        self.max_frame = self.workers[0].to_worker.max_record if self.workers else 0
        self._call_timeout_ns = 0  # 0: process() calls are not timed
        self._call_timeout_key = ""
        self._call_watch: asyncio.TimerHandle | None = None

    # -- start ----------------------------------------------------------------------------------
    def spawn(self) -> None:
        """Start the processes now (they import while the container connects); they wait for their spec."""
        for w in self.workers:
            fds = [*w.to_worker.fds(), *w.from_worker.fds(), w.calls.fd]
            w.process = subprocess.Popen(
                WORKER_ARGV,
                stdin=subprocess.PIPE,
                pass_fds=fds,
                close_fds=True,
            )
            w.pid = w.process.pid
            w.pidfd = os.pidfd_open(w.pid)
            self._loop.add_reader(w.pidfd, self._on_exit, w)
            self._loop.add_reader(w.rx.fileno(), self._on_readable, w)
            if w.rx.arm():  # the ring signals its fd only once armed
                self._loop.call_soon(self._on_readable, w)
            w.ready = self._loop.create_future()
            w.stopped = self._loop.create_future()
            self._register_metrics(w)

    async def start(self, config: dict[str, Any], graph_digest: str = "", processor: str | None = None) -> None:
        """Hand each worker its spec (the job's config, the digest of an application's graph, and
        how this process logs, for ``processor``) and wait until every one is ready to take tasks
        on (``add_task``)."""
        setup = logs.current()
        for w in self.workers:
            spec = f.WorkerSpec(
                f.VERSION,
                w.index,
                os.getpid(),
                config,
                list(sys.path),
                w.to_worker.spec().encode(),
                w.from_worker.spec().encode(),
                w.calls.fd,
                graph_digest,
                setup.level,
                setup.format,
                processor,
            )
            assert w.process is not None
            assert w.process.stdin is not None
            try:
                w.process.stdin.write(msgspec.json.encode(spec))
                w.process.stdin.close()
            except BrokenPipeError:
                pass  # it died already; _on_exit reports it
        await asyncio.gather(*(w.ready for w in self.workers if w.ready is not None))
        log.info("worker pool: %s", "; ".join(w.describe() for w in self.workers))

    # -- tasks ----------------------------------------------------------------------------------
    async def add_task(self, worker: int, model: TaskModel, handler: FrameHandler) -> tuple[int, list[RestoreReport]]:
        """Hand task ``model`` to ``worker`` and return its index there, and its stores' restore
        reports, once the worker has restored its stores and init'ed it. Its frames go to ``handler`` from now on. Adds to several
        workers may be awaited at once (they run in parallel); a failure of the worker meanwhile
        (the task's init, its restore, the worker's death) raises that error here."""
        w = self.workers[worker]
        self._check_running(w, f"take on task {model.name!r}")
        index = w.next_task
        w.next_task += 1
        w.handlers[index] = handler
        w.task_names[index] = model.name
        w.task_ssps[index] = model.ssps
        added = w.adding[index] = self._loop.create_future()
        self.send(worker, f.encode(f.AddTask(index, model)))
        reports = await added
        # DEBUG: a start of thousands of tasks would log thousands of lines; the container logs
        # one line for the tasks it started together.
        log.debug("task %r started in %s", model.name, w.short())
        return index, reports

    async def remove_task(self, worker: int, index: int) -> None:
        """Have ``worker`` close task ``index`` and its stores (releasing their locks); returns once it
        has, after the task's last frame reached its handler, which is then forgotten. The caller
        has finished the task's in-flight work and its final commit before."""
        w = self.workers[worker]
        if index not in w.handlers or index in w.adding or index in w.removing:
            raise WorkerError(f"{w.describe()}: task index {index} is not a task it runs; it cannot be removed")
        name = w.task_names[index]
        self._check_running(w, f"give up task {name!r}")
        removed = w.removing[index] = self._loop.create_future()
        self.send(worker, f.encode(f.RemoveTask(index)))
        await removed
        # DEBUG: thousands of tasks stop at once in a rebalance; the container logs one line for them.
        log.debug("task %r stopped in %s", name, w.short())

    def _check_running(self, w: WorkerHandle, what: str) -> None:
        if w.error is not None:
            raise w.error
        if w.stopping or w.exited:
            raise WorkerError(f"{w.describe()} is stopping: it cannot {what}")

    def tasks_on(self, worker: int) -> int:
        """How many tasks ``worker`` holds now (being added or removed included)."""
        return len(self.workers[worker].handlers)

    def loads(self) -> list[int]:
        """Per worker, the SSP count of the tasks it holds now: what ``placement.place_tasks`` balances."""
        return [sum(len(ssps) for ssps in w.task_ssps.values()) for w in self.workers]

    # -- sending --------------------------------------------------------------------------------
    def send(self, worker: int, frame: bytes) -> None:
        w = self.workers[worker]
        if len(frame) > self.max_frame:
            msg = (
                f"a frame of {len(frame)} bytes for {w.describe()} exceeds the ring's record limit of "
                f"{self.max_frame} bytes; raise job.container.worker.ring.bytes"
            )
            raise WorkerError(msg)
        if w.receiver_closed:
            return
        w.outbox.append(frame)
        if not w.waiting_for_room:
            self._push(w)

    def _push(self, w: WorkerHandle) -> None:
        outbox = w.outbox
        while outbox:
            batch = list(outbox)
            try:
                n = w.tx.send_many_nowait(batch)
            except PeerGone:
                self._receiver_closed(w)
                return
            for _ in range(n):
                outbox.popleft()
            if n < len(batch) and not w.tx.arm(len(outbox[0]) + 8):  # armed: wait for room
                w.waiting_for_room = True
                self._loop.add_reader(w.tx.fileno(), self._on_room, w)
                return

    def _on_room(self, w: WorkerHandle) -> None:
        w.tx.clear()
        self._loop.remove_reader(w.tx.fileno())
        w.waiting_for_room = False
        self._push(w)

    def _receiver_closed(self, w: WorkerHandle) -> None:
        """``w`` closed its end of the loop's ring: it is exiting, and reads nothing more. Its last
        frames (a ``Failed`` one, sent before it closed) and its exit reach the loop through its ring's
        fd and its pidfd, which are ready now: what it was sent goes nowhere."""
        log.debug("%s closed its end of the ring; %d frames for it dropped", w.describe(), len(w.outbox))
        w.receiver_closed = True
        w.outbox.clear()

    # -- receiving ------------------------------------------------------------------------------
    def _on_readable(self, w: WorkerHandle) -> None:
        rx = w.rx
        rx.clear()
        decode = f.decode_from_worker
        while True:
            try:
                records = rx.receive_many_nowait()
            except EndOfQueue:
                self._loop.remove_reader(rx.fileno())
                return
            if records:
                for record in records:
                    self._handle(w, decode(record))
            elif not rx.arm():
                return

    def _handle(self, w: WorkerHandle, frame: Any) -> None:
        if isinstance(frame, f.Processed):
            w.messages += frame.count
            w.busy_ns += frame.busy_ns
            handler = w.handlers.get(frame.task)
            if handler is None:
                self._unknown_task(w, frame)
                return
            handler(frame)
        elif isinstance(frame, f.Failed):
            t = frame.task
            if t < 0 and frame.kind == "ConfigError":  # the job as the worker read it: exit 2, as here
                err: BaseException = ConfigError(frame.key, f"{frame.message} ({w.describe()})")
            elif t < 0:  # the worker's own failure: at start, or later outside every task
                what = "could not start" if w.ready is not None and not w.ready.done() else "failed"
                err = WorkerError(f"{w.describe()} {what}: {frame.kind}: {frame.message}")
            elif t in w.adding:
                err = WorkerError(
                    f"{w.describe()} could not start task {w.task_names[t]!r}: {frame.kind}: {frame.message}"
                )
            elif frame.kind == "WorkerError":  # the worker caught the loop's bug: it is no task's failure
                err = WorkerError(f"{w.describe()}: {frame.message}")
            else:
                err = failure_of(frame)
            # Whoever awaits the worker's start, this task's add or its removal gets the error as
            # the answer; anything else the worker fails is the container's failure.
            answered = (t < 0 and w.ready is not None and not w.ready.done()) or t in w.adding or t in w.removing
            w.stopping = True  # it exits now; the failure is the news, not the exit
            w.reported = True
            self._failed(w, err)
            if not answered:
                self._on_failure(err)
        elif isinstance(frame, f.Restoring):
            if frame.task not in w.adding:
                self._unknown_task(w, frame)
                return
            self._restores.update(w.task_names[frame.task], frame.store, frame.records, frame.expected, frame.done)
        elif isinstance(frame, f.TaskAdded):
            added = w.adding.pop(frame.task, None)
            if added is None:
                self._unknown_task(w, frame)
            elif not added.done():
                added.set_result(frame.restored)
        elif isinstance(frame, f.TaskRemoved):
            removed = w.removing.pop(frame.task, None)
            if removed is None:
                self._unknown_task(w, frame)
                return
            del w.handlers[frame.task], w.task_names[frame.task], w.task_ssps[frame.task]
            if not removed.done():
                removed.set_result(None)
        elif isinstance(frame, f.Ready):
            if w.ready is not None and not w.ready.done():
                w.ready.set_result(None)
        elif isinstance(frame, f.Metrics):
            # Into the container's registry, where the tasks' groups live while they run here (a
            # task's last Metrics frame comes before its TaskRemoved, which drops its group).
            apply_deltas(self._metrics, frame.deltas)
        elif isinstance(frame, f.Stopped):
            if w.stopped is not None and not w.stopped.done():
                w.stopped.set_result(None)
        else:
            handler = w.handlers.get(frame.task)
            if handler is None:
                self._unknown_task(w, frame)
                return
            handler(frame)

    def _unknown_task(self, w: WorkerHandle, frame: Any) -> None:
        """A frame for a task index the loop did not give or has taken back: the two sides disagree on
        which tasks the worker runs, which only a bug in samzamp can cause. Stop before anything
        is checkpointed on that view."""
        err = WorkerError(
            f"{w.describe()} sent {type(frame).__name__} for task index {frame.task}, which is not a task it "
            "runs (a bug in samzamp: please report it); the container stops without checkpointing"
        )
        self._failed(w, err)
        self._on_failure(err)

    def _failed(self, w: WorkerHandle, err: BaseException) -> None:
        """The worker failed with ``err`` (the first error stands): its start and every add or removal
        awaited on it fail with it, as does any later one."""
        if w.error is None:
            w.error = err
        if w.ready is not None and not w.ready.done():
            w.ready.set_exception(err)
        self._fail_awaits(w, err)

    def _fail_awaits(self, w: WorkerHandle, err: BaseException) -> None:
        """The worker will answer nothing more: every add or removal awaited on it fails with ``err``."""
        waits: list[asyncio.Future[Any]] = [*w.adding.values(), *w.removing.values()]
        w.adding.clear()
        w.removing.clear()
        for fut in waits:
            if not fut.done():
                fut.set_exception(err)

    # -- supervision ----------------------------------------------------------------------------
    def time_calls(self, timeout_ms: int, key: str) -> None:
        """Fail the container when a task's process() call in a worker runs longer than
        ``timeout_ms`` (from the call's start: time queued behind other work does not count);
        ``key`` names the setting in the error. The worker is killed: it may never return."""
        if timeout_ms <= 0:
            return
        self._call_timeout_ns = timeout_ms * 1_000_000
        self._call_timeout_key = key
        if self._call_watch is None:
            self._watch_calls()

    def set_fence(self, until_ns: int) -> None:
        """No worker starts a process() call at or after ``until_ns`` (CLOCK_MONOTONIC; 0: no
        fence) until it is moved on (calls.py): a standalone processor's lease on its session."""
        for w in self.workers:
            if not w.exited:
                w.calls.set_fence(until_ns)

    def _watch_calls(self) -> None:
        now = time.monotonic_ns()
        for w in self.workers:
            call = None if w.stopping or w.exited else w.calls.current()
            if call is not None and now - call[0] > self._call_timeout_ns:
                self._call_timed_out(w, *call, now)
                return
        # A quarter of the timeout between checks (at most 1 s): a call is caught within 1.25x.
        period_s = min(self._call_timeout_ns / 4e9, 1.0)
        self._call_watch = self._loop.call_later(max(period_s, 0.005), self._watch_calls)

    def _call_timed_out(self, w: WorkerHandle, started: int, task: int, ssp: int, offset: int, now: int) -> None:
        w.stopping = True  # its death is the consequence, not the news
        assert w.process is not None
        w.process.kill()
        name = w.task_names.get(task, f"index {task}")
        ssps = w.task_ssps.get(task, ())
        where = ssps[ssp] if 0 <= ssp < len(ssps) else f"SSP index {ssp}"
        err = CallbackTimeoutError(
            f"task {name!r} failed processing {where} offset {offset}: process() did "
            f"not return within {self._call_timeout_key} = {self._call_timeout_ns // 1_000_000} ms (running for "
            f"{(now - started) // 1_000_000} ms in worker {w.index}, pid {w.pid}, which was killed); nothing from "
            "that offset on is checkpointed"
        )
        self._on_failure(err)

    def _on_exit(self, w: WorkerHandle) -> None:
        self._loop.remove_reader(w.pidfd)
        os.close(w.pidfd)
        w.pidfd = -1
        w.exited = True
        assert w.process is not None
        code = w.process.wait()
        self._on_readable(w)  # what it sent before it went (a Failed frame explains more than its exit)
        if w.stopping and code == 0:
            self._fail_awaits(w, WorkerError(f"{w.describe()} stopped before it answered"))
            return
        how = self._log_exit(w, code)
        err = WorkerError(
            f"{w.describe()} {how}; the container stops without checkpointing its unfinished work "
            "(restart it to resume from the last checkpoint)"
        )
        self._failed(w, err)
        if w.stopped is not None and not w.stopped.done():
            w.stopped.set_result(None)
        if not w.stopping:
            self._on_failure(err)

    def _log_exit(self, w: WorkerHandle, code: int) -> str:
        """Log how ``w`` ended, other than by ``Stop`` (its exit code, or the signal that killed it),
        and return it: a warning unless its failure or the pool's kill of it was already the news."""
        how = f"was killed by {_signal_name(-code)}" if code < 0 else f"exited with code {code}"
        level = logging.INFO if w.reported or w.stopping else logging.WARNING
        log.log(level, "%s %s", w.describe(), how)
        return how

    # -- stop -----------------------------------------------------------------------------------
    async def stop(self, timeout_s: float = 30.0) -> None:
        """Close every task in its worker, let them exit; kill those that do not within ``timeout_s``."""
        for w in self.workers:
            if not w.exited:
                w.stopping = True
                self.send(w.index, f.encode(f.Stop()))
        waits = [w.stopped for w in self.workers if w.stopped is not None and not w.exited]
        if waits:
            _, pending = await asyncio.wait(waits, timeout=timeout_s)
            if pending:
                log.warning("worker pool: workers did not stop within %.0f s; killing them", timeout_s)
        self.kill()

    def kill(self) -> None:
        """SIGKILL every worker still running and release the rings (failure path and final clean-up).
        Idempotent."""
        if self._call_watch is not None:
            self._call_watch.cancel()
        for w in self.workers:
            if w.released:
                continue
            w.released = True
            if w.process is not None:
                code = w.process.poll()
                if code is None:
                    w.process.kill()
                    w.process.wait()
                elif not w.exited and not (w.stopping and code == 0):  # ended unseen: say how all the same
                    self._log_exit(w, code)
            w.stopping = True
            w.exited = True
            for fd in (w.pidfd, w.rx.fileno(), w.tx.fileno()):
                if fd >= 0:
                    self._loop.remove_reader(fd)
            if w.pidfd >= 0:
                os.close(w.pidfd)
                w.pidfd = -1
            w.to_worker.close()
            w.from_worker.close()
            w.calls.close()
            self._fail_awaits(w, WorkerError(f"{w.describe()} was stopped before it answered"))

    # -- metrics --------------------------------------------------------------------------------
    def _register_metrics(self, w: WorkerHandle) -> None:
        group = f"WorkerPool-{w.index}"
        m = self._metrics
        m.gauge(group, "pid", fn=lambda: w.pid)
        m.gauge(group, "messages-processed", fn=lambda: w.messages)
        m.gauge(group, "busy-ns", fn=lambda: w.busy_ns)
        m.gauge(group, "ring-to-worker-bytes-used", fn=lambda: None if w.exited else w.tx.statistics().bytes_used)
        m.gauge(group, "ring-from-worker-bytes-used", fn=lambda: None if w.exited else w.rx.statistics().bytes_used)
        m.gauge(group, "outbox-frames", fn=lambda: len(w.outbox))
        m.gauge(group, "rss-bytes", fn=lambda: _rss(w.pid))


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:  # a real-time signal, which has no name of its own
        return f"signal {number}"


def _rss(pid: int) -> int | None:
    try:
        return int(psutil.Process(pid).memory_info().rss)
    except psutil.Error:
        return None
