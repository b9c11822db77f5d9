"""The job's metadata store: small key/value records every container and tool of a job can read.

``MetadataStore`` is the interface (Samza's MetadataStore): bytes keys' values under a namespace,
``get``/``put``/``delete``/``all``. ``CoordinatorStreamStore`` keeps them in the job's coordinator
stream, a one-partition compacted topic named as Samza names it (``__samza_coordinator_<job>_<id>``):

- the record key is JSON ``[1, namespace, key]`` (Samza's CoordinatorStreamKeySerde layout), so a
  compacted topic keeps the newest value of each (namespace, key);
- a delete is a null value (a tombstone);
- values are whatever the caller encodes (samzamp's are msgspec JSON).

Reads go back to the broker: each read reads the topic to its end, so what another process wrote
is seen at the next read. The first read of a ``CoordinatorStreamStore`` starts at the oldest record;
later ones start where the previous one stopped and apply only what was written since (a standalone
job's leader reads the task history, two records per task, at every rebalance), through
``samzamp.systems.read_since``, which also reads a batch held back by the broker again and reads a
recreated topic whole.
Writes wait for the broker's acknowledgement.

It works on any system with a ``SystemAdmin`` and a ``SystemProducer`` (Kafka, in-memory). The
ZooKeeper implementation (standalone mode) will implement the same ``MetadataStore`` protocol.
"""

from __future__ import annotations

import logging
import threading
from typing import Protocol

import msgspec

from samzamp.api.errors import SystemFailureError
from samzamp.systems.base import SystemAdmin, SystemProducer
from samzamp.systems.read_since import ReadPosition, read_since

__all__ = [
    "CoordinatorStreamStore",
    "MetadataStore",
    "NamespacedStore",
    "decode_coordinator_key",
    "encode_coordinator_key",
]

log = logging.getLogger(__name__)

KEY_VERSION = 1
ACK_TIMEOUT_S = 30.0


def encode_coordinator_key(namespace: str, key: str) -> bytes:
    return msgspec.json.encode([KEY_VERSION, namespace, key])


def decode_coordinator_key(raw: bytes) -> tuple[str, str] | None:
    """(namespace, key) of a coordinator stream record key; None for a key this version cannot read."""
    try:
        parts = msgspec.json.decode(raw)
    except msgspec.DecodeError:
        return None
    if not isinstance(parts, list) or len(parts) != 3 or parts[0] != KEY_VERSION:
        return None
    if not isinstance(parts[1], str) or not isinstance(parts[2], str):
        return None
    return parts[1], parts[2]


class MetadataStore(Protocol):
    """Key/value records of one namespace, shared by every process of a job."""

    def get(self, key: str) -> bytes | None:
        """The newest value of ``key`` (None when absent or deleted)."""

    def put(self, key: str, value: bytes) -> None:
        """Write ``value``; durable when this returns."""

    def put_all(self, values: dict[str, bytes]) -> None:
        """Write every value; all are durable when this returns."""

    def delete(self, key: str) -> None:
        """Delete ``key``; durable when this returns."""

    def all(self) -> dict[str, bytes]:
        """Every key of the namespace with its newest value."""


class CoordinatorStreamStore:
    """The coordinator stream of one job, all namespaces. ``namespace(ns)`` gives a ``MetadataStore``."""

    def __init__(self, admin: SystemAdmin, producer: SystemProducer, topic: str, replication_factor: int = 1) -> None:
        self._admin = admin
        self._producer = producer
        self.topic = topic
        self._replication = replication_factor
        # The topic as far as ``read`` read it: the live values, and where the next read starts.
        self._values: dict[tuple[str, str], bytes] = {}
        self._position = ReadPosition()
        self._read_lock = threading.Lock()

    def create_topic(self) -> None:
        """Create the topic (one partition, compacted) if it does not exist."""
        counts = self._admin.partition_counts([self.topic])
        if self.topic in counts:
            return
        self._admin.create_stream(self.topic, 1, self._replication, {"cleanup.policy": "compact"})

    def exists(self) -> bool:
        return self.topic in self._admin.partition_counts([self.topic])

    def namespace(self, namespace: str) -> NamespacedStore:
        return NamespacedStore(self, namespace)

    def read(self) -> dict[tuple[str, str], bytes]:
        """Every live (namespace, key) with its newest value, read from the broker now (only what
        was written since the last read: the module docstring). Any thread; the caller owns the dict."""
        with self._read_lock:
            # Into a copy: a read that fails leaves what was read before as it was.
            values = dict(self._values)
            read = read_since(self._admin, self.topic, 0, self._position)
            if read.whole:
                values.clear()
            for _offset, key_bytes, value, _ts in read.records:
                key = decode_coordinator_key(key_bytes) if key_bytes is not None else None
                if key is None:
                    continue
                if value is None:
                    values.pop(key, None)
                else:
                    values[key] = value
            self._values, self._position = values, read.next
            return dict(values)

    def namespaces(self, *names: str) -> dict[str, dict[str, bytes]]:
        """The keys and values of each of ``names``, from one read (``read``)."""
        out: dict[str, dict[str, bytes]] = {name: {} for name in names}
        for (ns, key), value in self.read().items():
            if ns in out:
                out[ns][key] = value
        return out

    def write(self, namespace: str, key: str, value: bytes | None) -> None:
        """Write (or with ``None`` delete) one record and wait for the acknowledgement."""
        self.write_all(namespace, {key: value})

    def write_all(self, namespace: str, values: dict[str, bytes | None]) -> None:
        """Write (``None``: delete) records, in order, and wait for the acknowledgement of all."""
        for key, value in values.items():
            self._producer.send(self.topic, encode_coordinator_key(namespace, key), value, 0, None)
        remaining = self._producer.flush(ACK_TIMEOUT_S)
        errors = self._producer.take_errors()
        if remaining or errors:
            why = errors[0] if errors else f"no acknowledgement within {ACK_TIMEOUT_S:.0f} s"
            keys = ", ".join(values) if len(values) <= 3 else f"{len(values)} keys"
            raise SystemFailureError(f"writing {namespace}/{keys} to the coordinator stream {self.topic}: {why}")


class NamespacedStore:
    """One namespace of a ``CoordinatorStreamStore`` (Samza's NamespaceAwareCoordinatorStreamStore)."""

    def __init__(self, stream: CoordinatorStreamStore, namespace: str) -> None:
        self._stream = stream
        self.namespace = namespace

    def get(self, key: str) -> bytes | None:
        return self.all().get(key)

    def put(self, key: str, value: bytes) -> None:
        self._stream.write(self.namespace, key, value)

    def put_all(self, values: dict[str, bytes]) -> None:
        self._stream.write_all(self.namespace, dict(values))

    def delete(self, key: str) -> None:
        self._stream.write(self.namespace, key, None)

    def all(self) -> dict[str, bytes]:
        return {k: v for (ns, k), v in self._stream.read().items() if ns == self.namespace}
