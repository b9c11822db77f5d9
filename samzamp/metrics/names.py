"""The names samzamp gives its own metrics where a name is built from parts: an SSP in a metric's
name, and the names samzamp uses in a task's group (``TaskName-<task>``), which a task's own metrics
(``samzamp.api.metrics.TaskMetrics``) may not take."""

from __future__ import annotations

from collections.abc import Iterable

from samzamp.api.envelope import SystemStreamPartition

__all__ = ["TASK_METRICS", "reserved_task_metrics", "ssp_label"]

# samzamp's metrics in every task's group, wherever they are registered (the run loop's task, the
# collector, the worker proxy, the drain, an application's graph and its joins).
TASK_METRICS = frozenset(
    {
        "process-calls",
        "messages-actually-processed",
        "window-calls",
        "commit-calls",
        "messages-in-flight",
        "pending-messages",
        "send-calls",
        "worker",
        "drain-ms",
        "skipped-envelopes",
        "drain-messages-received",
        "eos-messages-received",
        "foreign-drain-messages",
        "join-dropped-messages",
    }
)


def ssp_label(ssp: SystemStreamPartition) -> str:
    """An SSP in a metric's name: ``system-stream-partition``, then ``-bucket`` for a key bucket."""
    label = f"{ssp.system}-{ssp.stream}-{ssp.partition}"
    return label if ssp.key_bucket == -1 else f"{label}-{ssp.key_bucket}"


def reserved_task_metrics(ssps: Iterable[SystemStreamPartition], stores: Iterable[str]) -> frozenset[str]:
    """Every name samzamp may use in the group of a task reading ``ssps`` with ``stores``."""
    names = set(TASK_METRICS)
    names.update(f"{ssp_label(ssp)}-offset" for ssp in ssps)
    for store in stores:
        names.update((f"{store}-restored-records", f"{store}-reverted-records"))
    return frozenset(names)
