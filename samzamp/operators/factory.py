"""The task class of a job: task.class, or the operator-graph task of app.class."""

from __future__ import annotations

from samzamp.config.settings import JobSettings
from samzamp.config.validate import load_task_class
from samzamp.operators.graph_task import task_class

__all__ = ["job_task_class"]


def job_task_class(settings: JobSettings) -> type:
    """The class the job's tasks are made of (called with no arguments, as the runtime does)."""
    if settings.application is not None:
        return task_class(settings.application)
    return load_task_class(settings.task.task_class)
