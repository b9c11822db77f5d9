"""The public API, pinned (trio's ``_tests/test_exports.py``): ``samzamp`` exports exactly these
names, each from ``samzamp.api``, and nothing else public. Changing this list changes the public API:
do it on purpose, with docs/task-api.md."""

from __future__ import annotations

import types

import samzamp
import samzamp.api

PUBLIC = [
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


def test_samzamp_exports_exactly_the_pinned_names() -> None:
    assert sorted(samzamp.__all__) == sorted([*PUBLIC, "__version__"])
    assert len(set(samzamp.__all__)) == len(samzamp.__all__), "a name is listed twice"


def test_api_all_is_the_public_names_sorted() -> None:
    # Sorted, so that a diff of the public API reads as one added or removed line.
    assert samzamp.api.__all__ == PUBLIC


def test_every_public_name_is_defined_in_samzamp_api() -> None:
    for name in PUBLIC:
        obj = getattr(samzamp, name)
        assert obj is getattr(samzamp.api, name)
        assert obj.__module__.startswith("samzamp.api."), f"{name} comes from {obj.__module__}, not samzamp.api"


def test_samzamp_has_no_public_name_outside_all() -> None:
    # Submodules show up as attributes once anything imports them; they are not names of the API.
    public = {n for n, v in vars(samzamp).items() if not n.startswith("_") and not isinstance(v, types.ModuleType)}
    assert public == set(PUBLIC)


def test_star_import_gives_the_public_names() -> None:
    namespace: dict[str, object] = {}
    exec("from samzamp import *", namespace)
    assert {n for n in namespace if n != "__builtins__"} == {*PUBLIC, "__version__"}
    assert namespace["__version__"] == samzamp.__version__
