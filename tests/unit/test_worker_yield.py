"""The worker's side of ``Yield``: it looks for one at each report, also inside a batch, stops after
the message it is in, reports what it did and answers ``Yielded`` behind it, skips the rest of that
epoch and goes on with the next one. A Yield for an epoch a request already ended gets no answer."""

from __future__ import annotations

import time
from typing import Any

from fake_worker import worker_without_rings

from samzamp.api.envelope import SystemStreamPartition
from samzamp.dispatch.process import frames as f
from samzamp.metrics.registry import MetricsRegistry
from samzamp.model.job_model import TaskModel
from samzamp.task.runtime import TaskRuntime
from samzamp.worker.host import WorkerTask

SSP = SystemStreamPartition("kafka", "in", 0)
# Each message takes longer than a report interval, so the worker reports (and reads its ring) after each.
PROCESS_S = f.REPORT_EVERY_NS / 1e9 + 0.001


class SleepingTask:
    def __init__(self, requests: frozenset[int] = frozenset()) -> None:
        self.offsets: list[int] = []
        self.requests = set(requests)

    def process(self, envelope: Any, collector: Any, coordinator: Any) -> None:
        time.sleep(PROCESS_S)
        self.offsets.append(envelope.offset)
        if envelope.offset in self.requests:
            coordinator.commit()


class Ring:
    """The loop's side of both rings: ``waits`` are returned by blocking receives; ``arrivals[k]``
    becomes readable once the task has processed k messages."""

    def __init__(self, task: SleepingTask, waits: list[list[Any]], arrivals: dict[int, list[Any]]) -> None:
        self.task = task
        self.waits = [[f.encode(fr) for fr in frames] for frames in waits]
        self.arrivals = {k: [f.encode(fr) for fr in frames] for k, frames in arrivals.items()}
        self.sent: list[Any] = []

    def receive_many(self, timeout: float) -> list[bytes]:
        return self.waits.pop(0)

    def receive_many_nowait(self) -> list[bytes]:
        return self.arrivals.pop(len(self.task.offsets), [])

    def send_many(self, records: list[bytes]) -> None:
        self.sent.extend(f.decode_from_worker(r) for r in records)


def _serve(task: SleepingTask, waits: list[list[Any]], arrivals: dict[int, list[Any]]) -> list[Any]:
    w = worker_without_rings(256)  # and one task
    ring = Ring(task, waits, arrivals)
    w.rx = ring  # type: ignore[assignment]
    w.tx = ring  # type: ignore[assignment]
    runtime = TaskRuntime(
        TaskModel("T", (SSP,)),
        lambda: task,
        {},
        lambda _: (None, None),
        MetricsRegistry(),
        drop_serialization_errors=False,
        drop_deserialization_errors=False,
        drop_producer_errors=False,
        ignored_exceptions=(),
    )
    w.tasks = {0: WorkerTask(runtime)}
    w.serve()
    return [(type(fr).__name__, getattr(fr, "epoch", None), getattr(fr, "count", None)) for fr in ring.sent]


def _batch(epoch: int, first: int, n: int) -> f.Process:
    return f.Process(0, epoch, [(0, [(o, None, b"x", 0) for o in range(first, first + n)])])


def test_a_yield_read_inside_a_batch_stops_it_after_the_message_in_progress() -> None:
    task = SleepingTask()
    sent = _serve(
        task,
        waits=[[_batch(0, 0, 10), _batch(0, 10, 10)], [f.Stop()]],
        arrivals={2: [f.Yield(0, 0), _batch(1, 2, 3)]},  # the loop takes back 2..19 and sends 2..4 again
    )
    assert task.offsets == [0, 1, 2, 3, 4]
    assert sent[:3] == [("Processed", 0, 1), ("Processed", 0, 1), ("Yielded", 0, None)]
    assert sum(c for kind, e, c in sent if kind == "Processed" and e == 1) == 3
    assert sent[-1][0] == "Stopped"


def test_a_yield_is_read_between_batches_of_one_message_too() -> None:
    task = SleepingTask()
    sent = _serve(
        task,
        waits=[[_batch(0, o, 1) for o in range(20)], [f.Stop()]],  # all read at once: the inbox holds 20
        arrivals={2: [f.Yield(0, 0), _batch(1, 2, 1)]},
    )
    assert task.offsets == [0, 1, 2]
    assert [kind for kind, *_ in sent] == ["Processed", "Processed", "Yielded", "Processed", "Stopped"]


def test_a_yield_while_idle_is_answered_at_once() -> None:
    task = SleepingTask()
    sent = _serve(task, waits=[[_batch(0, 0, 1)], [f.Yield(0, 0)], [f.Stop()]], arrivals={})
    assert sent == [("Processed", 0, 1), ("Yielded", 0, None), ("Stopped", None, None)]


def test_a_yield_of_an_epoch_a_request_ended_gets_no_answer() -> None:
    task = SleepingTask(requests={1})
    sent = _serve(task, waits=[[_batch(0, 0, 5)], [f.Yield(0, 0), _batch(1, 2, 1)], [f.Stop()]], arrivals={})
    assert task.offsets == [0, 1, 2]
    kinds = [kind for kind, *_ in sent]
    assert "Yielded" not in kinds
    assert kinds[:3] == ["Processed", "Processed", "Requested"]
