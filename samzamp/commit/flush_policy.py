"""Commit step 3 for every host of a task: flush its producers, then one rule decides whether the
commit may go on to step 4 (apply the stores, read their markers) and to a checkpoint.

The rule (``commit_failure``), the same inline and in a worker process:

- a store's changelog write that is not durable (a delivery failure, or still unacknowledged when
  the flush gives up) always fails the commit: the checkpoint would record state that its changelog
  lacks, so a restore elsewhere would lose it. ``task.drop.producer.errors`` does not apply;
- outputs still unacknowledged when the flush gives up always fail the commit: they may yet fail
  or never arrive, and the checkpoint would move past them;
- outputs whose delivery failed are the task's ``OutputFailures`` rule's (``samzamp.collect.output_failures``),
  the same rule that decides about an output refused at send time: counted, and with
  ``task.drop.producer.errors`` logged and dropped, else they fail the commit.

``require_markers`` guards the other side of the same invariant where the checkpoint is built:
a checkpoint of a task with changelogged stores always carries their markers.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from samzamp.api.errors import SystemFailureError
from samzamp.collect.output_failures import OutputFailures
from samzamp.systems.base import Flushable

__all__ = ["FLUSH_TIMEOUT_S", "FlushResult", "commit_failure", "flush_task_producers", "require_markers"]

FLUSH_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class FlushResult:
    """What flushing a task's producers found, outputs and store changelogs apart."""

    unacked_outputs: int = 0  # output messages neither acknowledged nor failed when the flush gave up
    output_errors: tuple[str, ...] = ()  # output deliveries that failed
    unacked_changelog: int = 0
    changelog_errors: tuple[str, ...] = ()


def flush_task_producers(
    outputs: Iterable[Flushable], changelogs: Iterable[Flushable], timeout_s: float = FLUSH_TIMEOUT_S
) -> FlushResult:
    """Wait until everything sent through ``outputs`` and ``changelogs`` is acknowledged or failed
    (at most ``timeout_s`` each) and collect what was not delivered."""
    unacked_out, out_errors = _flush(outputs, timeout_s)
    unacked_cl, cl_errors = _flush(changelogs, timeout_s)
    return FlushResult(unacked_out, tuple(out_errors), unacked_cl, tuple(cl_errors))


def _flush(producers: Iterable[Flushable], timeout_s: float) -> tuple[int, list[str]]:
    unacked = 0
    errors: list[str] = []
    for producer in producers:
        unacked += producer.flush(timeout_s)
        errors.extend(producer.take_errors())
    return unacked, errors


def commit_failure(task: str, result: FlushResult, outputs: OutputFailures) -> str | None:
    """Why task ``task``'s commit must stop before its stores are applied and its checkpoint is
    written (the rule in the module docstring), or None: go on. Failed outputs go to ``outputs``."""
    if result.changelog_errors or result.unacked_changelog:
        what = (
            f"{len(result.changelog_errors)} changelog writes failed (first: {result.changelog_errors[0]})"
            if result.changelog_errors
            else f"{result.unacked_changelog} changelog writes were not acknowledged within the flush"
        )
        return (
            f"task {task!r}: {what}; not checkpointing, so that the checkpoint never records state its "
            "changelog lacks (task.drop.producer.errors covers outputs only; check the changelog's system "
            "and broker, then restart)"
        )
    if result.unacked_outputs:
        return (
            f"task {task!r}: {result.unacked_outputs} outputs were not acknowledged within the flush; "
            "not checkpointing (they may still fail; task.drop.producer.errors drops only outputs the system refused)"
        )
    return outputs.in_delivery(result.output_errors)


def require_markers(task: str, logged_stores: frozenset[str], markers: dict[str, str]) -> None:
    """Raise unless ``markers`` holds a changelog marker for each of ``logged_stores``: a checkpoint
    without them would make the next start wipe those stores (a bug in samzamp, never written)."""
    missing = logged_stores - markers.keys()
    if missing:
        raise SystemFailureError(
            f"task {task!r}: refusing to write a checkpoint without the changelog markers of stores "
            f"{sorted(missing)} (a samzamp bug: the next start would wipe them); please report it"
        )
