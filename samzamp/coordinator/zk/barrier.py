"""The barrier of a job model version (Samza's ZkBarrierForVersionUpgrade).

The leader creates ``barrier_<v>`` with ``barrier_state`` NEW and the processor ids it waits for.
Each processor joins by creating ``barrier_participants/<its id>`` once it stopped the tasks it
gives up; the leader, watching the participants, writes DONE when every expected processor joined,
or TIMED_OUT when job.coordinator.zk.consensus.timeout.ms passed first. Processors start their new
tasks on DONE only, so a task never runs in two processors: its old owner stopped it before joining.
The expected ids are the barrier node's data (msgspec JSON), so any leader can finish a barrier.
"""

from __future__ import annotations

import enum

import msgspec
from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from samzamp.coordinator.zk.keys import ZkKeys, decode_name

__all__ = ["BarrierState", "complete_if_joined", "create_barrier", "join", "time_out"]


class BarrierState(enum.StrEnum):
    NEW = "NEW"
    DONE = "DONE"
    TIMED_OUT = "TIMED_OUT"


def create_barrier(client: KazooClient, keys: ZkKeys, version: int, participants: list[str]) -> None:
    """The barrier of ``version``, NEW, waiting for ``participants`` (processor ids)."""
    client.create(keys.barrier(version), msgspec.json.encode(sorted(participants)), makepath=True)
    client.create(keys.barrier_participants(version))
    client.create(keys.barrier_state(version), BarrierState.NEW.value.encode())


def join(client: KazooClient, keys: ZkKeys, version: int, processor_id: str) -> bool:
    """Join the barrier of ``version``; False when it is gone (cleaned up: a newer version exists)."""
    try:
        client.create(keys.barrier_participant(version, processor_id))
    except NodeExistsError:
        pass  # joined before (a retried call)
    except NoNodeError:
        return False
    return True


def _move(client: KazooClient, keys: ZkKeys, version: int, to: BarrierState) -> bool:
    """NEW -> ``to`` with a compare-and-set: False when the barrier is no longer NEW."""
    try:
        raw, stat = client.get(keys.barrier_state(version))
        if raw.decode() != BarrierState.NEW:
            return False
        client.set(keys.barrier_state(version), to.value.encode(), version=stat.version)
    except (NoNodeError, BadVersionError):
        return False
    return True


def complete_if_joined(client: KazooClient, keys: ZkKeys, version: int) -> bool:
    """Write DONE if every expected processor joined; whether this call did."""
    try:
        raw, _ = client.get(keys.barrier(version))
        joined = {decode_name(n) for n in client.get_children(keys.barrier_participants(version))}
    except NoNodeError:
        return False
    expected = set(msgspec.json.decode(raw, type=list[str]))
    return expected <= joined and _move(client, keys, version, BarrierState.DONE)


def time_out(client: KazooClient, keys: ZkKeys, version: int) -> bool:
    """Write TIMED_OUT if the barrier is still NEW; whether this call did."""
    return _move(client, keys, version, BarrierState.TIMED_OUT)
