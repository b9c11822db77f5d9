"""The frames that cross the rings between the container's loop and a worker process.

Every frame is a msgspec Struct encoded as MessagePack (array-like, tagged by its class), one frame per
ring record. Nothing is pickled: frames carry only ints, strings, bytes and lists of them.

Loop -> worker: ``AddTask``, ``RemoveTask``, ``Process`` (a batch of one task's messages), ``Yield``,
``Window``, ``EndOfStream``, ``Drain``, ``BeforeCommit``, ``Commit``, ``Checkpointed``, ``Stop``. Worker
-> loop: ``Ready``, ``TaskAdded``, ``TaskRemoved``, ``Processed``, ``Requested``, ``Yielded``,
``WindowDone``, ``EndOfStreamDone``, ``DrainDone``, ``BeforeCommitDone``, ``CommitReady``,
``StoresApplied``, ``Failed``, ``Metrics``, ``Stopped``.

A worker starts with no task (its ``WorkerSpec`` says how to run tasks, not which) and answers
``Ready``. From then on the loop hands it tasks and takes them back at any time: ``AddTask`` (the
worker builds the task, restores its stores, calls init; answers ``TaskAdded``) and ``RemoveTask``
(the task is closed, then its stores, which releases their directory locks; answers
``TaskRemoved``). A task is named by the index its ``AddTask`` gave it, and the loop never gives
an index twice in one worker's life, so a frame that arrives late can never reach another task: a
frame for an index the worker does not have is a bug, and the worker fails on it. SSPs are named by
their index in that task's ``TaskModel.ssps``.

The worker answers each loop frame of one task in the order it got them, so the loop can match answers
to requests by task alone (``TaskRemoved`` is the last frame of its task). ``Yield`` is the
exception: it takes effect as soon as the worker reads it, ahead of the frames before it (it is about
them).

The metrics the worker's tasks count (their sends, serialization errors, operators, their own
metrics) cross as ``Metrics`` frames: what changed since the last one (``samzamp.metrics.deltas``),
which the loop adds to the container's registry. A worker sends one every ``METRICS_EVERY_NS`` at
most (with its reports, or when it wakes idle), and one before ``TaskRemoved`` and ``Stopped``, so
the container's counts of a task are whole when the task leaves or the workers stop.

``VERSION`` is checked at start-up: a worker of another samzamp version refuses to run.
"""

from __future__ import annotations

from typing import Any

import msgspec

from samzamp.metrics.deltas import MetricDeltas
from samzamp.model.control_state import ControlState
from samzamp.model.job_model import TaskModel
from samzamp.storage.manager import RestoreReport

__all__ = [
    "IN_FLIGHT_BATCHES",
    "IN_FLIGHT_TARGET_NS",
    "METRICS_EVERY_NS",
    "REPORT_BATCHES",
    "REPORT_EVERY_NS",
    "TASK_MIN_SHARE_NS",
    "VERSION",
    "AddTask",
    "BeforeCommit",
    "BeforeCommitDone",
    "Checkpointed",
    "Commit",
    "CommitReady",
    "Drain",
    "DrainDone",
    "EndOfStream",
    "EndOfStreamDone",
    "Failed",
    "Metrics",
    "Process",
    "ProcessOut",
    "Processed",
    "Ready",
    "RemoveTask",
    "Requested",
    "Stop",
    "Stopped",
    "StoresApplied",
    "TaskAdded",
    "TaskRemoved",
    "Window",
    "WindowDone",
    "WorkerSpec",
    "Yield",
    "Yielded",
    "decode_from_loop",
    "decode_from_worker",
    "encode",
    "report_after",
]

VERSION = 6

# A raw message as the loop buffers it: (offset, key bytes, value bytes, timestamp ms).
RawTuple = tuple[int, "bytes | None", "bytes | None", int]


# Pacing between the loop and a worker. Each report wakes the loop, and a wake-up costs the loop
# tens of microseconds on a core the workers need (its caches cold after them), so reports are few:
# a worker sends its completions after REPORT_EVERY_NS of process time at the latest, even inside a
# batch (or after REPORT_BATCHES batches of messages, or when it runs out of input). The loop keeps
# about IN_FLIGHT_TARGET_NS of work queued in each worker, shared by its tasks, so that the worker
# never waits for the loop; a task's share never drops below two report intervals, so a report
# reaches the loop while that task still has work queued, however many idle tasks share its worker.
# For a fast task the bound in messages decides instead: IN_FLIGHT_BATCHES batches, of which a
# report frees a quarter. (At 10 ms per task and reports every 2 ms, bench/cpu_scaling at pool size
# 2 ran ~10% slower; on bench/elasticity, reports every 16 ms rather than 8 took a quarter off the
# loop thread's CPU.)
#
# That queue is sized from the task's measured time per message, so it is only as good as the
# measurement: before the first one, or when a task suddenly slows down, far more work can be queued.
# A due window, commit or shutdown therefore does not wait for the queue to run out: the loop sends
# ``Yield``, and the worker, which looks for it at each report, stops after the message it is in and
# gives the rest back. The wait is bounded by one report interval of work (or one message, if longer),
# whatever was queued.
REPORT_EVERY_NS = 16_000_000
IN_FLIGHT_TARGET_NS = 80_000_000
TASK_MIN_SHARE_NS = 2 * REPORT_EVERY_NS
IN_FLIGHT_BATCHES = 16  # job.container.worker.batch.size messages each
REPORT_BATCHES = IN_FLIGHT_BATCHES // 4

# How often, at most, a worker sends its tasks' metrics: a frame a second costs the loop nothing
# measurable, and an export (a scrape, a snapshot, the metrics log) sees them at most this late.
METRICS_EVERY_NS = 1_000_000_000


def report_after(batch_size: int) -> int:
    """How many unreported messages make a worker report, with batches of ``batch_size``
    (job.container.worker.batch.size): a quarter of a fast task's in-flight window."""
    return REPORT_BATCHES * batch_size


class _Frame(msgspec.Struct, array_like=True, tag=True):
    pass


# -- start-up (over the worker's stdin, JSON) ----------------------------------------------------
class WorkerSpec(msgspec.Struct, frozen=True):
    """How a worker runs tasks; which tasks it runs come later, as ``AddTask`` frames."""

    version: int
    index: int
    parent_pid: int
    config: dict[str, Any]  # the job's flattened config, with each Kafka system's resolved brokers
    sys_path: list[str]  # the container's import path, so task.class imports the same way
    to_worker: str  # RingSpec of the loop -> worker ring, encoded
    from_worker: str
    calls_fd: int = -1  # the worker's CallSlot (see calls.py), inherited
    graph_digest: str = ""  # an application's graph as the container built it (the worker checks its own)
    # How the container logs (--log-level, --log-format; samzamp.logs): the worker logs the same
    # way, naming the container's processor.
    log_level: str = "INFO"
    log_format: str = "text"
    processor: str | None = None


# -- loop -> worker ------------------------------------------------------------------------------
class AddTask(_Frame):
    """Take task ``model`` on as index ``task`` (never an index this worker had before): build it,
    restore its stores from the model's markers, init it; answer ``TaskAdded``, or ``Failed``."""

    task: int
    model: TaskModel


class RemoveTask(_Frame):
    """Give task ``task`` up: close it, then its stores (their locks are released, so the task can
    be taken on by another process); answer ``TaskRemoved``. The loop finished its in-flight work
    and its final commit before."""

    task: int


class Process(_Frame):
    """Messages of one task, in order, in runs of one SSP's messages: (ssp index, its messages).
    ``epoch`` changes each time the loop takes back messages the worker was told to skip (after a
    commit or shutdown request)."""

    task: int
    epoch: int
    runs: list[tuple[int, list[RawTuple]]]


class ProcessOut(_Frame, tag="Process"):
    """``Process`` as the loop builds it: a run is a list of messages, or the bytes of a packed run
    (``samzamp.consume.packed``), which are those messages already encoded the same way. So the
    worker decodes either as ``Process``, with a list of messages in each run."""

    task: int
    epoch: int
    runs: list[tuple[int, list[RawTuple] | msgspec.Raw]]


class Yield(_Frame):
    """A window, commit or shutdown of the task is due: stop after the message being processed, skip
    the rest of ``epoch`` and answer ``Yielded`` (the loop takes the skipped messages back). Read
    ahead of the frames before it; ignored when the worker already skips ``epoch``."""

    task: int
    epoch: int


class Window(_Frame):
    task: int


class EndOfStream(_Frame):
    task: int


class Drain(_Frame):
    """Every input of the task is drained: call on_drain (DrainListenerTask)."""

    task: int


class BeforeCommit(_Frame):
    """Step 1 of the commit pipeline: before_commit; answered by ``BeforeCommitDone``."""

    task: int


class Commit(_Frame):
    """Steps 3 and 4 of the commit pipeline: flush the producer, commit the stores; answered by
    ``CommitReady``. ``asynchronous``: answer once the stores' writes are set aside, then apply
    them on a thread of the worker while its tasks go on, and answer ``StoresApplied`` once they
    are durable (``CommitReady.applying`` says whether it will)."""

    task: int
    asynchronous: bool = False


class Checkpointed(_Frame):
    """Step 6: the checkpoint was written with these offsets; call on_checkpoint."""

    task: int
    offsets: list[tuple[int, int]]  # (ssp index, offset)


class Stop(_Frame):
    """Close every task, flush and stop the producers, answer Stopped, exit."""


# -- worker -> loop ------------------------------------------------------------------------------
class Ready(_Frame):
    pid: int


class TaskAdded(_Frame):
    """Answer to ``AddTask``: the task's stores are restored and its init ran."""

    task: int
    restored: list[RestoreReport] = []  # one per store


class Restoring(_Frame):
    """While ``AddTask`` runs: how far the restore of the task's ``store`` got (``expected``: the
    records it will read, None when unknown), for the container's one view of its restores."""

    task: int
    store: str
    records: int
    expected: int | None
    done: bool


class BeforeCommitDone(_Frame):
    task: int
    control: ControlState | None = None  # the task's control state, for the checkpoint


class TaskRemoved(_Frame):
    """Answer to ``RemoveTask``: the task and its stores are closed; no frame of it follows."""

    task: int


class Processed(_Frame):
    """The task's next ``count`` messages in flight, in the order they were sent (across batches,
    up to where a request or failure cut one short), are done, having spent ``busy_ns`` in process()
    (``max_ns`` the longest). A worker sends one per task and send, however many batches it covers."""

    task: int
    epoch: int
    count: int
    busy_ns: int
    max_ns: int


class Requested(_Frame):
    """The message just reported asked for a commit and/or shutdown. The worker skips the rest of
    this epoch's messages; the loop takes them back and sends them again in the next epoch."""

    task: int
    epoch: int
    commit: bool
    commit_all: bool
    shutdown: bool
    shutdown_all: bool


class Yielded(_Frame):
    """Answer to ``Yield``: the task's messages of ``epoch`` not reported done before this frame are
    skipped; the loop takes them back and sends them again in the next epoch."""

    task: int
    epoch: int


class WindowDone(_Frame):
    task: int
    busy_ns: int
    commit: bool
    commit_all: bool
    shutdown: bool
    shutdown_all: bool


class EndOfStreamDone(_Frame):
    task: int
    commit: bool
    commit_all: bool
    shutdown: bool
    shutdown_all: bool


class DrainDone(_Frame):
    task: int
    commit: bool
    commit_all: bool
    shutdown: bool
    shutdown_all: bool


class CommitReady(_Frame):
    task: int
    # Why the commit must not go on (commit.flush_policy, applied by the worker); empty: it may.
    errors: list[str]
    markers: dict[str, str]  # per store: newest changelog offset
    applying: bool = False  # a ``StoresApplied`` follows (the stores' writes are being applied)


class StoresApplied(_Frame):
    """The stores' writes set aside at the task's last ``CommitReady`` are durable (a failure is
    ``Failed`` instead)."""

    task: int


class Failed(_Frame):
    """A task failed; ``message`` already names the task, SSP and offset. Task -1: the worker itself
    failed (at start, or outside every task). A ``ConfigError`` (at start: the worker's own plan of
    the job) carries its key, and its problem as the message."""

    task: int
    kind: str  # the exception's class name, for task.ignored.exceptions reporting
    message: str
    key: str = ""


class Metrics(_Frame):
    """What the worker's tasks' metrics gained since the last ``Metrics`` frame (none: from zero),
    to be added to the container's registry under the same groups and names."""

    deltas: MetricDeltas


class Stopped(_Frame):
    pass


FromLoop = (
    AddTask | RemoveTask | Process | Yield | Window | EndOfStream | Drain | BeforeCommit | Commit | Checkpointed | Stop
)
FromWorker = (
    Ready
    | TaskAdded
    | Restoring
    | TaskRemoved
    | Processed
    | Requested
    | Yielded
    | WindowDone
    | EndOfStreamDone
    | DrainDone
    | BeforeCommitDone
    | CommitReady
    | StoresApplied
    | Failed
    | Metrics
    | Stopped
)

_encoder = msgspec.msgpack.Encoder()
encode = _encoder.encode
decode_from_loop = msgspec.msgpack.Decoder(FromLoop).decode
decode_from_worker = msgspec.msgpack.Decoder(FromWorker).decode
