"""The checkpoint topic: one per job, one partition, compacted, one record per task (the latest wins).

Read once at start (oldest to end); written at every commit, waiting for the broker's
acknowledgement before the commit counts as done. The producer given here must carry nothing else
(the container makes one for checkpoints), so that its flush waits for the checkpoint alone.
Works on any system that implements SystemAdmin and SystemProducer (Kafka, in-memory).
"""

from __future__ import annotations

import logging
import time

from samzamp.api.envelope import SystemStreamPartition
from samzamp.api.errors import CheckpointError
from samzamp.commit.checkpoint import (
    Checkpoint,
    CheckpointKey,
    CheckpointV1,
    SSPOffset,
    decode_checkpoint,
    decode_key,
    encode_checkpoint,
    new_checkpoint_id,
)
from samzamp.systems.base import SystemAdmin, SystemProducer

__all__ = ["TopicCheckpointManager"]

log = logging.getLogger(__name__)


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
        """The newest checkpoint of every task in the topic."""
        latest: dict[str, Checkpoint] = {}
        for _offset, key_bytes, value, _ts in self._admin.read_all(self.topic, 0):
            if key_bytes is None:
                continue
            key = decode_key(key_bytes)
            if key is None:
                continue
            if key.grouper != self._grouper and self._validate:
                raise CheckpointError(
                    f"checkpoint of task {key.task_name!r} in {self.topic} was written with grouper {key.grouper!r}, "
                    f"but this job uses {self._grouper!r}; set job.checkpoint.validation.enabled=false to ignore"
                )
            if value is None:
                latest.pop(key.task_name, None)  # a tombstone deletes the task's checkpoint
                continue
            latest[key.task_name] = decode_checkpoint(key.task_name, value)
        return latest

    def write_checkpoint(
        self, task_name: str, offsets: dict[SystemStreamPartition, int], state_markers: dict[str, str] | None = None
    ) -> Checkpoint:
        """Write and wait for the acknowledgement (blocking: call it off the event loop)."""
        checkpoint = CheckpointV1(
            checkpoint_id=new_checkpoint_id(),
            task_name=task_name,
            input_offsets=[
                SSPOffset(s.system, s.stream, s.partition, o, s.key_bucket) for s, o in sorted(offsets.items())
            ],
            state_markers=dict(state_markers or {}),
        )
        key, value = encode_checkpoint(CheckpointKey(task_name=task_name, grouper=self._grouper), checkpoint)
        delay = 0.5
        for attempt in range(1, 6):
            self._producer.send(self.topic, key, value, 0, None)
            errors = (
                self._producer.take_errors() if self._producer.flush(30) == 0 else ["no acknowledgement within 30 s"]
            )
            if not errors:
                return checkpoint
            error = errors[0]
            log.warning("checkpoint of task %r not written (attempt %d): %s", task_name, attempt, error)
            time.sleep(delay)
            delay = min(delay * 2, 10)
        raise CheckpointError(f"checkpoint of task {task_name!r} could not be written to {self.topic}: {error}")
