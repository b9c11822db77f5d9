"""A commit's two phases (task.commit.stores.async): the task pauses only until its stores' writes are
set aside; they are written while it goes on, the store serving them meanwhile, and the checkpoint
waits for them. The store halves, the pipeline's order, and the task state's rules."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from samzamp.api.envelope import SystemStreamPartition
from samzamp.api.errors import StoreError
from samzamp.commit.pipeline import commit_task
from samzamp.container.task_state import TaskOp, TaskState
from samzamp.model.control_state import ControlState
from samzamp.serde.registry import SerdeRegistry
from samzamp.storage import store as store_module
from samzamp.storage.lmdb import LmdbEngine
from samzamp.storage.store import LmdbKeyValueStore

SERDES = SerdeRegistry({})
SSP = SystemStreamPartition("test", "in", 0)


def _store(path: Path, map_size: int | None = None) -> LmdbKeyValueStore:
    engine = LmdbEngine(path) if map_size is None else LmdbEngine(path, map_size=map_size)
    return LmdbKeyValueStore("s", engine, SERDES.get("string", "k"), SERDES.get("long", "v"), None, "T")


def _on_another_thread(run: Any) -> Any:
    """``run()`` on a thread of its own (as a commit's asynchronous phase runs), its result."""
    out: list[Any] = []
    t = threading.Thread(target=lambda: out.append(run()))
    t.start()
    t.join()
    return out[0]


def test_reads_and_iterators_see_the_frozen_writes_before_during_and_after_their_apply(tmp_path: Path) -> None:
    s = _store(tmp_path)
    s.put_all([("a", 1), ("b", 2), ("c", 3)])
    s.commit(1)
    s.put("b", 20)
    s.delete("c")
    s.put("d", 4)
    s.freeze(5)  # the synchronous phase ends here: what follows is the task going on
    s.put("e", 5)
    s.put("b", 200)  # the live buffer shadows the frozen one
    expected = [("a", 1), ("b", 200), ("d", 4), ("e", 5)]
    assert (s.get("b"), s.get("c"), s.get("d")) == (200, None, 4)
    assert s.engine.count() == 3  # nothing of the frozen writes is in LMDB yet
    before = s.all()  # an LMDB snapshot from before the apply, merged with both buffers
    with s.range("b", "e") as part:
        assert list(part) == [("b", 200), ("d", 4)]
    assert _on_another_thread(s.apply_frozen) is True
    assert (s.engine.count(), s.engine.changelog_offset()) == (3, 5)  # a, b, d: c deleted
    assert s.frozen  # written, not yet settled: still served from the frozen buffer
    after = s.all()  # a snapshot from after it
    assert list(before) == expected
    assert list(after) == expected
    s.settle()
    assert not s.frozen
    assert (s.get("b"), s.get("c"), s.get("d"), s.get("e")) == (200, None, 4, 5)
    with s.all() as it:
        assert list(it) == expected
    s.commit(6)
    assert [(k, v) for k, v in s.engine.items()][-1][0] == b"e"
    s.close()


def test_a_full_map_is_grown_by_settle_on_the_tasks_thread(tmp_path: Path) -> None:
    s = _store(tmp_path, map_size=64 * 1024)
    s.put_all([(f"y{i:05d}-{'p' * 500}", i) for i in range(200)])  # ~100 KB into a 64 KiB map
    s.freeze(9)
    # LMDB grows a map only with no transaction open in the process: not from the applying thread.
    assert _on_another_thread(s.apply_frozen) is False
    assert s.engine.count() == 0
    assert s.get(f"y00007-{'p' * 500}") == 7
    s.settle()
    assert (s.engine.count(), s.engine.changelog_offset()) == (200, 9)
    s.close()


def test_no_spill_writes_lmdb_while_writes_are_frozen(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(store_module, "SPILL_AT", 5)
    s = _store(tmp_path)
    s.put("a", 1)
    s.freeze(1)
    s.put_all([(f"k{i}", i) for i in range(10)])  # past SPILL_AT: it would spill
    assert s.engine.count() == 0  # the apply is LMDB's only writer until settle
    assert _on_another_thread(s.apply_frozen) is True
    s.settle()
    assert s.engine.count() == 1
    s.put("z", 26)  # the next write past SPILL_AT spills again
    assert s.engine.count() == 12
    assert s.engine.dirty()
    s.close()


class _Checkpoints:
    run_id = ""

    def __init__(self, events: list[str]) -> None:
        self.events = events

    async def write(self, task: str, offsets: Any, markers: Any, *, control: Any, drained: bool) -> None:
        self.events.append(f"checkpoint {markers}")


class _Task:
    """A CommittableTask recording the steps; its apply waits for ``applied`` and may fail."""

    name = "T"
    logged_stores = frozenset({"s"})
    checkpointed_control: ControlState | None = None

    def __init__(self, events: list[str], fail: bool = False) -> None:
        self.events = events
        self.applied = asyncio.Event()
        self.applying = asyncio.Event()
        self.fail = fail
        self.asynchronous: bool | None = None
        self.applying_stores = True  # the stores have writes set aside

    @property
    def checkpointed(self) -> Mapping[SystemStreamPartition, int]:
        return {}

    async def before_commit(self) -> ControlState | None:
        self.events.append("before_commit")
        return None

    def snapshot_offsets(self) -> dict[SystemStreamPartition, int]:
        self.events.append("snapshot")
        return {SSP: 7}

    async def flush_and_freeze_stores(self, *, asynchronous: bool) -> dict[str, str]:
        self.asynchronous = asynchronous
        self.events.append("flush and freeze")
        return {"s": "3"}

    async def apply_stores(self) -> None:
        self.applying.set()
        await self.applied.wait()
        if self.fail:
            raise StoreError("/stores/s", "writing to LMDB: No space left on device", "free space").of("s", "T")
        self.events.append("applied")

    def checkpoint_written(self, offsets: dict[SystemStreamPartition, int], control: ControlState | None) -> None:
        self.events.append("on_checkpoint")


def test_the_task_resumes_after_the_synchronous_phase_and_the_checkpoint_waits_for_the_apply() -> None:
    async def run() -> list[str]:
        events: list[str] = []
        task = _Task(events)
        resumed = asyncio.Event()

        def resume() -> None:
            events.append("resume")
            resumed.set()

        commit = asyncio.ensure_future(commit_task(task, _Checkpoints(events), resume=resume))  # type: ignore[arg-type]
        async with asyncio.timeout(30):  # a pipeline that resumed only after the apply would never get here
            await resumed.wait()
            await task.applying.wait()
        assert events == ["before_commit", "snapshot", "flush and freeze", "resume"]  # no checkpoint yet
        events.append("the task processes")
        task.applied.set()
        assert await commit is True
        assert task.asynchronous is True
        return events

    assert asyncio.run(run()) == [
        "before_commit",
        "snapshot",
        "flush and freeze",
        "resume",
        "the task processes",
        "applied",
        "checkpoint {'s': '3'}",
        "on_checkpoint",
    ]


def test_a_failing_apply_writes_no_checkpoint_and_fails_the_commit_naming_store_and_task() -> None:
    async def run() -> list[str]:
        events: list[str] = []
        task = _Task(events, fail=True)
        task.applied.set()
        with pytest.raises(StoreError, match="store 's' of task 'T'") as raised:
            await commit_task(task, _Checkpoints(events), resume=lambda: events.append("resume"))  # type: ignore[arg-type]
        assert "No space left on device" in str(raised.value)
        return events

    assert asyncio.run(run()) == ["before_commit", "snapshot", "flush and freeze", "resume"]


def test_without_resume_the_whole_commit_is_synchronous() -> None:
    async def run() -> _Task:
        events: list[str] = []
        task = _Task(events)
        task.applied.set()
        assert await commit_task(task, _Checkpoints(events)) is True  # type: ignore[arg-type]
        return task

    assert asyncio.run(run()).asynchronous is False


def test_a_commit_without_store_writes_to_apply_is_synchronous_on_checkpoint_included() -> None:
    async def run() -> list[str]:
        events: list[str] = []
        task = _Task(events)
        task.applying_stores = False
        task.applied.set()
        assert await commit_task(task, _Checkpoints(events), resume=lambda: events.append("resume")) is True  # type: ignore[arg-type]
        return events

    events = asyncio.run(run())
    assert "resume" not in events
    assert events[-1] == "on_checkpoint"


def test_the_task_processes_during_the_asynchronous_phase_and_the_next_commit_waits_for_it() -> None:
    st = TaskState(max_concurrency=1)
    st.pending.append((SSP, (0, None, None, 0)))
    st.request_commit()
    assert st.next_op() is TaskOp.COMMIT
    st.start_commit()
    assert st.next_op() is TaskOp.NO_OP  # the synchronous phase: idle
    st.commit_synced()
    assert st.next_op() is TaskOp.PROCESS  # the asynchronous phase: the task processes
    assert not st.idle  # a stop or a leaving task waits for it
    st.request_commit()
    assert st.next_op() is TaskOp.NO_OP  # one asynchronous phase at a time; no process past a due commit
    st.done_commit()
    assert st.next_op() is TaskOp.COMMIT
    assert st.idle


def test_end_of_stream_and_drain_wait_for_the_asynchronous_phase() -> None:
    st = TaskState(max_concurrency=1, ssps=[SSP])
    st.start_commit()
    st.commit_synced()
    st.input_ended(SSP)
    assert st.next_op() is TaskOp.NO_OP
    st.done_commit()
    assert st.next_op() is TaskOp.END_OF_STREAM
