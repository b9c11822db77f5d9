"""Checkpoint writes gathered: the checkpoints of the commits under way at once go to the checkpoint
topic together, one flush (one wait for the broker) for all of them.

A processor of thousands of tasks commits them all in one round (every task.commit.ms, and at
shutdown). Written one by one, each checkpoint waited for its own acknowledgement on a thread of
the loop's default executor, a few at a time, so a round cost a broker round trip per task. Here a
commit asks for its checkpoint and waits for it as before; while one batch is being written, the
checkpoints asked for meanwhile gather into the next. One task never has two commits under way, so
a batch holds at most one checkpoint per task, and a task's next checkpoint is never written before
its last was acknowledged. Event loop thread.
"""

from __future__ import annotations

import asyncio
from typing import Protocol

from samzamp.api.envelope import SystemStreamPartition
from samzamp.commit.topic_checkpoint import CheckpointWrite
from samzamp.model.control_state import ControlState

__all__ = ["CheckpointWrites", "CheckpointWriter"]


class CheckpointWriter(Protocol):
    """Where checkpoints are written (``TopicCheckpointManager``; a test's fake may offer only
    ``write_checkpoint``, one at a time)."""

    @property
    def run_id(self) -> str: ...

    def write_checkpoint(
        self,
        task_name: str,
        offsets: dict[SystemStreamPartition, int],
        state_markers: dict[str, str] | None,
        /,
        *,
        control: ControlState | None,
        drained: bool,
    ) -> object:
        """Write one checkpoint and wait for its acknowledgement (blocking)."""


class CheckpointWrites:
    """Writes the checkpoints that the commits of one event loop ask for, in batches (module docstring)."""

    def __init__(self, writer: CheckpointWriter) -> None:
        self._writer = writer
        self._waiting: list[tuple[CheckpointWrite, asyncio.Future[None]]] = []
        self._writing: asyncio.Task[None] | None = None

    @property
    def run_id(self) -> str:
        return self._writer.run_id

    async def write(
        self,
        task_name: str,
        offsets: dict[SystemStreamPartition, int],
        state_markers: dict[str, str],
        *,
        control: ControlState | None = None,
        drained: bool = False,
    ) -> None:
        """Write ``task_name``'s checkpoint; returns once the broker acknowledged it. Raises what
        writing its batch raised (every commit of that batch fails alike)."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        self._waiting.append((CheckpointWrite(task_name, offsets, state_markers, control, drained), done))
        if self._writing is None:
            self._writing = loop.create_task(self._write_batches())
        await done

    async def _write_batches(self) -> None:
        try:
            while self._waiting:
                batch, self._waiting = self._waiting, []
                try:
                    await asyncio.to_thread(self._write, [w for w, _ in batch])
                except BaseException as e:
                    for _, done in batch:
                        if not done.done():
                            done.set_exception(e)
                    if not isinstance(e, Exception):
                        raise
                else:
                    for _, done in batch:
                        if not done.done():
                            done.set_result(None)
        finally:
            self._writing = None
            for _, done in self._waiting:  # cancelled meanwhile: nothing more is written
                done.cancel()
            self._waiting = []

    def _write(self, writes: list[CheckpointWrite]) -> None:
        many = getattr(self._writer, "write_checkpoints", None)
        if many is not None:
            many(writes)
            return
        for w in writes:
            self._writer.write_checkpoint(w.task_name, w.offsets, w.state_markers, control=w.control, drained=w.drained)
