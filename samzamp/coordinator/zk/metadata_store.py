"""The job's metadata store on ZooKeeper (Samza's ZkMetadataStore): the ``MetadataStore`` of a
standalone job, in place of the coordinator stream.

``ZkMetadataStores(client, keys).namespace(ns)`` gives the store of one namespace, as
``CoordinatorStreamStore.namespace`` does, so a caller swaps one for the other. Each key is one znode,
``<root>/metadata/<namespace>/<key>`` (names encoded by ``keys.encode_name``), its value written by
``values``: of any size, whole or not at all, checked on read. A write is acknowledged by ZooKeeper
after its transaction log is on disk, so it is durable when the call returns. Every process of the
job sees a write at its next read (reads go to the server; nothing is cached).

``put_all`` writes key after key: each key whole, the set not atomically (nor is the coordinator
stream's). A failure talking to ZooKeeper raises ``SystemFailureError`` naming the namespace and key.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoNodeError

from samzamp.api.errors import SystemFailureError
from samzamp.coordinator.zk.keys import ZkKeys, decode_name, encode_name
from samzamp.coordinator.zk.values import delete_value, read_value, write_value

__all__ = ["ZkMetadataStore", "ZkMetadataStores"]


class ZkMetadataStore:
    """The keys of one namespace under ``path``: a ``MetadataStore`` (get/put/put_all/delete/all)."""

    def __init__(self, client: KazooClient, path: str, namespace: str) -> None:
        self._client = client
        self.path = path
        self.namespace = namespace

    def _node(self, key: str) -> str:
        return f"{self.path}/{encode_name(key)}"

    @contextmanager
    def _talking(self, what: str) -> Iterator[None]:
        try:
            yield
        except KazooException as e:
            raise SystemFailureError(
                f"ZooKeeper metadata store, namespace {self.namespace!r}: {what} failed: {type(e).__name__}"
                f"{': ' + str(e) if str(e) else ''}; check that ZooKeeper (job.coordinator.zk.connect) is reachable"
            ) from e

    def get(self, key: str) -> bytes | None:
        """The value of ``key`` (None when absent)."""
        with self._talking(f"reading {key!r}"):
            return read_value(self._client, self._node(key))

    def put(self, key: str, value: bytes) -> None:
        """Write ``value``; durable when this returns."""
        with self._talking(f"writing {key!r}"):
            write_value(self._client, self._node(key), value)

    def put_all(self, values: dict[str, bytes]) -> None:
        """Write every value, one key after another; all are durable when this returns."""
        for key, value in values.items():
            self.put(key, value)

    def delete(self, key: str) -> None:
        """Delete ``key`` (nothing when absent); durable when this returns."""
        with self._talking(f"deleting {key!r}"):
            delete_value(self._client, self._node(key))

    def all(self) -> dict[str, bytes]:
        """Every key of the namespace with its value, read now."""
        with self._talking("listing its keys"):
            try:
                children = self._client.get_children(self.path)
            except NoNodeError:
                return {}
            out: dict[str, bytes] = {}
            for child in sorted(children):
                value = read_value(self._client, f"{self.path}/{child}")
                if value is not None:
                    out[decode_name(child)] = value
            return out


class ZkMetadataStores:
    """Every namespace of one job's metadata on ZooKeeper; ``namespace(ns)`` gives one store."""

    def __init__(self, client: KazooClient, keys: ZkKeys) -> None:
        self._client = client
        self.keys = keys

    def namespace(self, namespace: str) -> ZkMetadataStore:
        return ZkMetadataStore(self._client, self.keys.metadata_dir(namespace), namespace)
