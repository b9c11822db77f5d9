"""3. Dispatch: how a message reaches its task's code.

``adapters`` gives a task run in the container's process one call shape, ``process_async``, which
the loop calls for asynchronous tasks. A synchronous task run inline skips it: its adapter marks it
for the fast path, a run of messages straight from the fetch buffer (``TaskRuntime.process_run``).
``process`` is the container's side of the worker processes that run synchronous tasks when
job.container.thread.pool.size >= 2: the loop reaches those tasks through frames on rings, not an
adapter.
"""

from samzamp.dispatch.adapters import RunnableTask, adapt_task

__all__ = ["RunnableTask", "adapt_task"]
