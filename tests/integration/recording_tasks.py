"""Tasks used by the integration tests. Each records what it does to a file, one line per event,
with unbuffered appends (os.write) so that a SIGKILL loses nothing that happened before it.

Config keys (passed through to the task): test.record.dir, test.output.
"""

from __future__ import annotations

import asyncio
import ctypes
import fcntl
import gc
import logging
import os
import random
import time

from samzamp import (
    AsyncStreamTask,
    CheckpointListenerTask,
    ClosableTask,
    DrainListenerTask,
    InitableTask,
    OutgoingMessageEnvelope,
    RequestScope,
    StreamTask,
    SystemStream,
    WindowableTask,
)


class _Recorder:
    def _open(self, context) -> None:
        d = context.config["test.record.dir"]
        name = context.task_name.replace(" ", "_")
        self._fd = os.open(os.path.join(d, f"{name}.{os.getpid()}.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        out = context.config.get("test.output")
        self.output = SystemStream("kafka", out) if out else None

    def record(self, line: str) -> None:
        os.write(self._fd, (line + "\n").encode())


class _CheckpointRecorder(CheckpointListenerTask, _Recorder):
    """Records ``K <partition> <offset>`` for each input of every checkpoint written."""

    def before_commit(self) -> None:
        pass

    def on_checkpoint(self, offsets) -> None:
        for ssp, offset in offsets.items():
            self.record(f"K {ssp.partition} {offset}")


def _busy(ns: int) -> None:
    """Spend ``ns`` of CPU (a task whose messages cost something, so that input piles up)."""
    end = time.perf_counter_ns() + ns
    while time.perf_counter_ns() < end:
        pass


class OrderTask(StreamTask, InitableTask, _CheckpointRecorder):
    """Records ``P <partition> <offset>`` for every processed message and forwards it. With
    test.shutdown.after = N, its N-th message asks to shut the container down (all tasks);
    test.busy.us makes each message cost that much CPU."""

    def init(self, context) -> None:
        self._open(context)
        self._shutdown_after = int(context.config.get("test.shutdown.after", 0))
        self._busy_ns = int(context.config.get("test.busy.us", 0)) * 1000
        self._seen = 0

    def process(self, envelope, collector, coordinator) -> None:
        if self._busy_ns:
            _busy(self._busy_ns)
        ssp = envelope.system_stream_partition
        if self.output is not None:
            collector.send(OutgoingMessageEnvelope(self.output, envelope.message, key=envelope.key))
        self.record(f"P {ssp.partition} {envelope.offset}")
        self._seen += 1
        if self._seen == self._shutdown_after:
            coordinator.shutdown(RequestScope.ALL_TASKS_IN_CONTAINER)


class RandomAsyncTask(AsyncStreamTask, InitableTask, _CheckpointRecorder):
    """max.concurrency > 1: each message sleeps a random 0-4 ms, so completions come out of order.
    Records ``S p o`` at start and ``C p o`` just before completing."""

    def init(self, context) -> None:
        self._open(context)
        self._rng = random.Random(os.getpid())

    async def process_async(self, envelope, collector, coordinator) -> None:
        ssp = envelope.system_stream_partition
        self.record(f"S {ssp.partition} {envelope.offset}")
        await asyncio.sleep(self._rng.random() * 0.004)
        if self.output is not None:
            collector.send(OutgoingMessageEnvelope(self.output, envelope.message, key=envelope.key))
        self.record(f"C {ssp.partition} {envelope.offset}")


class _SpanRecorder(CheckpointListenerTask, WindowableTask, InitableTask, _Recorder):
    """Records spans as ``<kind> <start_ns> <end_ns>`` with kind P (process), W (window), K (commit)."""

    def init(self, context) -> None:
        self._open(context)
        self._commit_start = 0

    def window(self, collector, coordinator) -> None:
        t0 = time.monotonic_ns()
        time.sleep(0.002)
        self.record(f"W {t0} {time.monotonic_ns()}")

    def before_commit(self) -> None:
        self._commit_start = time.monotonic_ns()

    def on_checkpoint(self, offsets) -> None:
        self.record(f"K {self._commit_start} {time.monotonic_ns()}")


class SyncSpanTask(StreamTask, _SpanRecorder):
    def process(self, envelope, collector, coordinator) -> None:
        t0 = time.monotonic_ns()
        time.sleep(0.0005)
        self.record(f"P {t0} {time.monotonic_ns()}")


class SlowSpanTask(StreamTask, _SpanRecorder):
    """SyncSpanTask with test.process.ms (sleeping) per message, except that the messages before
    offset test.fast.until take no time: a task whose time per message the loop has to learn, and
    then sees jump."""

    def init(self, context) -> None:
        super().init(context)
        self._process_s = float(context.config.get("test.process.ms", 15)) / 1000
        self._fast_until = int(context.config.get("test.fast.until", 0))

    def process(self, envelope, collector, coordinator) -> None:
        t0 = time.monotonic_ns()
        if envelope.offset >= self._fast_until:
            time.sleep(self._process_s)
        self.record(f"P {t0} {time.monotonic_ns()}")


class AsyncSpanTask(AsyncStreamTask, _SpanRecorder):
    async def process_async(self, envelope, collector, coordinator) -> None:
        t0 = time.monotonic_ns()
        await asyncio.sleep(0.001)
        self.record(f"P {t0} {time.monotonic_ns()}")


class NativeCrashTask(StreamTask):
    """Crashes its process in native code (a read of address 0) at its first message."""

    def process(self, envelope, collector, coordinator) -> None:
        ctypes.string_at(0)


class FailingTask(StreamTask):
    """Requests a commit at m1000, raises on m3000."""

    def process(self, envelope, collector, coordinator) -> None:
        if envelope.message == "m1000":
            coordinator.commit()
        if envelope.message == "m3000":
            raise ValueError("boom at m3000")


class StuckTask(AsyncStreamTask, InitableTask, _Recorder):
    """Never completes its first message (to test shutdown with work in flight)."""

    def init(self, context) -> None:
        self._open(context)

    async def process_async(self, envelope, collector, coordinator) -> None:
        self.record(f"S {envelope.system_stream_partition.partition} {envelope.offset}")
        await asyncio.Event().wait()


class CoordinatorTask(StreamTask):
    """Requests a commit at m100 and the shutdown of the whole container at m200."""

    def process(self, envelope, collector, coordinator) -> None:
        from samzamp import RequestScope

        if envelope.message == "m100":
            coordinator.commit(RequestScope.CURRENT_TASK)
        elif envelope.message == "m200":
            coordinator.shutdown(RequestScope.ALL_TASKS_IN_CONTAINER)


class ClosingOrderTask(OrderTask, ClosableTask):
    """OrderTask that leaves ``<task>.<pid>.closed`` in the record dir when closed."""

    def init(self, context) -> None:
        super().init(context)
        self._closed_marker = os.path.join(
            context.config["test.record.dir"], f"{context.task_name.replace(' ', '_')}.{os.getpid()}.closed"
        )

    def close(self) -> None:
        with open(self._closed_marker, "w") as f:
            f.write("closed\n")


class FailingInitTask(StreamTask, InitableTask):
    def init(self, context) -> None:
        raise RuntimeError("init failed on purpose")

    def process(self, envelope, collector, coordinator) -> None:
        pass


def _dump_store(context, store) -> None:
    """Write the store as restored to ``<task>.<pid>.state``: a ``key value`` line each, then ``END``."""
    d = context.config["test.record.dir"]
    with open(os.path.join(d, f"{context.task_name.replace(' ', '_')}.{os.getpid()}.state"), "w") as f:
        with store.all() as entries:
            for key, value in entries:
                f.write(f"{key} {value}\n")
        f.write("END\n")


class StoreCountTask(StreamTask, InitableTask, _Recorder):
    """Counts messages per word in the changelogged store "counts": message "m<i>" is word "w<i % 37>".
    Records ``P <partition> <offset>`` per processed message (after the store write). At init it
    writes the restored store to ``<task>.<pid>.state`` (one ``word count`` line each, then ``END``).
    With test.shutdown.after = N, its N-th message shuts the container down (all tasks; final commit);
    test.busy.us makes each message cost that much CPU."""

    def init(self, context) -> None:
        self._open(context)
        self.counts = context.get_store("counts")
        self.shutdown_after = int(context.config.get("test.shutdown.after", 0))
        self._busy_ns = int(context.config.get("test.busy.us", 0)) * 1000
        self.seen = 0
        _dump_store(context, self.counts)

    def process(self, envelope, collector, coordinator) -> None:
        if self._busy_ns:
            _busy(self._busy_ns)
        self.seen += 1
        word = f"w{int(envelope.message[1:]) % 37}"
        self.counts.put(word, (self.counts.get(word) or 0) + 1)
        self.record(f"P {envelope.system_stream_partition.partition} {envelope.offset}")
        if self.shutdown_after and self.seen == self.shutdown_after:
            coordinator.shutdown(RequestScope.ALL_TASKS_IN_CONTAINER)


class CheckpointedStoreCountTask(StoreCountTask, _CheckpointRecorder):
    """StoreCountTask that also records its checkpoints as ``K <partition> <offset>``: a test can wait
    for one before it kills the container, so the restart starts from a checkpoint."""


class CommitAtStoreCountTask(CheckpointedStoreCountTask):
    """CheckpointedStoreCountTask that asks for a commit after each offset test.commit.at lists
    (comma-separated), and records ``C <partition> <offset>`` when it does."""

    def init(self, context) -> None:
        super().init(context)
        self.commit_at = {int(o) for o in str(context.config.get("test.commit.at", "")).split(",") if o}

    def process(self, envelope, collector, coordinator) -> None:
        super().process(envelope, collector, coordinator)
        if envelope.offset in self.commit_at:
            self.record(f"C {envelope.system_stream_partition.partition} {envelope.offset}")
            coordinator.commit()


class DrainingCommitAtStoreCountTask(CommitAtStoreCountTask, DrainListenerTask):
    """CommitAtStoreCountTask that records ``D <partition> 0`` on drain (the partition of the last
    message it processed; -1 before any)."""

    _partition = -1

    def process(self, envelope, collector, coordinator) -> None:
        self._partition = envelope.system_stream_partition.partition
        super().process(envelope, collector, coordinator)

    def on_drain(self, collector, coordinator) -> None:
        self.record(f"D {self._partition} 0")


class StorePadCountTask(StoreCountTask, _CheckpointRecorder):
    """StoreCountTask that also writes test.pad.bytes bytes per message into the store "pad" (its own
    key each), so that its stores keep growing: a job that fills a small disk. Records checkpoints
    as ``K <partition> <offset>``."""

    def init(self, context) -> None:
        super().init(context)
        self.pad = context.get_store("pad")
        self.pad_value = "x" * int(context.config.get("test.pad.bytes", 1000))

    def process(self, envelope, collector, coordinator) -> None:
        self.pad.put(f"{envelope.system_stream_partition.partition}-{envelope.offset}", self.pad_value)
        super().process(envelope, collector, coordinator)


class StoreDeleteTask(StreamTask, InitableTask, _Recorder):
    """Puts every message "m<i>" under key "k<i>", then deletes the key of every third one."""

    def init(self, context) -> None:
        self._open(context)
        self.store = context.get_store("counts")

    def process(self, envelope, collector, coordinator) -> None:
        i = int(envelope.message[1:])
        self.store.put(f"k{i}", i)
        if i % 3 == 0:
            self.store.delete(f"k{i}")
        self.record(f"P {envelope.system_stream_partition.partition} {envelope.offset}")


class WindowedCountTask(StreamTask, InitableTask, WindowableTask, DrainListenerTask, _CheckpointRecorder):
    """A windowed aggregation: counts messages per window and emits ``<partition> <count>`` to
    test.output at each window() (the drain's last window emits the partial one). Records
    ``P p o`` per message, ``W p count`` per emitted window, ``D p 0`` in on_drain.
    test.busy.us makes each message cost that much CPU (so input piles up in the buffers)."""

    def init(self, context) -> None:
        self._open(context)
        self._partition = min(s.partition for s in context.ssps)
        self._busy_ns = int(context.config.get("test.busy.us", 0)) * 1000
        self._count = 0

    def process(self, envelope, collector, coordinator) -> None:
        if self._busy_ns:
            _busy(self._busy_ns)
        self._count += 1
        self.record(f"P {envelope.system_stream_partition.partition} {envelope.offset}")

    def window(self, collector, coordinator) -> None:
        if not self._count:
            return
        if self.output is not None:
            collector.send(OutgoingMessageEnvelope(self.output, f"{self._partition} {self._count}".encode()))
        self.record(f"W {self._partition} {self._count}")
        self._count = 0

    def on_drain(self, collector, coordinator) -> None:
        self.record(f"D {self._partition} 0")


class DrainingAsyncTask(RandomAsyncTask, DrainListenerTask):
    """RandomAsyncTask (max.concurrency > 1, out-of-order completion) that records ``D p 0`` on drain."""

    def init(self, context) -> None:
        super().init(context)
        self._partition = min(s.partition for s in context.ssps)

    def on_drain(self, collector, coordinator) -> None:
        self.record(f"D {self._partition} 0")


class DrainingOrderTask(OrderTask, DrainListenerTask):
    """OrderTask (runs in worker processes with pool size >= 2) that records ``D p 0`` on drain."""

    def init(self, context) -> None:
        super().init(context)
        self._partition = min(s.partition for s in context.ssps)

    def on_drain(self, collector, coordinator) -> None:
        self.record(f"D {self._partition} 0")


class GcFreezeTask(StreamTask, InitableTask, _Recorder):
    """Records, at its first message, how many objects the cyclic GC has frozen in its process."""

    def init(self, context) -> None:
        self._open(context)
        self._seen = False

    def process(self, envelope, collector, coordinator) -> None:
        if not self._seen:
            self._seen = True
            self.record(f"G {gc.get_freeze_count()} 0")


class SlowAtTask(StreamTask, InitableTask, _Recorder):
    """Records ``P <partition> <offset>`` per message; on partition test.slow.partition at offset
    test.slow.offset, process() first sleeps test.slow.seconds (far past any timeout under test)."""

    def init(self, context) -> None:
        self._open(context)
        self.slow = (int(context.config["test.slow.partition"]), int(context.config["test.slow.offset"]))
        self.seconds = float(context.config.get("test.slow.seconds", 60))

    def process(self, envelope, collector, coordinator) -> None:
        if (envelope.system_stream_partition.partition, envelope.offset) == self.slow:
            self.record(f"S {self.slow[0]} {self.slow[1]}")
            time.sleep(self.seconds)
        self.record(f"P {envelope.system_stream_partition.partition} {envelope.offset}")


class TenureTask(StreamTask, InitableTask, ClosableTask, _Recorder):
    """Evidence, from the task itself, of where and when it runs (a tenure: one init to its close).

    init takes an exclusive flock on ``<test.lock.dir>/<task>.lock`` without waiting, so a second
    copy of the task running anywhere on this host fails its init; it records ``I <tenure> <ns>``.
    Each message adds one to its partition's count in the changelogged store "counts" and records
    ``T <tenure> <partition> <offset> <count>``. close records ``E <tenure> <ns>``, then unlocks.
    ``<ns>`` is CLOCK_MONOTONIC, which every process of the host shares."""

    def init(self, context) -> None:
        self._open(context)
        self.counts = context.get_store("counts")
        self.tenure = f"{os.getpid()}-{os.urandom(4).hex()}"
        path = os.path.join(context.config["test.lock.dir"], f"{context.task_name.replace(' ', '_')}.lock")
        self._lock = os.open(path, os.O_CREAT | os.O_RDWR, 0o644)
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RuntimeError(f"task {context.task_name!r} is already running somewhere else") from None
        self.record(f"I {self.tenure} {time.monotonic_ns()}")

    def process(self, envelope, collector, coordinator) -> None:
        p = envelope.system_stream_partition.partition
        n = (self.counts.get(str(p)) or 0) + 1
        self.counts.put(str(p), n)
        self.record(f"T {self.tenure} {p} {envelope.offset} {n}")

    def close(self) -> None:
        self.record(f"E {self.tenure} {time.monotonic_ns()}")
        fcntl.flock(self._lock, fcntl.LOCK_UN)
        os.close(self._lock)


class InitByNameTask(StreamTask, InitableTask, _Recorder):
    """Records ``I <pid> 0`` when its init starts; then the init of the task named by test.init.fail
    raises, and that of the task named by test.init.hang never returns."""

    def init(self, context) -> None:
        self._open(context)
        self.record(f"I {os.getpid()} 0")
        if context.task_name == context.config.get("test.init.fail"):
            raise RuntimeError("init failed on purpose")
        if context.task_name == context.config.get("test.init.hang"):
            while True:
                time.sleep(1)

    def process(self, envelope, collector, coordinator) -> None:
        pass


class TaskKeyCountTask(StreamTask, InitableTask, _Recorder):
    """Counts its messages per input partition in the changelogged store "counts", under the key
    ``<task name with _ for spaces>|<partition>``, so a store holding another task's key shows that
    a task was restored from another task's changelog partition. Records ``P <partition> <offset>``;
    dumps the restored store at init, as StoreCountTask does."""

    def init(self, context) -> None:
        self._open(context)
        self.counts = context.get_store("counts")
        self.prefix = context.task_name.replace(" ", "_")
        _dump_store(context, self.counts)

    def process(self, envelope, collector, coordinator) -> None:
        partition = envelope.system_stream_partition.partition
        key = f"{self.prefix}|{partition}"
        self.counts.put(key, (self.counts.get(key) or 0) + 1)
        self.record(f"P {partition} {envelope.offset}")


class KeyBucketTask(StreamTask, InitableTask, _Recorder):
    """Records ``V <partition> <key bucket> <offset> <key>`` for every message: which virtual task
    (the record file's name) saw which key, in which order. With test.broadcast.stream, records
    ``B <partition> <offset>`` for the messages of that stream instead; test.busy.us: CPU time each
    message takes (with test.busy.bucket, only the messages of that key bucket)."""

    def init(self, context) -> None:
        self._open(context)
        self._broadcast = context.config.get("test.broadcast.stream")
        self._busy_s = int(context.config.get("test.busy.us", 0)) / 1e6
        bucket = context.config.get("test.busy.bucket")
        self._busy_bucket = None if bucket is None else int(bucket)

    def process(self, envelope, collector, coordinator) -> None:
        busy = self._busy_bucket is None or envelope.system_stream_partition.key_bucket == self._busy_bucket
        if self._busy_s and busy:
            until = time.perf_counter() + self._busy_s
            while time.perf_counter() < until:
                pass
        ssp = envelope.system_stream_partition
        if ssp.stream == self._broadcast:
            self.record(f"B {ssp.partition} {envelope.offset}")
        else:
            self.record(f"V {ssp.partition} {ssp.key_bucket} {envelope.offset} {envelope.key}")


class KeyCountTask(StreamTask, InitableTask, _CheckpointRecorder):
    """Word count by message key: adds one to the count of the message's key in the changelogged store
    "counts", keyed by that key (with key serde "string" on both, the store key's bytes are the
    message's key bytes, so re-bucketing moves each count to the task its messages go to). Records
    ``P <partition> <offset>`` and its checkpoints as ``K <partition> <offset>``; dumps the restored
    store at init, as StoreCountTask does. test.busy.us makes each message cost that much CPU."""

    def init(self, context) -> None:
        self._open(context)
        self.counts = context.get_store("counts")
        self._busy_ns = int(context.config.get("test.busy.us", 0)) * 1000
        _dump_store(context, self.counts)

    def process(self, envelope, collector, coordinator) -> None:
        if self._busy_ns:
            _busy(self._busy_ns)
        self.counts.put(envelope.key, (self.counts.get(envelope.key) or 0) + 1)
        self.record(f"P {envelope.system_stream_partition.partition} {envelope.offset}")


class OwnershipTask(StreamTask, InitableTask, _Recorder):
    """Evidence of who processed what when, written by the task itself: ``O <processor.id> <partition>
    <offset> <start ns> <end ns> <instance>`` for every message, the times on CLOCK_MONOTONIC (one clock
    for every process of the machine), so that two processors running one task at once can be seen;
    the instance names this task object (a tenure: a task started again is a new one).
    test.busy.us: CPU time each message takes."""

    def init(self, context) -> None:
        self._open(context)
        self._instance = f"{os.getpid()}-{random.getrandbits(32):08x}"
        self._processor = context.config.get("processor.id", "-")
        self._busy_s = int(context.config.get("test.busy.us", 0)) / 1e6

    def process(self, envelope, collector, coordinator) -> None:
        started = time.monotonic_ns()
        self.work(envelope)
        partition = envelope.system_stream_partition.partition
        self.record(
            f"O {self._processor} {partition} {envelope.offset} {started} {time.monotonic_ns()} {self._instance}"
        )

    def work(self, envelope) -> None:
        """What processing a message does, between its start and end times."""
        if self._busy_s:
            until = time.perf_counter() + self._busy_s
            while time.perf_counter() < until:
                pass


class OwnershipCountTask(OwnershipTask):
    """OwnershipTask that also counts messages per word in the changelogged store "counts", as
    StoreCountTask does (message "m<i>" is word "w<i % 37>"), within each message's recorded span."""

    def init(self, context) -> None:
        super().init(context)
        self.counts = context.get_store("counts")

    def work(self, envelope) -> None:
        super().work(envelope)
        word = f"w{int(envelope.message[1:]) % 37}"
        self.counts.put(word, (self.counts.get(word) or 0) + 1)


class CampaignTask(StreamTask, InitableTask, CheckpointListenerTask, _Recorder):
    """The fault campaign's job: counts words in the changelogged store "counts" as StoreCountTask
    does ("m<i>" is word "w<i % 37>"), and writes evidence of what it does, unbuffered, as it does it.

    ``<task>.<pid>.log``: an ``O`` line per message in OwnershipTask's format (who processed which
    offset when; ``standalone_util.ownership_records`` reads them), written after the store write.
    ``<task>.<pid>.commits``: ``C <processor.id> <partition> <last offset processed> <ns>`` when a
    commit starts (everything processed so far is in the writes that commit applies to LMDB; -1:
    nothing yet) and ``K <processor.id> <partition> <offset> <ns>`` once its checkpoint is written,
    so a test that froze the task's worker can tell which counts LMDB holds as they are and which
    wait in the store's write buffer, and where a processor's checkpoints are."""

    def init(self, context) -> None:
        self._open(context)
        name = context.task_name.replace(" ", "_")
        path = os.path.join(context.config["test.record.dir"], f"{name}.{os.getpid()}.commits")
        self._commits = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.counts = context.get_store("counts")
        self._instance = f"{os.getpid()}-{random.getrandbits(32):08x}"
        self._processor = context.config.get("processor.id", "-")
        self._partition = min(s.partition for s in context.ssps)
        self._last = -1

    def process(self, envelope, collector, coordinator) -> None:
        started = time.monotonic_ns()
        word = f"w{int(envelope.message[1:]) % 37}"
        self.counts.put(word, (self.counts.get(word) or 0) + 1)
        partition = envelope.system_stream_partition.partition
        self._last = envelope.offset
        self.record(
            f"O {self._processor} {partition} {envelope.offset} {started} {time.monotonic_ns()} {self._instance}"
        )

    def before_commit(self) -> None:
        line = f"C {self._processor} {self._partition} {self._last} {time.monotonic_ns()}\n"
        os.write(self._commits, line.encode())

    def on_checkpoint(self, offsets) -> None:
        for ssp, offset in offsets.items():
            line = f"K {self._processor} {ssp.partition} {offset} {time.monotonic_ns()}\n"
            os.write(self._commits, line.encode())


class LoggingTask(OrderTask):
    """OrderTask that logs through Python logging (logger ``test.task``): one DEBUG and one INFO line
    at init, one INFO line for its first message and a WARNING with a traceback for its second."""

    def init(self, context) -> None:
        super().init(context)
        self._log = logging.getLogger("test.task")
        self._log.debug("init of %s (debug)", context.task_name)
        self._log.info("init of %s", context.task_name)
        self._logged = 0

    def process(self, envelope, collector, coordinator) -> None:
        super().process(envelope, collector, coordinator)
        self._logged += 1
        if self._logged == 1:
            self._log.info("first message: offset %d", envelope.offset)
        elif self._logged == 2:
            try:
                raise ValueError("not really")
            except ValueError:
                self._log.warning("second message: offset %d", envelope.offset, exc_info=True)


class MetricsTask(OrderTask):
    """An OrderTask that counts each message in a metric of its own (``user-messages``) and sets a
    gauge of its own at init (``user-gauge``)."""

    def init(self, context) -> None:
        super().init(context)
        self.user_messages = context.metrics.counter("user-messages")
        context.metrics.gauge("user-gauge").set("set-at-init")

    def process(self, envelope, collector, coordinator) -> None:
        super().process(envelope, collector, coordinator)
        self.user_messages.inc()
