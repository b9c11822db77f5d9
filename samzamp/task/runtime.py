"""One task as it runs, wherever it runs: on the container's event loop or in a worker process.

``TaskRuntime`` owns the user's task object (built by a task factory), its collector, its stores,
``init``/``close``, the one decode -> process -> time -> request-check loop, the hook runner
(window, end of stream, drain) and the commit steps that run where the task runs (1, 3, 4 and 6 of
``samzamp.commit.pipeline``; step 4's asynchronous half on a thread of the host's), under one error policy:

- an exception from ``process`` or a hook that task.ignored.exceptions names is ignored; any other
  becomes a ``TaskError`` naming the task (and for ``process`` the SSP and offset);
- a message that cannot be decoded is dropped (task.drop.deserialization.errors=true: logged and
  counted) or raises ``SerdeError`` naming the task, SSP and offset;
- an output its system refuses, at send time or in a delivery report, is dropped (logged,
  counted) or fails the task, by ``collect.output_failures`` (task.drop.producer.errors);
- a commit stops before its stores are applied by ``flush_policy.commit_failure``'s rule (raised as
  ``SystemFailureError``).

The hosts only move messages and answers: ``container.task_instance.TaskInstance`` on the loop and
``worker.host.Worker`` in a worker process. Neither host decides anything above.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from samzamp import logs
from samzamp.api.collector import MessageCollector, TaskCoordinator
from samzamp.api.context import TaskContext
from samzamp.api.envelope import IncomingMessageEnvelope, SystemStream, SystemStreamPartition
from samzamp.api.errors import SystemFailureError
from samzamp.api.metrics import TaskMetrics
from samzamp.api.serde import Serde
from samzamp.api.task import (
    CheckpointListenerTask,
    ClosableTask,
    DrainListenerTask,
    EndOfStreamListenerTask,
    InitableTask,
    WindowableTask,
)
from samzamp.collect.collector import TaskCollector
from samzamp.collect.output_failures import OutputFailures
from samzamp.commit.flush_policy import commit_failure, flush_task_producers
from samzamp.config.settings import TaskSettings
from samzamp.dispatch.process.calls import FENCE, wait_for_fence
from samzamp.metrics.names import reserved_task_metrics
from samzamp.metrics.registry import Counter, MetricsRegistry, Timer
from samzamp.model.control_state import ControlState
from samzamp.model.job_model import TaskModel
from samzamp.storage.manager import RestoreReport, TaskStorage
from samzamp.systems.base import RawMessage, SystemProducer
from samzamp.task.coordinator import ReadableCoordinator
from samzamp.task.failures import deserialization_error, is_ignored, task_failure

__all__ = ["RUN_CHECK", "RUN_DONE", "RUN_MARKER", "RUN_REQUESTED", "TaskFactory", "TaskRuntime", "build_task_runtime"]

log = logging.getLogger(__name__)

TaskFactory = Callable[[], Any]  # builds the user's task object (today: task.class)
SerdesOf = Callable[[Any], tuple[Serde | None, Serde | None]]  # system stream -> (key serde, msg serde)

# Why ``process_run`` returned.
RUN_DONE = 0  # the messages ran out
RUN_REQUESTED = 1  # the task asked for a commit or shutdown (``requests`` holds them)
RUN_CHECK = 2  # ``check_ns`` of process time went by: the host may look around, then call again
RUN_MARKER = 3  # a control marker (end of stream, drain) came: ``marker`` holds it


class TaskRuntime:
    """A task's object, collector, stores and the rules for running them (see the module docstring)."""

    def __init__(
        self,
        model: TaskModel,
        task_factory: TaskFactory,
        producers: dict[str, SystemProducer],
        serdes_of: SerdesOf,
        metrics: MetricsRegistry,
        *,
        drop_serialization_errors: bool,
        drop_deserialization_errors: bool,
        drop_producer_errors: bool,
        ignored_exceptions: tuple[str, ...],
        fallback_system: str | None = None,
        intermediate: frozenset[SystemStream] = frozenset(),
    ) -> None:
        self.model = model
        self.name = model.name
        self.ssps = model.ssps
        self.index_of = {ssp: i for i, ssp in enumerate(model.ssps)}
        self.reads_intermediate = any(ssp.system_stream in intermediate for ssp in model.ssps)
        self.task: Any = task_factory()
        self.collector = TaskCollector(
            model.name,
            producers,
            serdes_of,
            drop_serialization_errors,
            metrics.counter(f"TaskName-{model.name}", "send-calls"),
            metrics.counter("SystemProducersMetrics", "serialization error"),
            output_failures=OutputFailures(
                model.name, drop_producer_errors, metrics.counter("SystemProducersMetrics", "producer-send-failed")
            ),
            fallback_system=fallback_system,
        )
        self.decoders: list[tuple[Callable[[bytes], Any] | None, Callable[[bytes], Any] | None]] = []
        for ssp in model.ssps:
            k, m = serdes_of(ssp.system_stream)
            self.decoders.append((None if k is None else k.from_bytes, None if m is None else m.from_bytes))
        self.storage: TaskStorage | None = None
        # A commit applies the stores' writes on a thread (step 4), which a failed container does
        # not wait for: their release waits for it rather than close LMDB under it.
        self._stores_lock = threading.Lock()
        self.metrics = metrics
        self._drop_deser = drop_deserialization_errors
        self._ignored = ignored_exceptions
        self.m_deser_errors = metrics.counter("SystemConsumersMetrics", "deserialization error")
        # Where a worker publishes the call it is in, for the loop's task.callback.timeout.ms
        # (dispatch.process.calls); (slot fields, the task's index in its worker) or None.
        self.call_slot: tuple[memoryview, int] | None = None
        self.requests = ReadableCoordinator()  # what the last RUN_REQUESTED run asked for
        # The host's process-calls, messages-actually-processed and process-ns, counted at the end
        # of each run (None: the host counts from run_*, as a worker's loop does from its reports).
        self.counted: tuple[Counter, Counter, Timer] | None = None
        self.marker: RawMessage | None = None  # the control marker that ended the last RUN_MARKER run
        self._coordinator = ReadableCoordinator()
        # The last process_run, also when it raised: messages taken (processed or dropped), process
        # calls, their total and longest time, and the last offset taken (-1: none).
        self.run_taken = self.run_calls = self.run_ns = self.run_max_ns = 0
        self.run_offset = -1

    # -- lifecycle ------------------------------------------------------------------------------
    @property
    def windowable(self) -> bool:
        """True when the task has a window() to call."""
        return isinstance(self.task, WindowableTask)

    def open_stores(self, storage: TaskStorage) -> list[RestoreReport]:
        """Open and restore the task's stores from its model's markers (before ``init``)."""
        self.storage = storage
        return storage.open(self.model.markers)

    def init(self, config: Any) -> None:
        """Call the task's init with its context (its stores open); a failure names the task."""
        with logs.task_scope(self.name):
            self._init(config)

    def _init(self, config: Any) -> None:
        if isinstance(self.task, InitableTask):
            stores = dict(self.storage.stores) if self.storage is not None else {}
            try:
                reserved = reserved_task_metrics(self.ssps, stores)
                context = TaskContext(
                    self.name,
                    frozenset(self.ssps),
                    config,
                    stores,
                    task_model=self.model,
                    metrics=TaskMetrics(self.name, self.metrics, reserved.__contains__),
                    registry=self.metrics,
                )
                self.task.init(context)
            except Exception as e:
                raise task_failure(self.name, e) from e

    def close(self) -> None:
        """Close the task, then its stores; a failing close() is logged (the stores close anyway)."""
        with logs.task_scope(self.name):
            try:
                if isinstance(self.task, ClosableTask):
                    self.task.close()
            except Exception as e:
                log.warning("task %r: close() failed: %s", self.name, e)
            self.release()

    def release(self) -> None:
        """Close the stores without a commit (closing drops their uncommitted writes and unlocks
        their directories), and without closing the task; a second call does nothing. Waits for a
        store commit under way on another thread; one that starts later commits nothing."""
        with self._stores_lock:
            storage, self.storage = self.storage, None
            if storage is not None:
                storage.close()

    # -- process --------------------------------------------------------------------------------
    def envelope(self, index: int, raw: RawMessage) -> IncomingMessageEnvelope | None:
        """Decode one message of SSP ``index``: its envelope, or None when it was dropped."""
        offset, key_bytes, value_bytes, ts = raw
        key_dec, msg_dec = self.decoders[index]
        try:
            key = key_bytes if key_dec is None or key_bytes is None else key_dec(key_bytes)
            message = value_bytes if msg_dec is None or value_bytes is None else msg_dec(value_bytes)
        except Exception as e:
            self.undecodable(index, offset, e)
            return None
        size = (len(key_bytes) if key_bytes else 0) + (len(value_bytes) if value_bytes else 0)
        return IncomingMessageEnvelope(self.ssps[index], offset, key, message, size, ts)

    def undecodable(self, index: int, offset: int, error: Exception) -> None:
        """A message that cannot be decoded: dropped (logged, counted) or a ``SerdeError``."""
        ssp = self.ssps[index]
        if not self._drop_deser:
            raise deserialization_error(self.name, ssp, offset, error) from error
        self.m_deser_errors.count += 1
        log.warning("task %r: dropped %s offset %d: cannot deserialize: %s", self.name, ssp, offset, error)

    def failure(
        self, error: BaseException, ssp: SystemStreamPartition | None = None, offset: int | None = None
    ) -> BaseException:
        """``error`` as the container reports it: a TaskError naming the task (SSP and offset)."""
        return task_failure(self.name, error, ssp, offset)

    def is_ignored(self, error: BaseException) -> bool:
        """True when task.ignored.exceptions names ``error``'s class (or a base class)."""
        return is_ignored(error, self._ignored)

    def process_run(self, index: int, next_raw: Callable[[], RawMessage], limit: int, check_ns: int) -> int:
        """Process messages of SSP ``index`` in order with the task's sync ``process``: each is taken
        from ``next_raw`` (``deque.popleft``, an iterator's ``__next__``), until it has none left
        (RUN_DONE), ``limit`` were taken (RUN_DONE), a control marker comes (RUN_MARKER: ``marker``
        holds it, for the host to put back), the task requests a commit or shutdown (RUN_REQUESTED:
        ``requests`` says which) or ``check_ns`` of process time has gone by (RUN_CHECK: call again
        to go on). A failure raises (see the module docstring). ``run_*`` tell what the run did,
        also when it raised.

        The hot path of both hosts: locals for everything it touches, no metric per message.
        """
        process = self.task.process
        ssp = self.ssps[index]
        key_dec, msg_dec = self.decoders[index]
        collector = self.collector
        coordinator = self._coordinator
        slot = self.call_slot
        calls, slot_task = slot if slot is not None else (None, 0)
        clock = time.monotonic_ns  # CLOCK_MONOTONIC: the loop reads a worker's call starts with it
        envelope_of = IncomingMessageEnvelope
        taken = n = total_ns = max_ns = 0
        done = -1
        scope = logs.enter_task(self.name)  # what the task logs names it
        try:
            while taken < limit:
                try:
                    raw = next_raw()
                except (IndexError, StopIteration):  # an empty deque, an exhausted iterator
                    return RUN_DONE
                offset, key_bytes, value_bytes, ts = raw
                if offset < 0:
                    self.marker = raw
                    return RUN_MARKER
                try:
                    key = key_bytes if key_dec is None or key_bytes is None else key_dec(key_bytes)
                    message = value_bytes if msg_dec is None or value_bytes is None else msg_dec(value_bytes)
                except Exception as e:
                    self.undecodable(index, offset, e)
                    taken += 1
                    done = offset
                    continue
                size = (len(key_bytes) if key_bytes else 0) + (len(value_bytes) if value_bytes else 0)
                started = clock()
                if calls is not None:
                    fence = calls[FENCE]
                    if fence and started >= fence:
                        started = wait_for_fence(calls, started)
                    calls[1] = slot_task
                    calls[2] = index
                    calls[3] = offset
                    calls[0] = started  # last: the loop reads the call's fields once this is set
                try:
                    process(envelope_of(ssp, offset, key, message, size, ts), collector, coordinator)
                except Exception as e:
                    if not is_ignored(e, self._ignored):
                        raise task_failure(self.name, e, ssp, offset) from e
                if calls is not None:
                    calls[0] = 0
                ns = clock() - started
                total_ns += ns
                if ns > max_ns:
                    max_ns = ns
                n += 1
                taken += 1
                done = offset
                if coordinator.requested:
                    self.requests = coordinator
                    self._coordinator = ReadableCoordinator()
                    return RUN_REQUESTED
                if total_ns >= check_ns:
                    return RUN_CHECK
            return RUN_DONE
        finally:
            logs.leave_task(scope)
            if calls is not None:
                calls[0] = 0
            counted = self.counted
            if counted is not None:
                calls_made, processed, timer = counted
                calls_made.count += n
                processed.count += n
                timer.count += n
                timer.total_ns += total_ns
                if max_ns > timer.max_ns:
                    timer.max_ns = max_ns
            self.run_taken = taken
            self.run_calls = n
            self.run_ns = total_ns
            self.run_max_ns = max_ns
            self.run_offset = done

    # -- hooks ----------------------------------------------------------------------------------
    def _run_hook(self, hook: Callable[[MessageCollector, TaskCoordinator], None] | None) -> ReadableCoordinator:
        """Call window / on_end_of_stream / on_drain (None: the task has none). An exception named
        by task.ignored.exceptions is ignored, as Samza's TaskInstanceExceptionHandler does for all
        three; any other raises a TaskError naming the task."""
        coordinator = ReadableCoordinator()
        if hook is not None:
            try:
                with logs.task_scope(self.name):
                    hook(self.collector, coordinator)
            except Exception as e:
                if not self.is_ignored(e):
                    raise task_failure(self.name, e) from e
        return coordinator

    def window(self) -> ReadableCoordinator:
        """Run window() (nothing when the task is not windowable); the task's requests."""
        task = self.task
        return self._run_hook(task.window if isinstance(task, WindowableTask) else None)

    def end_of_stream(self) -> ReadableCoordinator:
        """Run on_end_of_stream() (every source SSP of the task ended); the requests include a
        shutdown of this task, unless it reads intermediate streams: its operators decide when
        they ended too."""
        task = self.task
        coordinator = self._run_hook(task.on_end_of_stream if isinstance(task, EndOfStreamListenerTask) else None)
        if not self.reads_intermediate:
            coordinator.shutdown()
        return coordinator

    def on_drain(self) -> ReadableCoordinator:
        """Run on_drain() (SEP-31); the task's requests."""
        task = self.task
        return self._run_hook(task.on_drain if isinstance(task, DrainListenerTask) else None)

    # -- commit steps 1, 3, 4, 6 (the order is samzamp.commit.pipeline's) -------------------------
    def before_commit(self) -> ControlState | None:
        """Step 1: the task's CheckpointListenerTask.before_commit; a failure names the task. The
        task's control state (an application's graph has one), for the checkpoint."""
        task = self.task
        if isinstance(task, CheckpointListenerTask):
            try:
                with logs.task_scope(self.name):
                    task.before_commit()
            except Exception as e:
                raise task_failure(self.name, e) from e
        control_state: Callable[[], ControlState | None] | None = getattr(task, "control_state", None)
        return control_state() if control_state is not None else None

    def flush_producers(self) -> None:
        """Step 3: the stores' unsent writes sent, then every output and changelog record the task
        sent acknowledged, or ``SystemFailureError`` saying why the commit stops
        (``flush_policy.commit_failure``)."""
        if self.storage is not None:  # the stores' writes waiting to be sent go first
            self.storage.send_unsent()
        changelogs = self.storage.changelogs() if self.storage is not None else ()
        result = flush_task_producers(self.collector.producers_used, changelogs)
        failure = commit_failure(self.name, result, self.collector.output_failures)
        if failure is not None:
            raise SystemFailureError(failure)

    def commit_stores(self) -> dict[str, str]:
        """Step 4 whole, on the task's thread: apply the stores' writes (their changelog is
        durable); the state markers."""
        with self._stores_lock:
            return self.storage.commit() if self.storage is not None else {}

    def freeze_stores(self) -> dict[str, str]:
        """Step 4, its synchronous half, the task idle: set the stores' writes aside at the newest
        acknowledged changelog offsets (``TaskStorage.freeze``); the state markers."""
        with self._stores_lock:
            return self.storage.freeze() if self.storage is not None else {}

    @property
    def stores_frozen(self) -> bool:
        """Step 4's asynchronous half has writes to apply (``apply_stores``)."""
        return self.storage is not None and self.storage.frozen

    def apply_stores(self) -> None:
        """Step 4, its asynchronous half: write the frozen writes to LMDB and make them durable.
        From one thread other than the task's (which goes on processing) or from the task's own."""
        with self._stores_lock:
            if self.storage is not None:
                self.storage.apply_frozen()

    def settle_stores(self) -> None:
        """After ``apply_stores``, on the task's thread: write what only this thread may (a map that
        must grow) and drop the frozen writes."""
        with self._stores_lock:
            if self.storage is not None:
                self.storage.settle()

    def on_checkpoint(self, offsets: dict[SystemStreamPartition, int]) -> None:
        """Step 6: tell the task what was checkpointed; a failure names the task."""
        if isinstance(self.task, CheckpointListenerTask):
            try:
                with logs.task_scope(self.name):
                    self.task.on_checkpoint(offsets)
            except Exception as e:
                raise task_failure(self.name, e) from e


def build_task_runtime(
    settings: TaskSettings,
    model: TaskModel,
    task_factory: TaskFactory,
    producers: dict[str, SystemProducer],
    serdes_of: SerdesOf,
    metrics: MetricsRegistry,
    *,
    fallback_system: str | None = None,
) -> TaskRuntime:
    """The runtime of ``model`` under the job's task.* settings (the same for every host)."""
    return TaskRuntime(
        model,
        task_factory,
        producers,
        serdes_of,
        metrics,
        drop_serialization_errors=settings.drop_serialization_errors,
        drop_deserialization_errors=settings.drop_deserialization_errors,
        drop_producer_errors=settings.drop_producer_errors,
        ignored_exceptions=settings.ignored_exceptions,
        fallback_system=fallback_system,
        intermediate=settings.intermediate,
    )
