"""How a worker reports completions: one Processed frame per task and send, however many batches
it covers, and always ahead of any later frame (the loop moves a task's low watermark from them,
and reads a reply as coming after them)."""

from __future__ import annotations

from typing import Any

import pytest
from fake_worker import worker_without_rings

from samzamp.dispatch.process import frames as f
from samzamp.worker.host import Worker


class CapturingSend:
    def __init__(self) -> None:
        self.sent: list[list[Any]] = []  # frames of each send_many call

    def send_many(self, records: list[bytes]) -> None:
        self.sent.append([f.decode_from_worker(r) for r in records])


class ScriptedReceive:
    """The loop's side of the ring: each wait returns the next list of frames; nothing is waiting
    in between (``receive_many_nowait`` is empty), so the worker reports before it waits again."""

    def __init__(self, waits: list[list[Any]]) -> None:
        self.waits = [[f.encode(fr) for fr in frames] for frames in waits]

    def receive_many(self, timeout: float) -> list[bytes]:
        return self.waits.pop(0)

    def receive_many_nowait(self) -> list[bytes]:
        return []


def _worker(batch_size: int = 256) -> tuple[Worker, CapturingSend]:
    w = worker_without_rings(f.report_after(batch_size))
    tx = CapturingSend()
    w.tx = tx  # type: ignore[assignment]
    return w, tx


def _process_by_script(w: Worker, request_at: int | None = None) -> None:
    """Stand-in for running a task: each message takes 1 ms; the one at ``request_at`` asks for a commit."""

    def process(frame: f.Process) -> None:
        messages = [raw for _, run in frame.runs for raw in run]
        for done, raw in enumerate(messages, 1):
            if raw[0] == request_at:
                w._report_processed(frame.task, frame.epoch, done, done * 1_000_000, 1_000_000)
                w._reply(f.Requested(frame.task, frame.epoch, True, False, False, False))
                return
        n = len(messages)
        w._report_processed(frame.task, frame.epoch, n, n * 1_000_000, 1_000_000)

    w._process = process  # type: ignore[method-assign]


def _batch(task: int, first: int, n: int) -> f.Process:
    return f.Process(task, 0, [(0, [(o, None, b"x", 0) for o in range(first, first + n)])])


def test_completions_of_several_batches_go_out_as_one_report_per_task() -> None:
    w, tx = _worker()
    w._report_processed(0, 0, 3, 300, 120)
    w._report_processed(1, 0, 2, 500, 260)
    w._report_processed(0, 0, 4, 400, 150)
    assert w._unreported == 9
    assert w._unreported_ns == 1200
    w._send_out()
    assert len(tx.sent) == 1
    by_task = {fr.task: fr for fr in tx.sent[0]}
    assert len(tx.sent[0]) == 2
    assert (by_task[0].count, by_task[0].busy_ns, by_task[0].max_ns) == (7, 700, 150)
    assert (by_task[1].count, by_task[1].busy_ns, by_task[1].max_ns) == (2, 500, 260)
    assert w._unreported == 0
    assert not w._reports


def test_a_reply_goes_behind_the_completions_reported_before_it() -> None:
    w, tx = _worker()
    w._report_processed(0, 0, 5, 500, 100)
    w._reply(f.Requested(0, 0, True, False, False, False))
    w._report_processed(0, 1, 2, 200, 100)  # the next epoch, after the request was served
    w._send_out()
    kinds = [(type(fr).__name__, getattr(fr, "epoch", None), getattr(fr, "count", None)) for fr in tx.sent[0]]
    assert kinds == [("Processed", 0, 5), ("Requested", 0, None), ("Processed", 1, 2)]


def test_a_new_epoch_does_not_merge_into_the_old_one() -> None:
    w, tx = _worker()
    w._report_processed(0, 0, 5, 500, 100)
    w._report_processed(0, 1, 2, 200, 100)
    w._send_out()
    assert [(fr.epoch, fr.count) for fr in tx.sent[0]] == [(0, 5), (1, 2)]


def test_a_failure_goes_out_behind_the_completions_before_it() -> None:
    w, tx = _worker()
    w._report_processed(0, 0, 3, 300, 100)
    with pytest.raises(Exception) as stopped:  # noqa: PT011 - the worker's private _Stopped
        w.fail(0, ValueError("boom"))
    assert type(stopped.value).__name__ == "_Stopped"
    frames = tx.sent[0]
    assert [type(fr).__name__ for fr in frames] == ["Processed", "Failed"]
    assert frames[0].count == 3


def test_serve_reports_many_batches_at_once_when_its_input_runs_out() -> None:
    w, tx = _worker()
    _process_by_script(w)
    # Five batches of one message each (5 ms of work, under REPORT_EVERY_NS) arrive together.
    w.rx = ScriptedReceive([[_batch(t % 2, t, 1) for t in range(5)], [f.Stop()]])  # type: ignore[assignment]
    w.serve()
    reports, stopped = tx.sent
    assert sorted((fr.task, fr.count) for fr in reports) == [(0, 3), (1, 2)]
    assert [type(fr).__name__ for fr in stopped] == ["Stopped"]


def test_serve_reports_after_report_every_ns_of_work_without_waiting_for_the_input_to_run_out() -> None:
    w, tx = _worker()
    _process_by_script(w)
    per = f.REPORT_EVERY_NS // 1_000_000  # batches of 1 ms each that reach the report interval
    w.rx = ScriptedReceive([[_batch(0, i, 1) for i in range(per + 2)], [f.Stop()]])  # type: ignore[assignment]
    w.serve()
    assert [[fr.count for fr in send] for send in tx.sent[:-1]] == [[per], [2]]


def test_serve_sends_a_request_at_once_behind_its_completions() -> None:
    w, tx = _worker()
    _process_by_script(w, request_at=4)  # 5 ms of work in all before it: under the report interval
    w.rx = ScriptedReceive([[_batch(0, 0, 3), _batch(0, 3, 3), _batch(1, 0, 1)], [f.Stop()]])  # type: ignore[assignment]
    w.serve()
    first = tx.sent[0]
    assert [(type(fr).__name__, fr.task) for fr in first] == [("Processed", 0), ("Requested", 0)]
    assert first[0].count == 5
    assert [(type(fr).__name__, fr.task, fr.count) for fr in tx.sent[1]] == [("Processed", 1, 1)]


def test_serve_reports_after_report_batches_batches_worth_of_messages() -> None:
    assert f.REPORT_BATCHES == 4
    w, tx = _worker(batch_size=1)
    _process_by_script(w)
    w.rx = ScriptedReceive([[_batch(0, 0, 2), _batch(0, 2, 2), _batch(0, 4, 1)], [f.Stop()]])  # type: ignore[assignment]
    w.serve()
    assert [[fr.count for fr in send] for send in tx.sent[:-1]] == [[4], [1]]
