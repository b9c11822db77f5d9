"""Standalone mode's settings: ``job.coordinator.factory = "zk"`` and Samza's ZooKeeper keys.

With ``zk`` every process started with the job's config is a processor of one job, coordinated
through ZooKeeper (Samza's ZkJobCoordinator); with ``passthrough`` the one process owns every task.
``zk_settings`` reads the keys standalone mode uses, with Samza's defaults, into ``ZkSettings``;
their bounds are checked with every other key (``samzamp.config.keys``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from samzamp.api.errors import ConfigError
from samzamp.config.config import Config
from samzamp.config.keys import ConfigWarning

__all__ = [
    "COORDINATOR_FACTORIES",
    "LOCATION_ID_PROVIDERS",
    "ZK_ONLY_KEYS",
    "ZkSettings",
    "coordinator_factory",
    "standalone_warnings",
    "zk_settings",
]

# job.coordinator.factory: samzamp's names and Samza's classes, to the coordinator they mean.
COORDINATOR_FACTORIES = {
    "passthrough": "passthrough",
    "org.apache.samza.standalone.PassthroughJobCoordinatorFactory": "passthrough",
    "zk": "zk",
    "org.apache.samza.zk.ZkJobCoordinatorFactory": "zk",
}
# locationid.provider.factory: samzamp's names and Samza's classes, to the provider they mean
# (samzamp.coordinator.location has a provider for each).
LOCATION_ID_PROVIDERS = {
    "hostname": "hostname",
    "DefaultLocationIdProviderFactory": "hostname",
    "org.apache.samza.runtime.DefaultLocationIdProviderFactory": "hostname",
}
_HOST_AFFINITY = "job.host-affinity.enabled"
_LEGACY_HOST_AFFINITY = "yarn.samza.host-affinity.enabled"
# What a processor id may not hold: it names znodes (a '/' would be a path) and Samza's processor
# data is "<host> <processorId>", split at the space.
_BAD_PROCESSOR_ID = re.compile(r"[\s/]")
# Keys that only standalone mode reads: set with passthrough they do nothing, which a user is told.
ZK_ONLY_KEYS = (
    "job.coordinator.zk.connect",
    "job.coordinator.zk.session.timeout.ms",
    "job.coordinator.zk.connection.timeout.ms",
    "job.coordinator.zk.consensus.timeout.ms",
    "job.debounce.time.ms",
    _HOST_AFFINITY,
    _LEGACY_HOST_AFFINITY,
    "locationid.provider.factory",
    "processor.id",
    "processor.location.id",
)


@dataclass(frozen=True)
class ZkSettings:
    """What a standalone processor reads: where ZooKeeper is, its timeouts, host affinity, and who
    and where this processor is (``None``: generated, see ``samzamp.coordinator.location``)."""

    connect: str  # job.coordinator.zk.connect: host:port[,host:port...][/chroot]
    session_timeout_ms: int = 30000  # a processor silent this long is gone (its node expires)
    connection_timeout_ms: int = 60000  # how long connecting may take before the processor fails
    consensus_timeout_ms: int = 40000  # how long the barrier waits for every processor to join
    debounce_ms: int = 20000  # processor changes this close together make one new job model
    host_affinity: bool = False  # place a task at the location where it last ran (its local state)
    location_id_provider: str = "hostname"  # one of LOCATION_ID_PROVIDERS' values
    processor_id: str | None = None  # processor.id
    location_id: str | None = None  # processor.location.id: overrides the provider


def coordinator_factory(config: Config) -> str:
    """job.coordinator.factory as ``passthrough`` or ``zk`` (Samza's class names accepted)."""
    raw = config.get_str("job.coordinator.factory") or "passthrough"
    factory = COORDINATOR_FACTORIES.get(raw)
    if factory is None:
        raise ConfigError(
            "job.coordinator.factory",
            f"unknown coordinator {raw!r}; use passthrough (one process) or zk (standalone mode)",
        )
    return factory


def zk_settings(config: Config) -> ZkSettings | None:
    """Standalone mode's settings, or None when the job is passthrough."""
    if coordinator_factory(config) != "zk":
        return None
    connect = config.require_str(
        "job.coordinator.zk.connect",
        'with job.coordinator.factory = "zk", name the ZooKeeper ensemble, e.g. "zk1:2181,zk2:2181/samza"',
    )
    provider_raw = config.get_str("locationid.provider.factory") or "hostname"
    provider = LOCATION_ID_PROVIDERS.get(provider_raw)
    if provider is None:
        raise ConfigError(
            "locationid.provider.factory",
            f"unknown location id provider {provider_raw!r}; use hostname (Samza's DefaultLocationIdProviderFactory)"
            ", or set processor.location.id",
        )
    return ZkSettings(
        connect=connect,
        session_timeout_ms=config.get_int("job.coordinator.zk.session.timeout.ms", 30000),
        connection_timeout_ms=config.get_int("job.coordinator.zk.connection.timeout.ms", 60000),
        consensus_timeout_ms=config.get_int("job.coordinator.zk.consensus.timeout.ms", 40000),
        debounce_ms=config.get_int("job.debounce.time.ms", 20000),
        host_affinity=_host_affinity(config),
        location_id_provider=provider,
        processor_id=_processor_id(config),
        location_id=_non_blank(config, "processor.location.id"),
    )


def standalone_warnings(config: Config) -> list[ConfigWarning]:
    """Keys that are accepted but do nothing for this job's coordinator."""
    if coordinator_factory(config) == "zk":
        if "job.container.count" in config:
            return [
                ConfigWarning(
                    "job.container.count",
                    "is ignored in standalone mode (as Samza ignores it): the job has as many processors as "
                    "are started with its config",
                )
            ]
        return []
    problem = 'is read only with job.coordinator.factory = "zk" (standalone mode); this job is passthrough'
    # Host affinity off is what a passthrough job does anyway: a config brought from Samza often says so.
    off = {k for k in (_HOST_AFFINITY, _LEGACY_HOST_AFFINITY) if k in config and not config.get_bool(k, False)}
    return [ConfigWarning(key, problem) for key in ZK_ONLY_KEYS if key in config and key not in off]


def _host_affinity(config: Config) -> bool:
    """job.host-affinity.enabled, else Samza's legacy yarn.samza.host-affinity.enabled; both must agree."""
    new = config.get_bool(_HOST_AFFINITY, False) if _HOST_AFFINITY in config else None
    legacy = config.get_bool(_LEGACY_HOST_AFFINITY, False) if _LEGACY_HOST_AFFINITY in config else None
    if new is not None and legacy is not None and new != legacy:
        raise ConfigError(
            _LEGACY_HOST_AFFINITY,
            f"is {str(legacy).lower()} but {_HOST_AFFINITY} is {str(new).lower()}; "
            f"{_LEGACY_HOST_AFFINITY} is its legacy name: keep only {_HOST_AFFINITY}",
        )
    return bool(new if new is not None else legacy)


def _processor_id(config: Config) -> str | None:
    value = _non_blank(config, "processor.id")
    if value is not None and (_BAD_PROCESSOR_ID.search(value) or value in (".", "..")):
        raise ConfigError(
            "processor.id",
            f"{value!r} cannot name a processor: use no spaces and no '/' (or leave it unset to have one generated)",
        )
    return value


def _non_blank(config: Config, key: str) -> str | None:
    value = config.get_str(key)
    if value is not None and not value:
        raise ConfigError(key, "is empty: set a value or remove the key")
    return value
