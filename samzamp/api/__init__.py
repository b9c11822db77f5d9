"""The job author's world: task interfaces, envelopes, collector, coordinator, stores, serdes.

This package imports nothing else from samzamp, so that it stays the stable public face.
"""

from samzamp.api.collector import MessageCollector, RequestScope, TaskCoordinator
from samzamp.api.context import TaskContext
from samzamp.api.envelope import (
    IncomingMessageEnvelope,
    OutgoingMessageEnvelope,
    SystemStream,
    SystemStreamPartition,
)
from samzamp.api.errors import (
    CallbackTimeoutError,
    CheckpointError,
    ConfigError,
    IllegalCallbackStateError,
    SamzampError,
    SerdeError,
    StoreError,
    SystemFailureError,
    TaskError,
    WorkerError,
)
from samzamp.api.serde import Serde
from samzamp.api.store import KeyValueIterator, KeyValueStore
from samzamp.api.task import (
    AsyncStreamTask,
    CheckpointListenerTask,
    ClosableTask,
    DrainListenerTask,
    EndOfStreamListenerTask,
    InitableTask,
    StreamTask,
    TaskCallback,
    WindowableTask,
)

__all__ = [
    "AsyncStreamTask",
    "CallbackTimeoutError",
    "CheckpointError",
    "CheckpointListenerTask",
    "ClosableTask",
    "ConfigError",
    "DrainListenerTask",
    "EndOfStreamListenerTask",
    "IllegalCallbackStateError",
    "IncomingMessageEnvelope",
    "InitableTask",
    "KeyValueIterator",
    "KeyValueStore",
    "MessageCollector",
    "OutgoingMessageEnvelope",
    "RequestScope",
    "SamzampError",
    "Serde",
    "SerdeError",
    "StoreError",
    "StreamTask",
    "SystemFailureError",
    "SystemStream",
    "SystemStreamPartition",
    "TaskCallback",
    "TaskContext",
    "TaskCoordinator",
    "TaskError",
    "WindowableTask",
    "WorkerError",
]
