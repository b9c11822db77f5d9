"""Every task becomes a ``RunnableTask``: ``process_async(envelope, collector, coordinator, callback)``.

- A callback-style AsyncStreamTask already is one.
- An ``async def process_async(envelope, collector, coordinator)`` is started as an asyncio task on the
  container's loop; its return completes the callback, its exception fails it.
- A synchronous StreamTask runs inline on the loop thread (job.container.thread.pool.size <= 1) and
  completes the callback before returning (Samza's AsyncStreamTaskAdapter without a pool).

The container calls ``process_async`` for the asynchronous kinds only. For a synchronous task the
adapter's type is what counts: ``InlineSyncAdapter`` marks it for the fast path, which processes a
run of messages through ``TaskRuntime.process_run`` without a callback per message. A synchronous
task in a worker process (pool size >= 2) gets no adapter: the loop drives it through its
``WorkerTaskProxy``.
"""

from __future__ import annotations

import asyncio
import inspect
from typing import Any, Protocol

from samzamp.api.collector import MessageCollector, TaskCoordinator
from samzamp.api.envelope import IncomingMessageEnvelope
from samzamp.api.task import AsyncStreamTask, StreamTask, TaskCallback

__all__ = ["RunnableTask", "adapt_task"]


class RunnableTask(Protocol):
    """Called on the event loop thread only; must not block for long."""

    def process_async(
        self,
        envelope: IncomingMessageEnvelope,
        collector: MessageCollector,
        coordinator: TaskCoordinator,
        callback: TaskCallback,
    ) -> None: ...


class InlineSyncAdapter:
    __slots__ = ("process",)

    def __init__(self, task: StreamTask) -> None:
        self.process = task.process

    def process_async(
        self,
        envelope: IncomingMessageEnvelope,
        collector: MessageCollector,
        coordinator: TaskCoordinator,
        callback: TaskCallback,
    ) -> None:
        try:
            self.process(envelope, collector, coordinator)
        except Exception as e:
            callback.failure(e)
            return
        callback.complete()


class CallbackAsyncAdapter:
    __slots__ = ("_process",)

    def __init__(self, task: AsyncStreamTask) -> None:
        self._process = task.process_async

    def process_async(
        self,
        envelope: IncomingMessageEnvelope,
        collector: MessageCollector,
        coordinator: TaskCoordinator,
        callback: TaskCallback,
    ) -> None:
        try:
            self._process(envelope, collector, coordinator, callback)
        except Exception as e:  # raised before handing off: the message failed
            callback.failure(e)


class CoroutineAdapter:
    __slots__ = ("_loop", "_process", "_running")

    def __init__(self, task: AsyncStreamTask, loop: asyncio.AbstractEventLoop) -> None:
        self._process: Any = task.process_async
        self._loop = loop
        self._running: set[asyncio.Task[Any]] = set()  # strong refs: asyncio keeps only weak ones

    def process_async(
        self,
        envelope: IncomingMessageEnvelope,
        collector: MessageCollector,
        coordinator: TaskCoordinator,
        callback: TaskCallback,
    ) -> None:
        try:
            coro = self._process(envelope, collector, coordinator)
        except Exception as e:
            callback.failure(e)
            return
        fut = self._loop.create_task(coro)
        self._running.add(fut)

        def done(f: asyncio.Task[Any]) -> None:
            self._running.discard(f)
            if f.cancelled():
                callback.failure(asyncio.CancelledError("process_async was cancelled"))
            elif f.exception() is not None:
                callback.failure(f.exception())  # type: ignore[arg-type]
            else:
                callback.complete()

        fut.add_done_callback(done)

    def cancel_all(self) -> None:
        for f in list(self._running):
            f.cancel()


def adapt_task(task: object, loop: asyncio.AbstractEventLoop) -> RunnableTask:
    """Wrap a user task in the adapter that matches its kind."""
    if isinstance(task, AsyncStreamTask):
        if inspect.iscoroutinefunction(task.process_async):
            return CoroutineAdapter(task, loop)
        return CallbackAsyncAdapter(task)
    if isinstance(task, StreamTask):
        return InlineSyncAdapter(task)
    raise TypeError(f"{type(task).__name__} is neither a StreamTask nor an AsyncStreamTask")
