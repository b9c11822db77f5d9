"""What a job remembers of its tasks across runs, in its metadata store: which task each input
partition belonged to, and which changelog partition holds each task's state.

Both are written the first time a task or an SSP is seen and never changed or deleted afterwards,
so a task's changelog partition never changes, whatever happens to the inputs (Samza keeps the
same two records in its coordinator stream: ``set-changelog``, and the SSP -> task assignment
its SSPGrouperProxy reads). A task that leaves (its partitions are gone) keeps its changelog
partition: should it come back, it finds its state, and no other task ever gets that partition.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TypeVar

import msgspec

from samzamp.api.envelope import SystemStreamPartition
from samzamp.api.errors import SystemFailureError
from samzamp.coordinator.metadata_store import MetadataStore
from samzamp.model.grouper import task_order

__all__ = [
    "CHANGELOG_NAMESPACE",
    "SSP_NAMESPACE",
    "TaskHistory",
    "assign_changelog_partitions",
    "read_task_history",
    "record_task_history",
    "task_history_of",
]

T = TypeVar("T")

CHANGELOG_NAMESPACE = "set-changelog"
SSP_NAMESPACE = "set-task-partition-assignment"


class TaskHistory(msgspec.Struct, frozen=True):
    """The recorded task of each SSP and changelog partition of each task (empty for a new job)."""

    ssp_tasks: dict[SystemStreamPartition, str] = {}
    changelog: dict[str, int] = {}


def assign_changelog_partitions(known: Mapping[str, int], task_names: Iterable[str]) -> dict[str, int]:
    """``known`` plus a partition for each task it lacks: the next free ones after the highest
    known partition, in ``task_order`` (a new job: ``Partition 0`` gets 0, ``Partition 10`` gets 10)."""
    out = dict(known)
    nxt = max(known.values(), default=-1) + 1
    for name in sorted((n for n in set(task_names) if n not in known), key=task_order):
        out[name] = nxt
        nxt += 1
    return out


def _ssp_key(ssp: SystemStreamPartition) -> str:
    return msgspec.json.encode([ssp.system, ssp.stream, ssp.partition, ssp.key_bucket]).decode()


def read_task_history(changelog: MetadataStore, ssps: MetadataStore) -> TaskHistory:
    """The history recorded in the two namespaces (``CHANGELOG_NAMESPACE``, ``SSP_NAMESPACE``)."""
    return task_history_of(changelog.all(), ssps.all())


def task_history_of(changelog: Mapping[str, bytes], ssps: Mapping[str, bytes]) -> TaskHistory:
    """The history in the records of the two namespaces (key -> value, as read from each)."""
    mapping: dict[str, int] = {}
    for task, raw in changelog.items():
        mapping[task] = _decode(raw, int, CHANGELOG_NAMESPACE, task)
    owners: dict[SystemStreamPartition, str] = {}
    for key, raw in ssps.items():
        system, stream, partition, bucket = _decode(key.encode(), tuple[str, str, int, int], SSP_NAMESPACE, key)
        owners[SystemStreamPartition(system, stream, partition, bucket)] = _decode(raw, str, SSP_NAMESPACE, key)
    return TaskHistory(owners, mapping)


def _decode(raw: bytes, kind: type[T], namespace: str, key: str) -> T:
    try:
        return msgspec.json.decode(raw, type=kind)
    except msgspec.DecodeError as e:
        raise SystemFailureError(
            f"the job's metadata store holds a record samzamp cannot read: {namespace}/{key}: {e}; the job's "
            "coordinator stream was written by something else, or by a newer samzamp"
        ) from e


def record_task_history(changelog: MetadataStore, ssps: MetadataStore, old: TaskHistory, new: TaskHistory) -> int:
    """Write what ``new`` adds to ``old`` (an entry never changes once written); how many entries.
    Raises if ``new`` changes an entry ``old`` has: that would move a task's state."""
    moved = sorted(t for t, p in old.changelog.items() if new.changelog.get(t, p) != p)
    if moved:
        raise ValueError(f"the changelog partition of task(s) {moved} would change")
    changelog_entries = {t: msgspec.json.encode(p) for t, p in new.changelog.items() if t not in old.changelog}
    ssp_entries = {_ssp_key(s): msgspec.json.encode(t) for s, t in new.ssp_tasks.items() if s not in old.ssp_tasks}
    # Changelog partitions first: they are what keeps state apart; an SSP's task can be regrouped.
    if changelog_entries:
        changelog.put_all(changelog_entries)
    if ssp_entries:
        ssps.put_all(ssp_entries)
    return len(changelog_entries) + len(ssp_entries)
