"""What runs one task, wherever it runs (on the loop or in a worker process): the task runtime
(``runtime.TaskRuntime``, built from a ``model.job_model.TaskModel`` and a task factory), how a task
is started (``start.start_task``: build, restore its stores, init), the coordinator handed to its
calls and what its exceptions become. Imported by both hosts, ``container`` and ``worker``, and by
nothing below them."""
