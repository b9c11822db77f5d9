"""Windows and joins in whole applications, run by TestRunner: the real container, in-memory streams,
intermediate streams, LMDB stores and end of stream through the graph. Inputs are bounded, so each
test's outcome is what the windows emit at end of stream (and on any timer on the way); assertions
hold whatever the order between partitions or the wall clock."""

from __future__ import annotations

import random
from collections import Counter
from datetime import timedelta

from samzamp import KV, StreamApplication, Windows
from samzamp.testing import TestRunner

HOUR = timedelta(hours=1)
HOUR_MS = 3_600_000


def _lines(seed: int, words: int, vocabulary: int) -> tuple[list[str], Counter[str]]:
    rnd = random.Random(seed)
    drawn = [f"w{rnd.randrange(vocabulary)}" for _ in range(words)]
    return [" ".join(drawn[i : i + 7]) for i in range(0, words, 7)], Counter(drawn)


def _pane_record(pane):
    return [pane.key.key, pane.key.pane_id, pane.message]


class WordCount(StreamApplication):
    def describe(self, app):
        counts = app.output_stream("counts")
        (
            app.input_stream("lines")
            .flat_map(str.split)
            .partition_by(lambda w: w, lambda w: 1, id="by-word")
            .window(
                Windows.keyed_tumbling_window(lambda kv: kv.key, HOUR, lambda: 0, lambda kv, n: n + kv.value),
                id="count",
            )
            .map(_pane_record)
            .send_to(counts)
        )


def test_word_count_over_a_keyed_tumbling_window_is_exact_per_word():
    lines, expected = _lines(seed=7, words=2_000, vocabulary=120)
    result = TestRunner.from_app(WordCount).add_input("lines", lines, partitions=4).run(timeout_s=60)
    panes = result.messages("counts")
    # A run that crosses an hour boundary splits a word over two panes: sum them; a pane never repeats.
    assert len({(w, pane_id) for w, pane_id, _n in panes}) == len(panes)
    assert all(int(pane_id) % HOUR_MS == 0 for _w, pane_id, _n in panes)
    got: Counter[str] = Counter()
    for word, _pane_id, n in panes:
        got[word] += n
    assert got == expected
    # Every word's pane came from the task of its partition of the intermediate stream, and the
    # window left no state behind (end of stream deleted what it emitted).
    assert result.store("test-runner-1-window-count") == {}


class FastWordCount(StreamApplication):
    """Word count over 5 ms windows: task.window.ms becomes 5, so windows also fire on the timer mid-run."""

    def describe(self, app):
        (
            app.input_stream("lines")
            .flat_map(str.split)
            .partition_by(lambda w: w, lambda w: 1, id="by-word")
            .window(
                Windows.keyed_tumbling_window(
                    lambda kv: kv.key, timedelta(milliseconds=5), lambda: 0, lambda kv, n: n + kv.value
                ),
                id="count",
            )
            .map(_pane_record)
            .send_to(app.output_stream("counts"))
        )


def test_word_count_stays_exact_when_windows_fire_on_the_timer_as_well_as_at_end_of_stream():
    lines, expected = _lines(seed=11, words=3_000, vocabulary=40)
    result = TestRunner.from_app(FastWordCount).add_input("lines", lines, partitions=4).run(timeout_s=60)
    panes = result.messages("counts")
    assert len({(w, pane_id) for w, pane_id, _n in panes}) == len(panes)  # a window fires once
    got: Counter[str] = Counter()
    for word, _pane_id, n in panes:
        got[word] += n
    assert got == expected


class Total(StreamApplication):
    def describe(self, app):
        app.input_stream("lines").flat_map(str.split).window(
            Windows.tumbling_window(HOUR, lambda: 0, lambda w, n: n + 1), id="total"
        ).map(_pane_record).send_to(app.output_stream("totals"))


def test_an_unkeyed_tumbling_window_folds_every_message_of_its_task():
    lines, expected = _lines(seed=8, words=700, vocabulary=30)
    result = TestRunner.from_app(Total).add_input("lines", lines, partitions=2).run(timeout_s=60)
    panes = result.messages("totals")
    assert {key for key, _pane_id, _n in panes} == {None}
    assert sum(n for _k, _pane_id, n in panes) == sum(expected.values())
    assert len({pane_id for _k, pane_id, _n in panes}) <= 2 * 2  # per task, an hour boundary at most


class Sessions(StreamApplication):
    def describe(self, app):
        (
            app.input_stream("lines")
            .flat_map(str.split)
            .partition_by(lambda w: w, lambda w: 1, id="by-word")
            .window(
                Windows.keyed_session_window(lambda kv: kv.key, HOUR, lambda: 0, lambda kv, n: n + kv.value),
                id="sessions",
            )
            .map(_pane_record)
            .send_to(app.output_stream("sessions"))
        )


def test_a_keyed_session_window_with_an_hour_gap_fires_once_per_word_at_end_of_stream():
    lines, expected = _lines(seed=9, words=1_000, vocabulary=60)
    result = TestRunner.from_app(Sessions).add_input("lines", lines, partitions=4).run(timeout_s=60)
    panes = result.messages("sessions")
    # No gap of an hour in a run: one session per word, holding all of its messages.
    assert sorted(w for w, _pane_id, _n in panes) == sorted(expected)
    assert {w: n for w, _pane_id, n in panes} == dict(expected)


class Enrich(StreamApplication):
    """Profiles fill the table; clicks are joined with it."""

    def describe(self, app):
        users = app.table("users")
        app.input_stream("profiles", key_serde="msgpack").send_to(users)
        app.input_stream("clicks", key_serde="msgpack").join(users, lambda page, name: [name, page]).send_to(
            app.output_stream("enriched")
        )


def test_stream_table_join_reads_a_table_filled_by_another_stream(tmp_path):
    # In one run the order between the profiles and the clicks is not defined, so the table is
    # filled by a first run and read by a second, over the same store directory.
    config = {"job.logged.store.base.dir": str(tmp_path), "job.non-logged.store.base.dir": str(tmp_path)}
    users = {f"u{i}": f"name{i}" for i in range(40)}
    TestRunner.from_app(Enrich, config).add_input("profiles", list(users.values()), keys=list(users), partitions=3).run(
        timeout_s=60
    ).close()
    clicks = [(f"u{i % 50}", f"/page{i}") for i in range(200)]  # u40..u49 have no profile
    result = (
        TestRunner.from_app(Enrich, config)
        .add_input("clicks", [p for _u, p in clicks], keys=[u for u, _p in clicks], partitions=3)
        .run(timeout_s=60)
    )
    assert sorted(result.messages("enriched")) == sorted([users[u], p] for u, p in clicks if u in users)
    dropped = sum(
        n
        for group, metrics in result.metrics.items()
        if group.startswith("TaskName-")
        for name, n in metrics.items()
        if name == "join-dropped-messages"
    )
    assert dropped == sum(1 for u, _p in clicks if u not in users)


class Events(StreamApplication):
    """One stream of profile and click events: within a partition they are handled in order."""

    def describe(self, app):
        users = app.table("users")
        events = app.input_stream("events", key_serde="msgpack")
        events.filter(lambda kv: kv.value[0] == "profile").map(lambda kv: KV(kv.key, kv.value[1])).send_to(users)
        events.filter(lambda kv: kv.value[0] == "click").map(lambda kv: KV(kv.key, kv.value[1])).join(
            users, lambda page, name: [name, page]
        ).send_to(app.output_stream("enriched"))


def test_stream_table_join_sees_the_records_written_before_in_the_same_partition():
    # A key's events are in one partition, in order: a click joins the profile written before it.
    events = [
        ("a", ["click", "/early"]),  # no profile yet: dropped
        ("a", ["profile", "Ann"]),
        ("b", ["profile", "Bob"]),
        ("a", ["click", "/1"]),
        ("b", ["click", "/2"]),
        ("a", ["profile", "Anne"]),
        ("a", ["click", "/3"]),
    ]
    result = (
        TestRunner.from_app(Events)
        .add_input("events", [e for _k, e in events], keys=[k for k, _e in events], partitions=2)
        .run(timeout_s=60)
    )
    assert sorted(result.messages("enriched")) == [["Ann", "/1"], ["Anne", "/3"], ["Bob", "/2"]]


class Payments(StreamApplication):
    def describe(self, app):
        orders = app.input_stream("orders", key_serde="msgpack")
        payments = app.input_stream("payments", key_serde="msgpack")
        orders.join(payments, lambda order, paid: [order, paid], ttl=HOUR, id="paid").send_to(app.output_stream("paid"))


def test_stream_stream_join_pairs_each_order_with_its_payment_once():
    n = 300
    orders = [f"order{i}" for i in range(n)]
    payments = [i * 10 for i in range(n)]
    keys = [f"k{i}" for i in range(n)]
    unpaid = [f"lone{i}" for i in range(20)]
    result = (
        TestRunner.from_app(Payments)
        .add_input("orders", orders + unpaid, keys=keys + [f"u{i}" for i in range(20)], partitions=3)
        .add_input("payments", payments, keys=keys, partitions=3)
        .run(timeout_s=60)
    )
    # Whichever side of a key comes second joins the first: once per pair, the order's value first.
    assert sorted(result.messages("paid")) == sorted([o, p] for o, p in zip(orders, payments, strict=True))
