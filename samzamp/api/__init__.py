"""The job author's world: task interfaces, envelopes, collector, coordinator, stores, serdes.

This package imports nothing else from samzamp, so that it stays the stable public face.
"""

from samzamp.api.application import StreamApplication, StreamApplicationDescriptor
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
from samzamp.api.operators import KV, MessageStream, OutputStream, Table
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
from samzamp.api.windows import WindowKey, WindowPane, Windows

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
    "KV",
    "KeyValueIterator",
    "KeyValueStore",
    "MessageCollector",
    "MessageStream",
    "OutgoingMessageEnvelope",
    "OutputStream",
    "RequestScope",
    "SamzampError",
    "Serde",
    "SerdeError",
    "StoreError",
    "StreamApplication",
    "StreamApplicationDescriptor",
    "StreamTask",
    "SystemFailureError",
    "SystemStream",
    "SystemStreamPartition",
    "Table",
    "TaskCallback",
    "TaskContext",
    "TaskCoordinator",
    "TaskError",
    "WindowKey",
    "WindowPane",
    "WindowableTask",
    "Windows",
    "WorkerError",
]
