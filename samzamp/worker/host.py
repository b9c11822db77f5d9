"""The main of a worker process: run the synchronous tasks pinned to it, fed over a ring by the loop.

Started by ``WorkerPool`` as ``python -m samzamp.worker`` with the two rings' fds
inherited; reads its ``WorkerSpec`` (JSON) from stdin. It builds its own Kafka producers (no Kafka
client crosses the exec), imports task.class, answers ``Ready`` and then serves frames until
``Stop``: tasks come and go as ``AddTask`` and ``RemoveTask`` frames, each built, restored and
init'ed, or closed with its stores, when its frame comes.

One thread runs everything, so each task's process, window and commit steps never overlap, and a
task's messages are processed one at a time in the order the loop sent them. The one exception is a
commit's asynchronous phase (``Commit.asynchronous``): the stores' writes it set aside are applied on
a thread of the worker's own while that thread goes on with the frames; the main thread looks for
the apply's end at every report and while it waits for frames, settles the stores there and
answers ``StoresApplied``. A task's apply is settled before the task is removed or the worker stops.

If the container dies the worker dies with it: PR_SET_PDEATHSIG(SIGKILL) where Linux has it, and a
blocked ring call notices the loop's process is gone (``PeerGone``) in any case.

Exit codes: 0 after ``Stop``; 3 when the container's process went away; 1 on an error, reported
as ``Failed`` first if the ring still works.
"""

from __future__ import annotations

import ctypes
import faulthandler
import functools
import logging
import os
import signal
import sys
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, NoReturn

import msgspec

from samzamp import logs
from samzamp.api.errors import ConfigError, SystemFailureError, TaskError, WorkerError
from samzamp.config import Config, validate
from samzamp.config.stream_serdes import StreamSerdes
from samzamp.config.system_kinds import system_kind_names
from samzamp.dispatch.process import frames as f
from samzamp.dispatch.process.calls import CallSlot
from samzamp.gc_freeze import freeze_start_up
from samzamp.ipc import PeerGone, attach_ring
from samzamp.metrics.deltas import DeltaTracker, MetricDeltas
from samzamp.metrics.registry import MetricsRegistry
from samzamp.model.job_model import TaskModel
from samzamp.operators.factory import job_task_class
from samzamp.storage.manager import TaskStorage
from samzamp.storage.restore_progress import StoreProgress
from samzamp.systems.base import SystemProducer
from samzamp.systems.factory import Place
from samzamp.systems.registry import open_system
from samzamp.task.coordinator import ReadableCoordinator
from samzamp.task.runtime import RUN_CHECK, RUN_REQUESTED, TaskRuntime
from samzamp.task.start import run_sync, start_task

if TYPE_CHECKING:
    from samzamp.systems.kafka import KafkaClientSettings
    from samzamp.systems.kafka.changelog import ChangelogProducer

__all__ = ["main"]

log = logging.getLogger("samzamp.worker")

EXIT_PARENT_GONE = 3
RESTORING_EVERY_S = 0.5  # how often a restore in progress reports to the container, at most
# How often a worker waiting for frames looks whether a commit's apply finished (its end adds up
# to this to the commit's time to its checkpoint, never to the task's pause).
APPLY_POLL_S = 0.002
APPLY_THREADS = 4  # the stores' applies of different tasks at once (each mostly waits for its fsync)


def _die_with_parent(parent_pid: int) -> None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent_pid:  # the container died before prctl took effect
        os._exit(EXIT_PARENT_GONE)


class WorkerTask:
    """One task as its worker hosts it: its runtime, and which Process frames to skip."""

    __slots__ = ("runtime", "skip_epoch")

    def __init__(self, runtime: TaskRuntime) -> None:
        self.runtime = runtime
        self.skip_epoch = -1  # Process frames of this epoch or older are skipped (taken back by the loop)


class Worker:
    """A worker process's host: builds a task runtime per task it is given (``AddTask``), serves the
    loop's frames by calling those runtimes and answering, and closes a task it gives up
    (``RemoveTask``); it decides nothing about running a task."""

    # The commits' applies under way, by task, and the threads they run on (made at the first).
    _applies: dict[int, Future[None]] | None = None
    _apply_threads: ThreadPoolExecutor | None = None

    def __init__(self, spec: f.WorkerSpec) -> None:
        self.spec = spec
        self.index = spec.index
        self.to_worker = attach_ring(spec.to_worker)
        self.from_worker = attach_ring(spec.from_worker)
        self.rx = self.to_worker.receiver()
        self.tx = self.from_worker.sender()
        # The container's config as it loaded it: ${NAME} references are resolved already, and a
        # literal ${ (written $${) must stay literal, so it is not interpolated again.
        self.settings = validate(Config(spec.config))
        # Where this worker's process() calls are published for the loop's timeout, and where the
        # loop fences a standalone processor's calls (calls.py); used only then, as it costs a few
        # stores per message.
        st = self.settings
        timed = st.task.callback_timeout_ms > 0 or st.task.drain_callback_timeout_ms > 0
        slot = (timed or st.zk is not None) and spec.calls_fd >= 0
        self.calls: memoryview | None = CallSlot.attach(spec.calls_fd).fields if slot else None
        self.serdes = StreamSerdes(self.settings)
        # The tasks' metrics (send-calls, serialization errors, operators', their own): counted here,
        # and what they gained goes to the container's registry (``Metrics`` frames), where the
        # task's group leaves with the task and the shared groups sum every task's counts.
        self.metrics = MetricsRegistry()
        self.metrics_sent = DeltaTracker(self.metrics)
        self.max_frame = self.from_worker.max_record  # a Metrics frame is split to fit
        self.producers: dict[str, SystemProducer] = {}
        self.changelogs: dict[str, ChangelogProducer] = {}
        self.kafka: dict[str, KafkaClientSettings] = {}  # by system: how stores read their changelogs
        self.task_class: type | None = None
        self.tasks: dict[int, WorkerTask] = {}  # by the index the loop gave each task
        self.last_index = -1  # the highest index taken on so far: indexes are never reused
        self.inbox: deque[f.FromLoop] = deque()  # frames from the loop, read and not yet handled
        self.out: list[bytes] = []  # encoded frames to send, in order
        # Completions not yet in ``out``, per task: (epoch, count, total_ns, max_ns). One Processed
        # frame per task and send, however many Process frames it covers: each frame costs the loop
        # a decode and a handler call.
        self._reports: dict[int, tuple[int, int, int, int]] = {}
        self._unreported_ns = 0  # process time behind the completions not yet sent
        self._unreported = 0  # messages behind them
        # A fast task's in-flight window is IN_FLIGHT_BATCHES batches: report after a quarter of
        # it, so that it never runs empty while reports wait.
        self._report_after = f.report_after(self.settings.worker_batch_size)
        self._urgent = False  # ``out`` holds an answer the loop waits for
        # When the tasks' metrics go to the loop next (see frames.METRICS_EVERY_NS); a clock read per
        # send, not per message.
        self._metrics_due = time.monotonic_ns() + f.METRICS_EVERY_NS

    # -- set-up -------------------------------------------------------------------------------
    def start(self) -> None:
        from samzamp.systems.kafka.buffer_waits import time_buffer_waits
        from samzamp.systems.kafka.changelog import changelog_producers

        st = self.settings
        # The container resolved each system's address (maybe its embedded broker's) for the workers.
        place = Place(process=f"worker-{self.index}")
        for name, s in st.systems.items():
            if not s.kind.shared:
                msg = (
                    f"system {name!r} is {s.kind}, in the container's process only; worker processes can only "
                    f"reach {system_kind_names(lambda k: k.shared)} systems"
                )
                raise SystemFailureError(msg)
            system = open_system(st, name, place)
            if s.kind.changelogs:
                self.kafka[name] = system.changelog_clients()
            self.producers[name] = system.producer()
        if st.application is not None and st.application.digest != self.spec.graph_digest:
            raise ConfigError(
                "app.class",
                f"describe() of {st.application.app_class} built another graph in this worker "
                f"(digest {st.application.digest}) than in the container ({self.spec.graph_digest}): it must build "
                "the same operators, ids and streams every time it runs",
            )
        self.task_class = job_task_class(st)
        self.changelogs = changelog_producers(st, self.kafka)
        time_buffer_waits(self.metrics, self.producers.values(), self.changelogs.values())

    def _add_task(self, frame: f.AddTask) -> None:
        """Take task ``frame.model`` on: build its runtime, restore its stores, init it; answer
        ``TaskAdded``. A failure is the answer (``Failed``; the container fails)."""
        t, model = frame.task, frame.model
        if t <= self.last_index:
            self._protocol_error(
                t, f"AddTask for task index {t}, not above {self.last_index} (indexes are never reused)"
            )
        self.last_index = t
        st = self.settings
        assert self.task_class is not None
        try:
            rt, reports = run_sync(
                start_task(
                    st,
                    model,
                    self.task_class,
                    self.producers,
                    self.serdes,
                    self.metrics,
                    functools.partial(self._storage, t),
                )
            )
        except Exception as e:
            self.fail(t, e)  # the pool names the task and this worker
        if self.calls is not None:
            rt.call_slot = (self.calls, t)
        self.tasks[t] = WorkerTask(rt)
        self._reply(f.TaskAdded(t, reports))

    def _storage(self, t: int, model: TaskModel) -> TaskStorage:
        return TaskStorage(
            model.name, self.settings, model.changelog_partition, self.kafka, self.changelogs, self._restoring(t)
        )

    def _restoring(self, t: int) -> StoreProgress:
        """How task ``t``'s restores report to the container's view: a frame now and then (the first,
        the last, and at most one per ``RESTORING_EVERY_S`` of each store between)."""
        sent: dict[str, float] = {}

        def report(store: str, records: int, expected: int | None, done: bool) -> None:
            now = time.monotonic()
            if done or store not in sent or now - sent[store] >= RESTORING_EVERY_S:
                sent[store] = now
                self.send_now(f.Restoring(t, store, records, expected, done))

        return report

    def _remove_task(self, t: int) -> None:
        """Give task ``t`` up: close it, then its stores (which releases their directory locks: the
        task may be taken on by another process next); answer ``TaskRemoved``."""
        rt = self._task(t).runtime
        self._settle_all(t)
        del self.tasks[t]
        try:
            rt.close()
        except Exception as e:
            self.fail(t, TaskError(f"task {rt.name!r} could not be closed: {type(e).__name__}: {e}"))
        self._queue_metrics()  # the task's last counts, before the loop drops its group with it
        group = f"TaskName-{rt.name}"  # as there: one that comes back here starts from zero
        self.metrics.remove(group)
        self.metrics_sent.forget(group)
        self._reply(f.TaskRemoved(t))

    def _task(self, t: int) -> WorkerTask:
        wt = self.tasks.get(t)
        if wt is None:
            self._protocol_error(t, f"a frame for task index {t}, which it does not run (removed, or never added)")
        return wt

    def _protocol_error(self, t: int, what: str) -> NoReturn:
        """The loop and this worker disagree on which tasks it runs: a bug, so stop loudly."""
        self.fail(t, WorkerError(f"worker {self.index} got {what}; this is a bug in samzamp, please report it"))

    # -- serving ------------------------------------------------------------------------------
    def serve(self) -> None:
        """Handle the loop's frames until Stop.

        Completions (``Processed``, one per task however many batches it covers) are reported when
        ``frames.REPORT_EVERY_NS`` of process time or ``frames.REPORT_BATCHES`` batches of
        messages (job.container.worker.batch.size) has gone unreported, or when no more input is waiting:
        one report, one wake-up of the loop, per many messages, while the rest of the work queued
        here keeps this worker busy meanwhile (see the pacing in frames.py). Any other answer (a
        request, window done, commit ready, yielded) goes at once: the loop waits for it. At each
        report, inside a batch too, the worker reads what the loop sent meanwhile, so that a
        ``Yield`` stops the task's work within one report interval (or one message, if longer).

        An error no frame's handler answers (this worker's own, not a task's: a bug) is answered
        all the same, as ``Failed`` for the worker (task -1) with its stack in the log: the
        container's failure says what it was, not only that this worker exited.
        """
        try:
            self._serve()
        except (_Stopped, PeerGone):
            raise
        except Exception as e:
            log.exception("worker %d failed", self.index)
            self.fail(-1, e)

    def _serve(self) -> None:
        rx = self.rx
        inbox = self.inbox
        while True:
            if not inbox:
                self._take_in(rx.receive_many_nowait())
            if not inbox:
                self._send_out()  # nothing more to do now: report before sleeping
                try:
                    self._take_in(rx.receive_many(timeout=APPLY_POLL_S if self._applies else 1.0))
                except TimeoutError:
                    continue
                if self._urgent:  # a Yielded: the loop waits for it
                    self._send_out()
                continue
            frame = inbox.popleft()
            if isinstance(frame, f.Process):
                self._process(frame)
                if (
                    self._unreported_ns < f.REPORT_EVERY_NS
                    and self._unreported < self._report_after
                    and not self._urgent
                ):
                    continue
                self._take_in(rx.receive_many_nowait())  # a report is due: so is a look for a Yield
            elif isinstance(frame, f.AddTask):
                self._add_task(frame)
            elif isinstance(frame, f.RemoveTask):
                self._remove_task(frame.task)
            elif isinstance(frame, f.Window):
                self._window(frame.task)
            elif isinstance(frame, f.BeforeCommit):
                self._before_commit(frame.task)
            elif isinstance(frame, f.Commit):
                self._commit(frame.task, frame.asynchronous)
            elif isinstance(frame, f.Checkpointed):
                self._checkpointed(frame)
            elif isinstance(frame, f.EndOfStream):
                self._end_of_stream(frame.task)
            elif isinstance(frame, f.Drain):
                self._drain(frame.task)
            elif isinstance(frame, f.Stop):
                self._stop()
                return
            self._send_out()

    def _take_in(self, records: list[bytes]) -> None:
        """Decode frames from the loop into the inbox. A ``Yield`` takes effect at once: it is about
        the task's messages before it, in the inbox or being processed."""
        decode = f.decode_from_loop
        for record in records:
            frame = decode(record)
            if isinstance(frame, f.Yield):
                self._yield(frame)
            else:
                self.inbox.append(frame)

    def _yield(self, frame: f.Yield) -> None:
        wt = self._task(frame.task)
        if frame.epoch > wt.skip_epoch:  # else a request already ended that epoch: nothing to answer
            wt.skip_epoch = frame.epoch
            self._reply(f.Yielded(frame.task, frame.epoch))

    def _send_out(self) -> None:
        if self._applies:
            self._check_applies()
        self._flush_reports()
        if time.monotonic_ns() >= self._metrics_due:
            self._queue_metrics()
        if self.out:
            self.tx.send_many(self.out)
            self.out.clear()
        self._unreported_ns = self._unreported = 0
        self._urgent = False

    def _queue_metrics(self) -> None:
        """Queue what the tasks' metrics gained since they were last sent (nothing if none did), in
        as many ``Metrics`` frames as the ring's record limit needs (many tasks on a small ring)."""
        self._metrics_due = time.monotonic_ns() + f.METRICS_EVERY_NS
        deltas = self.metrics_sent.take()
        if deltas:
            self._flush_reports()
            self.out.extend(_metrics_frames(deltas, self.max_frame))

    def _queue(self, frame: f.FromWorker) -> None:
        """Queue a frame behind every completion reported so far (the loop relies on that order)."""
        self._flush_reports()
        self.out.append(f.encode(frame))

    def _reply(self, frame: f.FromWorker) -> None:
        """Queue an answer the loop waits for: it goes out right after the frame being handled."""
        self._queue(frame)
        self._urgent = True

    def send_now(self, frame: f.FromWorker) -> None:
        """Send ``frame`` (behind everything queued) and wait until the ring has taken it."""
        self._queue(frame)
        self.tx.send_many(self.out)
        self.out.clear()

    def fail(self, t: int, error: BaseException) -> NoReturn:
        if isinstance(error, ConfigError):
            self.send_now(f.Failed(t, "ConfigError", error.problem, error.key))
        else:
            self.send_now(f.Failed(t, type(error).__name__, str(error)))
        raise _Stopped

    def _process(self, frame: f.Process) -> None:
        t = frame.task
        wt = self._task(t)
        if frame.epoch <= wt.skip_epoch:
            return
        rt = wt.runtime
        runs = frame.runs
        # Most frames of a job of thousands of tasks hold one short run: no generator for those.
        left = len(runs[0][1]) if len(runs) == 1 else sum([len(run) for _, run in runs])
        check_ns = f.REPORT_EVERY_NS - self._unreported_ns
        for index, run in runs:
            next_raw = iter(run).__next__
            # The run's length bounds each call, so a run ends on its count, not on the iterator's
            # StopIteration: with thousands of tasks a run is a message or two, and raising and
            # catching an exception for each was about a tenth of what such a run costs.
            run_left = len(run)
            while True:
                try:
                    outcome = rt.process_run(index, next_raw, run_left, check_ns)
                except Exception as e:
                    self._report_processed(t, frame.epoch, rt.run_taken, rt.run_ns, rt.run_max_ns)
                    self.fail(t, e)
                self._report_processed(t, frame.epoch, rt.run_taken, rt.run_ns, rt.run_max_ns)
                left -= rt.run_taken
                run_left -= rt.run_taken
                if outcome == RUN_REQUESTED:
                    self._reply(f.Requested(t, frame.epoch, *rt.requests.flags()))
                    wt.skip_epoch = frame.epoch
                    return
                if outcome != RUN_CHECK:  # this SSP's run is done: the next one has what is left
                    check_ns -= rt.run_ns
                    break
                if not left:
                    return
                # A report interval of work inside one batch: it is reported; stop here if the loop
                # asked for the rest back (a window, commit or shutdown of some task is due).
                check_ns = f.REPORT_EVERY_NS
                self._take_in(self.rx.receive_many_nowait())
                self._send_out()
                if frame.epoch <= wt.skip_epoch:
                    return

    def _report_processed(self, t: int, epoch: int, count: int, total_ns: int, max_ns: int) -> None:
        self._unreported_ns += total_ns
        self._unreported += count
        prev = self._reports.get(t)
        if prev is not None:
            if prev[0] == epoch:
                self._reports[t] = (epoch, prev[1] + count, prev[2] + total_ns, max(prev[3], max_ns))
                return
            self._flush_reports()  # a new epoch: the old one's count goes first
        self._reports[t] = (epoch, count, total_ns, max_ns)

    def _flush_reports(self) -> None:
        if self._reports:
            for t, (epoch, count, total_ns, max_ns) in self._reports.items():
                self.out.append(f.encode(f.Processed(t, epoch, count, total_ns, max_ns)))
            self._reports.clear()

    def _hook(self, t: int, hook: Callable[[], ReadableCoordinator]) -> ReadableCoordinator:
        try:
            return hook()
        except Exception as e:
            self.fail(t, e)

    def _window(self, t: int) -> None:
        started = time.perf_counter_ns()
        coordinator = self._hook(t, self._task(t).runtime.window)
        self._reply(f.WindowDone(t, time.perf_counter_ns() - started, *coordinator.flags()))

    def _end_of_stream(self, t: int) -> None:
        coordinator = self._hook(t, self._task(t).runtime.end_of_stream)
        self._reply(f.EndOfStreamDone(t, *coordinator.flags()))

    def _drain(self, t: int) -> None:
        coordinator = self._hook(t, self._task(t).runtime.on_drain)
        self._reply(f.DrainDone(t, *coordinator.flags()))

    def _before_commit(self, t: int) -> None:
        """Commit step 1 for task ``t`` (see samzamp.commit.pipeline); the loop takes step 2 next."""
        rt = self._task(t).runtime
        control = None
        try:
            control = rt.before_commit()
        except Exception as e:
            self.fail(t, rt.failure(e))
        self._reply(f.BeforeCommitDone(t, control))

    def _commit(self, t: int, asynchronous: bool = False) -> None:
        """Commit steps 3 and 4 for task ``t`` (see samzamp.commit.pipeline). A flush that stops the
        commit is the answer (the loop fails the container, no checkpoint). ``asynchronous``: the
        stores' writes are set aside and applied on a thread, answered by ``StoresApplied``."""
        rt = self._task(t).runtime
        try:
            rt.flush_producers()
            markers = rt.freeze_stores() if asynchronous else rt.commit_stores()
        except SystemFailureError as e:
            self._reply(f.CommitReady(t, [str(e)], {}))
            return
        except Exception as e:
            self.fail(t, rt.failure(e))
        applying = asynchronous and rt.stores_frozen
        self._reply(f.CommitReady(t, [], markers, applying))
        if applying:
            if self._applies is None:
                self._applies = {}
                self._apply_threads = ThreadPoolExecutor(APPLY_THREADS, thread_name_prefix="samzamp-commit")
            assert self._apply_threads is not None
            self._applies[t] = self._apply_threads.submit(rt.apply_stores)

    def _check_applies(self) -> None:
        """Settle every task's apply that has finished (see the module docstring)."""
        assert self._applies is not None
        for t, done in [(t, a) for t, a in self._applies.items() if a.done()]:
            self._settle(t, done)

    def _settle(self, t: int, apply: Future[None]) -> None:
        """Task ``t``'s apply ended (or ends now: this waits): settle its stores and answer
        ``StoresApplied``, or fail the task as a commit that raised does."""
        assert self._applies is not None
        del self._applies[t]
        rt = self._task(t).runtime
        try:
            apply.result()
            rt.settle_stores()
        except Exception as e:
            self.fail(t, rt.failure(e))
        self._reply(f.StoresApplied(t))

    def _settle_all(self, t: int | None = None) -> None:
        """Wait for task ``t``'s apply (None: every task's) and settle it, before a task leaves."""
        if self._applies:
            for u, apply in list(self._applies.items()):
                if t is None or u == t:
                    self._settle(u, apply)

    def _checkpointed(self, frame: f.Checkpointed) -> None:
        rt = self._task(frame.task).runtime
        try:
            rt.on_checkpoint({rt.ssps[i]: o for i, o in frame.offsets})
        except Exception as e:
            self.fail(frame.task, e)

    def _stop(self) -> None:
        self._settle_all()
        for wt in self.tasks.values():  # the tasks still here: close each, then its stores
            wt.runtime.close()
        self._queue_metrics()  # the last counts, for the container's last report
        for p in self.producers.values():
            p.stop()
        for c in self.changelogs.values():
            c.stop()
        self.send_now(f.Stopped())


def _metrics_frames(deltas: MetricDeltas, limit: int) -> list[bytes]:
    """``deltas`` as encoded ``Metrics`` frames of at most ``limit`` bytes each, halved until they fit."""
    frame = f.encode(f.Metrics(deltas))
    if len(frame) <= limit:
        return [frame]
    entries = (
        [("c", e) for e in deltas.counters] + [("t", e) for e in deltas.timers] + [("g", e) for e in deltas.gauges]
    )
    if len(entries) == 1:  # one metric's names alone are too long for the ring: it cannot cross
        log.warning(
            "a metric too long to send to the container (%d bytes) is left out: %s", len(frame), entries[0][1][:2]
        )
        return []
    half = len(entries) // 2
    return [
        encoded
        for part in (entries[:half], entries[half:])
        for encoded in _metrics_frames(
            MetricDeltas(
                [e for k, e in part if k == "c"],
                [e for k, e in part if k == "t"],
                [e for k, e in part if k == "g"],
            ),
            limit,
        )
    ]


class _Stopped(Exception):
    """A Failed frame was sent: leave quietly (the container reports the failure)."""


def main() -> int:
    # A crash in native code prints where it happened on stderr (the container's), not only the
    # container's "worker died" line.
    faulthandler.enable()
    spec = msgspec.json.decode(sys.stdin.buffer.read(), type=f.WorkerSpec)
    _die_with_parent(spec.parent_pid)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the container decides when its workers stop
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    sys.path[:0] = [p for p in spec.sys_path if p not in sys.path]
    # As the container logs (its --log-level and --log-format), naming its processor.
    logs.configure(spec.log_level, "json" if spec.log_format == "json" else "text", worker=spec.index)
    logs.set_processor(spec.processor)
    if spec.version != f.VERSION:
        log.error("frame version %d from the container, expected %d", spec.version, f.VERSION)
        return 1
    worker = Worker(spec)
    try:
        try:
            worker.start()
        except Exception as e:
            worker.fail(-1, e)
        freeze_start_up()
        worker.send_now(f.Ready(os.getpid()))
        worker.serve()
    except _Stopped:
        return 1
    except PeerGone:
        return EXIT_PARENT_GONE
    return 0
