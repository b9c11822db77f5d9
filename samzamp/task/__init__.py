"""What runs one task, wherever it runs (on the loop or in a worker process): the coordinator handed
to its calls. Imported by both hosts, the container and the worker's main, and by nothing below them."""
