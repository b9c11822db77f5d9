"""Samza's snapshot reporter: one JSON message per source with Samza's header and group names, the
host's Java hash placing it, the blacklist leaving out exactly what it matches, a failed send
logged and counted but never raised; and the schedule's last report at stop."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import threading
from typing import Any

import pytest

from samzamp import InitableTask, StreamTask, TaskContext
from samzamp.metrics.registry import MetricsRegistry
from samzamp.metrics.reporting import LogReporter, MetricsReporter, Reporting
from samzamp.metrics.snapshot import (
    REPORTER_SOURCE,
    TASK_GROUP,
    SnapshotHeader,
    SnapshotReporter,
    host_partition,
    java_string_hash,
)
from samzamp.testing import TestRunner

HEADER = SnapshotHeader("wc", "1", "samza-container-0", "", "1.2.3", "samzamp-0.1.0", "host-a", 1000)
HEADER_FIELDS = {
    "job-name",
    "job-id",
    "container-name",
    "exec-env-container-id",
    "source",
    "version",
    "samza-version",
    "host",
    "time",
    "reset-time",
}


@pytest.mark.parametrize(
    ("text", "expected"),
    [("", 0), ("abc", 96354), ("localhost", -1204607085), ("é", 233), ("😀", 1772899)],
)
def test_java_string_hash_is_javas(text: str, expected: int) -> None:
    # The expected values are what java 17 printed for each string's hashCode().
    assert java_string_hash(text) == expected


def test_the_host_places_every_message_as_samzas_producer_would() -> None:
    assert host_partition("abc", 8) == 96354 % 8
    assert host_partition("localhost", 5) == 1204607085 % 5
    assert java_string_hash("polygenelubricants") == -(1 << 31)  # no absolute value in Java
    assert host_partition("polygenelubricants", 7) == 0


class Sink:
    """A producer that keeps what it is sent, or refuses it."""

    def __init__(self, refuse: bool = False, lose: int = 0) -> None:
        self.sent: list[tuple[str, Any, bytes, int | None]] = []
        self.refuse = refuse
        self.lose = lose

    def send(self, stream: str, key: Any, value: Any, partition: int | None, partition_key: Any) -> None:
        if self.refuse:
            raise RuntimeError("no such broker")
        assert partition_key is None
        self.sent.append((stream, key, value, partition))

    def flush(self, timeout_s: float) -> int:
        return 0

    def take_errors(self) -> list[str]:
        lost, self.lose = self.lose, 0
        return [f"metrics[0]: lost {i}" for i in range(lost)]

    def messages(self) -> dict[str, dict[str, Any]]:
        return {m["header"]["source"]: m for m in (json.loads(v) for _, _, v, _ in self.sent)}


def _registry() -> MetricsRegistry:
    r = MetricsRegistry()
    r.counter("SamzaContainerMetrics", "process-envelopes").count = 12
    r.gauge("SamzaContainerMetrics", "run-id").set("run-7")
    r.timer("SamzaContainerMetrics", "process-ns").update(100)
    r.timer("SamzaContainerMetrics", "process-ns").update(300)
    r.gauge("WorkerPool-0", "pid", fn=lambda: 4242)
    r.gauge("SystemConsumersMetrics", "lag", fn=lambda: float("nan"))
    r.counter("TaskName-Partition 0", "process-calls").count = 5
    r.gauge("TaskName-Partition 0", "pending-messages").set(2)
    r.counter("TaskName-Partition 1", "process-calls").count = 7
    r.gauge("TaskName-Partition 1", "odd").set(complex(1, 2))
    return r


def _reporter(sink: Sink, registry: MetricsRegistry, blacklist: str | None = None, **kw: Any) -> SnapshotReporter:
    return SnapshotReporter(
        "snapshot",
        registry,
        HEADER,
        "metrics",
        sink,
        lambda: 4,
        interval_s=1,
        blacklist=None if blacklist is None else re.compile(blacklist),
        epoch_id=lambda: "run-7",
        clock=lambda: 12.345,
        **kw,
    )


def _report(r: MetricsReporter) -> None:
    r.publish(r.collect())


def test_one_message_per_source_with_samzas_header_and_group_names() -> None:
    sink = Sink()
    _report(_reporter(sink, _registry()))
    assert {(stream, key, p) for stream, key, _, p in sink.sent} == {("metrics", None, host_partition("host-a", 4))}
    messages = sink.messages()
    assert set(messages) == {"samza-container-0", "TaskName-Partition 0", "TaskName-Partition 1", REPORTER_SOURCE}
    for source, m in messages.items():
        assert set(m) == {"header", "metrics"}
        assert set(m["header"]) == HEADER_FIELDS | {"samza-epoch-id"}
        assert m["header"]["source"] == source
        assert (m["header"]["time"], m["header"]["reset-time"], m["header"]["samza-epoch-id"]) == (12345, 1000, "run-7")
        assert (m["header"]["job-name"], m["header"]["job-id"], m["header"]["host"]) == ("wc", "1", "host-a")
    container = messages["samza-container-0"]["metrics"]
    assert container["org.apache.samza.container.SamzaContainerMetrics"] == {
        "process-envelopes": 12,
        "run-id": "run-7",
        "process-ns": 200.0,  # a timer reports its average, in ns
    }
    assert container["WorkerPool-0"] == {"pid": 4242}  # no Samza class: samzamp's name
    assert container["org.apache.samza.system.SystemConsumersMetrics"] == {"lag": None}  # JSON has no NaN
    assert messages["TaskName-Partition 0"]["metrics"] == {TASK_GROUP: {"process-calls": 5, "pending-messages": 2}}
    assert messages["TaskName-Partition 1"]["metrics"] == {TASK_GROUP: {"process-calls": 7, "odd": "(1+2j)"}}
    own = messages[REPORTER_SOURCE]["metrics"]["org.apache.samza.metrics.reporter.MetricsSnapshotReporter"]
    assert own["messages-sent"] == 0  # as it was when the report was collected


def test_the_blacklist_leaves_out_exactly_what_it_matches_whole_and_empty_groups_and_sources() -> None:
    sink = Sink()
    blacklist = r"org\.apache\.samza\.container\.TaskInstanceMetrics\.pending-messages|WorkerPool-0\..*|.*\.odd"
    _report(_reporter(sink, _registry(), blacklist))
    messages = sink.messages()
    assert messages["TaskName-Partition 0"]["metrics"] == {TASK_GROUP: {"process-calls": 5}}
    assert messages["TaskName-Partition 1"]["metrics"] == {TASK_GROUP: {"process-calls": 7}}
    assert "WorkerPool-0" not in messages["samza-container-0"]["metrics"]  # the group went empty
    assert (
        "process-envelopes"
        in messages["samza-container-0"]["metrics"]["org.apache.samza.container.SamzaContainerMetrics"]
    )
    # a partial match leaves nothing out (Java's Matcher.matches)
    sink2 = Sink()
    _report(_reporter(sink2, _registry(), "process-calls"))
    assert sink2.messages()["TaskName-Partition 0"]["metrics"][TASK_GROUP]["process-calls"] == 5
    # a source whose every metric is left out sends nothing
    sink3 = Sink()
    _report(_reporter(sink3, _registry(), r"org\.apache\.samza\.container\.TaskInstanceMetrics\..*"))
    assert not any(s.startswith("TaskName-") for s in sink3.messages())


def test_a_failed_send_is_logged_and_counted_never_raised(caplog: pytest.LogCaptureFixture) -> None:
    registry = _registry()
    refused = _reporter(Sink(refuse=True), registry)
    with caplog.at_level(logging.WARNING):
        _report(refused)
    assert "4 of 4 snapshot messages to metrics were not sent: samza-container-0: no such broker" in caplog.text
    assert (refused.m_sent.count, refused.m_failed.count) == (0, 4)
    lossy = _reporter(Sink(lose=1), registry)
    _report(lossy)
    assert (lossy.m_sent.count, lossy.m_failed.count) == (3, 1)

    def no_partitions() -> int:
        raise RuntimeError("broker away")

    away = SnapshotReporter("snapshot", registry, HEADER, "metrics", Sink(), no_partitions, interval_s=1)
    _report(away)
    assert away.m_failed.count == 4
    sink = Sink()
    ok = _reporter(sink, registry)
    _report(ok)
    _report(ok)  # the next report counts the last one's messages
    own = sink.messages()[REPORTER_SOURCE]["metrics"]["org.apache.samza.metrics.reporter.MetricsSnapshotReporter"]
    assert own["messages-sent"] == 4


class Recording(MetricsReporter):
    """Reports how many reports it collected; its second report fails."""

    name = "recording"

    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self.values: list[int] = []
        self.collected = 0
        self.last = False
        self.three = threading.Event()  # three reports published

    def collect(self) -> Any:
        self.collected += 1
        return 99 if self.last else self.collected

    def publish(self, collected: Any) -> None:
        if collected == 2:
            raise RuntimeError("a broken report")
        self.values.append(collected)
        if len(self.values) == 3:
            self.three.set()


def test_reports_come_every_interval_and_once_more_at_stop_and_a_failure_does_not_stop_them(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def main() -> list[int]:
        r = Recording(0.01)
        reporting = Reporting([r])
        reporting.start()
        assert await asyncio.to_thread(r.three.wait, 10)
        r.last = True
        await reporting.stop()
        return r.values

    with caplog.at_level(logging.WARNING):
        values = asyncio.run(asyncio.wait_for(main(), 10))
    assert values[:3] == [1, 3, 4]  # the second failed, and the schedule went on
    assert values[-1] == 99  # the last report, at stop, with the values then
    assert "metrics reporter 'recording': report failed: RuntimeError: a broken report" in caplog.text


class UserCounts(StreamTask, InitableTask):
    def init(self, context: TaskContext) -> None:
        self.n = context.metrics.counter("user-count")

    def process(self, envelope: Any, collector: Any, coordinator: Any) -> None:
        self.n.inc()


def test_the_processor_sends_a_last_snapshot_and_logs_a_last_metrics_line_at_stop(
    caplog: pytest.LogCaptureFixture,
) -> None:
    config = {
        "metrics.reporters": ["snapshot"],
        "metrics.reporter.snapshot.stream": "mx.metrics",
        "metrics.reporter.snapshot.interval": 3600,  # only the last one comes
        "systems.mx.samza.factory": "inmemory",
        "systems.mx.samza.msg.serde": "bytes",
        "metrics.log.interval.ms": 3_600_000,
    }
    with caplog.at_level(logging.INFO):
        result = TestRunner(UserCounts, config, system_alias="test").add_input("lines", ["a", "b", "c"]).run()
    (values,) = result.records("metrics", system="mx")
    by_source = {m["header"]["source"]: m for m in (json.loads(v) for _, v in values)}
    assert by_source["TaskName-Partition 0"]["metrics"][TASK_GROUP]["user-count"] == 3
    assert set(by_source["TaskName-Partition 0"]["header"]) == HEADER_FIELDS | {"samza-epoch-id"}
    assert (
        by_source["TaskName-Partition 0"]["header"]["samza-epoch-id"]
        == result.metrics["SamzaContainerMetrics"]["run-id"]
    )
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("metrics {")]
    assert len(lines) == 1
    assert json.loads(lines[0][len("metrics ") :])["TaskName-Partition 0"]["user-count"] == 3


def test_log_reporter_logs_the_snapshot_as_one_json_line(caplog: pytest.LogCaptureFixture) -> None:
    registry = _registry()
    with caplog.at_level(logging.INFO):
        _report(LogReporter(registry, 60))
    (line,) = [r.getMessage() for r in caplog.records]
    assert json.loads(line.removeprefix("metrics "))["TaskName-Partition 0"]["process-calls"] == 5
