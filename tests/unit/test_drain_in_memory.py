"""Drain (seed 003) on the in-memory system: metadata store, notifications, run ids, the monitor, and
the container's drain sequence. The same paths run against the real broker in
tests/integration/test_drain.py."""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

import msgspec
import pytest

from samzamp import (
    AsyncStreamTask,
    CheckpointListenerTask,
    DrainListenerTask,
    InitableTask,
    OutgoingMessageEnvelope,
    StreamTask,
    SystemStream,
    WindowableTask,
)
from samzamp.commit.checkpoint import decode_checkpoint
from samzamp.config import load_config, validate
from samzamp.coordinator.metadata_store import CoordinatorStreamStore, decode_coordinator_key
from samzamp.coordinator.run_id import (
    RUN_NAMESPACE,
    RunAlreadyDrained,
    RunState,
    end_run,
    read_current_run,
    start_run,
)
from samzamp.drain import (
    DRAIN_NAMESPACE,
    DrainNotification,
    cleanup,
    cleanup_all,
    read_drain_notifications,
    write_drain_notification,
)
from samzamp.drain.monitor import DrainMonitor, MonitorState
from samzamp.processor.stream_processor import StreamProcessor
from samzamp.systems.inmemory.system import InMemoryStreams, InMemorySystemAdmin, InMemorySystemProducer

TOPIC = "__samza_coordinator_job_1"


class Events(list):
    """A list other threads append to; ``until`` awaits (off the loop) a condition on it."""

    def __init__(self) -> None:
        super().__init__()
        self._cond = threading.Condition()

    def append(self, item: Any) -> None:
        with self._cond:
            super().append(item)
            self._cond.notify_all()

    async def until(self, pred: Any, within_s: float = 10) -> None:
        def wait() -> bool:
            with self._cond:
                return self._cond.wait_for(lambda: pred(self), within_s)

        assert await asyncio.to_thread(wait), "timed out"


POLLS = Events()  # one item per DrainMonitor.check (see the fixture)


@pytest.fixture(autouse=True)
def _count_polls(monkeypatch: pytest.MonkeyPatch) -> None:
    original = DrainMonitor.check

    def check(self: DrainMonitor) -> DrainNotification | None:
        found = original(self)
        POLLS.append(self.run_id)
        return found

    POLLS.clear()
    monkeypatch.setattr(DrainMonitor, "check", check)


def _store(streams: InMemoryStreams | None = None) -> tuple[CoordinatorStreamStore, InMemoryStreams]:
    streams = streams or InMemoryStreams()
    store = CoordinatorStreamStore(InMemorySystemAdmin(streams), InMemorySystemProducer(streams), TOPIC)
    store.create_topic()
    return store, streams


# -- metadata store ----------------------------------------------------------------------------
def test_namespaces_are_separate_and_the_newest_value_wins() -> None:
    store, _ = _store()
    a, b = store.namespace("a"), store.namespace("b")
    a.put("k", b"1")
    b.put("k", b"2")
    a.put("k", b"3")
    assert a.get("k") == b"3"
    assert b.get("k") == b"2"
    assert a.all() == {"k": b"3"}
    assert a.get("missing") is None


def test_a_delete_is_a_null_record_keyed_as_samza_keys_coordinator_messages() -> None:
    store, streams = _store()
    ns = store.namespace("samza-drain-v1")
    ns.put("u1", b"x")
    ns.delete("u1")
    assert ns.get("u1") is None
    assert ns.all() == {}
    records = streams.partitions[TOPIC][0]
    assert [json.loads(k) for _, k, _, _ in records] == [[1, "samza-drain-v1", "u1"]] * 2
    assert records[-1][2] is None  # the tombstone
    assert decode_coordinator_key(b"not json") is None
    assert decode_coordinator_key(b'[2, "ns", "k"]') is None  # another key version: skipped


def test_a_second_store_over_the_same_topic_sees_what_the_first_wrote() -> None:
    first, streams = _store()
    second, _ = _store(streams)
    first.namespace("n").put("k", b"v")
    assert second.namespace("n").get("k") == b"v"


# -- notifications -----------------------------------------------------------------------------
def test_a_notification_is_json_with_samzas_field_names() -> None:
    store, _ = _store()
    ns = store.namespace(DRAIN_NAMESPACE)
    n = write_drain_notification(ns, "run-1")
    raw = ns.get(n.uuid)
    assert raw is not None
    assert json.loads(raw) == {"uuid": n.uuid, "runId": "run-1", "drainMode": "DEFAULT"}
    assert read_drain_notifications(ns) == [n]


def test_cleanup_deletes_only_the_runs_notifications() -> None:
    store, _ = _store()
    ns = store.namespace(DRAIN_NAMESPACE)
    mine = [write_drain_notification(ns, "r1"), write_drain_notification(ns, "r1")]
    other = write_drain_notification(ns, "r2")
    ns.put("garbage", b"{not json")
    assert cleanup(ns, "r1") == 2
    left = read_drain_notifications(ns)
    assert left == [other]
    assert all(m not in left for m in mine)
    assert cleanup_all(ns) == 2  # r2's and the unreadable one
    assert ns.all() == {}


# -- run ids -----------------------------------------------------------------------------------
def test_run_ids_continue_after_a_crash_and_change_after_a_clean_stop() -> None:
    store, _ = _store()
    runs = store.namespace(RUN_NAMESPACE)
    first, how = start_run(runs, None)
    assert how == "generated"
    millis, suffix = first.run_id.split("-")
    assert millis.isdigit()
    assert len(suffix) == 8
    # The container died without recording an end: a restart continues the same run.
    again, how = start_run(runs, None)
    assert again.run_id == first.run_id
    assert how.startswith("continued")
    end_run(runs, again, RunState.FAILED)
    assert start_run(runs, None)[0].run_id == first.run_id
    end_run(runs, again, RunState.STOPPED)
    fresh, _ = start_run(runs, None)
    assert fresh.run_id != first.run_id
    end_run(runs, fresh, RunState.DRAINED)
    current = read_current_run(runs)
    assert current is not None
    assert current.state is RunState.DRAINED
    assert start_run(runs, "fixed")[0].run_id == "fixed"  # app.run.id wins
    # A configured run that drained is over: starting it again writes nothing and says so.
    end_run(runs, read_current_run(runs), RunState.DRAINED)  # type: ignore[arg-type]
    with pytest.raises(RunAlreadyDrained, match=r"run fixed \(app.run.id\) drained at .*a new deployment needs a new"):
        start_run(runs, "fixed")
    assert read_current_run(runs).state is RunState.DRAINED  # type: ignore[union-attr]
    assert start_run(runs, "next")[0].run_id == "next"


# -- monitor -----------------------------------------------------------------------------------
def test_the_monitor_ignores_other_runs_and_finds_its_own_while_polling() -> None:
    store, _ = _store()
    ns = store.namespace(DRAIN_NAMESPACE)
    write_drain_notification(ns, "old-run")
    seen: list[DrainNotification] = []

    async def main() -> MonitorState:
        got = asyncio.Event()

        def on_drain(n: DrainNotification) -> None:
            seen.append(n)
            got.set()

        monitor = DrainMonitor(ns, "this-run", 10, on_drain)
        await monitor.start()
        assert monitor.state is MonitorState.RUNNING  # the stale one did not trigger it
        await POLLS.until(lambda p: len(p) >= 3)
        assert not seen
        mine = write_drain_notification(ns, "this-run")
        await asyncio.wait_for(got.wait(), 5)
        assert seen == [mine]
        polls = len(POLLS)
        await asyncio.sleep(0.1)  # five poll intervals: nothing may happen in them
        assert len(POLLS) == polls  # it stopped polling
        return monitor.state

    assert asyncio.run(main()) is MonitorState.STOPPED
    assert len(seen) == 1


def test_a_notification_written_before_start_drains_at_once_without_polling() -> None:
    store, _ = _store()
    ns = store.namespace(DRAIN_NAMESPACE)
    mine = write_drain_notification(ns, "r")
    seen: list[DrainNotification] = []

    async def main() -> DrainMonitor:
        monitor = DrainMonitor(ns, "r", 10, seen.append)
        await monitor.start()
        assert seen == [mine]  # called before start() returned
        await asyncio.sleep(0.05)
        return monitor

    monitor = asyncio.run(main())
    assert len(POLLS) == 1
    assert monitor.state is MonitorState.STOPPED


# -- the container's drain ---------------------------------------------------------------------
OUT = SystemStream("mem", "out")
EVENTS = Events()  # what the tasks did, in order (one container per test)


class WindowedCount(StreamTask, InitableTask, WindowableTask, DrainListenerTask, CheckpointListenerTask):
    """Counts per window; window() emits the partial count, on_drain a closing record."""

    def init(self, context: Any) -> None:
        self.name = context.task_name
        self.count = 0

    def process(self, envelope: Any, collector: Any, coordinator: Any) -> None:
        self.count += 1
        EVENTS.append(("P", self.name, envelope.offset))

    def window(self, collector: Any, coordinator: Any) -> None:
        EVENTS.append(("W", self.name, self.count))
        if self.count:
            collector.send(OutgoingMessageEnvelope(OUT, ["window", self.name, self.count]))
        self.count = 0

    def on_drain(self, collector: Any, coordinator: Any) -> None:
        EVENTS.append(("D", self.name))
        collector.send(OutgoingMessageEnvelope(OUT, ["drained", self.name, 0]))

    def before_commit(self) -> None:
        pass

    def on_checkpoint(self, offsets: Any) -> None:
        EVENTS.append(("K", self.name, {s.partition: o for s, o in offsets.items()}))


class SlowAsync(AsyncStreamTask, InitableTask, DrainListenerTask):
    """max.concurrency 8; completes messages out of order, on other threads."""

    def init(self, context: Any) -> None:
        self.partition = next(iter(context.ssps)).partition

    def process_async(self, envelope: Any, collector: Any, coordinator: Any, callback: Any) -> None:
        def done() -> None:
            EVENTS.append(("P", envelope.system_stream_partition.partition, envelope.offset))
            callback.complete()

        threading.Timer(0.001 * (envelope.offset % 5), done).start()

    def on_drain(self, collector: Any, coordinator: Any) -> None:
        EVENTS.append(("D", self.partition))


def _container(task: type, streams: InMemoryStreams, **extra: Any) -> StreamProcessor:
    config = {
        "job.name": "job",
        "job.default.system": "mem",
        "task.class": f"{task.__module__}:{task.__qualname__}",
        "task.inputs": ["mem.in"],
        "task.commit.ms": -1,
        "task.window.ms": 3_600_000,  # far away: only the drain calls window()
        "job.drain-monitor.poll.interval.ms": 20,
        "metrics.log.interval.ms": 0,
        "systems.mem.samza.factory": "inmemory",
        "systems.mem.samza.msg.serde": "msgpack",
        "systems.mem.default.stream.samza.offset.default": "oldest",
    }
    config.update(extra)
    return StreamProcessor(validate(load_config(None, config)), inmemory={"mem": streams})


def _seed(streams: InMemoryStreams, partitions: int, per_partition: int) -> None:
    streams.create("in", partitions)  # unbounded: only a drain or a signal ends the job
    for p in range(partitions):
        for i in range(per_partition):
            streams.append("in", p, None, msgspec.msgpack.encode(i))


def _drain_ns(streams: InMemoryStreams) -> Any:
    return _store(streams)[0].namespace(DRAIN_NAMESPACE)


async def _run_until(container: StreamProcessor, cond: Any) -> asyncio.Task[None]:
    """Start the container and wait until ``cond(EVENTS)`` holds."""
    task = asyncio.get_running_loop().create_task(container.run())
    await EVENTS.until(cond)
    assert not task.done()
    return task


def _output(streams: InMemoryStreams) -> list[Any]:
    return [msgspec.msgpack.decode(v) for part in streams.partitions.get("out", []) for _, _, v, _ in part]


def test_drain_processes_everything_fetched_flushes_windows_commits_and_stops() -> None:
    EVENTS.clear()
    streams = InMemoryStreams()
    streams.create("out", 1)
    _seed(streams, 2, 300)
    container = _container(WindowedCount, streams)

    async def main() -> None:
        task = await _run_until(container, bool)
        assert container.run_record is not None
        write_drain_notification(_drain_ns(streams), container.run_record.run_id)
        await asyncio.wait_for(task, 10)

    asyncio.run(main())
    assert container.drained
    processed = sorted((e[1], e[2]) for e in EVENTS if e[0] == "P")
    assert processed == sorted((f"Partition {p}", o) for p in range(2) for o in range(300))
    for name in ("Partition 0", "Partition 1"):
        mine = [e for e in EVENTS if e[1:2] == (name,)]
        kinds = [e[0] for e in mine]
        # after its last message: window (the watermark went to infinity), on_drain, final checkpoint
        assert kinds[-3:] == ["W", "D", "K"], kinds[-5:]
        assert "W" not in kinds[:-3]  # the timer never fired: the drain called window()
        assert mine[-1][2] == {int(name[-1]): 299}
    out = _output(streams)
    assert sorted(o for o in out if o[0] == "window") == [
        ["window", "Partition 0", 300],
        ["window", "Partition 1", 300],
    ]
    assert sorted(o[1] for o in out if o[0] == "drained") == ["Partition 0", "Partition 1"]
    runs = _store(streams)[0].namespace(RUN_NAMESPACE)
    current = read_current_run(runs)
    assert current is not None
    assert current.state is RunState.DRAINED
    assert read_drain_notifications(_drain_ns(streams)) == []  # cleaned up


def test_a_notification_for_another_run_is_ignored() -> None:
    EVENTS.clear()
    streams = InMemoryStreams()
    streams.create("out", 1)
    _seed(streams, 1, 50)
    container = _container(WindowedCount, streams)

    async def main() -> None:
        stale = write_drain_notification(_drain_ns(streams), "some-other-run")
        task = await _run_until(container, lambda ev: len([e for e in ev if e[0] == "P"]) == 50)
        polls = len(POLLS)
        await POLLS.until(lambda p: len(p) >= polls + 3)
        assert container.run_loop is not None
        assert not container.run_loop.draining
        streams.append("in", 0, None, msgspec.msgpack.encode(50))  # still consuming
        await EVENTS.until(lambda ev: len([e for e in ev if e[0] == "P"]) == 51)
        container.run_loop.request_shutdown()
        await asyncio.wait_for(task, 10)
        assert read_drain_notifications(_drain_ns(streams)) == [stale]  # not ours to clean up

    asyncio.run(main())
    assert not container.drained
    current = read_current_run(_store(streams)[0].namespace(RUN_NAMESPACE))
    assert current is not None
    assert current.state is RunState.STOPPED
    assert not [e for e in EVENTS if e[0] in "WD"]  # neither drained nor a forced window


def test_a_notification_found_at_start_drains_before_anything_is_processed() -> None:
    EVENTS.clear()
    streams = InMemoryStreams()
    streams.create("out", 1)
    _seed(streams, 2, 100)
    write_drain_notification(_drain_ns(streams), "fixed-run")
    container = _container(WindowedCount, streams, **{"app.run.id": "fixed-run"})
    asyncio.run(asyncio.wait_for(container.run(), 10))
    assert container.drained
    assert not [e for e in EVENTS if e[0] == "P"]
    # Nothing processed, yet each task's final checkpoint is new: it says the task drained in this
    # run (a processor that takes the task over in the run holds it drained).
    assert sorted(e[0] for e in EVENTS) == ["D", "D", "K", "K", "W", "W"]
    checkpoints = [
        decode_checkpoint("?", value)
        for stream, partitions in streams.partitions.items()
        if stream.startswith("__samza_checkpoint")
        for _offset, _key, value, _ts in partitions[0]
        if value is not None
    ]
    assert sorted((c.task_name, c.run_id, c.drained, c.offsets()) for c in checkpoints) == [
        ("Partition 0", "fixed-run", True, {}),
        ("Partition 1", "fixed-run", True, {}),
    ]


def test_drain_waits_for_async_work_in_flight() -> None:
    EVENTS.clear()
    streams = InMemoryStreams()
    _seed(streams, 2, 400)
    container = _container(SlowAsync, streams, **{"task.max.concurrency": 8})

    async def main() -> None:
        task = await _run_until(container, lambda ev: len(ev) > 20)
        assert container.run_record is not None
        write_drain_notification(_drain_ns(streams), container.run_record.run_id)
        await asyncio.wait_for(task, 20)

    asyncio.run(main())
    assert container.drained
    processed = [e for e in EVENTS if e[0] == "P"]
    assert sorted(processed) == sorted(("P", p, o) for p in range(2) for o in range(400))
    for p in range(2):  # on_drain after every completion of the task
        last_processed = max(i for i, e in enumerate(EVENTS) if e[:2] == ("P", p))
        assert EVENTS.index(("D", p)) > last_processed
    assert container.run_loop is not None
    assert container.run_loop.drained_tasks == {
        "Partition 0": {s: 399 for s in container.run_loop.drained_tasks["Partition 0"]},
        "Partition 1": {s: 399 for s in container.run_loop.drained_tasks["Partition 1"]},
    }


DRAINING = threading.Event()


class HeldAsync(AsyncStreamTask):
    """Offset 0 completes once the container is draining; no later message ever completes."""

    def process_async(self, envelope: Any, collector: Any, coordinator: Any, callback: Any) -> None:
        EVENTS.append(("S", envelope.offset))
        if envelope.offset == 0:

            def complete_when_draining() -> None:
                DRAINING.wait(10)
                callback.complete()

            threading.Thread(target=complete_when_draining).start()


def test_while_draining_callbacks_time_out_after_the_drain_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    from samzamp.container.run_loop import RunLoop

    original = RunLoop.drain

    def drain(self: RunLoop, notification: str) -> None:
        original(self, notification)
        DRAINING.set()

    monkeypatch.setattr(RunLoop, "drain", drain)
    DRAINING.clear()
    EVENTS.clear()
    streams = InMemoryStreams()
    _seed(streams, 1, 10)
    # No task.callback.timeout.ms: before the drain a message may take as long as it likes.
    container = _container(HeldAsync, streams, **{"task.callback.drain.timeout.ms": 200})

    async def main() -> None:
        task = await _run_until(container, lambda ev: ev == [("S", 0)])
        assert container.run_record is not None
        write_drain_notification(_drain_ns(streams), container.run_record.run_id)
        await asyncio.wait_for(task, 10)

    with pytest.raises(Exception, match=r"offset 1 timed out after 200 ms"):
        asyncio.run(main())
    assert EVENTS == [("S", 0), ("S", 1)]
    assert not container.drained
    current = read_current_run(_store(streams)[0].namespace(RUN_NAMESPACE))
    assert current is not None
    assert current.state is RunState.FAILED
