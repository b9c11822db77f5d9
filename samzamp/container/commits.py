"""Running a task's commit from the loop: each runs ``commit.pipeline.commit_task`` as an asyncio
task while its ``TaskState`` says a commit is in flight, and counts and times it. Once the
checkpoint is acknowledged, the input offsets it implies go to the consumer group for lag tools
(``commit.group_offsets``), for inline and worker tasks alike.

Before its commit, a task idle on a lane catches up (``catch_up``): see there. Event loop thread only.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from samzamp.commit.checkpoint_writes import CheckpointWriter, CheckpointWrites
from samzamp.commit.group_offsets import GroupOffsets
from samzamp.commit.pipeline import commit_task
from samzamp.consume.system_consumers import SystemConsumers
from samzamp.container.run_loop_task import RunLoopTask
from samzamp.container.task_set import TaskSet
from samzamp.metrics.registry import MetricsRegistry

__all__ = ["Commits"]

log = logging.getLogger(__name__)


class Commits:
    """The commits the loop has started and not yet finished. ``done`` is told of each commit that
    succeeded (the task may go on); ``abort`` of one that failed (the container fails)."""

    def __init__(
        self,
        checkpoints: CheckpointWriter,
        consumers: SystemConsumers,
        tasks: TaskSet,
        loop: asyncio.AbstractEventLoop,
        metrics: MetricsRegistry,
        done: Callable[[RunLoopTask], None],
        abort: Callable[[BaseException], None],
        group_offsets: GroupOffsets | None = None,
    ) -> None:
        """``group_offsets``: where the input offsets go after each checkpoint (None: nowhere)."""
        self._checkpoints = CheckpointWrites(checkpoints)
        self._group_offsets = group_offsets
        self._consumers = consumers
        self._tasks = tasks
        self._loop = loop
        self._done = done
        self._abort = abort
        self.in_flight: set[asyncio.Task[None]] = set()
        self.m_commit_calls = metrics.counter("SamzaContainerMetrics", "commit-calls")

    def start(self, ti: RunLoopTask, then: Callable[[], None] | None = None, *, drained: bool = False) -> None:
        """Start ``ti``'s commit (its state says COMMIT, or its last op needs one); ``then`` runs
        once it succeeded, before the task is ready again. ``drained``: the task's final commit of
        a drain, which its checkpoint records."""
        st = ti.state
        self._catch_up(ti)
        st.start_commit()
        self.m_commit_calls.count += 1
        ti.m_commit_calls.count += 1
        started = time.perf_counter_ns()

        async def run() -> None:
            try:
                await commit_task(ti, self._checkpoints, drained=drained)
            except Exception as e:
                self._abort(e)
                return
            finally:
                st.done_commit()
            ti.m_commit_ns.update(time.perf_counter_ns() - started)
            if self._group_offsets is not None:  # the checkpoint is durable: never ahead of it
                self._group_offsets.checkpointed(ti, self._tasks.readers)
            ti.after_commit()
            if then is not None:
                then()
            self._done(ti)

        fut = self._loop.create_task(run())
        self.in_flight.add(fut)
        fut.add_done_callback(self.in_flight.discard)

    def _catch_up(self, ti: RunLoopTask) -> None:
        """Move ``ti``'s low watermark of each SSP it has finished everything fetched of up to the
        partition's fetched position (``SystemConsumers.caught_up_to``). This is what moves the
        checkpoint of a key bucket that gets few messages, or none: its partition is read from the
        lowest checkpoint among its buckets, so a bucket left behind would have every restart read
        the partition again from there. Only with nothing of ``ti`` in flight (a commit after
        task.shutdown.ms may have some) and nothing of the lane pending."""
        if ti.state.messages_in_flight:
            return
        pending = {lane for lane, _ in ti.state.pending}
        for lane, ssp in self._tasks.lanes(ti).items():
            if lane in pending:
                continue
            upto = self._consumers.caught_up_to(lane)
            if upto is not None:
                ti.catch_up(ssp, upto)

    def cancel(self) -> None:
        for c in self.in_flight:
            c.cancel()
