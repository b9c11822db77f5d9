"""A standalone job's current job model and live processors as a tool reads them from ZooKeeper,
without joining the job: no node is created, written or watched (``samzamp job-model show``).

The version shown is the one every processor agreed on (``activeJobModelVersion``), else, before
any barrier completed, the latest published one; the latest is reported too, since a newer version
may be in its barrier.
"""

from __future__ import annotations

from dataclasses import dataclass

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoNodeError

from samzamp.api.errors import SystemFailureError
from samzamp.config.standalone import ZkSettings
from samzamp.coordinator.zk.client import connect
from samzamp.coordinator.zk.job_models import read_job_model, read_version
from samzamp.coordinator.zk.keys import ZkKeys
from samzamp.coordinator.zk.registry import ProcessorData, read_processors
from samzamp.model.job_model import JobModel

__all__ = ["PublishedModelView", "read_model_view", "read_published_model"]


@dataclass(frozen=True)
class PublishedModelView:
    """What ZooKeeper holds of a standalone job's model: ``version`` (the one shown, with its
    ``model``; None before the first was published), ``active`` and ``latest`` as recorded, and the
    live processors by their ZooKeeper node (their id, location, host and pid)."""

    where: str
    version: int | None
    active: int | None
    latest: int | None
    model: JobModel | None
    processors: dict[str, ProcessorData]


def _active_version(client: KazooClient, keys: ZkKeys) -> int | None:
    try:
        raw, _ = client.get(keys.active_job_model_version)
    except NoNodeError:
        return None
    text = raw.decode(errors="replace").strip()
    return int(text) if text.isdigit() else None


def read_published_model(zk: ZkSettings, keys: ZkKeys) -> PublishedModelView:
    """Read the job's current model and live processors (see the module docstring). Raises
    ``SystemFailureError`` when ZooKeeper cannot be reached or fails a read, ``ZkProtocolError``
    when another samzamp version wrote the model."""
    client = connect(zk.connect, zk.session_timeout_ms, zk.connection_timeout_ms)
    try:
        return read_model_view(client, keys, f"ZooKeeper {zk.connect} {keys.root}")
    finally:
        client.stop()
        client.close()


def read_model_view(client: KazooClient, keys: ZkKeys, where: str) -> PublishedModelView:
    """``read_published_model`` with a client the caller holds (and keeps); ``where`` names it in errors."""
    try:
        latest = read_version(client, keys)
        active = _active_version(client, keys)
        version = active if active is not None else latest
        model = read_job_model(client, keys, version) if version is not None else None
        try:
            processors = read_processors(client, keys)
        except NoNodeError:
            processors = {}
    except KazooException as e:
        raise SystemFailureError(
            f"reading the job model from {where} failed: {type(e).__name__}{': ' + str(e) if str(e) else ''}; "
            "check that ZooKeeper (job.coordinator.zk.connect) is reachable"
        ) from e
    return PublishedModelView(where, version, active, latest, model, processors)
