"""The low watermark (Samza's TaskCallbackManager) and the per-task readiness rules."""

from __future__ import annotations

import random

import pytest

from samzamp import SystemStreamPartition
from samzamp.collect.completions import TaskCallbackImpl, TaskCallbackManager
from samzamp.container.task_state import TaskOp, TaskState
from samzamp.task.coordinator import ReadableCoordinator

SSP = SystemStreamPartition("kafka", "in", 0)


def _callbacks(mgr: TaskCallbackManager, n: int, commit_at: int | None = None) -> list[TaskCallbackImpl]:
    out = []
    for offset in range(n):
        coordinator = ReadableCoordinator()
        if offset == commit_at:
            coordinator.commit()
        out.append(TaskCallbackImpl(lambda cb, err: None, mgr.new_seq(), SSP, offset, coordinator, 0))
    return out


@pytest.mark.parametrize("seed", range(20))
def test_out_of_order_completions_release_only_contiguous_prefix(seed: int) -> None:
    mgr = TaskCallbackManager(max_concurrency=8)
    cbs = _callbacks(mgr, 200)
    order = list(range(200))
    random.Random(seed).shuffle(order)
    done: set[int] = set()
    watermark = -1
    for i in order:
        done.add(i)
        for released in mgr.release(cbs[i]):
            assert released.offset == watermark + 1, "released out of sequence"
            watermark = released.offset
        # The watermark is exactly the end of the contiguous completed prefix: never past a gap.
        expected = -1
        while expected + 1 in done:
            expected += 1
        assert watermark == expected
    assert watermark == 199


def test_release_stops_after_a_commit_request_and_resumes_on_drain() -> None:
    mgr = TaskCallbackManager(max_concurrency=4)
    cbs = _callbacks(mgr, 6, commit_at=2)
    for i in (5, 4, 3, 2, 1):
        assert mgr.release(cbs[i]) == []
    released = mgr.release(cbs[0])
    assert [c.offset for c in released] == [0, 1, 2]  # the commit covers exactly up to offset 2
    assert [c.offset for c in mgr.release_held()] == [3, 4, 5]


def test_in_order_fast_path_with_concurrency_one() -> None:
    mgr = TaskCallbackManager(max_concurrency=1)
    cbs = _callbacks(mgr, 3)
    assert [c.offset for cb in cbs for c in mgr.release(cb)] == [0, 1, 2]


def test_callback_completed_twice_reports_illegal_state() -> None:
    errors = []
    cb = TaskCallbackImpl(lambda c, e: errors.append(e), 0, SSP, 7, None, 0)
    cb.complete()
    cb.complete()
    assert errors[0] is None
    assert "completed twice" in str(errors[1])


def test_window_and_commit_wait_for_in_flight_and_block_process() -> None:
    st = TaskState(max_concurrency=2)
    st.pending.append((SSP, (0, None, None, 0)))
    assert st.next_op() is TaskOp.PROCESS
    st.messages_in_flight = 1
    st.need_window = True
    assert st.next_op() is TaskOp.NO_OP  # a due window stops new process calls, waits for in-flight
    st.messages_in_flight = 0
    assert st.next_op() is TaskOp.WINDOW
    st.need_window = False
    st.window_in_flight = True
    assert st.next_op() is TaskOp.NO_OP
    st.window_in_flight = False
    st.need_commit = True
    st.need_window = True
    assert st.next_op() is TaskOp.COMMIT  # commit before window
    st.need_commit = False
    st.commit_in_flight = True
    assert st.next_op() is TaskOp.NO_OP


def test_max_concurrency_bounds_process() -> None:
    st = TaskState(max_concurrency=3)
    st.pending.extend([(SSP, (i, None, None, 0)) for i in range(5)])
    st.messages_in_flight = 3
    assert st.next_op() is TaskOp.NO_OP
    st.messages_in_flight = 2
    assert st.next_op() is TaskOp.PROCESS
