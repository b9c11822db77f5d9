"""The worker process: a host for the synchronous tasks the container pins to it, fed over rings.

It sits beside ``container`` (the loop's host) and above ``task``: both hosts run their tasks through
the same task runtime and neither imports the other. ``python -m samzamp.worker`` is its main."""
