"""End of stream through intermediate streams (Samza's EndOfStreamStates and ControlMessageSender).

Every task that sends to an intermediate stream (a producer: it reads a stream that feeds the
stream's ``partition_by``) sends one named end-of-stream message to the stream's aggregate
partition once its part of the graph ended, after every record it sent before is acknowledged.
The task reading the aggregate partition counts the names; when it has heard from every producer
of the job (``IntermediateStreamModel.producers``) that partition is done, and the task sends an
unnamed copy to every other partition, which is done when the copy arrives. An intermediate
stream has ended for a task when each of its partitions in the task is done.
"""

from __future__ import annotations

from collections.abc import Iterable

from samzamp.api.envelope import SystemStream, SystemStreamPartition

__all__ = ["EndOfStreamStates"]


class EndOfStreamStates:
    """Which producers' end-of-stream messages each intermediate SSP of a task has seen."""

    def __init__(self, ssps: Iterable[SystemStreamPartition], expected: dict[SystemStream, int]) -> None:
        """``ssps``: the task's intermediate SSPs; ``expected``: producers per intermediate stream."""
        self._names: dict[SystemStreamPartition, set[str]] = {ssp: set() for ssp in ssps}
        self._expected = expected
        self._done: set[SystemStreamPartition] = set()

    def update(self, ssp: SystemStreamPartition, task_name: str | None) -> bool:
        """An end-of-stream message from ``task_name`` (None: an aggregator's copy) reached ``ssp``;
        True if it completed ``ssp`` by the last producer's name (the task then sends the copies).
        A name counts once, however often it comes."""
        if ssp in self._done:
            return False
        if task_name is None:
            self._done.add(ssp)
            return False
        names = self._names.setdefault(ssp, set())
        names.add(task_name)
        if len(names) >= self._expected.get(ssp.system_stream, 0):
            self._done.add(ssp)
            return True
        return False

    def is_done(self, ssp: SystemStreamPartition) -> bool:
        return ssp in self._done

    def stream_done(self, stream: SystemStream) -> bool:
        """Every SSP of ``stream`` in the task is done."""
        return all(ssp in self._done for ssp in self._names if ssp.system_stream == stream)

    def seen(self, ssp: SystemStreamPartition) -> frozenset[str]:
        """The producer names counted on ``ssp`` so far."""
        return frozenset(self._names.get(ssp, ()))
