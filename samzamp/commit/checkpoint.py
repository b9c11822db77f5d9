"""Checkpoint records: versioned msgspec Structs (JSON on the wire), keyed by task name.

The key is ``{"type": "checkpoint", "task_name": ..., "grouper": ...}`` so that a compacted topic keeps
one record per task. The value is a tagged union on ``version``: old versions stay decodable when new
ones are added. Offsets are *last processed* offsets (restart resumes at offset + 1), as in Samza.
Each SSP entry carries ``key_bucket`` (-1 = none), so virtual tasks (job.elasticity.factor > 1) can
checkpoint per key bucket without a new format; a reader of this version that finds no key_bucket
takes -1.

Version 2 adds where the checkpoint stands in the job's run (``run_id``; ``drained``: the task's
final checkpoint of that run's drain) and the task's ``ControlState`` (an application's progress
through drain and end-of-stream messages). A version 1 record reads as a version 2 one without them.
"""

from __future__ import annotations

import os
import time

import msgspec

from samzamp.api.envelope import SystemStreamPartition
from samzamp.api.errors import CheckpointError
from samzamp.model.control_state import ControlState

__all__ = [
    "Checkpoint",
    "CheckpointKey",
    "CheckpointV1",
    "CheckpointV2",
    "SSPOffset",
    "decode_checkpoint",
    "encode_checkpoint",
    "new_checkpoint_id",
    "written_ms",
]


class CheckpointKey(msgspec.Struct, frozen=True):
    task_name: str
    grouper: str
    type: str = "checkpoint"


class SSPOffset(msgspec.Struct, frozen=True):
    system: str
    stream: str
    partition: int
    offset: int
    key_bucket: int = -1

    @property
    def ssp(self) -> SystemStreamPartition:
        return SystemStreamPartition(self.system, self.stream, self.partition, self.key_bucket)


class CheckpointV1(msgspec.Struct, frozen=True, tag="1", tag_field="version"):
    checkpoint_id: str
    task_name: str
    input_offsets: list[SSPOffset]
    # store name -> changelog marker: the newest changelog offset this checkpoint covers
    state_markers: dict[str, str] = {}

    def offsets(self) -> dict[SystemStreamPartition, int]:
        return {o.ssp: o.offset for o in self.input_offsets}

    # What version 2 added, as a version 1 record has it: written outside any run, no control state.
    @property
    def run_id(self) -> str:
        return ""

    @property
    def drained(self) -> bool:
        return False

    @property
    def control(self) -> ControlState | None:
        return None

    def drained_in(self, run_id: str | None) -> bool:
        return False


class CheckpointV2(msgspec.Struct, frozen=True, tag="2", tag_field="version"):
    checkpoint_id: str
    task_name: str
    input_offsets: list[SSPOffset]
    state_markers: dict[str, str] = {}
    run_id: str = ""  # the run (app.run.id) that wrote it; empty: written outside a run
    drained: bool = False  # the task's final checkpoint of run_id's drain
    control: ControlState | None = None

    def offsets(self) -> dict[SystemStreamPartition, int]:
        return {o.ssp: o.offset for o in self.input_offsets}

    def drained_in(self, run_id: str | None) -> bool:
        """This is the task's final checkpoint of a drain of run ``run_id``."""
        return self.drained and bool(run_id) and self.run_id == run_id


Checkpoint = CheckpointV2 | CheckpointV1  # every version, newest first

_key_enc = msgspec.json.Encoder()
_key_dec = msgspec.json.Decoder(CheckpointKey)
_enc = msgspec.json.Encoder()
_dec: msgspec.json.Decoder[Checkpoint] = msgspec.json.Decoder(Checkpoint)


def new_checkpoint_id() -> str:
    """Samza's CheckpointId form: ``<millis>-<sub-millisecond>``, unique and ordered within a process."""
    return f"{int(time.time() * 1000)}-{time.monotonic_ns() % 1_000_000:06d}{os.getpid() % 100:02d}"


def written_ms(checkpoint: Checkpoint) -> int | None:
    """When ``checkpoint`` was written (epoch millis, from its id: ``new_checkpoint_id``); None for
    an id of another form."""
    head = checkpoint.checkpoint_id.split("-", 1)[0]
    return int(head) if head.isdigit() else None


def encode_checkpoint(key: CheckpointKey, checkpoint: Checkpoint) -> tuple[bytes, bytes]:
    return _key_enc.encode(key), _enc.encode(checkpoint)


def decode_key(data: bytes) -> CheckpointKey | None:
    """The key, or None for a record that is not a checkpoint of this format (skipped)."""
    try:
        key = _key_dec.decode(data)
    except msgspec.DecodeError:
        return None
    return key if key.type == "checkpoint" else None


def decode_checkpoint(task_name: str, data: bytes) -> Checkpoint:
    try:
        return _dec.decode(data)
    except msgspec.DecodeError as e:
        raise CheckpointError(
            f"checkpoint of task {task_name!r} cannot be decoded ({e}); it was written by a newer samzamp "
            "or is corrupt: upgrade, or reset the task's offsets with samza.reset.offset"
        ) from None
