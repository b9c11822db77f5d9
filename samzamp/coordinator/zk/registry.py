"""The live processors of a standalone job: one ephemeral sequential znode each.

A processor registers ``processors/<seq>`` with its ``ProcessorData`` (msgspec JSON: processor id,
location id, host, pid); the node goes when its session ends, which is how the others learn that it
left or died. The lowest sequence is the leader (``leader_of``).

A processor id is unique among the live processors. A processor restarted with the same
``processor.id`` soon after it died finds its old node still there until that session expires, so
``register`` waits up to twice the session timeout for a duplicate to go (Samza's rule); when one
remains, the node with the lower sequence keeps the id and the other fails with
``DuplicateProcessorError``.
"""

from __future__ import annotations

import logging
import os
import socket
import time

import msgspec
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from samzamp.api.errors import SystemFailureError
from samzamp.coordinator.zk.keys import ZkKeys

__all__ = ["DuplicateProcessorError", "ProcessorData", "leader_of", "read_processors", "register"]

log = logging.getLogger(__name__)


class ProcessorData(msgspec.Struct, frozen=True, rename="camel"):
    """What a processor's node says of it."""

    processor_id: str
    location_id: str
    host: str
    pid: int


class DuplicateProcessorError(SystemFailureError):
    """Another live processor of the job has this processor's ``processor.id``."""


def register(client: KazooClient, keys: ZkKeys, processor_id: str, location_id: str, session_timeout_ms: int) -> str:
    """Create this processor's node; its name (the sequence) once no other live node has its id."""
    client.ensure_path(keys.processors_dir)
    data = ProcessorData(processor_id, location_id, socket.gethostname(), os.getpid())
    path = client.create(keys.processor_prefix, msgspec.json.encode(data), ephemeral=True, sequence=True)
    mine = str(path).rsplit("/", 1)[1]
    deadline = time.monotonic() + 2 * session_timeout_ms / 1000
    while True:
        others = [n for n, d in read_processors(client, keys).items() if d.processor_id == processor_id and n != mine]
        if not others:
            return mine
        if min(others) < mine and time.monotonic() >= deadline:
            client.delete(path)
            raise DuplicateProcessorError(
                f"processor.id {processor_id!r} is taken by a live processor of this job (ZooKeeper node "
                f"{keys.processor(min(others))}): give each processor its own processor.id, or leave it unset "
                "to have one generated"
            )
        if min(others) > mine:
            return mine  # the other one, registered later, gives way
        log.info("processor.id %r is still registered by node %s: waiting for it to go", processor_id, min(others))
        time.sleep(min(1.0, session_timeout_ms / 4000))


def read_processors(client: KazooClient, keys: ZkKeys) -> dict[str, ProcessorData]:
    """Node name -> data of every live processor (a node gone meanwhile, or unreadable, is left out)."""
    out: dict[str, ProcessorData] = {}
    for node in client.get_children(keys.processors_dir):
        try:
            raw, _ = client.get(keys.processor(node))
            out[node] = msgspec.json.decode(raw, type=ProcessorData)
        except NoNodeError:
            continue
        except msgspec.DecodeError:
            log.warning("ZooKeeper node %s is not a samzamp processor's: ignored", keys.processor(node))
    return out


def leader_of(nodes: list[str]) -> str | None:
    """The leader among processor node names: the lowest sequence (the names are zero-padded)."""
    return min(nodes) if nodes else None
