"""Re-bucketing a job's state to another job.elasticity.factor: what goes where (no Kafka, no Spark).

The old tasks are the job's tasks at the factor F1 its state was written with, the new tasks those at
the factor F2 it is to run with (``samzamp.model.grouper``: ``Partition 0_1_2`` is key bucket 1
of 2 of ``Partition 0``). A store key goes to the new task of the same base (plain task name) and
bucket ``key_hash(key) % F2``. That is where its messages go only if the store is keyed by the input
messages' serialized key bytes; a key whose bucket at F1 is not its old task's shows a store keyed
otherwise (``route_key`` says so), and re-bucketing it would part its state from its messages.

Changelog partitions follow "one partition per task, in Samza's order": a new task the task history
already knows keeps its partition; the others take the lowest partitions no such task holds, in task
order (``assign_partitions``).
"""

from __future__ import annotations

import itertools
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from samzamp.api.errors import ConfigError
from samzamp.commit.checkpoint import Checkpoint
from samzamp.commit.elasticity import written_at
from samzamp.consume.key_bucket import key_hash
from samzamp.model.grouper import TaskName, parse_task_name, task_order, virtual_task_name

__all__ = [
    "NewTask",
    "OldTask",
    "assign_partitions",
    "check_bases",
    "check_latest_factor",
    "live_keys",
    "route_key",
    "stale_keys",
]


@dataclass(frozen=True)
class OldTask:
    """A task of the old factor: where its state is and up to where its last checkpoint covers it."""

    name: str
    partition: int  # its changelog partition
    cut: int  # its last checkpoint's state marker: the state is the records at offsets <= cut (-1: empty)


@dataclass(frozen=True)
class NewTask:
    """A task of the new factor and the changelog partition its state is written to."""

    name: str
    partition: int


def assign_partitions(new_tasks: Iterable[str], known: Mapping[str, int]) -> dict[str, int]:
    """Changelog partition of each new task: the one ``known`` (the task history) records for it,
    else the lowest partitions not recorded for another new task, in ``task_order``. ValueError if
    ``known`` gives two new tasks one partition (then their states would mix)."""
    names = sorted(set(new_tasks), key=task_order)
    out = {n: known[n] for n in names if n in known}
    owners: dict[int, str] = {}
    for name, partition in out.items():
        if partition in owners:
            raise ValueError(
                f"the task history gives tasks {owners[partition]!r} and {name!r} the same changelog partition "
                f"{partition}"
            )
        owners[partition] = name
    free = (p for p in itertools.count() if p not in owners)
    for name in names:
        if name not in out:
            out[name] = next(free)
    return out


def route_key(old: TaskName, key: bytes, to_factor: int) -> str | None:
    """The new task (factor ``to_factor``) that store key ``key`` of task ``old`` belongs to; None if
    the key's bucket at ``old``'s factor is not ``old``'s (the store is not keyed by its messages' keys)."""
    h = key_hash(key)
    if h % old.factor != old.key_bucket:
        return None
    return virtual_task_name(old.base, h % to_factor, to_factor)


def check_bases(old_tasks: Collection[str], new_tasks: Collection[str], to_factor: int) -> None:
    """ConfigError unless every key bucket of factor ``to_factor`` of every old task's base is a new
    task: the job's inputs (its plain tasks) must be the same at both factors."""
    new = set(new_tasks)
    for name in sorted(old_tasks, key=task_order):
        base = parse_task_name(name).base
        missing = [n for n in (virtual_task_name(base, b, to_factor) for b in range(to_factor)) if n not in new]
        if missing:
            raise ConfigError(
                "task.inputs",
                f"task {name!r} holds state, but the job at factor {to_factor} has no task {missing[0]!r} to take "
                "it: the job's inputs must be the same at both factors",
            )


def check_latest_factor(
    old_tasks: Collection[str], last: Mapping[str, Checkpoint], from_factor: int, stores: Collection[str]
) -> None:
    """ConfigError naming ``--from-factor`` unless, for every plain task (base) of ``old_tasks``, the
    newest checkpoint carrying state markers of ``stores`` is one of factor ``from_factor`` (then its
    tasks wrote the state last), or when no task checkpointed any state."""
    bases = {parse_task_name(n).base for n in old_tasks}
    newest: dict[str, tuple[tuple[int, ...], str]] = {}
    for name, checkpoint in last.items():
        parsed = parse_task_name(name)
        if parsed.base not in bases or not any(s in checkpoint.state_markers for s in stores):
            continue
        at = written_at(checkpoint)
        if parsed.base not in newest or at > newest[parsed.base][0]:
            newest[parsed.base] = (at, name)
    if not newest:
        raise ConfigError(
            "--from-factor",
            f"no checkpoint of the job records the state of store(s) {', '.join(sorted(stores))}: there is no "
            "state to re-bucket (has the job run with these stores?)",
        )
    for base in sorted(newest, key=task_order):
        name = newest[base][1]
        factor = parse_task_name(name).factor
        if factor != from_factor:
            raise ConfigError(
                "--from-factor",
                f"is {from_factor}, but the job's latest checkpoints are of factor {factor} (task {name!r}, "
                f"checkpoint {last[name].checkpoint_id}): its state was last written at factor {factor}; "
                f"pass --from-factor {factor}",
            )


def live_keys(records: Iterable[tuple[int, bytes, bytes | None]]) -> tuple[dict[bytes, bytes], int]:
    """The state a changelog's ``(offset, key, value)`` records leave (the last value per key, a
    tombstone (None) deleting it), and how many records there were."""
    state: dict[bytes, bytes | None] = {}
    n = 0
    for _offset, key, value in records:
        state[key] = value
        n += 1
    return {k: v for k, v in state.items() if v is not None}, n


def stale_keys(present: Iterable[bytes], state: Mapping[bytes, bytes]) -> list[bytes]:
    """The keys live in a reused changelog partition (``present``) that the new task's ``state`` lacks:
    each needs a tombstone, since a restore reads the partition from its oldest record. Sorted."""
    return sorted(set(present) - state.keys())
