"""The processor's metrics reporters, made from the config: the metrics log (metrics.log.interval.ms)
and each snapshot reporter of metrics.reporters, over the processor's registry.

A snapshot reporter sends through a producer of its own on its stream's system (``Systems.
metrics_producer``), so its flushes never wait for task outputs nor its failures reach a commit. Its
stream is created when missing, as the job's other output streams are (``streams.<id>.partitions``,
else the system's default partition count); a stream that cannot be created or read at start is
tried again at each report, so a broker that is away costs reports, never the job.
"""

from __future__ import annotations

import importlib
import logging
import os
import socket
import sys
import threading
import time
from collections.abc import Callable

from samzamp._version import __version__
from samzamp.api.envelope import SystemStream
from samzamp.api.errors import SystemFailureError
from samzamp.config.metrics_reporters import SnapshotReporterSettings, snapshot_reporters
from samzamp.config.settings import JobSettings
from samzamp.metrics.registry import MetricsRegistry
from samzamp.metrics.reporting import LogReporter, MetricsReporter
from samzamp.metrics.snapshot import SnapshotHeader, SnapshotReporter
from samzamp.processor.systems import Systems

__all__ = ["metrics_reporters", "task_version"]

log = logging.getLogger(__name__)

DEFAULT_VERSION = "0.0.1"  # Samza's, for a task class whose jar names no version


def metrics_reporters(
    settings: JobSettings, registry: MetricsRegistry, systems: Systems, epoch_id: Callable[[], str | None]
) -> list[MetricsReporter]:
    """The reporters the config asks for, ready to run (``samzamp.metrics.reporting.Reporting``).
    Creates each snapshot reporter's stream when missing: call it off the event loop, once the
    systems started. ``epoch_id``: the run id, for the snapshots' ``samza-epoch-id``."""
    reporters: list[MetricsReporter] = []
    if settings.metrics_log_interval_ms > 0:
        reporters.append(LogReporter(registry, settings.metrics_log_interval_ms / 1000))
    snapshot = snapshot_reporters(settings)
    if not snapshot:
        return reporters
    header = SnapshotHeader(
        job_name=settings.name,
        job_id=settings.id,
        container_name=f"samza-container-{settings.zk.processor_id if settings.zk and settings.zk.processor_id else 0}",
        exec_env_container_id=os.environ.get("EXECUTION_ENV_CONTAINER_ID", ""),
        version=task_version(settings),
        samza_version=f"samzamp-{__version__}",
        host=socket.gethostname(),
        reset_time=int(time.time() * 1000),
    )
    epoch = os.environ.get("SAMZA_EPOCH_ID")
    for r in snapshot:
        reporters.append(
            SnapshotReporter(
                r.name,
                registry,
                header,
                r.stream.stream,
                systems.metrics_producer(r.stream.system),
                _PartitionCount(settings, systems, r),
                interval_s=r.interval_s,
                blacklist=r.blacklist,
                epoch_id=(lambda: epoch) if epoch else epoch_id,
            )
        )
        log.info(
            "metrics reporter %r: a snapshot to %s every %d s%s",
            r.name,
            r.stream,
            r.interval_s,
            f" (leaving out {r.blacklist.pattern!r})" if r.blacklist is not None else "",
        )
    return reporters


def task_version(settings: JobSettings) -> str:
    """The ``version`` of the snapshots' header: ``__version__`` of the module of the task class (or
    of the application class), else of its top-level package, else Samza's default ``0.0.1``."""
    path = settings.application.app_class if settings.application is not None else settings.task.task_class
    module_name = path.partition(":")[0]
    for name in (module_name, module_name.partition(".")[0]):
        module = sys.modules.get(name)
        if module is None:
            try:
                module = importlib.import_module(name)
            except Exception:
                continue
        version = getattr(module, "__version__", None)
        if isinstance(version, str) and version:
            return version
    return DEFAULT_VERSION


class _PartitionCount:
    """The partition count of a reporter's stream, created when missing; asked again until it answers."""

    def __init__(self, settings: JobSettings, systems: Systems, reporter: SnapshotReporterSettings) -> None:
        self._settings = settings
        self._systems = systems
        self._stream = reporter.stream
        self._count: int | None = None
        self._lock = threading.Lock()  # the first ask is on the loop's executor; reports ask on theirs
        try:
            self()
        except Exception as e:
            log.warning(
                "metrics reporter %r: stream %s not ready, tried again at each report: %s",
                reporter.name,
                reporter.stream,
                e,
            )

    def __call__(self) -> int:
        with self._lock:
            if self._count is None:
                self._count = _ensure_stream(self._settings, self._systems, self._stream)
            return self._count


def _ensure_stream(settings: JobSettings, systems: Systems, ss: SystemStream) -> int:
    admin = systems.admins[ss.system]
    count = admin.partition_counts([ss.stream]).get(ss.stream)
    if count is None:
        stream, system = settings.stream(ss), settings.systems[ss.system]
        admin.create_stream(
            ss.stream, stream.partitions or system.default_partitions, system.replication_factor, stream.topic_configs
        )
        count = admin.partition_counts([ss.stream]).get(ss.stream)
    if not count:
        raise SystemFailureError(f"stream {ss} does not exist and could not be created")
    return count
