"""The one validation pass that runs before the container connects to anything."""

from __future__ import annotations

import dataclasses
import inspect

from samzamp.api.errors import ConfigError
from samzamp.api.task import AsyncStreamTask, StreamTask
from samzamp.config.config import Config
from samzamp.config.metrics_reporters import reporter_warnings, snapshot_reporters
from samzamp.config.schema import check_keys, spec_for
from samzamp.config.settings import JobSettings
from samzamp.serde.registry import SerdeRegistry, load_object

__all__ = ["load_task_class", "validate"]


def load_task_class(path: str) -> type:
    """Import task.class and check it is a StreamTask or AsyncStreamTask."""
    cls = load_object(path, "task.class")
    if not inspect.isclass(cls):
        raise ConfigError("task.class", f"{path!r} is not a class")
    if not issubclass(cls, (StreamTask, AsyncStreamTask)):
        raise ConfigError("task.class", f"{path!r} must subclass samzamp.StreamTask or samzamp.AsyncStreamTask")
    if inspect.isabstract(cls):
        missing = ", ".join(sorted(getattr(cls, "__abstractmethods__", ())))
        raise ConfigError("task.class", f"{path!r} does not implement {missing}")
    return cls


def validate(config: Config) -> JobSettings:
    """Check every key (names, types, cross-references, serdes, the task class); return the typed view.

    Keys that are accepted but worth a word are in ``settings.warnings`` (the container logs them).
    """
    warnings = check_keys(config)
    settings = JobSettings.from_config(config)
    snapshot_reporters(settings)  # checked here; the processor reads them again when it starts them
    warnings += reporter_warnings(settings)
    settings = dataclasses.replace(settings, warnings=(*warnings, *settings.warnings))
    serdes = SerdeRegistry(settings.serializers)
    for key in config:
        spec = spec_for(key)  # a task's own key that happens to end in .serde is not a serde
        if spec is not None and spec.pattern.endswith(".serde"):
            serdes.get(str(config[key]), key)
    for ss in settings.task.inputs:
        stream = settings.stream(ss)
        for kind, name in (("key", stream.key_serde), ("msg", stream.msg_serde)):
            if name is not None:
                serdes.get(name, f"streams.{stream.stream_id}.samza.{kind}.serde")
    if settings.application is None:  # an application's describe ran in from_config
        load_task_class(settings.task.task_class)
    return settings
