"""The loop's host: ``SamzaContainer`` runs the tasks of one job model on the run loop, where the five
stages meet. Each task there is a ``RunLoopTask`` (``run_loop_task``): a ``TaskInstance`` (run in
this process) or a ``WorkerTaskProxy`` (run in a worker process), and its ``TaskState`` says which
operation it may run next. ``run_loop`` is the slice loop and op dispatch; ``task_set`` (membership,
shutdown votes), ``drain`` (the drain and control markers), ``commits`` and ``timers`` are its parts.

What outlasts a job model (the process's lifecycle, the systems, the worker processes, the metrics,
the job coordinator) is ``samzamp.processor``'s.
"""
