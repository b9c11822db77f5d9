"""Worker processes, the container's side: the pool (``pool``), which worker runs which task
(``placement``), the frames on the rings between them (``frames``) and the shared-memory slot per
worker that times its process() calls and carries the fence (``calls``).

The worker's own side, its main included, is ``samzamp.worker`` (``worker/host.py``).
"""
