"""The task runtime's rules, run once for each host: inline on the event loop (``TaskInstance``, on the
sync fast path and on the callback path that async tasks take) and in a worker process
(``worker.host.Worker``, driven in-process through its frame handlers). Each case is written once; the
``host`` fixture runs it on every host, so a rule that holds in one mode holds in the others.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from samzamp.api.collector import RequestScope
from samzamp.api.envelope import OutgoingMessageEnvelope, SystemStream, SystemStreamPartition
from samzamp.api.errors import SerdeError, SystemFailureError, TaskError
from samzamp.api.task import (
    AsyncStreamTask,
    CheckpointListenerTask,
    DrainListenerTask,
    EndOfStreamListenerTask,
    StreamTask,
    WindowableTask,
)
from samzamp.container import task_instance as task_instance_module
from samzamp.container.task_instance import TaskInstance
from samzamp.dispatch.adapters import RunnableTask, adapt_task
from samzamp.dispatch.process import frames as f
from samzamp.dispatch.process.pool import failure_of
from samzamp.metrics.deltas import DeltaTracker
from samzamp.metrics.registry import MetricsRegistry
from samzamp.model.job_model import TaskModel
from samzamp.storage.manager import RestoreReport
from samzamp.task.runtime import TaskRuntime
from samzamp.worker.host import Worker, WorkerTask

SSP = SystemStreamPartition("kafka", "in", 0)
OUT = SystemStream("kafka", "out")
Flags = tuple[bool, bool, bool, bool]
COMMIT: Flags = (True, False, False, False)
SHUTDOWN_ALL: Flags = (False, False, True, True)


class Serde:
    """Decodes anything but b"bad"."""

    def from_bytes(self, data: bytes) -> bytes:
        if data == b"bad":
            raise ValueError("not a message")
        return data

    def to_bytes(self, value: bytes) -> bytes:
        return value


class Producer:
    """An output or changelog producer whose flush is recorded and whose deliveries fail on demand."""

    def __init__(self, name: str, events: list[str], errors: list[str]) -> None:
        self.name, self.events, self.errors = name, events, errors

    def send(self, stream: str, key: Any, value: Any, partition: Any = None, partition_key: Any = None) -> None:
        if value == b"too large":  # refused at send time, as Kafka's produce() refuses one over message.max.bytes
            raise SystemFailureError(f"system 'kafka' refused a message to {stream!r}: Broker: Message size too large")
        self.events.append(f"send {stream}")

    def keyed_sender(self, stream: str) -> None:
        return None

    def flush(self, timeout_s: float) -> int:
        self.events.append(f"flush {self.name}")
        return 0

    def take_errors(self) -> list[str]:
        errors, self.errors = self.errors, []
        return errors

    def stop(self) -> None:
        pass


class Storage:
    """A task's stores as the commit steps see them."""

    def __init__(self, events: list[str], changelog: Producer) -> None:
        self.events, self.changelog = events, changelog

    def send_unsent(self) -> None:
        self.events.append("send store writes")

    def changelogs(self) -> list[Producer]:
        return [self.changelog]

    def commit(self) -> dict[str, str]:
        self.events.append("commit stores")
        return {"counts": "7"}

    def close(self) -> None:
        self.events.append("close stores")


class Task(StreamTask, WindowableTask, EndOfStreamListenerTask, DrainListenerTask, CheckpointListenerTask):
    """Records what it is called with; ``plan`` says what it does at an offset."""

    def __init__(self, events: list[str], plan: dict[int, Callable[[Any, Any], None]] | None = None) -> None:
        self.events = events
        self.plan = plan or {}
        self.offsets: list[int] = []
        self.window_error: Exception | None = None

    def process(self, envelope: Any, collector: Any, coordinator: Any) -> None:
        self.offsets.append(envelope.offset)
        action = self.plan.get(envelope.offset)
        if action is not None:
            action(collector, coordinator)

    def window(self, collector: Any, coordinator: Any) -> None:
        self.events.append("window")
        if self.window_error is not None:
            raise self.window_error
        coordinator.commit()

    def on_end_of_stream(self, collector: Any, coordinator: Any) -> None:
        self.events.append("end of stream")

    def on_drain(self, collector: Any, coordinator: Any) -> None:
        self.events.append("drain")

    def before_commit(self) -> None:
        self.events.append("before_commit")

    def on_checkpoint(self, offsets: dict[SystemStreamPartition, int]) -> None:
        self.events.append(f"on_checkpoint {offsets[SSP]}")


def _raise(error: Exception) -> Callable[[Any, Any], None]:
    def act(collector: Any, coordinator: Any) -> None:
        raise error

    return act


class Job:
    """One task's runtime with fake producers and stores; the settings a case varies."""

    def __init__(
        self,
        plan: dict[int, Callable[[Any, Any], None]] | None = None,
        *,
        ignored: tuple[str, ...] = (),
        drop_deser: bool = False,
        drop_producer_errors: bool = False,
        output_errors: tuple[str, ...] = (),
        changelog_errors: tuple[str, ...] = (),
    ) -> None:
        self.events: list[str] = []
        self.task = Task(self.events, plan)
        self.output = Producer("outputs", self.events, list(output_errors))
        self.runtime = TaskRuntime(
            TaskModel("T", (SSP,)),
            lambda: self.task,
            {"kafka": self.output},  # type: ignore[dict-item]
            lambda _: (None, Serde()),  # type: ignore[arg-type, return-value]
            MetricsRegistry(),
            drop_serialization_errors=False,
            drop_deserialization_errors=drop_deser,
            drop_producer_errors=drop_producer_errors,
            ignored_exceptions=ignored,
        )
        changelog = Producer("changelog", self.events, list(changelog_errors))
        self.runtime.storage = Storage(self.events, changelog)  # type: ignore[assignment]


def _raws(values: list[bytes]) -> list[tuple[int, bytes | None, bytes | None, int]]:
    return [(offset, None, value, 0) for offset, value in enumerate(values)]


class CallingBack(AsyncStreamTask):
    """The sync task seen as an AsyncStreamTask that calls back before returning: the loop's callback
    path (max.concurrency, async tasks) with the same task behind it."""

    def __init__(self, task: Task) -> None:
        self.task = task

    def process_async(self, envelope: Any, collector: Any, coordinator: Any, callback: Any) -> None:
        self.task.process(envelope, collector, coordinator)
        callback.complete()


class InlineHost:
    """The loop's host, driven as the run loop drives it: sync tasks on the fast path, or (``callbacks``)
    every message through a TaskCallback, as async tasks run."""

    def __init__(self, job: Job, callbacks: bool = False) -> None:
        self.loop = asyncio.new_event_loop()
        self.failures: list[BaseException] = []
        self.requests: list[Flags] = []
        self.callbacks = callbacks
        rt = job.runtime

        async def started(model: TaskModel) -> tuple[TaskRuntime, list[RestoreReport]]:
            return rt, []

        def adapt(task: Any, loop: asyncio.AbstractEventLoop) -> RunnableTask:
            return adapt_task(CallingBack(task) if callbacks else task, loop)

        self.ti = TaskInstance(
            rt.name,
            frozenset(rt.ssps),
            {},
            started,
            max_concurrency=1,
            callback_timeout_ms=0,
            metrics=MetricsRegistry(),
            loop=self.loop,
            on_ready=lambda ti: None,
            on_abort=self.failures.append,
            on_requests=lambda ti, c: self.requests.append(c.flags()),
            adapt=adapt,
        )
        self.loop.run_until_complete(self.ti.start(rt.model))

    def process(self, values: list[bytes]) -> None:
        buffer = deque(_raws(values))
        while buffer and not self.failures:
            if self.callbacks:
                self.ti.dispatch(SSP, buffer.popleft())
            else:
                self.ti.process_run(SSP, buffer.popleft(), buffer, 256, 1 << 62)

    def watermark(self) -> int | None:
        return self.ti.last_processed.get(SSP)

    def hook(self, run: Callable[[], Any]) -> Flags | None:
        try:
            coordinator = run()
        except Exception as e:
            self.failures.append(e)
            return None
        return coordinator.flags()

    def window(self) -> Flags | None:
        return self.hook(self.ti.window)

    def end_of_stream(self) -> Flags | None:
        return self.hook(self.ti.end_of_stream)

    def drain(self) -> Flags | None:
        return self.hook(self.ti.on_drain)

    def commit(self) -> dict[str, str] | str:
        try:
            self.loop.run_until_complete(self.ti.before_commit())
            markers = self.loop.run_until_complete(self.ti.flush_and_freeze_stores(asynchronous=False))
        except Exception as e:
            return str(e)
        return markers

    def checkpointed(self, offset: int) -> None:
        self.ti.checkpoint_written({SSP: offset}, None)


class _Sent:
    def __init__(self) -> None:
        self.frames: list[Any] = []

    def send_many(self, records: list[bytes]) -> None:
        self.frames.extend(f.decode_from_worker(r) for r in records)

    def receive_many_nowait(self) -> list[bytes]:
        return []


class WorkerHost:
    """The worker's host, driven through its frame handlers as ``serve`` calls them; what it sends is
    read back as the loop's side of the ring would (a Failed frame becomes the pool's error)."""

    def __init__(self, job: Job) -> None:
        w = Worker.__new__(Worker)  # no rings, config or producers of its own
        self.ring = _Sent()
        w.tx = w.rx = self.ring  # type: ignore[assignment]
        w.inbox, w.out, w._reports = deque(), [], {}
        w._unreported_ns = w._unreported = 0
        w._urgent = False
        w._report_after = 256
        w._metrics_due = time.monotonic_ns() + f.METRICS_EVERY_NS
        w.calls = None
        w.producers, w.changelogs = {}, {}
        w.metrics = job.runtime.metrics
        w.metrics_sent = DeltaTracker(w.metrics)
        w.max_frame = 1 << 20
        w.tasks = {0: WorkerTask(job.runtime)}
        self.w = w
        self.epoch = 0
        self.taken = -1
        self.failures: list[BaseException] = []
        self.requests: list[Flags] = []

    def _handle(self, handler: Callable[[], None]) -> list[Any]:
        start = len(self.ring.frames)
        try:
            handler()
        except Exception as e:
            if type(e).__name__ != "_Stopped":  # the worker sent Failed and leaves
                raise
        self.w._send_out()
        frames = self.ring.frames[start:]
        for fr in frames:
            if isinstance(fr, f.Failed):
                self.failures.append(failure_of(fr))
        return frames

    def process(self, values: list[bytes]) -> None:
        raws = _raws(values)
        while raws and not self.failures:
            frame = f.Process(0, self.epoch, [(0, list(raws))])
            frames = self._handle(lambda frame=frame: self.w._process(frame))  # type: ignore[misc]
            done = sum(fr.count for fr in frames if isinstance(fr, f.Processed))
            self.taken += done
            requested = [fr for fr in frames if isinstance(fr, f.Requested)]
            self.requests.extend((r.commit, r.commit_all, r.shutdown, r.shutdown_all) for r in requested)
            raws = raws[done:] if requested else []  # the loop takes the rest back and sends it again
            self.epoch += 1

    def watermark(self) -> int | None:
        return None if self.taken < 0 else self.taken

    def _answer(self, handler: Callable[[], None]) -> Any:
        frames = self._handle(handler)
        return None if self.failures else frames[-1]

    def window(self) -> Flags | None:
        fr = self._answer(lambda: self.w._window(0))
        return None if fr is None else (fr.commit, fr.commit_all, fr.shutdown, fr.shutdown_all)

    def end_of_stream(self) -> Flags | None:
        fr = self._answer(lambda: self.w._end_of_stream(0))
        return None if fr is None else (fr.commit, fr.commit_all, fr.shutdown, fr.shutdown_all)

    def drain(self) -> Flags | None:
        fr = self._answer(lambda: self.w._drain(0))
        return None if fr is None else (fr.commit, fr.commit_all, fr.shutdown, fr.shutdown_all)

    def commit(self) -> dict[str, str] | str:
        self._handle(lambda: self.w._before_commit(0))
        if self.failures:
            return str(self.failures[-1])
        fr = self._answer(lambda: self.w._commit(0))
        if fr is None:
            return str(self.failures[-1])
        return fr.errors[0] if fr.errors else dict(fr.markers)

    def checkpointed(self, offset: int) -> None:
        self._handle(lambda: self.w._checkpointed(f.Checkpointed(0, [(0, offset)])))


Host = InlineHost | WorkerHost


@pytest.fixture(params=["inline", "inline-callbacks", "worker"])
def host(request: pytest.FixtureRequest) -> Iterator[Callable[[Job], Host]]:
    """Builds the case's host: inline (the sync fast path, then the callback path of async tasks),
    then in a worker."""
    made: list[Host] = []

    def make(job: Job) -> Host:
        h = WorkerHost(job) if request.param == "worker" else InlineHost(job, request.param == "inline-callbacks")
        made.append(h)
        return h

    yield make
    for h in made:
        if isinstance(h, InlineHost):
            h.loop.close()


def test_messages_are_processed_in_order_and_the_watermark_follows(host: Callable[[Job], Host]) -> None:
    job = Job()
    h = host(job)
    h.process([b"a", b"b", b"c", b"d"])
    assert job.task.offsets == [0, 1, 2, 3]
    assert h.watermark() == 3
    assert not h.failures


def test_a_task_exception_fails_naming_task_ssp_and_offset(host: Callable[[Job], Host]) -> None:
    job = Job({2: _raise(KeyError("k"))})
    h = host(job)
    h.process([b"a", b"b", b"c", b"d"])
    assert job.task.offsets == [0, 1, 2]
    assert len(h.failures) == 1
    error = h.failures[0]
    assert type(error) is TaskError
    assert "'T'" in str(error)
    assert str(SSP) in str(error)
    assert "offset 2" in str(error)
    assert "KeyError" in str(error)
    assert h.watermark() == 1


def test_an_ignored_exception_lets_processing_go_on(host: Callable[[Job], Host]) -> None:
    job = Job({1: _raise(KeyError("k"))}, ignored=("KeyError",))
    h = host(job)
    h.process([b"a", b"b", b"c"])
    assert job.task.offsets == [0, 1, 2]
    assert h.watermark() == 2
    assert not h.failures


def test_an_undecodable_message_is_dropped_when_asked(host: Callable[[Job], Host]) -> None:
    job = Job(drop_deser=True)
    h = host(job)
    h.process([b"a", b"bad", b"c"])
    assert job.task.offsets == [0, 2]
    assert h.watermark() == 2
    assert not h.failures
    assert job.runtime.m_deser_errors.count == 1


def test_an_undecodable_message_fails_with_the_same_error_in_both_hosts(host: Callable[[Job], Host]) -> None:
    job = Job()
    h = host(job)
    h.process([b"a", b"bad", b"c"])
    assert job.task.offsets == [0]
    assert len(h.failures) == 1
    error = h.failures[0]
    assert type(error) is SerdeError
    assert "'T'" in str(error)
    assert "offset 1" in str(error)
    assert h.watermark() == 0


def test_coordinator_requests_reach_the_loop_and_processing_goes_on(host: Callable[[Job], Host]) -> None:
    job = Job(
        {
            1: lambda c, coord: coord.commit(),
            3: lambda c, coord: coord.shutdown(RequestScope.ALL_TASKS_IN_CONTAINER),
        }
    )
    h = host(job)
    h.process([b"a", b"b", b"c", b"d", b"e"])
    assert h.requests == [COMMIT, SHUTDOWN_ALL]
    assert job.task.offsets == [0, 1, 2, 3, 4]
    assert h.watermark() == 4


def test_hooks_run_and_report_their_requests(host: Callable[[Job], Host]) -> None:
    job = Job()
    h = host(job)
    assert h.window() == COMMIT
    assert h.end_of_stream() == (False, False, True, False)  # end of stream always shuts the task down
    assert h.drain() == (False, False, False, False)
    assert job.events == ["window", "end of stream", "drain"]
    assert not h.failures


def test_a_hook_exception_is_ignored_or_fails_naming_the_task(host: Callable[[Job], Host]) -> None:
    job = Job(ignored=("KeyError",))
    job.task.window_error = KeyError("k")
    h = host(job)
    assert h.window() == (False, False, False, False)
    job.task.window_error = ValueError("v")
    assert h.window() is None
    assert [type(e) for e in h.failures] == [TaskError]
    assert "'T'" in str(h.failures[0])
    assert "ValueError" in str(h.failures[0])


def test_commit_steps_run_in_samzas_order(host: Callable[[Job], Host]) -> None:
    job = Job({0: lambda c, coord: c.send(OutgoingMessageEnvelope(OUT, b"x"))})
    h = host(job)
    h.process([b"a"])
    assert h.commit() == {"counts": "7"}
    h.checkpointed(0)
    assert job.events == [
        "send out",
        "before_commit",
        "send store writes",  # the stores' writes that wait go to the changelog before its flush
        "flush outputs",
        "flush changelog",
        "commit stores",
        "on_checkpoint 0",
    ]


@pytest.mark.parametrize("drop", [False, True])
def test_a_changelog_failure_always_stops_the_commit(host: Callable[[Job], Host], drop: bool) -> None:
    job = Job(drop_producer_errors=drop, changelog_errors=("broker down",))
    h = host(job)
    outcome = h.commit()
    assert isinstance(outcome, str)
    assert "changelog" in outcome
    assert "broker down" in outcome
    assert "'T'" in outcome
    assert "commit stores" not in job.events


@pytest.mark.parametrize("drop", [False, True])
def test_an_output_failure_is_dropped_only_with_drop_producer_errors(host: Callable[[Job], Host], drop: bool) -> None:
    job = Job(
        {0: lambda c, coord: c.send(OutgoingMessageEnvelope(OUT, b"x"))},
        drop_producer_errors=drop,
        output_errors=("rejected",),
    )
    h = host(job)
    h.process([b"a"])
    outcome = h.commit()
    if drop:
        assert outcome == {"counts": "7"}
        assert "commit stores" in job.events
    else:
        assert isinstance(outcome, str)
        assert "rejected" in outcome
        assert "task.drop.producer.errors" in outcome
        assert "commit stores" not in job.events


def _forward(collector: Any, coordinator: Any, value: bytes) -> None:
    collector.send(OutgoingMessageEnvelope(OUT, value))


def _forwarding_plan(n: int, refused: int) -> dict[int, Callable[[Any, Any], None]]:
    """Offsets 0..n-1 each send one output; the one at ``refused`` is refused at send time."""
    return {
        o: (lambda c, coord, v=(b"too large" if o == refused else b"x"): _forward(c, coord, v))  # type: ignore[misc]
        for o in range(n)
    }


def test_an_output_refused_at_send_time_is_dropped_logged_and_counted_with_drop_producer_errors(
    host: Callable[[Job], Host], caplog: pytest.LogCaptureFixture
) -> None:
    job = Job(_forwarding_plan(4, refused=1), drop_producer_errors=True)
    h = host(job)
    h.process([b"a", b"b", b"c", b"d"])
    assert not h.failures
    assert job.task.offsets == [0, 1, 2, 3]
    assert h.watermark() == 3
    assert job.events.count("send out") == 3  # the refused output is gone, the later ones are sent
    assert job.runtime.collector.output_failures.failed.count == 1
    dropped = [r.getMessage() for r in caplog.records if "dropped an output" in r.getMessage()]
    assert len(dropped) == 1
    assert "'T'" in dropped[0]
    assert str(OUT) in dropped[0]
    assert "Message size too large" in dropped[0]
    assert h.commit() == {"counts": "7"}  # and the commit goes on past it


def test_an_output_refused_at_send_time_fails_the_task_naming_task_ssp_and_offset(
    host: Callable[[Job], Host],
) -> None:
    job = Job(_forwarding_plan(4, refused=2))
    h = host(job)
    h.process([b"a", b"b", b"c", b"d"])
    assert job.task.offsets == [0, 1, 2]
    assert len(h.failures) == 1
    error = str(h.failures[0])
    assert "'T'" in error
    assert str(SSP) in error
    assert "offset 2" in error
    assert "Message size too large" in error
    assert "task.drop.producer.errors" in error
    assert h.watermark() == 1  # nothing at or past the refused message may be checkpointed


def test_send_time_and_delivery_failures_are_counted_in_one_metric(host: Callable[[Job], Host]) -> None:
    job = Job(_forwarding_plan(2, refused=0), drop_producer_errors=True, output_errors=("out[0]: timed out",))
    h = host(job)
    h.process([b"a", b"b"])
    assert h.commit() == {"counts": "7"}
    assert job.runtime.collector.output_failures.failed.count == 2


@pytest.mark.parametrize("fenced", [True, False], ids=["fenced", "unfenced"])
def test_a_fenced_inline_run_starts_no_message_once_the_clock_passed_its_deadline(
    monkeypatch: pytest.MonkeyPatch, fenced: bool
) -> None:
    """A processor with a lease (standalone) may be frozen between two messages of a run, a pause no
    message's process time holds; continued past its lease, it must not start the next one."""
    deadline = time.monotonic_ns() + 10_000_000_000  # ten seconds of process time: no bound here
    now = [0]
    monkeypatch.setattr(task_instance_module, "_now_ns", lambda: now[0])

    def frozen_after(_collector: Any, _coordinator: Any) -> None:
        now[0] = deadline + 1  # past the run's deadline, between this message and the next

    job = Job({1: frozen_after})
    h = InlineHost(job)
    try:
        buffer = deque(_raws([b"a", b"b", b"c", b"d"]))
        taken = h.ti.process_run(SSP, buffer.popleft(), buffer, 256, deadline, fenced)
        if fenced:
            assert (taken, job.task.offsets, [r[0] for r in buffer]) == (2, [0, 1], [2, 3])  # c, d wait, in order
        else:  # without a lease the run's bound is its process time: the pause is nobody's
            assert (taken, job.task.offsets, list(buffer)) == (4, [0, 1, 2, 3], [])
        assert h.watermark() == taken - 1
    finally:
        h.loop.close()
