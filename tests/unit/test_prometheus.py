"""The Prometheus endpoint without a container: the names every registry metric gets (each shape
the code registers, and what it may register later), the text a scrape gives, parsed back with
prometheus_client's own parser, the HTTP server's routes, and the config keys."""

from __future__ import annotations

import json
import re
import socket
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from samzamp.api.errors import ConfigError
from samzamp.config import Config, validate
from samzamp.extras import PROMETHEUS, Extra
from samzamp.metrics.prometheus.collector import RegistryCollector
from samzamp.metrics.prometheus.names import Namer, snake
from samzamp.metrics.prometheus.server import MetricsServer
from samzamp.metrics.registry import MetricsRegistry

NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
LABEL = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
CONST = {"job": "wc", "job_id": "1", "processor": "0"}
STREAMS = [("kafka", "lines"), ("kafka", "click-events-2"), ("my-sys", "in")]


def _every_shape() -> MetricsRegistry:
    """A registry with every group and name the code registers (samzamp/: .counter(, .gauge(,
    .timer(), with dashed stream names, key buckets and stores, then what a user or a later
    change may add."""
    m = MetricsRegistry()
    c = "SamzaContainerMetrics"
    for name in ("process-envelopes", "window-calls", "commit-calls"):
        m.counter(c, name).inc(3)
    for name in ("process-ns", "window-ns", "commit-ns"):
        t = m.timer(c, name)
        t.update(2_000_000)
        t.update(4_000_000)
    m.gauge(c, "event-loop-utilization", fn=lambda: 0.25)
    m.gauge(c, "task-count", fn=lambda: 2)
    m.gauge(c, "container-startup-time").set(1.5)
    m.gauge(c, "run-id").set("1700000000000-abcd")
    m.gauge(c, "drain-started-ms").set(1_700_000_000_000)
    m.gauge(c, "drain-buffered-messages").set(7)
    for task in ("Partition 0", "SystemStreamPartition [kafka, click-events-2, 1, 3]_4"):
        g = f"TaskName-{task}"
        for name in (
            "process-calls",
            "messages-actually-processed",
            "window-calls",
            "commit-calls",
            "send-calls",
            "drain-messages-received",
            "eos-messages-received",
            "foreign-drain-messages",
            "join-dropped-messages",
        ):
            m.counter(g, name).inc(5)
        m.gauge(g, "messages-in-flight", fn=lambda: 1)
        m.gauge(g, "pending-messages", fn=lambda: 0)
        m.gauge(g, "skipped-envelopes", fn=lambda: 2)
        m.gauge(g, "worker", fn=lambda: 1)
        m.gauge(g, "drain-ms").set(1500)
        m.gauge(g, "counts-restored-records").set(1000)
        m.gauge(g, "counts-reverted-records").set(3)
        m.gauge(g, "my-store-2-restored-records").set(10)
    m.gauge("TaskName-Partition 0", "kafka-lines-0-offset", fn=lambda: 41)
    m.gauge("TaskName-SystemStreamPartition [kafka, click-events-2, 1, 3]_4", "kafka-click-events-2-1-3-offset").set(9)
    co = "SystemConsumersMetrics"
    for name in ("chose-object", "polls", "skipped-envelopes", "deserialization error"):
        m.counter(co, name).inc()
    m.timer(co, "keyhash-ns").update(1000)
    m.gauge(co, "unprocessed-messages", fn=lambda: 12)
    m.gauge(co, "ssps-needed-by-chooser", fn=lambda: 1)
    m.gauge(co, "kafka-lines-0-messages-behind-high-watermark", fn=lambda: 0)
    m.gauge(co, "kafka-click-events-2-1-3-messages-behind-high-watermark", fn=lambda: 4)
    m.gauge(co, "my-sys-in-7-messages-behind-high-watermark", fn=lambda: 5)
    m.gauge("OffsetManagerMetrics", "kafka-lines-0-checkpointed-offset", fn=lambda: 40)
    m.gauge("OffsetManagerMetrics", "kafka-click-events-2-1-3-checkpointed-offset", fn=lambda: None)  # none yet
    m.counter("SystemProducersMetrics", "serialization error")
    m.counter("SystemProducersMetrics", "producer-send-failed")
    for i in (0, 1):
        w = f"WorkerPool-{i}"
        for name in ("pid", "ring-to-worker-bytes-used", "ring-from-worker-bytes-used", "outbox-frames", "rss-bytes"):
            m.gauge(w, name, fn=lambda: 100)
        m.gauge(w, "messages-processed", fn=lambda: 10)
        m.gauge(w, "busy-ns", fn=lambda: 3_000_000_000)
    zk = "ZkJobCoordinatorMetrics"
    m.gauge(zk, "job-model-version").set(3)
    m.counter(zk, "rebalances").inc(3)
    m.gauge(zk, "is-leader").set(True)
    m.gauge(zk, "last-rebalance-pause-ms").set(250)
    m.counter("OperatorImpl", "map-1-messages").inc(4)
    m.timer("OperatorImpl", "map-1-handle-message-ns").update(1000)
    m.timer("OperatorImpl", "window-2-handle-timer-ns").update(1000)
    return m


def _add_unknown(m: MetricsRegistry) -> None:
    """What the table does not name: user metrics of a task, a group added later, odd values."""
    g = "TaskName-Partition 0"
    m.counter(g, "my-events").inc(2)
    m.counter(g, "bytes_total").inc(8)
    m.timer(g, "lookup").update(5000)
    m.gauge(g, "model-version").set("v2")
    m.gauge(g, "ratio", fn=lambda: 0.5)
    m.gauge(g, "broken", fn=lambda: 1 / 0)  # its function raises: no sample, the scrape goes on
    m.gauge(g, "nothing-yet").set(None)
    m.gauge(g, "a dict").set({"a": 1})  # neither number nor text: no sample
    m.counter("FutureThingMetrics", "made-things").inc()
    m.counter("Future-Group-7", "made things").inc()
    m.gauge("9 odd//group", "ünïcode näme").set(1)
    # Two registry names that snake-case alike: one series, the other left out with a warning.
    m.counter(g, "made things").inc()
    m.counter(g, "made-things").inc()
    # A gauge named like a counter's samples: left out rather than clash.
    m.gauge("FutureThingMetrics", "made-things-total").set(1)


def _scrape(m: MetricsRegistry, state: str | None = None) -> str:
    collector = RegistryCollector(
        m,
        Namer(STREAMS),
        lambda: CONST,
        (lambda: state) if state is not None else None,
        ["starting", "running", "stopping"],
    )
    registry = CollectorRegistry()
    registry.register(collector)
    return generate_latest(registry).decode()


def _series(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a scrape by (name, labels), parsed with prometheus_client's parser; checks
    that each name and label is valid, and that no series comes twice."""
    out: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in text_string_to_metric_families(text):
        assert NAME.match(family.name), family.name
        for s in family.samples:
            assert NAME.match(s.name), s.name
            assert all(LABEL.match(k) and not k.startswith("__") for k in s.labels), s.labels
            key = (s.name, tuple(sorted(s.labels.items())))
            assert key not in out, f"series twice: {key}"
            out[key] = s.value
    return out


def _value(series: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str) -> float:
    return series[(name, tuple(sorted({**CONST, **labels}.items())))]


def test_every_name_the_code_registers_maps_to_its_prometheus_series() -> None:
    s = _series(_scrape(_every_shape()))
    assert _value(s, "samza_container_process_envelopes_total") == 3
    assert _value(s, "samza_container_commit_calls_total") == 3
    assert _value(s, "samza_container_process_seconds_count") == 2
    assert _value(s, "samza_container_process_seconds_sum") == pytest.approx(0.006)
    assert _value(s, "samza_container_process_max_seconds") == pytest.approx(0.004)
    assert _value(s, "samza_container_window_seconds_count") == 2
    assert _value(s, "samza_container_event_loop_utilization") == 0.25
    assert _value(s, "samza_container_task_count") == 2
    assert _value(s, "samza_container_startup_seconds") == 1.5
    assert _value(s, "samza_container_info", run_id="1700000000000-abcd") == 1
    assert _value(s, "samza_container_drain_started_timestamp_seconds") == 1_700_000_000
    assert _value(s, "samza_container_drain_buffered_messages") == 7
    for task in ("Partition 0", "SystemStreamPartition [kafka, click-events-2, 1, 3]_4"):
        for name in (
            "process_calls",
            "messages_actually_processed",
            "window_calls",
            "commit_calls",
            "send_calls",
            "drain_messages_received",
            "eos_messages_received",
            "foreign_drain_messages",
            "join_dropped_messages",
        ):
            assert _value(s, f"samza_task_{name}_total", task=task) == 5
        assert _value(s, "samza_task_skipped_envelopes_total", task=task) == 2
        assert _value(s, "samza_task_messages_in_flight", task=task) == 1
        assert _value(s, "samza_task_pending_messages", task=task) == 0
        assert _value(s, "samza_task_worker", task=task) == 1
        assert _value(s, "samza_task_drain_seconds", task=task) == 1.5
        assert _value(s, "samza_task_store_restored_records", task=task, store="counts") == 1000
        assert _value(s, "samza_task_store_reverted_records", task=task, store="counts") == 3
        assert _value(s, "samza_task_store_restored_records", task=task, store="my-store-2") == 10
    lines = {"system": "kafka", "stream": "lines", "partition": "0"}
    bucket = {"system": "kafka", "stream": "click-events-2", "partition": "1", "key_bucket": "3"}
    assert _value(s, "samza_task_offset", task="Partition 0", **lines) == 41
    assert _value(s, "samza_task_offset", task="SystemStreamPartition [kafka, click-events-2, 1, 3]_4", **bucket) == 9
    assert _value(s, "samza_consumer_messages_behind_high_watermark", **lines) == 0
    assert _value(s, "samza_consumer_messages_behind_high_watermark", **bucket) == 4
    dashed_system = {"system": "my-sys", "stream": "in", "partition": "7"}
    assert _value(s, "samza_consumer_messages_behind_high_watermark", **dashed_system) == 5
    assert _value(s, "samza_offset_manager_checkpointed_offset", **lines) == 40
    assert not [k for k in s if k[0] == "samza_offset_manager_checkpointed_offset" and ("key_bucket", "3") in k[1]]
    for name in ("chose_object", "polls", "skipped_envelopes", "deserialization_errors"):
        assert _value(s, f"samza_consumer_{name}_total") == 1
    assert _value(s, "samza_consumer_keyhash_seconds_count") == 1
    assert _value(s, "samza_consumer_keyhash_max_seconds") == pytest.approx(1e-6)
    assert _value(s, "samza_consumer_unprocessed_messages") == 12
    assert _value(s, "samza_consumer_ssps_needed_by_chooser") == 1
    assert _value(s, "samza_producer_serialization_errors_total") == 0
    assert _value(s, "samza_producer_send_failed_total") == 0
    for w in ("0", "1"):
        for name in ("pid", "ring_to_worker_bytes", "ring_from_worker_bytes", "outbox_frames", "rss_bytes"):
            assert _value(s, f"samza_worker_{name}", worker=w) == 100
        assert _value(s, "samza_worker_messages_processed_total", worker=w) == 10
        assert _value(s, "samza_worker_busy_seconds_total", worker=w) == 3
    assert _value(s, "samza_zk_coordinator_job_model_version") == 3
    assert _value(s, "samza_zk_coordinator_rebalances_total") == 3
    assert _value(s, "samza_zk_coordinator_is_leader") == 1
    assert _value(s, "samza_zk_coordinator_last_rebalance_pause_seconds") == 0.25
    assert _value(s, "samza_operator_messages_total", op="map-1") == 4
    assert _value(s, "samza_operator_handle_message_seconds_count", op="map-1") == 1
    assert _value(s, "samza_operator_handle_timer_max_seconds", op="window-2") == pytest.approx(1e-6)
    # Nothing fell through to the generic names: every family is one of the table's.
    families = {f.name for f in text_string_to_metric_families(_scrape(_every_shape()))}
    assert not [f for f in families if "group" in f or f.endswith(("_ns", "_ms"))], families


def test_the_types_in_the_text_format() -> None:
    types = {f.name: f.type for f in text_string_to_metric_families(_scrape(_every_shape()))}
    assert types["samza_task_process_calls"] == "counter"
    assert types["samza_task_skipped_envelopes"] == "counter"  # a gauge in the registry, a count in fact
    assert types["samza_worker_busy_seconds"] == "counter"
    assert types["samza_container_process_seconds"] == "summary"
    assert types["samza_container_process_max_seconds"] == "gauge"
    assert types["samza_consumer_messages_behind_high_watermark"] == "gauge"
    assert types["samza_container_info"] == "gauge"


def test_what_the_table_does_not_name_still_exports_valid_and_once(caplog: pytest.LogCaptureFixture) -> None:
    m = _every_shape()
    _add_unknown(m)
    s = _series(_scrape(m))
    task = {"task": "Partition 0"}
    assert _value(s, "samza_task_my_events_total", **task) == 2
    assert _value(s, "samza_task_bytes_total", **task) == 8  # no _total_total
    assert _value(s, "samza_task_lookup_seconds_count", **task) == 1
    assert _value(s, "samza_task_lookup_max_seconds", **task) == pytest.approx(5e-6)
    assert _value(s, "samza_task_info", model_version="v2", **task) == 1
    assert _value(s, "samza_task_ratio", **task) == 0.5
    assert not [k for k in s if k[0] in ("samza_task_broken", "samza_task_nothing_yet", "samza_task_a_dict")]
    assert _value(s, "samza_future_thing_made_things_total") == 1
    assert _value(s, "samza_future_made_things_total", group="Future-Group-7") == 1
    assert _value(s, "samza_9_odd_group_n_code_n_me") == 1
    made = [k for k in s if k[0] == "samza_task_made_things_total"]
    assert len(made) == 1
    assert not [k for k in s if k[0] == "samza_future_thing_made_things_total_total"]
    assert "prometheus: left out TaskName-Partition 0 'made-things': the series" in caplog.text
    assert "prometheus: left out FutureThingMetrics 'made-things-total': samza_future_thing_made_things_total" in (
        caplog.text
    )
    # Each problem is logged once, not at every scrape.
    caplog.clear()
    collector = RegistryCollector(m, Namer(STREAMS), lambda: CONST)
    list(collector.collect())
    warned = caplog.text.count("left out")
    list(collector.collect())
    assert caplog.text.count("left out") == warned


def test_every_series_carries_job_job_id_and_processor() -> None:
    for family in text_string_to_metric_families(_scrape(_every_shape(), state="running")):
        for sample in family.samples:
            assert {k: sample.labels[k] for k in CONST} == CONST, sample


def test_the_processor_state_is_one_of_a_stateset() -> None:
    s = _series(_scrape(MetricsRegistry(), state="running"))
    assert _value(s, "samza_processor_state", state="running") == 1
    assert _value(s, "samza_processor_state", state="starting") == 0
    assert _value(s, "samza_processor_state", state="stopping") == 0


def test_a_metric_that_leaves_the_registry_leaves_the_scrape() -> None:
    m = _every_shape()
    assert ("samza_task_send_calls_total", tuple(sorted({**CONST, "task": "Partition 0"}.items()))) in _series(
        _scrape(m)
    )
    m.remove("TaskName-Partition 0")
    assert not [k for k in _series(_scrape(m)) if ("task", "Partition 0") in k[1]]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("SamzaContainerMetrics", "samza_container_metrics"),
        ("deserialization error", "deserialization_error"),
        ("process-ns", "process_ns"),
        ("HTTPRequests", "http_requests"),
        ("--", "unnamed"),
    ],
)
def test_snake(text: str, expected: str) -> None:
    assert snake(text) == expected


# -- the HTTP server -----------------------------------------------------------------------------


@pytest.fixture
def served() -> Iterator[tuple[MetricsServer, dict[str, Any]]]:
    health: dict[str, Any] = {"state": "starting", "ready": False}
    m = MetricsRegistry()
    m.counter("TaskName-Partition 0", "process-calls").inc(7)
    collector = RegistryCollector(m, Namer(), lambda: CONST)
    server = MetricsServer("127.0.0.1", 0, collector, lambda: (health["state"], health["ready"]))
    server.start()
    try:
        yield server, health
    finally:
        server.stop()


def _get(url: str) -> tuple[int, str, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, r.headers.get("Content-Type", ""), r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Content-Type", ""), e.read().decode()


def test_the_server_serves_metrics_and_health(served: tuple[MetricsServer, dict[str, Any]]) -> None:
    server, health = served
    assert server.port > 0
    assert server.url == f"http://127.0.0.1:{server.port}/metrics"
    status, _, text = _get(server.url)
    assert status == 200
    assert _value(_series(text), "samza_task_process_calls_total", task="Partition 0") == 7
    base = server.url.removesuffix("/metrics")
    status, kind, body = _get(f"{base}/healthz")
    assert (status, kind, body) == (503, "application/json", '{"state": "starting"}\n')
    health.update(state="running", ready=True)
    status, _, body = _get(f"{base}/healthz")
    assert (status, json.loads(body)) == (200, {"state": "running"})
    assert body.count("\n") == 1
    assert _get(f"{base}/")[0] == 404
    assert _get(f"{base}/metricsx")[0] == 404


def test_a_failing_health_check_answers_503(served: tuple[MetricsServer, dict[str, Any]]) -> None:
    server, _ = served
    server._health = lambda: (str(1 / 0), True)
    status, _, body = _get(server.url.removesuffix("/metrics") + "/healthz")
    assert status == 503
    assert json.loads(body)["state"].startswith("unknown (ZeroDivisionError")


def test_stop_closes_the_port() -> None:
    server = MetricsServer(
        "127.0.0.1", 0, RegistryCollector(MetricsRegistry(), Namer(), lambda: CONST), lambda: ("x", True)
    )
    server.start()
    port = server.port
    server.stop()
    with pytest.raises(ConnectionRefusedError), socket.create_connection(("127.0.0.1", port), timeout=5):
        pass


def test_a_port_in_use_raises() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        server = MetricsServer(
            "127.0.0.1",
            taken.getsockname()[1],
            RegistryCollector(MetricsRegistry(), Namer(), lambda: CONST),
            lambda: ("x", True),
        )
        with pytest.raises(OSError, match="in use"):
            server.start()


# -- config --------------------------------------------------------------------------------------

MINIMAL: dict[str, Any] = {
    "job.name": "wc",
    "task.class": "samzamp.examples.word_count:WordCountTask",
    "task.inputs": ["kafka.lines"],
    "systems.kafka.samza.factory": "kafka",
}


def test_the_endpoint_is_off_by_default() -> None:
    assert validate(Config(MINIMAL)).prometheus is None
    assert validate(Config({**MINIMAL, "metrics.prometheus.port": -1})).prometheus is None


def test_port_and_host() -> None:
    p = validate(Config({**MINIMAL, "metrics.prometheus.port": 0})).prometheus
    assert p is not None
    assert (p.host, p.port) == ("127.0.0.1", 0)
    p = validate(Config({**MINIMAL, "metrics.prometheus.port": 9404, "metrics.prometheus.host": "0.0.0.0"})).prometheus
    assert p is not None
    assert (p.host, p.port) == ("0.0.0.0", 9404)


@pytest.mark.parametrize("port", [-2, 65536, "x"])
def test_a_bad_port_names_the_key(port: object) -> None:
    with pytest.raises(ConfigError) as exc:
        validate(Config({**MINIMAL, "metrics.prometheus.port": port}))
    assert exc.value.key == "metrics.prometheus.port"


def test_without_prometheus_client_a_port_is_a_config_error_naming_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Extra, "installed", lambda self: self is not PROMETHEUS)
    assert validate(Config(MINIMAL)).prometheus is None  # off: the extra is not needed
    with pytest.raises(ConfigError) as exc:
        validate(Config({**MINIMAL, "metrics.prometheus.port": 0}))
    assert exc.value.key == "metrics.prometheus.port"
    assert "pip install 'samzamp[prometheus]'" in str(exc.value)


def test_an_empty_host_names_the_key() -> None:
    with pytest.raises(ConfigError) as exc:
        validate(Config({**MINIMAL, "metrics.prometheus.port": 0, "metrics.prometheus.host": ""}))
    assert exc.value.key == "metrics.prometheus.host"
