"""Where a task stands in the control messages of one run: the part of an application task's state
that lives in its checkpoint, not in a store (WAVE3 R-A14).

Samza keeps its DrainStates and EndOfStreamStates in memory, so a task that restarts while a drain
or an end of stream goes through its intermediate streams forgets whom it heard from, and can wait
forever. samzamp writes them with each checkpoint: a restart within the same run id picks them up
where the checkpoint left them, a task of another run starts afresh.
"""

from __future__ import annotations

import msgspec

from samzamp.api.envelope import SystemStreamPartition

__all__ = ["ControlState", "SSPControl"]


class SSPControl(msgspec.Struct, frozen=True):
    """One intermediate SSP of a task: the producer tasks whose message it counted, or done."""

    system: str
    stream: str
    partition: int
    key_bucket: int = -1
    names: list[str] = []
    done: bool = False

    @property
    def ssp(self) -> SystemStreamPartition:
        return SystemStreamPartition(self.system, self.stream, self.partition, self.key_bucket)

    @staticmethod
    def of(ssp: SystemStreamPartition, names: frozenset[str], done: bool) -> SSPControl:
        return SSPControl(ssp.system, ssp.stream, ssp.partition, ssp.key_bucket, sorted(names), done)


class ControlState(msgspec.Struct, frozen=True):
    """A task's progress through run ``run_id``'s drain and end of stream: whether its sources
    drained or ended (its own control messages then went out), and per intermediate SSP what it
    counted."""

    run_id: str
    sources_drained: bool = False
    sources_ended: bool = False
    drain: list[SSPControl] = []
    end_of_stream: list[SSPControl] = []
