"""What a task is, independent of where it runs: the input a ``TaskRuntime`` is built from."""

from __future__ import annotations

import msgspec

from samzamp.api.envelope import SystemStreamPartition

__all__ = ["TaskModel"]


class TaskModel(msgspec.Struct, frozen=True):
    """One task of a job model. ``ssps`` is ordered: a message's SSP is named by its index in it
    (how a worker's frames name them). ``markers`` are the state markers of the task's last
    checkpoint (store -> changelog offset), from which its stores are restored."""

    name: str
    ssps: tuple[SystemStreamPartition, ...]
    changelog_partition: int = 0
    markers: dict[str, str] = {}
