"""Worker processes: the pool in the container (pool.py), the worker's main (worker.py), their frames."""
