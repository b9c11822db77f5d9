"""The checkpoint topic: one per job, one partition, compacted, one record per task (the latest wins).

Read from the oldest record at the first read, then from where the last read stopped; written at
every commit, waiting for the broker's acknowledgement before the commit counts as done (the
checkpoints of the commits under way written together: ``samzamp.commit.checkpoint_writes``). The
producer given here must carry nothing else (the container makes one for checkpoints), so that its
flush waits for the checkpoints alone.
Works on any system that implements SystemAdmin and SystemProducer (Kafka, in-memory).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from typing import Any, NamedTuple

import msgspec

from samzamp.api.envelope import SystemStreamPartition
from samzamp.api.errors import CheckpointError, ConfigError
from samzamp.commit.checkpoint import (
    Checkpoint,
    CheckpointKey,
    CheckpointV2,
    SSPOffset,
    decode_checkpoint,
    decode_key,
    encode_checkpoint,
    new_checkpoint_id,
)
from samzamp.model.control_state import ControlState
from samzamp.systems.base import SystemAdmin, SystemProducer
from samzamp.systems.read_since import ReadPosition, read_since

__all__ = ["CheckpointWrite", "TopicCheckpointManager", "samza_checkpoint_task"]

log = logging.getLogger(__name__)

# The fields of Samza's checkpoint key (KafkaCheckpointLogKeySerde), any of which marks a record as Samza's.
_SAMZA_KEY_FIELDS = ("taskName", "systemstreampartition-grouper-factory")
_json_object = msgspec.json.Decoder(dict[str, Any])


def samza_checkpoint_task(key: bytes | None) -> str | None:
    """The task name of a checkpoint key written by Apache Samza, or None for any other key."""
    if key is None:
        return None
    try:
        fields = _json_object.decode(key)
    except msgspec.DecodeError:
        return None
    if not any(f in fields for f in _SAMZA_KEY_FIELDS):
        return None
    return str(fields.get("taskName", "?"))


class _ReadSoFar:
    """What the checkpoint topic said up to ``position``."""

    __slots__ = ("foreign", "latest", "position", "samza_tasks")

    def __init__(self) -> None:
        self.position = ReadPosition()
        self.latest: dict[str, Checkpoint] = {}
        self.samza_tasks: set[str] = set()
        self.foreign = 0

    def clear(self) -> None:
        self.position = ReadPosition()
        self.latest = {}
        self.samza_tasks = set()
        self.foreign = 0

    def copy(self) -> _ReadSoFar:
        out = _ReadSoFar()
        out.position, out.latest, out.samza_tasks, out.foreign = (
            self.position,
            dict(self.latest),
            set(self.samza_tasks),
            self.foreign,
        )
        return out


class TopicCheckpointManager:
    def __init__(
        self,
        admin: SystemAdmin,
        producer: SystemProducer,
        topic: str,
        grouper: str,
        replication_factor: int = 1,
        segment_bytes: int = 26214400,
        validate_grouper: bool = True,
    ) -> None:
        self._admin = admin
        self._producer = producer
        self.topic = topic
        self._grouper = grouper
        self._replication = replication_factor
        self._segment_bytes = segment_bytes
        self._validate = validate_grouper
        self.run_id = ""  # the job's run (app.run.id) that each checkpoint written here belongs to
        self._read = _ReadSoFar()  # the topic as far as read_last_checkpoints read it
        self._read_lock = threading.Lock()

    def create_topic(self) -> None:
        counts = self._admin.partition_counts([self.topic])
        if self.topic in counts:
            if counts[self.topic] != 1:
                raise CheckpointError(
                    f"checkpoint topic {self.topic!r} has {counts[self.topic]} partitions; it must have 1"
                )
            return
        self._admin.create_stream(
            self.topic, 1, self._replication, {"cleanup.policy": "compact", "segment.bytes": str(self._segment_bytes)}
        )

    def read_last_checkpoints(self) -> dict[str, Checkpoint]:
        """The newest checkpoint of every task in the topic.

        The first call reads the topic from its oldest record; later ones read only what was
        written since (a processor reads it at every rebalance, and the topic of thousands of tasks
        grows by thousands of records a commit interval). Should the topic end before where the
        last read stopped (it was recreated), it is read whole again where the broker answers a
        read past the end from the oldest record (Kafka's reset). Any thread.

        A topic that holds Apache Samza's checkpoints and none of samzamp's raises ConfigError: the
        job was moved from Samza under the same job.name and job.id, and starting would silently
        drop every offset Samza committed. Any other record samzamp cannot read is skipped, and said.
        """
        with self._read_lock:
            # Read into a copy: a read that fails leaves what was read before as it was.
            read = self._read.copy()
            self._read_from(read)
            self._read = read
        return self._checked(read)

    def _read_from(self, read: _ReadSoFar) -> None:
        """Apply the records written since ``read.position`` to ``read`` (``samzamp.systems.read_since``:
        a batch the broker held back is read again at the next read, and a recreated topic whole)."""
        got = read_since(self._admin, self.topic, 0, read.position)
        if got.whole:
            read.clear()
        for _offset, key_bytes, value, _ts in got.records:
            key = decode_key(key_bytes) if key_bytes is not None else None
            if key is None:
                samza_task = samza_checkpoint_task(key_bytes)
                if samza_task is not None:
                    read.samza_tasks.add(samza_task)
                else:
                    read.foreign += 1
                continue
            if key.grouper != self._grouper and self._validate:
                raise CheckpointError(
                    f"checkpoint of task {key.task_name!r} in {self.topic} was written with grouper {key.grouper!r}, "
                    f"but this job uses {self._grouper!r}; set job.checkpoint.validation.enabled=false to ignore"
                )
            if value is None:
                read.latest.pop(key.task_name, None)  # a tombstone deletes the task's checkpoint
                continue
            read.latest[key.task_name] = decode_checkpoint(key.task_name, value)
        read.position = got.next

    def _checked(self, read: _ReadSoFar) -> dict[str, Checkpoint]:
        latest, samza_tasks, foreign = read.latest, read.samza_tasks, read.foreign
        if samza_tasks and not latest:
            raise ConfigError(
                "job.id",
                f"checkpoint topic {self.topic} holds Apache Samza's checkpoints ({len(samza_tasks)} task(s), e.g. "
                f"{min(samza_tasks)!r}), which samzamp cannot read: starting would ignore them and begin at "
                "samza.offset.default. Give the job another job.id (a new checkpoint topic), or delete the topic "
                "to start over",
            )
        if samza_tasks:
            log.warning(
                "checkpoint topic %s: ignoring Apache Samza's checkpoints of %d task(s) beside samzamp's own",
                self.topic,
                len(samza_tasks),
            )
        if foreign:
            log.warning(
                "checkpoint topic %s: skipped %d record(s) that are not samzamp checkpoints", self.topic, foreign
            )
        return dict(latest)

    def write_checkpoint(
        self,
        task_name: str,
        offsets: dict[SystemStreamPartition, int],
        state_markers: dict[str, str] | None = None,
        *,
        control: ControlState | None = None,
        drained: bool = False,
    ) -> Checkpoint:
        """Write and wait for the acknowledgement (blocking: call it off the event loop).
        ``drained``: the task's final checkpoint of its run's drain."""
        return self.write_checkpoints([CheckpointWrite(task_name, offsets, state_markers, control, drained)])[0]

    def write_checkpoints(self, writes: Sequence[CheckpointWrite]) -> list[Checkpoint]:
        """Write the checkpoints of ``writes`` (of distinct tasks, or in the order they must be
        applied) and wait for the acknowledgement of them all, one flush for the lot (blocking: call
        it off the event loop). All are sent again while any failed; CheckpointError if they could
        not be written in five attempts."""
        checkpoints: list[Checkpoint] = []
        records: list[tuple[bytes, bytes]] = []
        for w in writes:
            checkpoint = CheckpointV2(
                checkpoint_id=new_checkpoint_id(),
                task_name=w.task_name,
                input_offsets=[
                    SSPOffset(s.system, s.stream, s.partition, o, s.key_bucket) for s, o in sorted(w.offsets.items())
                ],
                state_markers=dict(w.state_markers or {}),
                run_id=self.run_id,
                drained=w.drained,
                control=w.control,
            )
            checkpoints.append(checkpoint)
            records.append(encode_checkpoint(CheckpointKey(task_name=w.task_name, grouper=self._grouper), checkpoint))
        if not writes:
            return checkpoints
        who = (
            f"task {writes[0].task_name!r}"
            if len(writes) == 1
            else f"{len(writes)} tasks ({writes[0].task_name!r}, ...)"
        )
        delay = 0.5
        error = ""
        for attempt in range(1, 6):
            for key, value in records:
                self._producer.send(self.topic, key, value, 0, None)
            errors = (
                self._producer.take_errors() if self._producer.flush(30) == 0 else ["no acknowledgement within 30 s"]
            )
            if not errors:
                return checkpoints
            error = errors[0]
            log.warning("checkpoint of %s not written (attempt %d): %s", who, attempt, error)
            time.sleep(delay)
            delay = min(delay * 2, 10)
        raise CheckpointError(f"checkpoint of {who} could not be written to {self.topic}: {error}")


class CheckpointWrite(NamedTuple):
    """One task's checkpoint to write (``TopicCheckpointManager.write_checkpoints``)."""

    task_name: str
    offsets: dict[SystemStreamPartition, int]
    state_markers: dict[str, str] | None = None
    control: ControlState | None = None
    drained: bool = False
