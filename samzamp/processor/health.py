"""What a processor is doing, as ``GET /healthz`` and ``samza_processor_state`` report it.

A Kubernetes readiness probe on /healthz sees 200 only while the processor runs its tasks (or
drains them), and 503 while it starts, restores, rebalances, is paused or stops.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["READY", "ProcessorState"]


class ProcessorState(StrEnum):
    """The processor's state, first match wins in this order: stopped, stopping, starting (no
    container yet), restoring, rebalancing, starting (the loop not running yet, or no job model
    applied yet), paused, draining, running."""

    # Connecting, creating topics, joining the job: no task runs yet.
    STARTING = "starting"
    # Starting tasks that arrived: checkpoints read, stores restored from their changelogs, init.
    RESTORING = "restoring"
    # Standalone: a new job model version is under way, from its arrival until this processor
    # applied it (its tasks that leave stopped, the barrier, its new tasks started).
    REBALANCING = "rebalancing"
    RUNNING = "running"
    # Running its tasks up to their drain point, then it stops (samzamp-drain).
    DRAINING = "draining"
    # Standalone: ZooKeeper silent past the lease; it holds its tasks and processes nothing.
    PAUSED = "paused"
    # Asked to stop, failed, or drained: in-flight work finishing, the final commit, closing.
    STOPPING = "stopping"
    STOPPED = "stopped"


# The states /healthz answers 200 for; 503 for every other.
READY = frozenset({ProcessorState.RUNNING, ProcessorState.DRAINING})
