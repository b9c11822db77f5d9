"""Running a task's commit from the loop: each runs ``commit.pipeline.commit_task`` as an asyncio
task, and counts and times it. Once the checkpoint is acknowledged, the input offsets it implies go
to the consumer group for lag tools (``commit.group_offsets``), for inline and worker tasks alike.

With task.commit.stores.async (the default) a commit has two phases, as Samza's TaskInstance.commit
does: its synchronous phase (steps 1 to 3 and the stores' writes set aside), during which
``TaskState`` says a commit is in flight and the task is idle, and its asynchronous phase (the
writes made durable, the checkpoint written, the task told), during which the task processes on.
A task with no changelogged store has nothing to set aside and no asynchronous phase: it waits for
all of its commit, on_checkpoint included (such a commit stays exclusive with process, as it was).
A task has one asynchronous phase at a time: a commit due meanwhile waits for it, as a due commit
does for messages in flight (``TaskState``). Samza skips such a commit under
task.commit.max.delay.ms instead; samzamp keeps the rule that a task's commit request commits
before its next message, which a skipped commit would break, and a timer commit waits only when
an asynchronous phase outlasts task.commit.ms. A commit started while one is still applying (a
stop's final commit after task.shutdown.ms) runs after it. A task's final
commit of a drain, or of its leaving, is synchronous throughout: nothing follows it. Timers:
``commit-sync-ns`` (the pause the task sees), ``commit-async-ns`` and ``commit-ns`` (the whole
commit, to the checkpoint written), in SamzaContainerMetrics as Samza has them.

Before its commit, a task idle on a lane catches up (``catch_up``): see there. Event loop thread only.
"""

from __future__ import annotations

import asyncio
import functools
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
        *,
        asynchronous: bool = True,
    ) -> None:
        """``group_offsets``: where the input offsets go after each checkpoint (None: nowhere).
        ``asynchronous``: task.commit.stores.async (see the module docstring)."""
        self._checkpoints = CheckpointWrites(checkpoints)
        self._group_offsets = group_offsets
        self._consumers = consumers
        self._tasks = tasks
        self._loop = loop
        self._done = done
        self._abort = abort
        self.in_flight: set[asyncio.Task[None]] = set()
        self._asynchronous = asynchronous
        self._failed = False  # a commit failed (and so the container)
        self._last: dict[RunLoopTask, asyncio.Task[None]] = {}  # each task's latest commit
        self.m_commit_calls = metrics.counter("SamzaContainerMetrics", "commit-calls")
        self.m_commit_sync_ns = metrics.timer("SamzaContainerMetrics", "commit-sync-ns")
        self.m_commit_async_ns = metrics.timer("SamzaContainerMetrics", "commit-async-ns")

    def start(self, ti: RunLoopTask, then: Callable[[], None] | None = None, *, drained: bool = False) -> None:
        """Start ``ti``'s commit (its state says COMMIT, or its last op needs one); ``then`` runs
        once it succeeded, before the task is ready again. ``drained``: the task's final commit of
        a drain, which its checkpoint records. A commit of ``ti`` still in its asynchronous phase
        finishes first."""
        previous = self._last.get(ti)
        if previous is not None and previous.done():
            previous = None
        if previous is None:
            self._begin(ti)
        asynchronous = self._asynchronous and then is None and not drained

        async def run() -> None:
            if previous is not None:
                await asyncio.wait({previous})
                if self._failed:  # it failed the container: nothing more is committed
                    return
                self._begin(ti)
            await self._run(ti, then, drained, asynchronous)

        fut = self._loop.create_task(run())
        self._last[ti] = fut
        self.in_flight.add(fut)
        fut.add_done_callback(functools.partial(self._finished, ti))

    def _finished(self, ti: RunLoopTask, fut: asyncio.Task[None]) -> None:
        self.in_flight.discard(fut)
        if self._last.get(ti) is fut:
            del self._last[ti]

    def _begin(self, ti: RunLoopTask) -> None:
        self._catch_up(ti)
        ti.state.start_commit()
        self.m_commit_calls.count += 1
        ti.m_commit_calls.count += 1

    async def _run(self, ti: RunLoopTask, then: Callable[[], None] | None, drained: bool, asynchronous: bool) -> None:
        st = ti.state
        started = synced = time.perf_counter_ns()
        resumed = False

        def resume() -> None:
            """The synchronous phase is done: the task processes while the rest runs."""
            nonlocal synced, resumed
            synced = time.perf_counter_ns()
            resumed = True
            st.commit_synced()
            ti.after_commit()
            self._done(ti)

        try:
            await commit_task(ti, self._checkpoints, drained=drained, resume=resume if asynchronous else None)
        except Exception as e:
            self._failed = True
            self._abort(e)
            return
        finally:
            st.done_commit()
        ended = time.perf_counter_ns()
        ti.m_commit_ns.update(ended - started)
        if resumed:
            self.m_commit_sync_ns.update(synced - started)
            self.m_commit_async_ns.update(ended - synced)
        else:
            self.m_commit_sync_ns.update(ended - started)
        if self._group_offsets is not None:  # the checkpoint is durable: never ahead of it
            self._group_offsets.checkpointed(ti, self._tasks.readers)
        if not resumed:
            ti.after_commit()
        if then is not None:
            then()
        self._done(ti)

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
        self._last.clear()
