"""The job models a standalone job's leader publishes, one version after another.

``jobModels/<version>`` holds a ``PublishedJobModel``: msgspec JSON of the model with the format it
was written in, so a processor of another samzamp version fails clearly (``ZkProtocolError``)
instead of running a model it reads differently. ``jobModelVersion`` names the latest published
version; it is written with a compare-and-set on its znode version, so two leaders (one of them
about to learn that it no longer is) cannot both publish the same version. The last ``KEEP``
versions are kept with their barriers, as Samza keeps 10.
"""

from __future__ import annotations

import logging

import msgspec
from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, NotEmptyError

from samzamp.coordinator.zk.barrier import create_barrier
from samzamp.coordinator.zk.errors import ZkProtocolError
from samzamp.coordinator.zk.keys import ZkKeys
from samzamp.coordinator.zk.values import delete_value, read_value, write_value
from samzamp.model.job_model import JobModel

__all__ = [
    "FORMAT",
    "KEEP",
    "PublishedJobModel",
    "cleanup",
    "publish",
    "read_job_model",
    "read_version",
    "set_active_version",
]

log = logging.getLogger(__name__)

FORMAT = "samzamp-job-model-1"
KEEP = 10


class PublishedJobModel(msgspec.Struct, frozen=True):
    """A job model as a leader writes it: ``format`` first, read before the rest is trusted."""

    format: str
    version: int
    model: JobModel


class _Format(msgspec.Struct):
    format: str = ""


def _read_int(client: KazooClient, path: str) -> int | None:
    try:
        raw, _ = client.get(path)
    except NoNodeError:
        return None
    try:
        return int(raw.decode())
    except (UnicodeDecodeError, ValueError):
        raise ZkProtocolError(path, raw.decode("utf-8", "replace")[:40], "a version number") from None


def read_version(client: KazooClient, keys: ZkKeys) -> int | None:
    """The latest published version (None before the first)."""
    return _read_int(client, keys.job_model_version)


def read_job_model(client: KazooClient, keys: ZkKeys, version: int) -> JobModel:
    """The job model of ``version``; ZkProtocolError when another format (another samzamp) wrote it."""
    path = keys.job_model(version)
    raw = read_value(client, path)
    if raw is None:
        raise ZkProtocolError(path, "nothing", FORMAT)
    try:
        found = msgspec.json.decode(raw, type=_Format).format
    except msgspec.DecodeError:
        found = "not samzamp's JSON"
    if found != FORMAT:
        raise ZkProtocolError(path, found or "no format", FORMAT)
    try:
        return msgspec.json.decode(raw, type=PublishedJobModel).model
    except msgspec.DecodeError as e:
        raise ZkProtocolError(path, f"{FORMAT} that does not decode ({e})", FORMAT) from e


def publish(client: KazooClient, keys: ZkKeys, model: JobModel) -> int:
    """Write ``model`` as the next version, with its barrier (state NEW, waiting for every processor
    of the model), then announce it in ``jobModelVersion``; the version. Raises BadVersionError
    when another leader published meanwhile."""
    client.ensure_path(keys.job_model_generation_dir)
    try:
        raw, stat = client.get(keys.job_model_version)
        latest, expected = int(raw.decode()), stat.version
    except NoNodeError:
        latest, expected = 0, -1
    version = latest + 1
    published = PublishedJobModel(FORMAT, version, msgspec.structs.replace(model, generation=version))
    write_value(client, keys.job_model(version), msgspec.json.encode(published))
    create_barrier(client, keys, version, sorted(model.containers))
    if expected < 0:
        try:
            client.create(keys.job_model_version, str(version).encode())
        except NodeExistsError:
            raise BadVersionError() from None
    else:
        client.set(keys.job_model_version, str(version).encode(), version=expected)
    return version


def set_active_version(client: KazooClient, keys: ZkKeys, version: int) -> None:
    """Record ``version`` as the one every processor agreed on."""
    try:
        client.set(keys.active_job_model_version, str(version).encode())
    except NoNodeError:
        client.create(keys.active_job_model_version, str(version).encode(), makepath=True)


def cleanup(client: KazooClient, keys: ZkKeys, latest: int) -> None:
    """Delete job models and barriers older than the last ``KEEP`` versions (best effort)."""
    for directory, path_of in ((keys.job_models_dir, keys.job_model), (keys.barriers_dir, keys.barrier)):
        try:
            children = client.get_children(directory)
        except NoNodeError:
            continue
        for child in children:
            digits = child.rsplit("_", 1)[-1]
            if not digits.isdigit() or int(digits) > latest - KEEP:
                continue
            try:
                if directory == keys.job_models_dir:
                    delete_value(client, path_of(int(digits)))
                else:
                    client.delete(path_of(int(digits)), recursive=True)
            except (NoNodeError, NotEmptyError) as e:
                log.debug("cleanup of %s/%s: %s", directory, child, e)
