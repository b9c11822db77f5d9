"""Samza's snapshot reporter (``MetricsSnapshotReporter``): every interval, one JSON message per
metrics source to a stream, ``{"header": {...}, "metrics": {group: {name: value}}}``.

The sources are Samza's: the container (``container-name``, ``samza-container-<processor.id or 0>``)
with every group but the tasks'; each task, ``TaskName-<task>``, with its group; and the reporter
itself (``MetricsSnapshotReporterFactory``), with what it sent and failed to send. Groups carry
Samza's class names where Samza has the group (``SAMZA_GROUPS``; a task's group is
``org.apache.samza.container.TaskInstanceMetrics``), others keep samzamp's name (``WorkerPool-<i>``).
A counter reports its count, a gauge its value (a number, string, bool or null; anything else as its
``str()``), a timer its average in ns; a metric the blacklist matches whole (``group.metric``, with
the group as the message names it) is left out, a group left empty is omitted, and a source with no
metrics sends nothing.

The header has Samza's fields: ``job-name``, ``job-id``, ``container-name``, ``exec-env-container-id``
(``$EXECUTION_ENV_CONTAINER_ID``), ``samza-epoch-id`` (``$SAMZA_EPOCH_ID``, else the run id),
``source``, ``version`` (the task's or application's module ``__version__``), ``samza-version``,
``host``, ``time`` (ms, the report's) and ``reset-time`` (ms, when the reporter started: fixed for
the process's life). The value is plain JSON, Samza's ``MetricsSnapshotSerde`` form; the key is
null and the partition ``abs(hash(host)) % partitions`` with Java's ``String.hashCode``, as Samza's
Kafka producer places a message whose partition key is the host. A report sends every source, then
waits for their acknowledgement; a failure is logged and counted, and the next report goes on.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from samzamp.metrics.registry import Counter, Gauge, MetricsRegistry, Timer
from samzamp.metrics.reporting import MetricsReporter

__all__ = [
    "REPORTER_SOURCE",
    "SAMZA_GROUPS",
    "TASK_GROUP",
    "SnapshotHeader",
    "SnapshotReporter",
    "SnapshotSink",
    "host_partition",
    "java_string_hash",
]

log = logging.getLogger(__name__)

# samzamp's group -> the class whose name Samza gives that group (MetricsHelper: getClass.getName).
SAMZA_GROUPS = {
    "SamzaContainerMetrics": "org.apache.samza.container.SamzaContainerMetrics",
    "SystemConsumersMetrics": "org.apache.samza.system.SystemConsumersMetrics",
    "SystemProducersMetrics": "org.apache.samza.system.SystemProducersMetrics",
    "OffsetManagerMetrics": "org.apache.samza.checkpoint.OffsetManagerMetrics",
    "OperatorImpl": "org.apache.samza.operators.impl.OperatorImpl",
    "ZkJobCoordinatorMetrics": "org.apache.samza.zk.ZkJobCoordinatorMetrics",
}
TASK_GROUP = "org.apache.samza.container.TaskInstanceMetrics"
TASK_SOURCE_PREFIX = "TaskName-"
REPORTER_SOURCE = "MetricsSnapshotReporterFactory"  # Samza registers its reporter's own registry so
REPORTER_GROUP = "org.apache.samza.metrics.reporter.MetricsSnapshotReporter"
FLUSH_TIMEOUT_S = 10.0


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode()`` of ``text`` (over its UTF-16 code units), a signed 32-bit int."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def host_partition(host: str, partitions: int) -> int:
    """The partition Samza's Kafka producer gives a message with partition key ``host``: the hash's
    absolute value modulo ``partitions`` (``Integer.MIN_VALUE``, which has none, counts as 0)."""
    h = java_string_hash(host)
    return (0 if h == -(1 << 31) else abs(h)) % partitions


class SnapshotSink(Protocol):
    """Where the messages go: a system's producer (``samzamp.systems.base.SystemProducer``)."""

    def send(
        self, stream: str, key: bytes | None, value: bytes | None, partition: int | None, partition_key: bytes | None
    ) -> None: ...

    def flush(self, timeout_s: float) -> int: ...

    def take_errors(self) -> list[str]: ...


@dataclass(frozen=True)
class SnapshotHeader:
    """What every message's header says of the job and this process (``source`` and ``time`` aside)."""

    job_name: str
    job_id: str
    container_name: str
    exec_env_container_id: str
    version: str
    samza_version: str
    host: str
    reset_time: int

    def fields(self, source: str, time_ms: int, epoch_id: str | None) -> dict[str, Any]:
        """The header of ``source``'s message of the report at ``time_ms``."""
        header: dict[str, Any] = {
            "job-name": self.job_name,
            "job-id": self.job_id,
            "container-name": self.container_name,
            "exec-env-container-id": self.exec_env_container_id,
        }
        if epoch_id is not None:
            header["samza-epoch-id"] = epoch_id
        header.update(
            {
                "source": source,
                "version": self.version,
                "samza-version": self.samza_version,
                "host": self.host,
                "time": time_ms,
                "reset-time": self.reset_time,
            }
        )
        return header


# One report as collected: its time (ms), the epoch id, and per source its groups' values.
Collected = tuple[int, "str | None", list[tuple[str, dict[str, dict[str, Any]]]]]


class SnapshotReporter(MetricsReporter):
    """Samza's snapshot reporter over ``registry`` (see the module docstring)."""

    def __init__(
        self,
        name: str,
        registry: MetricsRegistry,
        header: SnapshotHeader,
        stream: str,
        sink: SnapshotSink,
        partitions: Callable[[], int],
        *,
        interval_s: float,
        blacklist: Any = None,
        epoch_id: Callable[[], str | None] = lambda: None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """``stream``: the stream's name in the sink's system; ``partitions``: its partition count
        (called at each report until it answers); ``blacklist``: a compiled regex or None;
        ``epoch_id``: the header's ``samza-epoch-id`` at a report (None: left out)."""
        self.name = name
        self.registry = registry
        self.header = header
        self.stream = stream
        self.interval_s = interval_s
        self._sink = sink
        self._partitions = partitions
        self._blacklist = blacklist
        self._epoch_id = epoch_id
        self._clock = clock
        self._left_out: dict[tuple[str, str], bool] = {}  # (group, name) -> blacklisted: matched once
        self.own = MetricsRegistry()  # the reporter's own source
        self.m_sent = self.own.counter(REPORTER_GROUP, "messages-sent")
        self.m_failed = self.own.counter(REPORTER_GROUP, "send-failed")
        self.m_report_ns = self.own.timer(REPORTER_GROUP, "report-ns")

    # -- collect (the event loop thread) ------------------------------------------------------------
    def collect(self) -> Collected:
        sources: dict[str, dict[str, dict[str, Any]]] = {}
        for group, metrics in self.registry.metrics():
            if group.startswith(TASK_SOURCE_PREFIX):
                source, samza_group = group, TASK_GROUP
            else:
                source, samza_group = self.header.container_name, SAMZA_GROUPS.get(group, group)
            self._add(sources.setdefault(source, {}), samza_group, metrics)
        own: dict[str, dict[str, Any]] = {}
        for group, metrics in self.own.metrics():
            self._add(own, group, metrics)
        sources[REPORTER_SOURCE] = own
        return (
            int(self._clock() * 1000),
            self._epoch_id(),
            [(source, groups) for source, groups in sources.items() if groups],
        )

    def _add(self, groups: dict[str, dict[str, Any]], group: str, metrics: list[tuple[str, Any]]) -> None:
        values = groups.get(group)
        for name, m in metrics:
            if self._left_out_by_blacklist(group, name):
                continue
            if values is None:
                values = groups[group] = {}
            values[name] = _value(m)

    def _left_out_by_blacklist(self, group: str, name: str) -> bool:
        if self._blacklist is None:
            return False
        key = (group, name)
        out = self._left_out.get(key)
        if out is None:
            out = self._left_out[key] = self._blacklist.fullmatch(f"{group}.{name}") is not None
        return out

    # -- publish (an executor thread) -------------------------------------------------------------
    def publish(self, collected: Collected) -> None:
        started = time.perf_counter_ns()
        time_ms, epoch_id, sources = collected
        sent = failed = 0
        problems: list[str] = []
        try:
            partition = host_partition(self.header.host, self._partitions())
            for source, groups in sources:
                message = {"header": self.header.fields(source, time_ms, epoch_id), "metrics": groups}
                value = json.dumps(message, separators=(",", ":"), allow_nan=False).encode()
                try:
                    self._sink.send(self.stream, None, value, partition, None)
                    sent += 1
                except Exception as e:  # refused (too large, ...): the other sources still go
                    failed += 1
                    problems.append(f"{source}: {e}")
            unacked = self._sink.flush(FLUSH_TIMEOUT_S)
            lost = self._sink.take_errors()
            problems += lost
            if unacked:
                problems.append(f"{unacked} not acknowledged within {FLUSH_TIMEOUT_S:.0f} s")
            undelivered = min(sent, len(lost) + unacked)
            sent -= undelivered
            failed += undelivered
        except Exception as e:  # no partition count, or the producer failed: the rest is not sent
            problems.append(f"{type(e).__name__}: {e}")
            failed = len(sources) - sent
        self.m_sent.count += sent
        self.m_failed.count += failed
        self.m_report_ns.update(time.perf_counter_ns() - started)
        if problems:
            log.warning(
                "metrics reporter %r: %d of %d snapshot messages to %s were not sent: %s",
                self.name,
                failed,
                len(sources),
                self.stream,
                "; ".join(problems[:3]),
            )


def _value(m: Any) -> Any:
    """A metric's value in a snapshot: a counter's count, a gauge's value, a timer's average ns."""
    if isinstance(m, Counter):
        return m.count
    if isinstance(m, Timer):
        return m.total_ns / m.count if m.count else 0.0
    assert isinstance(m, Gauge)
    try:
        value = m.snapshot()
    except Exception:  # one broken gauge must not cost the whole report
        return None
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None  # JSON has no NaN nor infinity
    return str(value)
