"""What lives as long as the process: the ``StreamProcessor`` and the container it runs."""
