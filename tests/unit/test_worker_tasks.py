"""A worker takes tasks on and gives them up while it serves (``AddTask``, ``RemoveTask``): a task added
is built, its stores opened and its init called before ``TaskAdded``; a task removed is closed, then
its stores, whose directory locks are released, before ``TaskRemoved``; frames reach tasks by the
index their ``AddTask`` gave, and a frame for an index the worker does not hold fails the worker.

The worker runs in-process (``serve``) on a scripted loop: each step of the script is what the loop
sends next, and runs once the worker has answered everything before it, so a step can look at
the worker's state (a store's lock) at that point; a step may give raw bytes, sent as they are.
"""

from __future__ import annotations

import os
import sys
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from samzamp.api.envelope import SystemStreamPartition
from samzamp.api.task import ClosableTask, InitableTask, StreamTask
from samzamp.dispatch.process import frames as f
from samzamp.ipc import create_ring
from samzamp.model.job_model import TaskModel
from samzamp.storage.dirs import StoreLockedError, lock_store_dir, store_dir, unlock_store_dir
from samzamp.worker.host import Worker

IN_A = SystemStreamPartition("mem", "in", 0)
IN_B = SystemStreamPartition("mem", "in", 1)
A = TaskModel("Partition 0", (IN_A,))
B = TaskModel("Partition 1", (IN_B,))

Step = list[Any] | Callable[[], list[Any]]


class CountingTask(StreamTask, InitableTask, ClosableTask):
    """Counts its messages in the store "counts"; records init (with the count it found), each
    message and close in ``events``, shared by every instance of one test."""

    events: list[str] = []
    fail_init = False

    def init(self, context: Any) -> None:
        if self.fail_init:
            raise RuntimeError("init failed on purpose")
        self.name = context.task_name
        self.counts = context.get_store("counts")
        self.events.append(f"init {self.name} found {self.counts.get('n')}")

    def process(self, envelope: Any, collector: Any, coordinator: Any) -> None:
        self.counts.put("n", (self.counts.get("n") or 0) + 1)
        self.events.append(f"process {self.name} {envelope.offset}")

    def close(self) -> None:
        self.events.append(f"close {self.name}")


class ScriptedLoop:
    """Both rings as the worker sees them: ``receive_many`` gives the next step's frames (calling
    the step first when it is a function), ``send_many`` records what the worker answers."""

    def __init__(self, script: list[Step]) -> None:
        self.script = deque(script)
        self.sent: list[Any] = []

    def receive_many(self, timeout: float) -> list[bytes]:
        step = self.script.popleft()
        frames = step() if callable(step) else step
        return [fr if isinstance(fr, bytes) else f.encode(fr) for fr in frames]

    def receive_many_nowait(self) -> list[bytes]:
        return []

    def send_many(self, records: list[bytes]) -> None:
        self.sent.extend(f.decode_from_worker(r) for r in records)


@pytest.fixture
def state(tmp_path: Path) -> Path:
    return tmp_path / "state"


@pytest.fixture
def events() -> Iterator[list[str]]:
    CountingTask.events = []
    CountingTask.fail_init = False
    yield CountingTask.events
    CountingTask.fail_init = False


def _worker(state: Path, loop: ScriptedLoop) -> Worker:
    config = {
        "job.name": "job",
        "job.default.system": "mem",
        "task.class": f"{__name__}:CountingTask",
        "task.inputs": ["mem.in"],
        "systems.mem.samza.factory": "inmemory",
        "stores.counts.factory": "lmdb",
        "stores.counts.key.serde": "string",
        "stores.counts.msg.serde": "long",
        "job.non-logged.store.base.dir": str(state),
    }
    to_worker, from_worker = create_ring(1 << 16), create_ring(1 << 16)
    spec = f.WorkerSpec(
        f.VERSION, 0, os.getpid(), config, list(sys.path), to_worker.spec().encode(), from_worker.spec().encode()
    )
    w = Worker(spec)
    w.task_class = CountingTask  # what start() loads; start() also builds Kafka producers, not needed here
    w.rx = w.tx = loop  # type: ignore[assignment]
    return w


def _serve(state: Path, script: list[Step]) -> list[Any]:
    """Serve ``script`` (ending with Stop, or with a frame the worker fails on); what it answered."""
    loop = ScriptedLoop(script)
    w = _worker(state, loop)
    try:
        w.serve()
    except Exception as e:
        if type(e).__name__ != "_Stopped":  # the worker sent Failed and leaves
            raise
    return loop.sent


def _batch(t: int, epoch: int, offsets: range) -> f.Process:
    return f.Process(t, epoch, [(0, [(o, None, b"x", 0) for o in offsets])])


def _lock_is_free(state: Path, task: str) -> bool:
    try:
        fd = lock_store_dir(store_dir(state, "counts", task), wait_s=0)
    except StoreLockedError:
        return False
    unlock_store_dir(fd)
    return True


def _kinds(sent: list[Any]) -> list[tuple[str, int | None]]:
    return [(type(fr).__name__, getattr(fr, "task", None)) for fr in sent]


def test_a_task_is_taken_on_served_and_given_up_with_its_store_closed_and_unlocked(
    state: Path, events: list[str]
) -> None:
    seen: dict[str, Any] = {}

    def after_add() -> list[Any]:
        seen["locked while held"] = not _lock_is_free(state, A.name)
        seen["events after add"] = list(events)
        return [_batch(0, 0, range(3)), f.Commit(0)]

    def after_remove() -> list[Any]:
        seen["free after remove"] = _lock_is_free(state, A.name)
        seen["events after remove"] = list(events)
        return [f.AddTask(1, A)]  # the same task again, as a move back would: a new index

    sent = _serve(state, [[f.AddTask(0, A)], after_add, [f.RemoveTask(0)], after_remove, [f.Stop()]])
    assert seen == {
        "locked while held": True,
        "events after add": ["init Partition 0 found None"],  # the store was open at init
        "free after remove": True,
        "events after remove": [
            "init Partition 0 found None",
            "process Partition 0 0",
            "process Partition 0 1",
            "process Partition 0 2",
            "close Partition 0",  # close() ran before TaskRemoved
        ],
    }
    assert events[-2:] == ["init Partition 0 found 3", "close Partition 0"]  # re-taken on, closed at Stop
    assert _kinds(sent) == [
        ("TaskAdded", 0),
        ("Processed", 0),
        ("CommitReady", 0),
        ("TaskRemoved", 0),
        ("TaskAdded", 1),
        ("Stopped", None),
    ]
    assert sent[1].count == 3
    assert _lock_is_free(state, A.name)  # Stop closed it too


def test_frames_reach_tasks_by_their_index_and_stop_closes_only_the_tasks_still_held(
    state: Path, events: list[str]
) -> None:
    sent = _serve(
        state,
        [
            [f.AddTask(0, A), f.AddTask(1, B)],
            [_batch(1, 0, range(2)), _batch(0, 0, range(5, 6))],
            [f.RemoveTask(0)],
            [_batch(1, 1, range(2, 3))],
            [f.Stop()],
        ],
    )
    assert events == [
        "init Partition 0 found None",
        "init Partition 1 found None",
        "process Partition 1 0",
        "process Partition 1 1",
        "process Partition 0 5",
        "close Partition 0",
        "process Partition 1 2",
        "close Partition 1",  # at Stop: Partition 0 is not closed twice
    ]
    assert [k for k in _kinds(sent) if k[0] != "Processed"] == [
        ("TaskAdded", 0),
        ("TaskAdded", 1),
        ("TaskRemoved", 0),
        ("Stopped", None),
    ]
    assert {(fr.task, fr.count) for fr in sent if isinstance(fr, f.Processed)} == {(1, 2), (0, 1), (1, 1)}


def test_a_frame_for_a_removed_task_fails_the_worker_naming_the_index(state: Path, events: list[str]) -> None:
    sent = _serve(state, [[f.AddTask(0, A)], [f.RemoveTask(0)], [_batch(0, 0, range(1))]])
    assert _kinds(sent) == [("TaskAdded", 0), ("TaskRemoved", 0), ("Failed", 0)]
    failed = sent[-1]
    assert failed.kind == "WorkerError"
    assert "task index 0, which it does not run" in failed.message
    assert "process" not in " ".join(events)


def test_an_index_is_never_taken_on_twice(state: Path, events: list[str]) -> None:
    sent = _serve(state, [[f.AddTask(0, A)], [f.RemoveTask(0)], [f.AddTask(0, A)]])
    assert _kinds(sent) == [("TaskAdded", 0), ("TaskRemoved", 0), ("Failed", 0)]
    assert sent[-1].kind == "WorkerError"
    assert "indexes are never reused" in sent[-1].message
    assert events == ["init Partition 0 found None", "close Partition 0"]


def test_a_task_whose_init_fails_is_answered_with_failed_naming_the_task(state: Path, events: list[str]) -> None:
    CountingTask.fail_init = True
    sent = _serve(state, [[f.AddTask(3, A)]])
    assert _kinds(sent) == [("Failed", 3)]
    assert sent[0].kind == "TaskError"
    assert "'Partition 0'" in sent[0].message
    assert "init failed on purpose" in sent[0].message


def test_an_error_no_frame_handler_answers_is_answered_with_failed_for_the_worker(
    state: Path, events: list[str]
) -> None:
    """Here a record that is no frame: the worker's own failure (a bug), reported before it leaves."""
    sent = _serve(state, [[f.AddTask(0, A)], [b"not a frame"]])
    assert _kinds(sent) == [("TaskAdded", 0), ("Failed", -1)]
    assert (sent[-1].kind, sent[-1].message) == ("ValidationError", "Expected `array`, got `int`")
