"""How much work the loop keeps queued for a task in its worker: IN_FLIGHT_TARGET_NS shared by the
worker's tasks, but never less than two report intervals (TASK_MIN_SHARE_NS), so that a task whose
worker holds many idle tasks still has work queued when the worker's next report comes."""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any

import pytest
from fake_worker import MODEL, SSP, FakePool, worker_task

from samzamp.consume.packed import PackedRun, pack
from samzamp.container.worker_task_proxy import WorkerTaskProxy
from samzamp.dispatch.process import frames as f

MS = 1_000_000


def bound_after_reports(tasks: int, per_message_ns: int) -> int:
    return bounds_after(tasks, [(10 * per_message_ns, per_message_ns)])[-1]


def bounds_after(tasks: int, reports: list[tuple[int, int]]) -> list[int]:
    """The task's in-flight bound after each report of 10 messages done in ``(busy_ns, max_ns)``."""
    pool = FakePool(tasks)
    ti = worker_task(pool, batch_size=256, in_flight_limit=100_000)
    asyncio.run(ti.start(MODEL))
    bounds = []
    for k, (busy_ns, max_ns) in enumerate(reports):
        for i in range(10):
            ti.dispatch(SSP, (10 * k + i, None, b"x", 0))
        pool.handler(f.Processed(0, 0, 10, busy_ns, max_ns))
        bounds.append(ti.state.max_concurrency)
    return bounds


@pytest.mark.parametrize(("tasks", "expected_ms"), [(1, 80), (2, 40), (10, 32), (40, 32)])
def test_a_task_gets_its_share_of_the_worker_queue_but_at_least_two_report_intervals(
    tasks: int, expected_ms: int
) -> None:
    assert f.TASK_MIN_SHARE_NS == 2 * f.REPORT_EVERY_NS == 32 * MS
    # 1 ms a message: the bound in messages is the task's share in milliseconds.
    assert bound_after_reports(tasks, per_message_ns=MS) == expected_ms


def test_a_pause_inside_one_call_does_not_starve_the_worker_afterwards() -> None:
    # 1 ms a message, then a report whose one call took 3 s: the worker was stopped (SIGSTOP, a VM
    # stall, a long GC) in the middle of it. That call is not the task's typical message: the bound
    # stays near its 80 messages, where taking the 3 s at face value would cut it to 2 and leave the
    # worker waiting on the loop after every few messages for dozens of reports.
    steady = (10 * MS, MS)
    paused = (9 * MS + 3000 * MS, 3000 * MS)
    bounds = bounds_after(1, [steady] * 5 + [paused])
    assert bounds[4] == 80
    assert bounds[5] >= 40


def test_a_task_that_really_slows_down_gets_a_smaller_bound_within_a_few_reports() -> None:
    # From 1 ms to 40 ms a message for good: a report counts for at most 4x the average, which can so
    # rise 1.6x a report, and the bound follows the slowdown within a dozen reports, down to the 2
    # messages that 80 ms of work hold.
    bounds = bounds_after(1, [(10 * MS, MS)] * 5 + [(400 * MS, 40 * MS)] * 12)
    assert bounds[4] == 80
    assert bounds[5] < 80
    assert bounds[-1] == 2


def _proxy(in_flight_limit: int) -> tuple[WorkerTaskProxy, list[Any]]:
    pool = FakePool()
    ti = worker_task(pool, batch_size=in_flight_limit, in_flight_limit=in_flight_limit)
    asyncio.run(ti.start(MODEL))
    return ti, pool.frames


def _messages(first: int, n: int) -> list[tuple[int, bytes | None, bytes | None, int]]:
    return [(o, None, b"x", 0) for o in range(first, first + n)]


@pytest.mark.parametrize("path", ["process_run", "dispatch"])
def test_a_packed_run_goes_whole_past_a_bound_of_four_runs_or_more_and_is_split_below(path: str) -> None:
    # A bound of 32 holds four runs of 8: a run that passes it by 7 goes whole, nothing comes back.
    # A bound of 16 holds two: the run is split at the bound, and the rest waits first in the task's
    # queue as messages the chooser already moved past (redo), in order.
    for limit, whole in [(32, True), (16, False)]:
        ti, sent = _proxy(limit)
        ti.dispatch(SSP, pack(_messages(0, limit - 1), limit)[0])
        assert ti.state.messages_in_flight == limit - 1
        run = pack(_messages(limit - 1, 8), 8)
        assert len(run) == 1
        assert isinstance(run[0], PackedRun)
        if path == "process_run":
            assert ti.process_run(SSP, run[0], deque(), 64, 0) == 8  # all of it taken from the chooser
        else:
            ti.dispatch(SSP, run[0])
        ti.flush()
        on_wire = [m[0] for frame in sent for _, r in frame.runs for m in r]
        back = [m for _ssp, m in ti.state.pending]
        if whole:
            assert back == []
            assert ti.state.redo == 0
            assert ti.state.messages_in_flight == limit + 7
            assert on_wire == list(range(limit + 7))
        else:
            assert back == _messages(limit, 7)  # in order, each once
            assert ti.state.redo == 7
            assert ti.state.messages_in_flight == limit
            assert on_wire == list(range(limit))
