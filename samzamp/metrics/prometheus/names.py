"""Prometheus names for the registry's metrics: the one table from Samza's groups and names to
``samza_<area>_<metric>`` and its labels.

A group's per-instance part and a name's per-SSP, per-store or per-operator part become labels:

    group / name                                      Prometheus
    SamzaContainerMetrics                             samza_container_*
      process-envelopes, window-calls, commit-calls   samza_container_<name>_total
      process-ns, window-ns, commit-ns,               samza_container_{process,window,commit,
      commit-sync-ns, commit-async-ns (timers)          commit_sync,commit_async}_seconds
                                                      (summary: _count, _sum) and ..._max_seconds
      event-loop-utilization, task-count,             samza_container_<name> (gauges)
      drain-buffered-messages
      container-startup-time                          samza_container_startup_seconds
      drain-started-ms                                samza_container_drain_started_timestamp_seconds
      run-id                                          samza_container_info{run_id}
    TaskName-<task>                                   samza_task_*{task}
      process-calls, messages-actually-processed,     samza_task_<name>_total
      window-calls, commit-calls, send-calls,
      skipped-envelopes, drain-messages-received,
      eos-messages-received, foreign-drain-messages,
      join-dropped-messages
      messages-in-flight, pending-messages, worker    samza_task_<name>
      drain-ms                                        samza_task_drain_seconds
      <ssp>-offset                                    samza_task_offset{system,stream,partition[,key_bucket]}
      <store>-restored-records                        samza_task_store_restored_records{store}
      <store>-reverted-records                        samza_task_store_reverted_records{store}
    SystemConsumersMetrics                            samza_consumer_*
      chose-object, polls, skipped-envelopes,         samza_consumer_<name>_total
      polls-held, partition-pauses
      deserialization error                           samza_consumer_deserialization_errors_total
      keyhash-ns (timer)                              samza_consumer_keyhash_seconds, ..._max_seconds
      unprocessed-messages, ssps-needed-by-chooser,   samza_consumer_<name>
      paused-partitions
      <ssp>-messages-behind-high-watermark            samza_consumer_messages_behind_high_watermark{system,...}
    SystemProducersMetrics                            samza_producer_*
      serialization error                             samza_producer_serialization_errors_total
      producer-send-failed                            samza_producer_send_failed_total
      producer-buffer-wait-ns (timer)                 samza_producer_buffer_wait_seconds, ..._max_seconds
      changelog-buffer-wait-ns (timer)                samza_producer_changelog_buffer_wait_seconds, ...
    OffsetManagerMetrics
      <ssp>-checkpointed-offset                       samza_offset_manager_checkpointed_offset{system,...}
    WorkerPool-<i>                                    samza_worker_*{worker}
      messages-processed                              samza_worker_messages_processed_total
      busy-ns                                         samza_worker_busy_seconds_total
      pid, outbox-frames, rss-bytes                   samza_worker_<name>
      ring-{to,from}-worker-bytes-used                samza_worker_ring_{to,from}_worker_bytes
    ZkJobCoordinatorMetrics                           samza_zk_coordinator_*
      rebalances                                      samza_zk_coordinator_rebalances_total
      job-model-version, is-leader                    samza_zk_coordinator_<name>
      last-rebalance-pause-ms                         samza_zk_coordinator_last_rebalance_pause_seconds
    OperatorImpl                                      samza_operator_*{op}
      <op>-messages                                   samza_operator_messages_total
      <op>-handle-message-ns, <op>-handle-timer-ns    samza_operator_handle_{message,timer}_seconds, _max_seconds

Everything else (a user's metric, a group added later) still exports, under a generic name: the
group's area is ``task`` for ``TaskName-<task>`` (with the ``task`` label), else the snake-cased
group (its part after the first ``-`` as the label ``group``), the metric's name snake-cased, with
the kind the registry gives it: a counter ends in ``_total``, a timer becomes a summary in seconds,
a gauge of text goes to ``samza_<area>_info{<name>=...}``.

Units: timers count ns and ``-ms`` gauges ms in the registry; Prometheus gets seconds (``scale``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Literal

__all__ = ["PREFIX", "Kind", "Namer", "Series", "snake"]

PREFIX = "samza"

# counter: a value that only grows (``_total``); gauge; timer: a summary in seconds plus its max;
# info: a text value, as a label of samza_<area>_info.
Kind = Literal["counter", "gauge", "timer", "info"]

NS = 1e-9
MS = 1e-3


@dataclass(frozen=True)
class Series:
    """Where one registry metric goes: family ``name`` (``samza_<area>_<metric>``, without a
    counter's ``_total`` nor a timer's ``_seconds``: the collector adds them; ``samza_<area>_info``
    for text, whose value goes in the label ``metric``). ``labels``: the metric's own labels (the
    collector adds job, job_id and processor). ``scale``: the registry's value times this is in
    Prometheus's unit."""

    area: str
    metric: str
    kind: Kind
    labels: tuple[tuple[str, str], ...] = ()
    scale: float = 1.0
    help: str = ""

    @property
    def name(self) -> str:
        """The family's name."""
        return f"{PREFIX}_{self.area}_{'info' if self.kind == 'info' else self.metric}"

    def as_info(self) -> Series:
        """This metric as text: a label of ``samza_<area>_info`` (a gauge whose value is a string)."""
        return replace(self, kind="info", scale=1.0)


def snake(text: str) -> str:
    """``text`` in snake case, of [a-z0-9_] only: ``SamzaContainerMetrics`` -> ``samza_container_metrics``,
    ``deserialization error`` -> ``deserialization_error``; ``unnamed`` when nothing is left."""
    s = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", text)
    s = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", s)
    s = re.sub(r"[^A-Za-z0-9]+", "_", s).strip("_").lower()
    return s or "unnamed"


# Groups with one instance: their area.
_AREAS = {
    "SamzaContainerMetrics": "container",
    "SystemConsumersMetrics": "consumer",
    "SystemProducersMetrics": "producer",
    "OffsetManagerMetrics": "offset_manager",
    "ZkJobCoordinatorMetrics": "zk_coordinator",
    "OperatorImpl": "operator",
}
# Groups named <prefix><instance>: their area and the label the instance goes in.
_INSTANCE_GROUPS = {"TaskName-": ("task", "task"), "WorkerPool-": ("worker", "worker")}

# (area, registry name) -> (metric, kind, scale, help): every fixed name the code registers.
_FIXED: dict[tuple[str, str], tuple[str, Kind, float, str]] = {
    ("container", "process-envelopes"): ("process_envelopes", "counter", 1, "Envelopes the run loop handed to tasks."),
    ("container", "window-calls"): ("window_calls", "counter", 1, "window() calls of every task."),
    ("container", "commit-calls"): ("commit_calls", "counter", 1, "Commits of every task."),
    ("container", "process-ns"): ("process", "timer", NS, "Time in a task's process(), per message."),
    ("container", "window-ns"): ("window", "timer", NS, "Time in window() calls."),
    ("container", "commit-ns"): ("commit", "timer", NS, "Time a commit took, from snapshot to checkpoint."),
    ("container", "commit-sync-ns"): (
        "commit_sync",
        "timer",
        NS,
        "A commit's synchronous phase: the pause its task sees (task.commit.stores.async).",
    ),
    ("container", "commit-async-ns"): (
        "commit_async",
        "timer",
        NS,
        "A commit's asynchronous phase, the task processing: its stores' writes made durable, its checkpoint.",
    ),
    ("container", "event-loop-utilization"): (
        "event_loop_utilization",
        "gauge",
        1,
        "Share of time the run loop spent running slices since it started (0..1).",
    ),
    ("container", "task-count"): ("task_count", "gauge", 1, "Tasks this processor runs."),
    ("container", "container-startup-time"): (
        "startup_seconds",
        "gauge",
        1,
        "From start to the first job model's tasks running.",
    ),
    ("container", "run-id"): ("run_id", "info", 1, "The job's run this processor runs in."),
    ("container", "drain-started-ms"): (
        "drain_started_timestamp_seconds",
        "gauge",
        MS,
        "When this processor's drain began (Unix time).",
    ),
    ("container", "drain-buffered-messages"): (
        "drain_buffered_messages",
        "gauge",
        1,
        "Messages buffered when the drain began.",
    ),
    ("task", "process-calls"): ("process_calls", "counter", 1, "Messages given to the task's process()."),
    ("task", "messages-actually-processed"): (
        "messages_actually_processed",
        "counter",
        1,
        "Messages the task completed.",
    ),
    ("task", "window-calls"): ("window_calls", "counter", 1, "The task's window() calls."),
    ("task", "commit-calls"): ("commit_calls", "counter", 1, "The task's commits."),
    ("task", "send-calls"): ("send_calls", "counter", 1, "Messages the task sent."),
    ("task", "skipped-envelopes"): (
        "skipped_envelopes",
        "counter",
        1,
        "Messages at or below the task's own checkpoint, skipped (a key bucket's partition is fetched from "
        "its buckets' lowest checkpoint).",
    ),
    ("task", "messages-in-flight"): ("messages_in_flight", "gauge", 1, "The task's messages being processed."),
    ("task", "pending-messages"): ("pending_messages", "gauge", 1, "The task's messages waiting to be processed."),
    ("task", "worker"): ("worker", "gauge", 1, "The worker process the task runs in (its index)."),
    ("task", "drain-ms"): ("drain_seconds", "gauge", MS, "How long the task's drain took."),
    ("task", "drain-messages-received"): ("drain_messages_received", "counter", 1, "Drain control messages read."),
    ("task", "eos-messages-received"): ("eos_messages_received", "counter", 1, "End-of-stream control messages read."),
    ("task", "foreign-drain-messages"): (
        "foreign_drain_messages",
        "counter",
        1,
        "Drain control messages of another run, ignored.",
    ),
    ("task", "join-dropped-messages"): (
        "join_dropped_messages",
        "counter",
        1,
        "Messages a join dropped (no match within its window).",
    ),
    ("consumer", "chose-object"): ("chose_object", "counter", 1, "Envelopes the chooser handed out."),
    ("consumer", "polls"): ("polls", "counter", 1, "Polls of the consumers."),
    ("consumer", "polls-held"): (
        "polls_held",
        "counter",
        1,
        "Polls not made because the buffers held task.fetch.threshold messages.",
    ),
    ("consumer", "partition-pauses"): (
        "partition_pauses",
        "counter",
        1,
        "Partitions paused by back-pressure because another ran dry while the buffers were full.",
    ),
    ("consumer", "paused-partitions"): ("paused_partitions", "gauge", 1, "Partitions paused by back-pressure now."),
    ("consumer", "skipped-envelopes"): (
        "skipped_envelopes",
        "counter",
        1,
        "Messages of key buckets no task of this processor reads.",
    ),
    ("consumer", "keyhash-ns"): ("keyhash", "timer", NS, "Time splitting fetched batches by key bucket."),
    ("consumer", "unprocessed-messages"): ("unprocessed_messages", "gauge", 1, "Messages fetched, not yet processed."),
    ("consumer", "ssps-needed-by-chooser"): (
        "ssps_needed_by_chooser",
        "gauge",
        1,
        "Partitions the chooser waits for.",
    ),
    ("consumer", "deserialization error"): (
        "deserialization_errors",
        "counter",
        1,
        "Messages that could not be deserialized (dropped with task.drop.deserialization.errors).",
    ),
    ("producer", "serialization error"): (
        "serialization_errors",
        "counter",
        1,
        "Outputs that could not be serialized (dropped with task.drop.serialization.errors).",
    ),
    ("producer", "producer-send-failed"): ("send_failed", "counter", 1, "Outputs the system refused."),
    ("producer", "producer-buffer-wait-ns"): (
        "buffer_wait",
        "timer",
        NS,
        "Sends that waited for room in a Kafka producer's local queue, and how long: back-pressure from the broker.",
    ),
    ("producer", "changelog-buffer-wait-ns"): (
        "changelog_buffer_wait",
        "timer",
        NS,
        "Store writes that waited for room in the changelog producer's local queue, and how long.",
    ),
    ("worker", "pid"): ("pid", "gauge", 1, "The worker process's pid."),
    ("worker", "messages-processed"): ("messages_processed", "counter", 1, "Messages the worker processed."),
    ("worker", "busy-ns"): ("busy_seconds", "counter", NS, "Time the worker spent processing."),
    ("worker", "ring-to-worker-bytes-used"): (
        "ring_to_worker_bytes",
        "gauge",
        1,
        "Bytes queued in the ring to the worker.",
    ),
    ("worker", "ring-from-worker-bytes-used"): (
        "ring_from_worker_bytes",
        "gauge",
        1,
        "Bytes queued in the ring from the worker.",
    ),
    ("worker", "outbox-frames"): ("outbox_frames", "gauge", 1, "Frames waiting for room in the ring to the worker."),
    ("worker", "rss-bytes"): ("rss_bytes", "gauge", 1, "The worker process's resident memory."),
    ("zk_coordinator", "job-model-version"): ("job_model_version", "gauge", 1, "The job model version applied."),
    ("zk_coordinator", "rebalances"): ("rebalances", "counter", 1, "Job model versions applied by this processor."),
    ("zk_coordinator", "is-leader"): ("is_leader", "gauge", 1, "1 while this processor leads the job."),
    ("zk_coordinator", "last-rebalance-pause-ms"): (
        "last_rebalance_pause_seconds",
        "gauge",
        MS,
        "How long the last rebalance paused this processor.",
    ),
}

# (area, suffix of the registry name) -> (what the rest of the name is, metric, kind, scale, help):
# names with a per-instance part, matched after _FIXED.
_SUFFIXED: dict[tuple[str, str], tuple[str, str, Kind, float, str]] = {
    ("task", "-offset"): ("ssp", "offset", "gauge", 1, "The last offset the task processed, per partition."),
    ("task", "-restored-records"): ("store", "store_restored_records", "gauge", 1, "Records the store restored."),
    ("task", "-reverted-records"): (
        "store",
        "store_reverted_records",
        "gauge",
        1,
        "Changelog records the restore reverted (written past the checkpoint).",
    ),
    ("consumer", "-messages-behind-high-watermark"): (
        "ssp",
        "messages_behind_high_watermark",
        "gauge",
        1,
        "Messages of the partition past the last one processed (the lag).",
    ),
    ("offset_manager", "-checkpointed-offset"): (
        "ssp",
        "checkpointed_offset",
        "gauge",
        1,
        "The last offset checkpointed, per partition.",
    ),
    ("operator", "-messages"): ("op", "messages", "counter", 1, "Messages the operator handled."),
    ("operator", "-handle-message-ns"): ("op", "handle_message", "timer", NS, "Time the operator took per message."),
    ("operator", "-handle-timer-ns"): ("op", "handle_timer", "timer", NS, "Time the operator's timers took."),
}
_SUFFIXES = sorted(_SUFFIXED, key=lambda k: -len(k[1]))  # the longest first: -checkpointed-offset before -offset

_PARTITION = re.compile(r"^(\d+)(?:-(\d+))?$")
# An SSP of a stream the job does not name (it should not happen): a system without dashes.
_ANY_SSP = re.compile(r"^([^-]+)-(.+?)-(\d+)(?:-(\d+))?$")


class Namer:
    """Names registry metrics (``series``). ``streams``: the (system, physical stream) pairs the job
    reads, so that ``<system>-<stream>-<partition>[-<bucket>]`` splits right when names hold dashes."""

    def __init__(self, streams: Iterable[tuple[str, str]] = ()) -> None:
        self._prefixes = sorted({f"{s}-{t}-": (s, t) for s, t in streams}.items(), key=lambda p: -len(p[0]))

    def series(self, group: str, name: str, registered: str) -> Series:
        """Where metric ``name`` of ``group`` goes; ``registered``: its kind in the registry
        (counter, gauge or timer), which decides for a metric the table does not name."""
        area, labels = self._area(group)
        fixed = _FIXED.get((area, name))
        if fixed is not None:
            metric, kind, scale, doc = fixed
            return self._series(area, metric, kind, labels, scale, doc)
        for key in _SUFFIXES:
            if key[0] == area and name.endswith(key[1]) and len(name) > len(key[1]):
                what, metric, kind, scale, doc = _SUFFIXED[key]
                instance = self._instance(what, name[: -len(key[1])])
                if instance is not None:
                    return self._series(area, metric, kind, labels + instance, scale, doc)
        return self._generic(area, labels, group, name, registered)

    def _area(self, group: str) -> tuple[str, tuple[tuple[str, str], ...]]:
        area = _AREAS.get(group)
        if area is not None:
            return area, ()
        for prefix, (area, label) in _INSTANCE_GROUPS.items():
            if group.startswith(prefix):
                return area, ((label, group[len(prefix) :]),)
        cls, dash, instance = group.partition("-")
        area = snake(cls)
        if area.endswith("_metrics") and area != "_metrics":
            area = area[: -len("_metrics")]
        return area, (("group", group),) if dash else ()

    def _instance(self, what: str, part: str) -> tuple[tuple[str, str], ...] | None:
        if what != "ssp":
            return ((what, part),)
        for prefix, (system, stream) in self._prefixes:
            if part.startswith(prefix):
                m = _PARTITION.match(part[len(prefix) :])
                if m is not None:
                    return _ssp_labels(system, stream, m.group(1), m.group(2))
        m = _ANY_SSP.match(part)
        if m is None:
            return None
        return _ssp_labels(m.group(1), m.group(2), m.group(3), m.group(4))

    @staticmethod
    def _series(
        area: str, metric: str, kind: Kind, labels: tuple[tuple[str, str], ...], scale: float, doc: str
    ) -> Series:
        return Series(area, metric, kind, labels, scale, doc)

    def _generic(
        self, area: str, labels: tuple[tuple[str, str], ...], group: str, name: str, registered: str
    ) -> Series:
        metric = snake(name)
        doc = f"{name!r} of {group}"
        if registered == "counter":
            return self._series(area, _strip(metric, "_total"), "counter", labels, 1, doc)
        if registered == "timer":
            return self._series(area, _strip(_strip(metric, "_ns"), "_seconds"), "timer", labels, NS, doc)
        return self._series(area, metric, "gauge", labels, 1, doc)


def _strip(metric: str, suffix: str) -> str:
    return metric[: -len(suffix)] if metric.endswith(suffix) and metric != suffix else metric


def _ssp_labels(system: str, stream: str, partition: str, bucket: str | None) -> tuple[tuple[str, str], ...]:
    labels = (("system", system), ("stream", stream), ("partition", partition))
    return labels if bucket is None else (*labels, ("key_bucket", bucket))
