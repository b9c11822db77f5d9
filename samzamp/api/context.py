"""What a task's ``init`` receives."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from samzamp.api.envelope import SystemStreamPartition

__all__ = ["TaskContext"]


class TaskContext:
    """The task's name, its input partitions, the job's config and its stores.

    ``config`` is the whole flattened config (Samza's dotted keys to values). ``get_store`` returns
    a store named under ``stores.<name>`` in the config, opened for this task only.
    ``task_model`` is the task's model in the job (Samza's TaskModel: name, SSPs, changelog
    partition); ``metrics`` the registry of the process the task runs in (internal for now).
    """

    def __init__(
        self,
        task_name: str,
        ssps: frozenset[SystemStreamPartition],
        config: Mapping[str, Any],
        stores: Mapping[str, Any] | None = None,
        *,
        task_model: Any = None,
        metrics: Any = None,
    ) -> None:
        self.task_name = task_name
        self.ssps = ssps
        self.config = config
        self._stores = dict(stores or {})
        self.task_model = task_model
        self.metrics = metrics

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
