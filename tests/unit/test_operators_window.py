"""WindowOperator driven by hand: a real LMDB store (JSON serdes, as the planner configures it) and a
clock the test sets, so each firing rule is checked at its boundary."""

from __future__ import annotations

from datetime import timedelta

import pytest
from fake_graph_context import FakeGraphContext

import samzamp.operators.window as window_module
from samzamp.api.operators import KV, OperatorSpec
from samzamp.api.windows import WindowKey, WindowPane, Windows
from samzamp.operators.window import WindowOperator

OP = "job-1-window-w"
SECOND = timedelta(seconds=1)


def count(kv, n):
    return n + 1


def op_of(window) -> WindowOperator:
    return WindowOperator(OperatorSpec(OP, "window", window=window))


def keyed_tumbling() -> WindowOperator:
    return op_of(Windows.keyed_tumbling_window(lambda kv: kv.key, SECOND, lambda: 0, count))


def keyed_session() -> WindowOperator:
    return op_of(Windows.keyed_session_window(lambda kv: kv.key, SECOND, lambda: 0, count))


def pane(key, start, value):
    return WindowPane(WindowKey(key, str(start)), value, "default")


def feed(op, ctx, at, *keys):
    """Each key as one message at time ``at``; what process returned."""
    ctx.now = at
    out = []
    for k in keys:
        out += list(op.process(KV(k, None)))
    return out


@pytest.fixture
def ctx(tmp_path):
    return FakeGraphContext(tmp_path, now=0)


def test_tumbling_window_fires_at_its_end_not_before(ctx):
    op = keyed_tumbling()
    op.init(ctx)
    assert feed(op, ctx, 10_500, "a", "a", "a") == []
    assert list(op.on_timer(10_999)) == []
    assert list(op.on_timer(11_000)) == [pane("a", 10_000, 3)]
    assert ctx.contents(OP) == {}
    assert list(op.on_timer(20_000)) == []  # emitted once


def test_tumbling_window_starts_aligned_and_the_next_interval_is_a_new_pane(ctx):
    op = keyed_tumbling()
    op.init(ctx)
    feed(op, ctx, 10_999, "a")
    feed(op, ctx, 11_000, "a", "a")
    assert ctx.contents(OP) == {}  # in memory until the task commits
    op.flush()
    assert ctx.contents(OP) == {
        '["a",10000]': {"v": 1, "start": 10_000},
        '["a",11000]': {"v": 2, "start": 11_000},
    }
    assert list(op.on_timer(11_500)) == [pane("a", 10_000, 1)]
    assert list(op.on_timer(12_000)) == [pane("a", 11_000, 2)]


def test_keyed_tumbling_window_folds_each_key_apart_and_fires_in_fire_time_order(ctx):
    op = keyed_tumbling()
    op.init(ctx)
    feed(op, ctx, 1_500, "b", "a", "b")
    feed(op, ctx, 2_100, "c")
    feed(op, ctx, 2_200, "a")
    assert list(op.on_timer(5_000)) == [
        pane("b", 1_000, 2),
        pane("a", 1_000, 1),
        pane("c", 2_000, 1),
        pane("a", 2_000, 1),
    ]


def test_unkeyed_tumbling_window_folds_every_message_into_one_pane(ctx):
    op = op_of(Windows.tumbling_window(SECOND, list, lambda m, acc: [*acc, m]))
    op.init(ctx)
    ctx.now = 3_100
    for m in ("x", "y", "z"):
        op.process(m)
    assert list(op.on_timer(4_000)) == [WindowPane(WindowKey(None, "3000"), ["x", "y", "z"])]


def test_session_window_is_extended_by_each_message_within_the_gap(ctx):
    op = keyed_session()
    op.init(ctx)
    feed(op, ctx, 0, "a")
    feed(op, ctx, 800, "a")
    assert list(op.on_timer(1_000)) == []  # the first message's gap passed, the session's did not
    feed(op, ctx, 1_500, "a")
    assert list(op.on_timer(2_499)) == []
    assert list(op.on_timer(2_500)) == [pane("a", 0, 3)]
    assert ctx.contents(OP) == {}
    assert list(op.on_timer(10_000)) == []


def test_session_windows_of_different_keys_close_apart(ctx):
    op = keyed_session()
    op.init(ctx)
    feed(op, ctx, 0, "a", "b")
    feed(op, ctx, 700, "b")
    assert list(op.on_timer(1_000)) == [pane("a", 0, 1)]
    assert list(op.on_timer(1_700)) == [pane("b", 0, 2)]


def test_a_message_after_the_gap_closes_the_session_the_timer_has_not_fired_yet(ctx):
    op = keyed_session()
    op.init(ctx)
    feed(op, ctx, 0, "a", "a")
    assert feed(op, ctx, 1_000, "a") == [pane("a", 0, 2)]
    op.flush()
    assert ctx.contents(OP) == {'["a"]': {"v": 1, "start": 1_000, "last": 1_000}}
    # The closed session's trigger finds a newer session and does not fire it early, nor again.
    assert list(op.on_timer(1_500)) == []
    assert list(op.on_timer(2_000)) == [pane("a", 1_000, 1)]


def test_end_of_stream_emits_every_open_tumbling_window_once_and_deletes_the_state(ctx):
    op = keyed_tumbling()
    op.init(ctx)
    feed(op, ctx, 1_200, "a", "b")
    feed(op, ctx, 2_300, "a")
    assert list(op.on_end_of_stream()) == [pane("a", 1_000, 1), pane("b", 1_000, 1), pane("a", 2_000, 1)]
    assert ctx.contents(OP) == {}
    assert list(op.on_timer(100_000)) == []


def test_end_of_stream_emits_every_open_session_once_and_deletes_the_state(ctx):
    op = keyed_session()
    op.init(ctx)
    feed(op, ctx, 1_200, "a", "b")
    feed(op, ctx, 1_900, "a")
    assert list(op.on_end_of_stream()) == [pane("b", 1_200, 1), pane("a", 1_200, 2)]  # b's gap ends first
    assert ctx.contents(OP) == {}
    assert list(op.on_timer(100_000)) == []


def test_tumbling_triggers_are_rebuilt_from_the_store_at_init(ctx):
    op = keyed_tumbling()
    op.init(ctx)
    feed(op, ctx, 1_500, "a", "a")
    feed(op, ctx, 2_500, "b")
    op.flush()  # the task commits: its windows go to the store first
    ctx = ctx.restart()  # the job stops; both windows' ends pass while it is down
    ctx.now = 3_100
    again = keyed_tumbling()
    again.init(ctx)
    feed(again, ctx, 3_100, "c")
    assert list(again.on_timer(3_100)) == [pane("a", 1_000, 2), pane("b", 2_000, 1)]
    assert list(again.on_timer(4_000)) == [pane("c", 3_000, 1)]
    assert ctx.contents(OP) == {}


def test_a_restarted_tumbling_window_folds_on_from_its_stored_value(ctx):
    op = keyed_tumbling()
    op.init(ctx)
    feed(op, ctx, 1_100, "a", "a")
    op.flush()  # the task commits: its windows go to the store first
    ctx = ctx.restart()
    again = keyed_tumbling()
    again.init(ctx)
    feed(again, ctx, 1_900, "a")
    assert list(again.on_timer(2_000)) == [pane("a", 1_000, 3)]


def test_a_restarted_session_closes_a_gap_after_its_last_stored_message(ctx):
    op = keyed_session()
    op.init(ctx)
    feed(op, ctx, 0, "a")
    feed(op, ctx, 600, "a")
    op.flush()  # the task commits: its windows go to the store first
    ctx = ctx.restart()
    again = keyed_session()
    again.init(ctx)
    assert list(again.on_timer(1_599)) == []
    assert list(again.on_timer(1_600)) == [pane("a", 0, 2)]


def test_a_store_of_another_kind_of_window_is_refused_at_init(ctx):
    op = keyed_tumbling()
    op.init(ctx)
    feed(op, ctx, 1_000, "a")
    op.flush()  # the task commits: its windows go to the store first
    ctx = ctx.restart()
    session = keyed_session()
    with pytest.raises(ValueError, match="is not a session window's"):
        session.init(ctx)


def test_windows_wait_in_memory_until_the_commit_and_a_crash_before_it_loses_only_those(ctx):
    op = keyed_tumbling()
    op.init(ctx)
    feed(op, ctx, 1_100, "a", "a")
    op.flush()
    feed(op, ctx, 1_200, "a")  # after the commit: not in the store
    ctx = ctx.restart()  # a crash: the store as committed
    again = keyed_tumbling()
    again.init(ctx)
    assert list(again.on_timer(2_000)) == [pane("a", 1_000, 2)]  # the replay folds the third again


def test_more_dirty_windows_than_the_limit_are_written_without_a_commit(ctx, monkeypatch):
    monkeypatch.setattr(window_module, "DIRTY_LIMIT", 3)
    op = keyed_tumbling()
    op.init(ctx)
    feed(op, ctx, 1_000, "a", "b", "c")
    assert ctx.contents(OP) == {}
    feed(op, ctx, 1_000, "d")
    assert len(ctx.contents(OP)) == 4
