"""The record format of intermediate (partition_by) streams, and where their control records go.

A record's value starts with one type byte (Samza's MessageType): 0 a user message, followed by
the bytes of the stream's message serde; 1 a watermark, 2 an end of stream, 3 a drain, each
followed by JSON: ``{"version": 1, "task-name": <sending task, or null for a broadcast copy>}``
plus ``"timestamp"`` (watermark) or ``"run-id"`` (drain). A control record has a null key. Any
other first byte is a deserialization error. The reader also accepts ``taskName``/``runId``.

A producer task sends a control message to one partition of the stream, its aggregate partition
``abs(java_string_hash(topic)) % partitions`` (Samza places it so, through Kafka's partitioner of
an integer key), where the task reading it counts the producers and broadcasts a copy to the
other partitions once all have sent theirs.
"""

from __future__ import annotations

from typing import Any

import msgspec

from samzamp.api.errors import SerdeError
from samzamp.api.serde import Serde

__all__ = [
    "ControlMessage",
    "DrainMessage",
    "EndOfStreamMessage",
    "IntermediateMessageSerde",
    "WatermarkMessage",
    "aggregate_partition",
    "decode_control",
    "encode_control",
    "java_string_hash",
]

USER_MESSAGE = 0
WATERMARK = 1
END_OF_STREAM = 2
DRAIN = 3


class ControlMessage(msgspec.Struct, frozen=True):
    """A control message on an intermediate stream: who sent it (None: a broadcast copy)."""

    task_name: str | None


class WatermarkMessage(ControlMessage, frozen=True):
    timestamp: int


# The watermark of a stream that will bring no more messages (Samza's Long.MAX_VALUE): a drain sends it.
MAX_WATERMARK = 2**63 - 1


class EndOfStreamMessage(ControlMessage, frozen=True):
    pass


class DrainMessage(ControlMessage, frozen=True):
    run_id: str


_json_encode = msgspec.json.Encoder().encode
_json_decode = msgspec.json.Decoder(dict[str, Any]).decode


def encode_control(message: ControlMessage) -> bytes:
    """The value bytes of a control record: its type byte, then JSON."""
    body: dict[str, Any] = {"version": 1, "task-name": message.task_name}
    if isinstance(message, WatermarkMessage):
        kind = WATERMARK
        body["timestamp"] = message.timestamp
    elif isinstance(message, DrainMessage):
        kind = DRAIN
        body["run-id"] = message.run_id
    elif isinstance(message, EndOfStreamMessage):
        kind = END_OF_STREAM
    else:
        raise TypeError(f"not a control message: {message!r}")
    return bytes((kind,)) + _json_encode(body)


def _field(body: dict[str, Any], name: str, java_name: str) -> Any:
    return body[name] if name in body else body.get(java_name)


def decode_control(kind: int, payload: bytes) -> ControlMessage:
    """The control message of type byte ``kind`` (1-3) with JSON ``payload``."""
    body = _json_decode(payload)
    task = _field(body, "task-name", "taskName")
    if task is not None and not isinstance(task, str):
        raise ValueError(f"a control message's task-name must be a string or null, got {task!r}")
    if kind == WATERMARK:
        ts = body.get("timestamp")
        if not isinstance(ts, int):
            raise ValueError(f"a watermark message needs an integer timestamp, got {ts!r}")
        return WatermarkMessage(task, ts)
    if kind == END_OF_STREAM:
        return EndOfStreamMessage(task)
    run_id = _field(body, "run-id", "runId")
    if not isinstance(run_id, str):
        raise ValueError(f"a drain message needs a run-id string, got {run_id!r}")
    return DrainMessage(task, run_id)


class IntermediateMessageSerde:
    """The message serde of an intermediate stream: the type byte around the user's serde."""

    def __init__(self, inner: Serde | None) -> None:
        self._to = inner.to_bytes if inner is not None else bytes
        self._from = inner.from_bytes if inner is not None else bytes

    def to_bytes(self, value: Any) -> bytes:
        if isinstance(value, ControlMessage):
            return encode_control(value)
        return b"\x00" + self._to(value)

    def from_bytes(self, data: bytes) -> Any:
        if not data:
            raise SerdeError("an intermediate record has an empty value (no type byte)")
        kind = data[0]
        if kind == USER_MESSAGE:
            return self._from(data[1:])
        if kind in (WATERMARK, END_OF_STREAM, DRAIN):
            return decode_control(kind, data[1:])
        raise SerdeError(f"an intermediate record starts with type byte {kind}; known types are 0 to 3")


def java_string_hash(s: str) -> int:
    """Java's ``String.hashCode``: over UTF-16 code units, in signed 32-bit arithmetic."""
    h = 0
    units = s.encode("utf-16-be")
    for i in range(0, len(units), 2):
        h = (31 * h + ((units[i] << 8) | units[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def aggregate_partition(topic: str, partitions: int) -> int:
    """The partition of ``topic`` that gathers its producers' control messages."""
    return abs(java_string_hash(topic)) % partitions
