"""How a worker reports completions: one Processed frame per task and send, however many batches
it covers, and always ahead of any later frame (the loop moves a task's low watermark from them,
and reads a reply as coming after them)."""

from __future__ import annotations

from typing import Any

import pytest

from samzamp.dispatch.process import frames as f
from samzamp.dispatch.process.worker import Worker


class CapturingSend:
    def __init__(self) -> None:
        self.sent: list[list[Any]] = []  # frames of each send_many call

    def send_many(self, records: list[bytes]) -> None:
        self.sent.append([f.decode_from_worker(r) for r in records])


def _worker() -> tuple[Worker, CapturingSend]:
    w = Worker.__new__(Worker)  # the reporting state only: no rings, config or tasks
    tx = CapturingSend()
    w.tx = tx  # type: ignore[assignment]
    w.out = []
    w._reports = {}
    w._unreported_ns = w._unreported = 0
    w._urgent = False
    return w, tx


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
