"""3. Dispatch: one shape for every way a task runs. The loop only ever calls ``process_async``."""

from samzamp.dispatch.adapters import RunnableTask, adapt_task

__all__ = ["RunnableTask", "adapt_task"]
