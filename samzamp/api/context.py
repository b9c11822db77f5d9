"""What a task's ``init`` receives."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from samzamp.api.envelope import SystemStreamPartition
from samzamp.api.metrics import TaskMetrics

__all__ = ["TaskContext"]


class TaskContext:
    """The task's name, its input partitions, the job's config, its stores and its metrics.

    ``config`` is the whole flattened config (Samza's dotted keys to values). ``get_store`` returns
    a store named under ``stores.<name>`` in the config, opened for this task only. ``metrics`` is
    the task's own metrics registry (``TaskMetrics``, Samza's task metrics registry):
    ``context.metrics.counter(name)``, ``.gauge(name, fn=None)`` and ``.timer(name)``, in the
    task's group ``TaskName-<task>``, reported with samzamp's metrics wherever they go (the metrics
    log, the snapshot reporter), from a worker process too; ``samzamp.testing``'s result reads them
    (``result.task_metrics(task)``). ``task_model`` is the task's model in the job (Samza's
    TaskModel: name, SSPs, changelog partition) and ``registry`` the metrics registry of the process
    the task runs in, where samzamp's operators count (both internal for now).
    """

    def __init__(
        self,
        task_name: str,
        ssps: frozenset[SystemStreamPartition],
        config: Mapping[str, Any],
        stores: Mapping[str, Any] | None = None,
        *,
        task_model: Any = None,
        metrics: TaskMetrics | None = None,
        registry: Any = None,
    ) -> None:
        """``metrics``: None gives the task metrics of their own, kept by this context only (a
        task's unit test that builds its context)."""
        self.task_name = task_name
        self.ssps = ssps
        self.config = config
        self._stores = dict(stores or {})
        self.task_model = task_model
        self.metrics = metrics if metrics is not None else TaskMetrics(task_name)
        self.registry = registry

    def get_store(self, name: str) -> Any:
        """The task's store ``name``; KeyError naming the configured stores if there is none."""
        try:
            return self._stores[name]
        except KeyError:
            known = ", ".join(sorted(self._stores)) or "none"
            msg = (
                f"task {self.task_name!r} has no store {name!r} (configured stores: {known}); add stores.{name}.factory"
            )
            raise KeyError(msg) from None
