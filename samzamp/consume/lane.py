"""Lanes: the way one task reads one of its SSPs, as the fan-in, the chooser and the run loop key it.

Usually a lane is the SSP itself: an SSP (a partition, or one key bucket of it) belongs to one task.
A broadcast partition (task.broadcast.inputs) is read whole by every task, so each task reads it
through a lane of its own, ``BroadcastLane(ssp, task)``: its own buffer, its own place in the
chooser, its own position, while the partition is fetched once.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import NamedTuple

from samzamp.api.envelope import SystemStreamPartition

__all__ = ["BroadcastLane", "Lane", "lane_ssp", "partition_of", "task_lanes"]


class BroadcastLane(NamedTuple):
    """Task ``task``'s reading of the broadcast partition ``ssp``."""

    ssp: SystemStreamPartition
    task: str


Lane = SystemStreamPartition | BroadcastLane


def lane_ssp(lane: Lane) -> SystemStreamPartition:
    """The SSP a lane reads, as its task knows it."""
    return lane.ssp if isinstance(lane, BroadcastLane) else lane


def partition_of(lane: Lane) -> SystemStreamPartition:
    """The partition a lane's messages are fetched from (its SSP without a key bucket)."""
    ssp = lane_ssp(lane)
    return ssp if ssp.key_bucket == -1 else ssp._replace(key_bucket=-1)


def task_lanes(
    task: str, ssps: Iterable[SystemStreamPartition], broadcast: Collection[SystemStreamPartition]
) -> dict[Lane, SystemStreamPartition]:
    """Lane -> SSP for each SSP of ``task``: a broadcast one through a lane of the task's own."""
    return {(BroadcastLane(s, task) if s in broadcast else s): s for s in ssps}
