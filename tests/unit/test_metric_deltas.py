"""Metrics counted in one registry and added to another (``samzamp.metrics.deltas``): each gain is
added exactly once, counters never go down where they are added, timers merge count, total and max,
and a gauge goes across when its value changed."""

from __future__ import annotations

from samzamp.dispatch.process import frames as f
from samzamp.metrics.deltas import DeltaTracker, MetricDeltas, apply_deltas
from samzamp.metrics.registry import MetricsRegistry

G = "TaskName-Partition 0"


def _sent(deltas: MetricDeltas) -> MetricDeltas:
    """``deltas`` as the loop decodes them from a worker's ``Metrics`` frame."""
    frame = f.decode_from_worker(f.encode(f.Metrics(deltas)))
    assert isinstance(frame, f.Metrics)
    return frame.deltas


def test_counters_add_up_to_what_every_sender_counted_and_each_take_only_once() -> None:
    container = MetricsRegistry()
    workers = [MetricsRegistry(), MetricsRegistry()]
    trackers = [DeltaTracker(w) for w in workers]
    totals = [0, 0]
    for step in range(5):
        for i, w in enumerate(workers):
            w.counter(G, "send-calls").count += step + i
            w.counter("SystemProducersMetrics", "serialization error").count += 1
            totals[i] += step + i
            apply_deltas(container, _sent(trackers[i].take()))
        apply_deltas(container, _sent(trackers[0].take()))  # nothing new: adds nothing
    snap = container.snapshot()
    assert snap[G]["send-calls"] == sum(totals)
    assert snap["SystemProducersMetrics"]["serialization error"] == 10


def test_a_counter_set_back_by_hand_never_takes_the_sum_down_nor_counts_twice() -> None:
    worker, container = MetricsRegistry(), MetricsRegistry()
    tracker = DeltaTracker(worker)
    c = worker.counter(G, "n")
    c.count = 10
    apply_deltas(container, tracker.take())
    c.count = 4  # set back: the sum stays at 10
    apply_deltas(container, tracker.take())
    assert container.counter(G, "n").count == 10
    c.count = 12  # past where it was: only the 2 above 10 are new
    apply_deltas(container, tracker.take())
    assert container.counter(G, "n").count == 12


def test_timers_merge_count_total_and_max() -> None:
    worker, container = MetricsRegistry(), MetricsRegistry()
    container.timer("OperatorImpl", "op-handle-message-ns").update(50)
    tracker = DeltaTracker(worker)
    t = worker.timer("OperatorImpl", "op-handle-message-ns")
    t.update(10)
    t.update(30)
    apply_deltas(container, _sent(tracker.take()))
    t.update(20)
    apply_deltas(container, _sent(tracker.take()))
    merged = container.timer("OperatorImpl", "op-handle-message-ns")
    assert (merged.count, merged.total_ns, merged.max_ns) == (4, 110, 50)
    t.update(70)
    apply_deltas(container, _sent(tracker.take()))
    assert (merged.count, merged.total_ns, merged.max_ns) == (5, 180, 70)


def test_a_gauge_goes_across_when_its_value_changed_and_as_plain_values() -> None:
    worker, container = MetricsRegistry(), MetricsRegistry()
    tracker = DeltaTracker(worker)
    size = [3]
    worker.gauge(G, "cache-size", fn=lambda: size[0])
    worker.gauge(G, "odd").set(complex(1, 2))  # no msgpack form: its str() goes
    worker.gauge(G, "huge").set(1 << 70)
    first = _sent(tracker.take())
    assert {name for _, name, _ in first.gauges} == {"cache-size", "odd", "huge"}
    apply_deltas(container, first)
    assert container.snapshot()[G]["cache-size"] == 3
    assert container.snapshot()[G]["odd"] == "(1+2j)"
    assert container.snapshot()[G]["huge"] == float(1 << 70)
    assert not tracker.take()  # nothing changed: nothing to send
    size[0] = 5
    second = tracker.take()
    assert second.gauges == [(G, "cache-size", 5)]
    apply_deltas(container, second)
    assert container.snapshot()[G]["cache-size"] == 5


def test_a_name_of_another_kind_in_the_receiver_is_skipped_not_fatal() -> None:
    worker, container = MetricsRegistry(), MetricsRegistry()
    container.gauge(G, "x").set("kept")
    worker.counter(G, "x").count = 3
    worker.counter(G, "y").count = 1
    apply_deltas(container, DeltaTracker(worker).take())
    assert container.snapshot()[G] == {"x": "kept", "y": 1}


def test_forgetting_one_group_among_many_leaves_the_others_as_they_were() -> None:
    worker = MetricsRegistry()
    tracker = DeltaTracker(worker)
    groups = [f"TaskName-Partition {p}" for p in range(50)]
    for i, g in enumerate(groups):
        worker.counter(g, "send-calls").count += i + 1
        worker.timer(g, "process-ns").update(10 * (i + 1))
        worker.gauge(g, "worker").set(0)
    tracker.take()
    gone = groups[::2]
    for g in gone:  # the worker's tasks leave one by one
        worker.remove(g)
        tracker.forget(g)
    for g in groups:  # the ones that stayed count on; the ones that left come back from zero
        worker.counter(g, "send-calls").count += 1
        worker.timer(g, "process-ns").update(5)
        worker.gauge(g, "worker").set(0)
    deltas = tracker.take()
    assert sorted(deltas.counters) == sorted((g, "send-calls", 1) for g in groups)
    assert sorted((g, n, c, t) for g, n, c, t, _ in deltas.timers) == sorted((g, "process-ns", 1, 5) for g in groups)
    assert sorted(deltas.gauges) == sorted((g, "worker", 0) for g in gone)  # unchanged where it stayed
