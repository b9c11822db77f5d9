"""Who a standalone processor is and where it runs: its processor id and its location id.

The location id is what host affinity compares: a task is placed back at the location where it last
ran, where its local stores are. It is ``processor.location.id`` when set, else what
``locationid.provider.factory`` provides: by default (``hostname``, Samza's
``DefaultLocationIdProviderFactory``) the local host name. Setting ``processor.location.id`` lets
several processes on one host stand for several hosts (each with its own store directory), as
tests and local trials need.

The processor id names the processor in ZooKeeper and in the job model: ``processor.id`` when set
(it must then be unique among the job's running processors), else generated as
``<host name>-<pid>-<8 hex digits>``: readable in logs, and unique per process start, since the
random part differs even when a restarted process gets the same pid.
"""

from __future__ import annotations

import os
import secrets
import socket
from collections.abc import Callable, Mapping

from samzamp.api.errors import ConfigError
from samzamp.config.standalone import ZkSettings

__all__ = ["LOCATION_ID_PROVIDERS", "location_id", "processor_id"]

# Each provider that samzamp.config.standalone.LOCATION_ID_PROVIDERS names, by that name.
LOCATION_ID_PROVIDERS: Mapping[str, Callable[[], str]] = {"hostname": socket.gethostname}


def location_id(zk: ZkSettings) -> str:
    """This processor's location id: ``processor.location.id``, else its location id provider's.

    ConfigError naming locationid.provider.factory if ``zk`` names a provider samzamp does not have
    (settings read from a config never do: the config's check refuses them first).
    """
    if zk.location_id is not None:
        return zk.location_id
    provider = LOCATION_ID_PROVIDERS.get(zk.location_id_provider)
    if provider is None:
        raise ConfigError(
            "locationid.provider.factory",
            f"unknown location id provider {zk.location_id_provider!r}; use hostname, or set processor.location.id",
        )
    return provider()


def processor_id(zk: ZkSettings) -> str:
    """This processor's id: ``processor.id``, else a new ``<host>-<pid>-<8 hex digits>`` on each call."""
    if zk.processor_id is not None:
        return zk.processor_id
    return f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(4)}"
