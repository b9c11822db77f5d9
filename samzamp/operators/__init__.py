"""The operators of the high-level API, run as one task per task name (Samza's StreamOperatorTask).

``graph_task`` is the task the runtime runs for an application (inline, in a worker process, as a
virtual task: like any task). It holds an ``OperatorGraph`` (``graph``): the application's
operators (``impl``, ``window``, ``join``) built from the plan of its ``describe``, which it pushes
each message through, ticks on the window timer and ends at end of stream. ``control`` counts the
end-of-stream messages of intermediate streams. ``factory`` picks the task class of a job.
"""
