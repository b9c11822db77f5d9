"""The run id: which deployment of a job is running (Samza's app.run.id), kept in the metadata store.

A deployment starts when a container starts after the job's previous run ended cleanly (stopped or
drained) or when the job never ran; it keeps its run id across restarts after a crash or a failure,
as a Samza job keeps its run id while its containers are restarted. So a drain requested for the run
still applies to a container that was restarted in the middle of it. ``app.run.id`` in the config
overrides all this (then each deployment must set a new one, as Samza's planner does).

The current run is one record, ``samzamp-run-v1/current``, msgspec JSON: tools (``samzamp-drain``)
read it to find the running deployment.

Where the record lives is a ``Runs``: for a job of one container, ``StreamRuns``, the coordinator
stream (this module's ``start_run``/``end_run``); for a standalone job, ``ZkRuns`` in
``samzamp.coordinator.zk.runs``, ZooKeeper, where the run is shared by several processors and ends
only when its last processor ends it. A job's drain notifications live in the same place as its run
record (``Runs.namespace``), so that a processor and ``samzamp-drain`` look in one place. A tool
sees that place through a ``RunView`` (``StreamRunView``, or ``ZkRunView`` for a standalone job);
the job's coordinator factory (``samzamp.coordinator.factory``) says which.
"""

from __future__ import annotations

import enum
import os
import socket
import time
import uuid
from collections.abc import Callable
from typing import Protocol

import msgspec

from samzamp.coordinator.metadata_store import CoordinatorStreamStore, MetadataStore

__all__ = [
    "RUN_NAMESPACE",
    "RunAlreadyDrained",
    "RunProcessor",
    "RunRecord",
    "RunState",
    "RunView",
    "Runs",
    "StreamRunView",
    "StreamRuns",
    "end_run",
    "generate_run_id",
    "process_alive",
    "read_current_run",
    "start_run",
]

RUN_NAMESPACE = "samzamp-run-v1"
_CURRENT = "current"


class RunState(enum.StrEnum):
    RUNNING = "running"  # a container of the run is up (or died without saying so: it will be restarted)
    FAILED = "failed"  # the container stopped on a failure; a restart continues the same run
    STOPPED = "stopped"  # stopped cleanly (signal, shutdown request, end of input): the run is over
    DRAINED = "drained"  # drained and stopped: the run is over

    @property
    def ended(self) -> bool:
        return self in (RunState.STOPPED, RunState.DRAINED)


class RunRecord(msgspec.Struct, frozen=True, rename="camel"):
    run_id: str
    state: RunState
    started_ms: int
    updated_ms: int
    host: str
    pid: int


class RunProcessor(msgspec.Struct, frozen=True):
    """A live processor of a job's run as a tool sees it: its id, where it runs and its tasks (those
    of the job model it agreed to; empty before it has one)."""

    processor_id: str
    host: str
    pid: int
    tasks: tuple[str, ...] = ()


def process_alive(host: str, pid: int) -> bool | None:
    """Whether process ``pid`` of ``host`` runs: True or False when ``host`` is this host (by its
    hostname), None when it is another, which nothing here can see. A pid the kernel gave to
    another process since reads as alive."""
    if host != socket.gethostname() or pid <= 0:
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process: it exists
    return True


def generate_run_id() -> str:
    """Samza's format: ``<epoch millis>-<first 8 characters of a random UUID>``."""
    return f"{int(time.time() * 1000)}-{str(uuid.uuid4())[:8]}"


def read_current_run(store: MetadataStore) -> RunRecord | None:
    raw = store.get(_CURRENT)
    if raw is None:
        return None
    try:
        return msgspec.json.decode(raw, type=RunRecord)
    except msgspec.DecodeError:
        return None  # written by another version: as if no run were known


class RunAlreadyDrained(Exception):
    """The configured run (app.run.id) drained: it is over, and a process started for it has nothing to do."""

    def __init__(self, record: RunRecord) -> None:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(record.updated_ms / 1000))
        super().__init__(
            f"run {record.run_id} (app.run.id) drained at {when}: the run is over, so nothing is processed; "
            "a new deployment needs a new app.run.id"
        )
        self.record = record


def start_run(store: MetadataStore, configured: str | None, others: int = 0) -> tuple[RunRecord, str]:
    """Publish this container's run (state RUNNING); returns it and how its id was chosen.

    ``others``: how many other processes run the job now (standalone); when there are any, this
    one joins their run, the one in the record (Samza's RunIdGenerator: only the first generates).
    Raises RunAlreadyDrained, writing nothing, when ``configured`` names a run that drained: a
    supervisor that restarts whatever exits (a Kubernetes StatefulSet) must not start a drained
    deployment over again."""
    previous = read_current_run(store)
    if configured and previous is not None and previous.run_id == configured and previous.state is RunState.DRAINED:
        raise RunAlreadyDrained(previous)
    if configured:
        run_id, how = configured, "app.run.id"
    elif others and previous is not None:
        run_id, how = previous.run_id, f"joined: {others} other processor{'s' if others > 1 else ''} of the run running"
    elif previous is not None and not previous.state.ended:
        run_id, how = previous.run_id, f"continued: the run's last container {previous.state.value} without stopping"
    else:
        run_id, how = generate_run_id(), "generated"
    now = int(time.time() * 1000)
    started = previous.started_ms if previous is not None and previous.run_id == run_id else now
    record = RunRecord(run_id, RunState.RUNNING, started, now, socket.gethostname(), os.getpid())
    store.put(_CURRENT, msgspec.json.encode(record))
    return record, how


def end_run(store: MetadataStore, record: RunRecord, state: RunState) -> RunRecord:
    """Record how this container's run ended."""
    ended = msgspec.structs.replace(record, state=state, updated_ms=int(time.time() * 1000))
    store.put(_CURRENT, msgspec.json.encode(ended))
    return ended


class Runs(Protocol):
    """The run of this process's job: its id, how it ended, and the job's metadata beside it."""

    where: str  # for messages: where the run record and drain notifications live

    def namespace(self, namespace: str) -> MetadataStore:
        """One namespace of the metadata store that holds the run record (and the drain notifications)."""

    def start(self, configured: str | None) -> tuple[RunRecord, str]:
        """Join the job's current run, or start a new one; the run and how its id was chosen."""

    def end(self, record: RunRecord, state: RunState) -> tuple[RunRecord, int]:
        """This process's part of the run ended with ``state``. Returns the record and how many other
        processes still run it: with 0 the run itself ended so, and the record says ``state``."""

    def close(self) -> None:
        """Release what the runs hold (connections); idempotent."""


class StreamRuns:
    """The run of a job of one container, in its coordinator stream: that container is the run."""

    def __init__(self, stream: CoordinatorStreamStore) -> None:
        self._stream = stream
        self.where = f"coordinator stream {stream.topic}"

    def namespace(self, namespace: str) -> MetadataStore:
        return self._stream.namespace(namespace)

    def start(self, configured: str | None) -> tuple[RunRecord, str]:
        return start_run(self._stream.namespace(RUN_NAMESPACE), configured)

    def end(self, record: RunRecord, state: RunState) -> tuple[RunRecord, int]:
        return end_run(self._stream.namespace(RUN_NAMESPACE), record, state), 0

    def close(self) -> None:
        pass


class RunView(Protocol):
    """The job's run as a tool sees it (``samzamp-drain``, the offline jobs), without taking part in it."""

    where: str  # for messages: where the run record and drain notifications live

    def namespace(self, namespace: str) -> MetadataStore:
        """One namespace of the metadata store that holds the run record (and the drain notifications)."""

    def exists(self) -> bool:
        """Whether the job ever wrote there."""

    def prepare(self) -> None:
        """Make it ready for a value to be written (a drain notification)."""

    def members(self) -> int | None:
        """How many processes run the job's current run now, where that is kept apart from the run
        record (a standalone job's members); None where only the record tells."""

    def processors(self) -> list[RunProcessor] | None:
        """The job's live processors and their tasks, where they are kept apart from the run record
        (a standalone job's, on ZooKeeper); None where only the record tells."""

    def close(self) -> None:
        """Release what the view holds (connections, clients)."""


class StreamRunView:
    """The run of a job of one container, as its coordinator stream holds it."""

    def __init__(self, stream: CoordinatorStreamStore, close: Callable[[], None] = lambda: None) -> None:
        """``close``: releases the clients that reach the stream (the caller made them)."""
        self._stream = stream
        self._close = close
        self.where = f"coordinator stream {stream.topic}"

    def namespace(self, namespace: str) -> MetadataStore:
        return self._stream.namespace(namespace)

    def exists(self) -> bool:
        return self._stream.exists()

    def prepare(self) -> None:
        self._stream.create_topic()

    def members(self) -> int | None:
        return None  # the container is the run: only its record says whether it runs

    def processors(self) -> list[RunProcessor] | None:
        return None  # the one container: its record says where it runs

    def close(self) -> None:
        self._close()
