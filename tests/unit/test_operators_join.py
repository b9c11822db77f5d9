"""The join operators driven by hand: real LMDB stores (JSON serdes, as the planner configures them)
and a clock the test sets."""

from __future__ import annotations

import pytest
from fake_graph_context import FakeGraphContext

from samzamp.api.operators import KV, OperatorSpec, Table
from samzamp.operators.join import StreamStreamJoinOperator, StreamTableJoinOperator

OP = "job-1-join-j"
TTL = 1_000


def pair(left, right):
    return [left, right]


@pytest.fixture
def ctx(tmp_path):
    return FakeGraphContext(tmp_path, now=0)


@pytest.fixture
def join(ctx):
    op = StreamStreamJoinOperator(OperatorSpec(OP, "join", fn=pair, ttl_ms=TTL))
    op.init(ctx)
    return op


def at(ctx, now, side, key, value):
    ctx.now = now
    return list(side.process(KV(key, value)))


def test_a_message_joins_the_other_sides_latest_within_the_ttl_left_value_first(ctx, join):
    assert at(ctx, 0, join.left, "k", "L1") == []
    assert at(ctx, 500, join.right, "k", "R1") == [["L1", "R1"]]
    assert at(ctx, 600, join.left, "k", "L2") == [["L2", "R1"]]


def test_right_first_still_gives_the_left_value_first(ctx, join):
    assert at(ctx, 0, join.right, "k", "R1") == []
    assert at(ctx, 10, join.left, "k", "L1") == [["L1", "R1"]]


def test_each_side_keeps_only_the_latest_message_of_a_key(ctx, join):
    at(ctx, 0, join.left, "k", "L1")
    at(ctx, 100, join.left, "k", "L2")
    assert at(ctx, 200, join.right, "k", "R1") == [["L2", "R1"]]
    assert ctx.contents(f"{OP}-L") == {'"k"': ["L2", 100]}
    assert ctx.contents(f"{OP}-R") == {'"k"': ["R1", 200]}


def test_only_messages_of_the_same_key_join(ctx, join):
    at(ctx, 0, join.left, "a", "L")
    assert at(ctx, 1, join.right, "b", "R") == []


def test_a_message_older_than_the_ttl_does_not_join(ctx, join):
    at(ctx, 0, join.left, "early", "L")
    at(ctx, 0, join.left, "edge", "L")
    assert at(ctx, TTL - 1, join.right, "early", "R") == [["L", "R"]]  # ts > now - ttl
    assert at(ctx, TTL, join.right, "edge", "R") == []  # ts == now - ttl: expired


def test_purge_deletes_entries_older_than_the_ttl_from_both_sides(ctx, join):
    at(ctx, 0, join.left, "old", "L")
    at(ctx, 100, join.right, "old", "R")
    at(ctx, 900, join.right, "young", "R")
    assert list(join.on_timer(1_100)) == []
    assert ctx.contents(f"{OP}-L") == {}
    assert ctx.contents(f"{OP}-R") == {'"young"': ["R", 900]}
    # A purge scans both stores, so it runs at most once per ttl: "young" goes at the next one.
    join.on_timer(1_950)
    assert ctx.contents(f"{OP}-R") == {'"young"': ["R", 900]}
    join.on_timer(2_100)
    assert ctx.contents(f"{OP}-R") == {}


def test_the_first_timer_after_a_restart_purges_what_expired_while_down(ctx, join):
    at(ctx, 0, join.left, "k", "L")
    ctx = ctx.restart()
    again = StreamStreamJoinOperator(OperatorSpec(OP, "join", fn=pair, ttl_ms=TTL))
    again.init(ctx)
    assert ctx.contents(f"{OP}-L") == {'"k"': ["L", 0]}
    again.on_timer(5_000)
    assert ctx.contents(f"{OP}-L") == {}


def test_a_join_takes_kv_messages_with_a_key(ctx, join):
    with pytest.raises(TypeError, match=f"join '{OP}' takes KV"):
        join.left.process("not a kv")
    with pytest.raises(ValueError, match=f"join '{OP}': a message with a None key"):
        join.right.process(KV(None, 1))


# -- stream-table ---------------------------------------------------------------------------------
TABLE = Table("t", "job-1-table-t")


@pytest.fixture
def table_join(ctx):
    op = StreamTableJoinOperator(OperatorSpec("job-1-join-0", "join", fn=pair, table=TABLE))
    op.init(ctx)
    return op


def test_stream_table_join_gives_fn_of_the_value_and_the_record(ctx, table_join):
    ctx.store(TABLE.store).put("k", {"name": "kay"})
    assert list(table_join.process(KV("k", 7))) == [[7, {"name": "kay"}]]


def test_stream_table_join_drops_and_counts_a_message_with_no_record(ctx, table_join):
    ctx.store(TABLE.store).put("k", 1)
    assert list(table_join.process(KV("other", 7))) == []
    assert list(table_join.process(KV("gone", 8))) == []
    assert list(table_join.process(KV("k", 9))) == [[9, 1]]
    assert ctx.metrics.counter("TaskName-Partition 0", "join-dropped-messages").count == 2


def test_stream_table_join_sees_the_table_as_it_is_now(ctx, table_join):
    table = ctx.store(TABLE.store)
    assert list(table_join.process(KV("k", 1))) == []
    table.put("k", "v1")
    assert list(table_join.process(KV("k", 2))) == [[2, "v1"]]
    table.delete("k")
    assert list(table_join.process(KV("k", 3))) == []


def test_stream_table_join_takes_kv_messages(table_join):
    with pytest.raises(TypeError, match="join 'job-1-join-0' takes KV"):
        table_join.process(("k", 1))
