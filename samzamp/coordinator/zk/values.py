"""Values of any size on one znode, checked on read and replaced atomically.

A znode holds at most 1 MiB (jute.maxbuffer), and a job model of many tasks can be larger. A value
of up to ``SEGMENT_BYTES`` (1020 * 1020 bytes, Samza's segment size) is stored in the node's own data
behind a header; a larger one is split into segments written as children of a new generation node
``g-<seq>`` (a sequential child of the value's node), and only then is the node's header switched to
that generation, in one transaction that also checks the generation still exists. Generations the
header no longer names are deleted afterwards, in a transaction that checks the header did not
change meanwhile. So a reader sees the old value or the new one, never a mix: it reads the header,
then the segments it names; if a segment is gone (a newer write deleted its generation) it reads the
header again and retries. A transaction of all the segments is not an option: a ZooKeeper
transaction is one request, bounded by the same 1 MiB.

Every value carries its length and CRC32 in the header, checked on read: a torn or corrupt value
raises ``ZkValueError`` instead of returning garbage. A node with empty data holds no value (a node
made as a parent, or by a write that has not switched its header yet). Delete removes the node and
all its generations in one transaction. Nothing read is unpickled: the header is a fixed binary
struct, the value plain bytes.

Header: ``b"SZV" + format byte`` (``I`` inline or ``S`` segmented), CRC32 and length of the value;
a segmented one adds the segment count and the generation's name.
"""

from __future__ import annotations

import struct
import zlib
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError

from samzamp.api.errors import SystemFailureError
from samzamp.coordinator.zk.errors import ZkValueError

__all__ = ["SEGMENT_BYTES", "delete_value", "read_value", "write_value"]

SEGMENT_BYTES = 1020 * 1020
MAGIC = b"SZV"
INLINE = b"I"
SEGMENTED = b"S"
_INLINE = struct.Struct(">3scIQ")  # magic, format, crc32, length
_SEGMENTED = struct.Struct(">3scIQI")  # ... and the segment count; the generation's name follows
GENERATION_PREFIX = "g-"
ATTEMPTS = 10


class _Header:
    __slots__ = ("count", "crc", "generation", "length")

    def __init__(self, crc: int, length: int, count: int = 0, generation: str = "") -> None:
        self.crc = crc
        self.length = length
        self.count = count
        self.generation = generation


def _parse(path: str, data: bytes) -> tuple[_Header, bytes]:
    """The header of a node's data and, for an inline value, the value."""
    if data[:3] != MAGIC or len(data) < _INLINE.size:
        raise ZkValueError(path, "has no samzamp value header")
    if data[3:4] == INLINE:
        _m, _f, crc, length = _INLINE.unpack_from(data)
        return _Header(crc, length), data[_INLINE.size :]
    if data[3:4] == SEGMENTED and len(data) > _SEGMENTED.size:
        _m, _f, crc, length, count = _SEGMENTED.unpack_from(data)
        return _Header(crc, length, count, data[_SEGMENTED.size :].decode("ascii", "replace")), b""
    raise ZkValueError(path, f"has an unknown value format {data[3:4]!r}")


def _check(path: str, header: _Header, value: bytes) -> bytes:
    if len(value) != header.length:
        raise ZkValueError(path, f"is {len(value)} bytes long where its header says {header.length}")
    crc = zlib.crc32(value)
    if crc != header.crc:
        raise ZkValueError(path, f"has CRC32 {crc:#010x} where its header says {header.crc:#010x}")
    return value


def read_value(client: KazooClient, path: str) -> bytes | None:
    """The value at ``path``, checked; None when there is none. ``ZkValueError`` when it is torn or
    corrupt."""
    for _attempt in range(ATTEMPTS):
        try:
            data, stat = client.get(path)
        except NoNodeError:
            return None
        if not data:
            return None
        header, inline = _parse(path, data)
        if not header.generation:
            return _check(path, header, inline)
        try:
            segments = [client.get(f"{path}/{header.generation}/{i}")[0] for i in range(header.count)]
        except NoNodeError:
            segments = None
        try:
            if segments is not None:
                return _check(path, header, b"".join(segments))
        except ZkValueError:
            if _header_version(client, path) == stat.version:
                raise
            continue  # rewritten while it was read: read the new one
        if _header_version(client, path) == stat.version:
            raise ZkValueError(path, f"misses segments of its generation {header.generation}")
    raise SystemFailureError(f"reading ZooKeeper node {path}: rewritten {ATTEMPTS} times while it was read")


def _header_version(client: KazooClient, path: str) -> int | None:
    stat = client.exists(path)
    return int(stat.version) if stat is not None else None


def write_value(client: KazooClient, path: str, value: bytes) -> None:
    """Write ``value`` at ``path`` (creating the node and its parents); durable and whole when this
    returns. The last writer wins."""
    for _attempt in range(ATTEMPTS):
        try:
            if len(value) <= SEGMENT_BYTES:
                _write_inline(client, path, value)
                _drop_generations(client, path)
                return
            if _write_segmented(client, path, value):
                _drop_generations(client, path)
                return
        except NoNodeError:
            pass  # the node or our generation was deleted by another writer: write again
    raise SystemFailureError(f"writing ZooKeeper node {path}: other writers deleted it {ATTEMPTS} times meanwhile")


def _write_inline(client: KazooClient, path: str, value: bytes) -> None:
    data = _INLINE.pack(MAGIC, INLINE, zlib.crc32(value), len(value)) + value
    try:
        client.create(path, data, makepath=True)
    except NodeExistsError:
        client.set(path, data)


def _write_segmented(client: KazooClient, path: str, value: bytes) -> bool:
    """Write a new generation and switch the header to it; False when a concurrent write deleted it."""
    try:
        client.create(path, b"", makepath=True)
    except NodeExistsError:
        pass
    generation_path = client.create(f"{path}/{GENERATION_PREFIX}", b"", sequence=True)
    generation = generation_path.rsplit("/", 1)[1]
    count = 0
    for start in range(0, len(value), SEGMENT_BYTES):
        client.create(f"{generation_path}/{count}", value[start : start + SEGMENT_BYTES])
        count += 1
    header = _SEGMENTED.pack(MAGIC, SEGMENTED, zlib.crc32(value), len(value), count) + generation.encode("ascii")
    transaction = client.transaction()
    transaction.check(generation_path, 0)
    transaction.set_data(path, header)
    return _committed(transaction.commit())


def _committed(results: list[Any]) -> bool:
    return not any(isinstance(r, Exception) for r in results)


def _drop_generations(client: KazooClient, path: str) -> None:
    """Delete the generations the header no longer names, unless the header changes meanwhile (then
    the newer write drops them). Best effort: what is left is deleted by a later write."""
    try:
        data, stat = client.get(path)
        keep = _parse(path, data)[0].generation if data else ""
        transaction = client.transaction()
        transaction.check(path, stat.version)
        dropped = _delete_generations(client, transaction, path, keep)
        if dropped:
            transaction.commit()
    except (NoNodeError, ZkValueError):
        pass


def _delete_generations(client: KazooClient, transaction: Any, path: str, keep: str = "") -> int:
    """Add the deletion of every generation under ``path`` but ``keep`` to ``transaction``."""
    dropped = 0
    for child in client.get_children(path):
        if not child.startswith(GENERATION_PREFIX) or child == keep:
            continue
        for segment in client.get_children(f"{path}/{child}"):
            transaction.delete(f"{path}/{child}/{segment}")
        transaction.delete(f"{path}/{child}")
        dropped += 1
    return dropped


def delete_value(client: KazooClient, path: str) -> None:
    """Delete the value at ``path`` and its node, at once; nothing when there is none."""
    for _attempt in range(ATTEMPTS):
        try:
            stat = client.exists(path)
            if stat is None:
                return
            transaction = client.transaction()
            _delete_generations(client, transaction, path)
            transaction.delete(path, version=stat.version)
            if _committed(transaction.commit()):
                return
        except NoNodeError:
            pass  # a generation went while it was listed: list again
    raise SystemFailureError(f"deleting ZooKeeper node {path}: rewritten {ATTEMPTS} times meanwhile")
