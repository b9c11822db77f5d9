"""The processor's one view of its restores: one redrawn line on a terminal, a log line every few
seconds otherwise, and each store's restored-records gauge kept current."""

from __future__ import annotations

import io
import logging
import re

import pytest

from samzamp.metrics.registry import MetricsRegistry
from samzamp.storage import restore_progress
from samzamp.storage.restore_progress import LOG_EVERY_S, RestoreProgress


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    c = Clock()
    monkeypatch.setattr(restore_progress.time, "monotonic", c)
    return c


def test_several_restores_on_a_terminal_are_one_line_redrawn_until_the_last_ends(clock: Clock) -> None:
    out = io.StringIO()
    view = RestoreProgress(stream=out, tty=True)
    a, b = view.reporter("Partition 0"), view.reporter("Partition 1")
    a("counts", 0, 3000, False)
    b("counts", 0, 1000, False)
    for n in (1000, 2000):
        clock.now += 0.5
        a("counts", n, 3000, False)
        b("counts", n // 2, 1000, False)
    clock.now += 0.5
    b("counts", 1000, 1000, True)
    assert "\n" not in out.getvalue()  # one restore still runs: the line stays open
    assert out.getvalue().endswith("\r")  # at its start, for any log line to write over
    clock.now += 0.5
    a("counts", 3000, 3000, True)
    text = out.getvalue()
    drawn = [d.rstrip("\r") for d in text.split("\r\x1b[K")[1:]]
    assert drawn, text
    assert all(re.match(r"(restoring stores: \d of \d done, |restored 2 stores: )", d) for d in drawn), drawn
    assert text.count("\n") == 1
    assert text.endswith("\n")
    assert drawn[-1].startswith("restored 2 stores: 4,000 of 4,000 records (100%) in 2.0 s")
    assert "restoring stores: 1 of 2 done, 3,000 of 4,000 records (75%)" in text


def test_a_redraw_waits_a_fifth_of_a_second_so_a_fast_restore_costs_no_terminal_writes(clock: Clock) -> None:
    out = io.StringIO()
    view = RestoreProgress(stream=out, tty=True)
    report = view.reporter("Partition 0")
    report("counts", 0, None, False)
    for n in range(1, 100):
        clock.now += 0.001
        report("counts", n * 10_000, None, False)
    assert out.getvalue().count("\x1b[K") == 1
    report("counts", 1_000_000, None, True)
    assert out.getvalue().count("\x1b[K") == 2
    assert "1,000,000 records in" in out.getvalue()  # no total known: no share


def test_without_a_terminal_a_log_line_every_few_seconds_and_one_at_the_end(
    clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    out = io.StringIO()
    view = RestoreProgress(stream=out, tty=False)
    report = view.reporter("Partition 0")
    caplog.set_level(logging.INFO, logger=restore_progress.__name__)
    report("counts", 0, 120_000, False)
    for step in range(1, 13):
        clock.now += 1.0
        report("counts", step * 10_000, 120_000, step == 12)
    lines = [r.getMessage() for r in caplog.records]
    assert out.getvalue() == ""
    assert lines == [
        "restoring stores: 0 of 1 done, 50,000 of 120,000 records (42%), 10,000 records/s",
        "restoring stores: 0 of 1 done, 100,000 of 120,000 records (83%), 10,000 records/s",
        "restored 1 stores: 120,000 of 120,000 records (100%) in 12.0 s (10,000 records/s)",
    ]
    assert LOG_EVERY_S == 5.0


def test_a_restore_shorter_than_the_log_interval_logs_nothing(clock: Clock, caplog: pytest.LogCaptureFixture) -> None:
    view = RestoreProgress(stream=io.StringIO(), tty=False)
    caplog.set_level(logging.INFO, logger=restore_progress.__name__)
    report = view.reporter("Partition 0")
    report("counts", 0, 10, False)
    clock.now += 1.0
    report("counts", 10, 10, True)
    assert caplog.records == []  # each store's own restore line says it


def test_each_store_s_restored_records_gauge_follows_its_restore(clock: Clock) -> None:
    metrics = MetricsRegistry()
    view = RestoreProgress(metrics, stream=io.StringIO(), tty=False)
    report = view.reporter("Partition 3")
    report("counts", 0, None, False)
    report("counts", 20_000, None, False)
    assert metrics.snapshot()["TaskName-Partition 3"]["counts-restored-records"] == 20_000
    assert view.running()
    report("counts", 25_000, None, True)
    assert metrics.snapshot()["TaskName-Partition 3"]["counts-restored-records"] == 25_000
    assert not view.running()


def test_a_task_whose_start_failed_ends_its_restores(clock: Clock) -> None:
    out = io.StringIO()
    view = RestoreProgress(stream=out, tty=True)
    view.reporter("Partition 0")("counts", 10, 100, False)
    view.reporter("Partition 1")("counts", 10, 100, False)
    view.forget("Partition 0")
    assert view.running()
    view.forget("Partition 1")
    assert not view.running()
    clock.now += 1.0
    view.reporter("Partition 2")("counts", 0, 5, False)  # a new round counts only its own restores
    assert out.getvalue().endswith("restoring stores: 0 of 1 done, 0 of 5 records (0%), 0 records/s\r")
