"""What lives as long as the process: the ``StreamProcessor``, the container it runs, and its side of
the job coordinator (``ContainerListener``: each job model the coordinator decides, applied to the
container)."""
