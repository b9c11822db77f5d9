"""task.drop.producer.errors: what becomes of a task's output that its system would not take.

One rule, wherever the failure shows and wherever the task runs (loop thread or worker process):
the system refused the message at send time (``SystemProducer.send`` raised: too large for
``message.max.bytes``, a partition that does not exist, ...) or reported it failed later, in a
delivery report that the commit's flush collects.

- Every such output is counted in ``SystemProducersMetrics`` ``producer-send-failed`` (Samza's
  KafkaSystemProducerMetrics name for the same count), dropped or not.
- task.drop.producer.errors=true: it is logged (task, stream, why) and dropped; the task goes on
  and a commit may checkpoint past the message that sent it.
- Otherwise the task fails: a send-time refusal raises out of ``MessageCollector.send`` into the
  task's ``process`` (which then fails naming the task, SSP and offset, and nothing past that
  message is checkpointed); a failed delivery stops the commit before its checkpoint.

A full local send queue is back-pressure, never a failure: the producer waits for room. Store
changelog writes never come here (``samzamp.commit.flush_policy``: they are never dropped).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from samzamp.api.envelope import SystemStream
from samzamp.api.errors import SystemFailureError
from samzamp.metrics.registry import Counter

__all__ = ["OutputFailures"]

log = logging.getLogger(__name__)


class OutputFailures:
    """One task's rule for failed outputs (see the module docstring); called on the thread that
    runs the task (a send) or its commit (the flush)."""

    __slots__ = ("drop", "failed", "task_name")

    def __init__(self, task_name: str, drop: bool, failed: Counter) -> None:
        self.task_name = task_name
        self.drop = drop
        self.failed = failed

    def at_send(self, ss: SystemStream, error: Exception) -> None:
        """The system refused an output to ``ss`` at send time: count it; return when it is
        dropped, else raise ``SystemFailureError`` saying why and what to do."""
        self.failed.count += 1
        if self.drop:
            log.warning(
                "task %r: dropped an output to %s that the system refused (task.drop.producer.errors=true): %s "
                "(%d failed outputs in this process so far)",
                self.task_name,
                ss,
                error,
                self.failed.count,
            )
            return
        raise SystemFailureError(
            f"cannot send an output to {ss}: {error}; make it fit the system (or its producer settings), "
            "or set task.drop.producer.errors=true to drop such outputs"
        ) from error

    def in_delivery(self, errors: Sequence[str]) -> str | None:
        """Outputs whose delivery failed (each error names the stream and why): count them; None
        when they are dropped, else why the commit must stop."""
        if not errors:
            return None
        self.failed.count += len(errors)
        if self.drop:
            log.warning(
                "task %r: %d outputs could not be delivered and are dropped (task.drop.producer.errors=true); "
                "first: %s (%d failed outputs in this process so far)",
                self.task_name,
                len(errors),
                errors[0],
                self.failed.count,
            )
            return None
        return (
            f"task {self.task_name!r}: {len(errors)} outputs could not be delivered (first: {errors[0]}); "
            "not checkpointing (set task.drop.producer.errors=true to drop them)"
        )
