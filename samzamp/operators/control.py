"""Control messages through intermediate streams (Samza's EndOfStreamStates, DrainStates and
WatermarkStates, and ControlMessageSender's rules).

Every task that sends to an intermediate stream (a producer: it reads a stream that feeds the
stream's ``partition_by``) sends one named control message to the stream's aggregate partition once
its part of the graph got there, after every record it sent before is acknowledged. The task reading
the aggregate partition counts the names; when it has heard from every producer of the job
(``IntermediateStreamModel.producers``) that partition is done, and the task sends an unnamed copy
to every other partition, which is done when the copy arrives. An intermediate stream is done for a
task when each of its partitions in the task is done.

- End of stream: ``EndOfStreamStates``, as above.
- Drain: ``DrainStates``, as above for the messages of the current run id; a message of another
  run (a drain of an earlier deployment left in the topic) is skipped and counted.
- Watermarks: ``WatermarkStates``: per partition the latest watermark of each producer; the
  partition's watermark is their minimum once every producer sent one (an unnamed copy sets it
  directly), and never goes back.
"""

from __future__ import annotations

from collections.abc import Iterable

from samzamp.api.envelope import SystemStream, SystemStreamPartition
from samzamp.model.control_state import SSPControl

__all__ = ["DrainStates", "EndOfStreamStates", "WatermarkStates"]


class EndOfStreamStates:
    """Which producers' named messages each intermediate SSP of a task has seen, and which SSPs are done."""

    def __init__(self, ssps: Iterable[SystemStreamPartition], expected: dict[SystemStream, int]) -> None:
        """``ssps``: the task's intermediate SSPs; ``expected``: producers per intermediate stream."""
        self._names: dict[SystemStreamPartition, set[str]] = {ssp: set() for ssp in ssps}
        self._expected = expected
        self._done: set[SystemStreamPartition] = set()

    def update(self, ssp: SystemStreamPartition, task_name: str | None) -> bool:
        """A message from ``task_name`` (None: an aggregator's copy) reached ``ssp``; True if it
        completed ``ssp`` by the last producer's name (the task then sends the copies). A name
        counts once, however often it comes."""
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

    def snapshot(self) -> list[SSPControl]:
        """What each SSP counted so far (for the checkpoint); SSPs with nothing yet are left out."""
        return [
            SSPControl.of(ssp, frozenset(names), ssp in self._done)
            for ssp, names in sorted(self._names.items())
            if names or ssp in self._done
        ]

    def restore(self, entries: Iterable[SSPControl]) -> None:
        """Take back what a checkpoint's ``snapshot`` held, for the task's SSPs among ``entries``."""
        for entry in entries:
            ssp = entry.ssp
            if ssp in self._names:
                self._names[ssp] = set(entry.names)
                if entry.done:
                    self._done.add(ssp)


class DrainStates(EndOfStreamStates):
    """``EndOfStreamStates`` for the drain messages of one run id; others are skipped and counted."""

    def __init__(self, ssps: Iterable[SystemStreamPartition], expected: dict[SystemStream, int], run_id: str) -> None:
        super().__init__(ssps, expected)
        self.run_id = run_id
        self.foreign = 0  # drain messages of other runs, skipped

    def update_drain(self, ssp: SystemStreamPartition, task_name: str | None, run_id: str) -> bool:
        """``update`` for a drain message of run ``run_id``: one of another run changes nothing."""
        if run_id != self.run_id:
            self.foreign += 1
            return False
        return self.update(ssp, task_name)


class WatermarkStates:
    """The watermark of each intermediate SSP of a task, from its producers' watermark messages."""

    def __init__(self, ssps: Iterable[SystemStreamPartition], expected: dict[SystemStream, int]) -> None:
        self._latest: dict[SystemStreamPartition, dict[str, int]] = {ssp: {} for ssp in ssps}
        self._expected = expected
        self._watermark: dict[SystemStreamPartition, int | None] = dict.fromkeys(self._latest)

    def update(self, ssp: SystemStreamPartition, task_name: str | None, timestamp: int) -> bool:
        """A watermark from ``task_name`` (None: an aggregator's copy, or a source's); True if it
        moved ``ssp``'s watermark forward by the producers' minimum (the aggregate partition's task
        then sends a copy of it). Never moves a watermark back."""
        if task_name is None:
            self._advance(ssp, timestamp)
            return False
        latest = self._latest.setdefault(ssp, {})
        latest[task_name] = max(timestamp, latest.get(task_name, timestamp))
        if len(latest) < self._expected.get(ssp.system_stream, 0):
            return False
        return self._advance(ssp, min(latest.values()))

    def _advance(self, ssp: SystemStreamPartition, timestamp: int) -> bool:
        current = self._watermark.get(ssp)
        if current is not None and timestamp <= current:
            return False
        self._watermark[ssp] = timestamp
        return True

    def watermark(self, ssp: SystemStreamPartition) -> int | None:
        """``ssp``'s watermark (None: none yet)."""
        return self._watermark.get(ssp)

    def stream_watermark(self, stream: SystemStream) -> int | None:
        """The minimum over the task's SSPs of ``stream`` (None until each has one)."""
        marks = [w for ssp, w in self._watermark.items() if ssp.system_stream == stream]
        if not marks or any(w is None for w in marks):
            return None
        return min(w for w in marks if w is not None)
