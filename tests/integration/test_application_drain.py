"""Acceptance of issue 31 (WAVE3-SPEC A.5, AT-A6, AT-A7, AT-A9): ``samzamp-drain --wait`` of a 2-stage
application (``partition_by`` + keyed session window) run by two ``samzamp-container`` processors of
one standalone job, on the real broker and ZooKeeper, while input keeps arriving.

The application (``drain_apps.ReKeyedSessionApp``) reads ``events`` (4 partitions, each record
``{"k": key, "src": partition, "seq": offset}``), re-keys by ``k`` through the intermediate topic
and folds the ``[src, seq]`` pairs of each key in a session window with a one-hour gap, which can
only fire on the drain; each pane goes to ``out``. So the panes of a run hold exactly what the run
processed, and the test can tell a lost, repeated or late record apart.

Every scenario deploys the job, drains it mid-stream, checks what the topics, the checkpoints and
ZooKeeper hold (items 1-5 of the acceptance list, each a ``check_*`` function below), deploys it
again with more input, drains again and checks the second run and both together (item 6). The
variants: inline, a pool of 2, ``job.elasticity.factor = 2`` (item 7), a SIGKILL of the processor
that owns the aggregate partition in the middle of the drain (item 8), a producer linger of 1 s
(item 9), and a third processor that joins the job in the middle of the drain and takes tasks over
(acceptance item 7 of the build list: a processor that joins during the drain does not break it).
Every check runs, the failures are reported together.
"""

from __future__ import annotations

import ast
import functools
import json
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from drain_apps import PARTITION_BY_ID, WINDOW_ID
from kafka_util import create_topic, run_drain, wait_until
from standalone_util import REGISTERED, Processor, ZkView

from samzamp.commit.checkpoint import Checkpoint, decode_checkpoint, decode_key
from samzamp.consume.key_bucket import key_bucket
from samzamp.coordinator.run_id import RUN_NAMESPACE, RunState, read_current_run
from samzamp.coordinator.zk import job_models
from samzamp.coordinator.zk.metadata_store import ZkMetadataStores
from samzamp.drain.notification import DRAIN_NAMESPACE, read_drain_notifications
from samzamp.model.job_model import JobModel
from samzamp.serde.intermediate import ControlMessage, DrainMessage, aggregate_partition, decode_control
from samzamp.systems.kafka.codes import PARTITION_EOF

pytestmark = pytest.mark.integration

PARTITIONS = 4
KEYS = tuple(f"k{i:02d}" for i in range(50))
FEED_PAUSE_S = 0.04  # one record per partition each pause: about 100 records a second
FAST_POLL_MS = 200
# In the SIGKILL and join scenarios the processor that does not own the aggregate partition looks
# for the drain this seldom: its first look comes at least this long after it started, which leaves
# the time to kill the aggregator (or to start a third processor) between the first processor's
# drain messages and its own.
SLOW_POLL_MS = 15_000
BOUND_S = 30  # item 7: a drain completes within the slowest poll interval plus this
HELD_MS = 600  # an intermediate record that arrived this long after it was produced was held back
MIN_WATCH_S = 3  # the intermediate topic is watched this long at least before the drain
WARM_UP_MS = 1000  # arrival times of records produced in the first second of watching are not trusted
RUN_ID = re.compile(r"run id (\S+) \(")


@dataclass(frozen=True)
class Scenario:
    pool: int = 0
    factor: int = 1
    kill_aggregator: bool = False
    join: bool = False  # a third processor joins in the middle of the drain
    linger_ms: int | None = None
    # A commit flushes the producers: with the linger, commits come seldom enough not to cut it short.
    commit_ms: int = 200


SCENARIOS = [
    pytest.param(Scenario(), id="inline"),
    pytest.param(Scenario(pool=2), id="pool2"),
    pytest.param(Scenario(factor=2), id="factor2"),
    pytest.param(Scenario(kill_aggregator=True), id="sigkill-aggregator"),
    pytest.param(Scenario(linger_ms=1000, commit_ms=3000), id="linger1000"),
    pytest.param(Scenario(join=True), id="join-during-drain"),
]


# -- The job, its input, its processors --------------------------------------------------------------


def key_of(src: int, seq: int) -> str:
    """The key of record ``seq`` of partition ``src``: every key in every partition, in a fixed order."""
    return KEYS[(seq * 31 + src * 17) % len(KEYS)]


class Feeder:
    """Writes events to every partition, one per partition every ``FEED_PAUSE_S``, until ``stop``:
    ``{"k", "src", "seq"}`` with ``seq`` the record's offset (one idempotent producer, in order).
    ``next_seq`` (partition -> the next offset) carries over from one Feeder to the next."""

    def __init__(self, bootstrap: str, topic: str, next_seq: dict[int, int]) -> None:
        self.next_seq = next_seq
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self._producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True})
        self._topic = topic
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                for p in range(PARTITIONS):
                    seq = self.next_seq[p]
                    k = key_of(p, seq)
                    value = json.dumps({"k": k, "src": p, "seq": seq}).encode()
                    self._producer.produce(self._topic, value, k.encode(), partition=p)
                    self.next_seq[p] = seq + 1
                self._producer.poll(0)
                self._stop.wait(FEED_PAUSE_S)
        except BaseException as e:  # reported by stop
            self._error = e

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        assert self._producer.flush(30) == 0, "the feeder's records were not all delivered"
        assert self._error is None, f"the feeder failed: {self._error!r}"


def job_toml(job: str, zk_connect: str, events: str, out: str, sc: Scenario) -> str:
    linger = f"producer.linger.ms = {sc.linger_ms}\n" if sc.linger_ms is not None else ""
    return f"""
[job]
name = "{job}"
default.system = "kafka"
container.thread.pool.size = {sc.pool}
elasticity.factor = {sc.factor}

[job.coordinator]
factory = "zk"
zk.connect = "{zk_connect}"
zk.session.timeout.ms = 4000
zk.connection.timeout.ms = 20000
zk.consensus.timeout.ms = 20000

[job.debounce]
time.ms = 300

[app]
class = "drain_apps:ReKeyedSessionApp"

[task]
commit.ms = {sc.commit_ms}

[systems.kafka]
samza.factory = "kafka"
default.stream.samza.offset.default = "oldest"
{linger}
[metrics]
log.interval.ms = 0

[streams.events]
samza.physical.name = "{events}"
partitions = {PARTITIONS}

[streams.out]
samza.physical.name = "{out}"
partitions = {PARTITIONS}
"""


@dataclass
class DrainJob:
    name: str
    config: Path
    bootstrap: str
    view: ZkView
    scenario: Scenario
    tmp: Path
    events: str
    out: str

    @property
    def intermediate(self) -> str:
        return f"{self.name}-1-partition_by-{PARTITION_BY_ID}"

    @property
    def changelog(self) -> str:
        return f"{self.name}-1-window-{WINDOW_ID}"

    @property
    def aggregate(self) -> int:
        return aggregate_partition(self.intermediate, PARTITIONS)

    def processor(self, pid: str, location: str, poll_ms: int, run: int) -> Processor:
        state = self.tmp / f"state-{location}"
        return Processor(
            self.config,
            self.bootstrap,
            pid,
            location,
            f"job.drain-monitor.poll.interval.ms={poll_ms}",
            f"job.logged.store.base.dir={state}",
            f"job.non-logged.store.base.dir={state}",
            run=run,
        )


def registered(p: Processor) -> bool:
    return REGISTERED.search(p.log_text()) is not None


def logged_run_id(p: Processor) -> str:
    m = RUN_ID.search(p.log_text())
    assert m, f"processor {p.pid} did not log its run id:\n{p.log_text()[-3000:]}"
    return m.group(1)


def topic_exists(bootstrap: str, topic: str) -> bool:
    return topic in AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).topics


def now_ms() -> int:
    return int(time.time() * 1000)


# -- Reading the topics -----------------------------------------------------------------------------


class Inter(NamedTuple):
    """One record of the intermediate topic, decoded by its type byte."""

    partition: int
    offset: int
    ts: int  # its timestamp (producer create time), ms
    item: tuple[str, int, int] | None  # a user record: (k, src, seq)
    control: ControlMessage | None  # a control record
    key: bytes | None


def decode_inter(m: Message) -> Inter:
    value = m.value()
    assert value, f"intermediate record {m.partition()}@{m.offset()} has no value"
    kind = value[0]
    ts = m.timestamp()[1]
    if kind == 0:
        src, seq = json.loads(value[1:])
        return Inter(m.partition(), m.offset(), ts, (json.loads(m.key()), src, seq), None, m.key())
    assert kind in (1, 2, 3), f"intermediate record {m.partition()}@{m.offset()} has type byte {kind}"
    return Inter(m.partition(), m.offset(), ts, None, decode_control(kind, value[1:]), m.key())


class Pane(NamedTuple):
    key: str
    items: list[tuple[int, int]]
    ts: int
    body_key: Any  # the "key" field of the value


class Snapshot(NamedTuple):
    """Every record of the job's topics (the processors stopped), each partition in offset order."""

    events: dict[int, list[Message]]
    inter: list[Inter]
    out: list[Message]
    changelog: list[Message]
    checkpoints: list[tuple[int, Checkpoint]]  # (offset, checkpoint) in topic order


class Marks(NamedTuple):
    """Where a snapshot's topics end (partition -> the next offset): what a later run writes comes after."""

    inter: dict[int, int]
    out: dict[int, int]
    changelog: dict[int, int]
    checkpoints: int


def checkpoint_topic(job: str) -> str:
    return f"__samza_checkpoint_ver_1_for_{job}_1"


def decode_checkpoint_record(m: Message) -> Checkpoint:
    key = decode_key(m.key())
    assert key is not None, f"checkpoint record {m.offset()} has a key of another format"
    return decode_checkpoint(key.task_name, m.value())


def read_topics(bootstrap: str, topics: list[str]) -> dict[str, list[Message]]:
    """Every record of every partition of ``topics`` (those that exist), from the oldest to the end,
    each partition in offset order; one consumer for all (the writers stopped)."""
    listed = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).topics
    parts = [TopicPartition(t, p, OFFSET_BEGINNING) for t in topics if t in listed for p in listed[t].partitions]
    out: dict[str, list[Message]] = {t: [] for t in topics}
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "test-drain-read",
            "enable.partition.eof": True,
            "fetch.wait.max.ms": 10,
        }
    )
    c.list_topics(timeout=10)  # the leaders known before assign(): see kafka_util.read_all
    c.assign(parts)
    eof: set[tuple[str, int]] = set()
    deadline = time.monotonic() + 60
    try:
        while len(eof) < len(parts):
            assert time.monotonic() < deadline, f"reading {topics} did not reach their ends: {sorted(eof)}"
            for m in c.consume(5000, 0) or c.consume(1, 0.2):
                err = m.error()
                if err is None:
                    out[m.topic()].append(m)
                elif err.code() == PARTITION_EOF:
                    eof.add((m.topic(), m.partition()))
    finally:
        c.close()
    for records in out.values():
        records.sort(key=lambda m: (m.partition(), m.offset()))
    return out


def take_snapshot(job: DrainJob) -> Snapshot:
    cps = checkpoint_topic(job.name)
    read = read_topics(job.bootstrap, [job.events, job.intermediate, job.out, job.changelog, cps])
    events: dict[int, list[Message]] = {p: [] for p in range(PARTITIONS)}
    for m in read[job.events]:
        events[m.partition()].append(m)
    return Snapshot(
        events,
        [decode_inter(m) for m in read[job.intermediate]],
        read[job.out],
        read[job.changelog],
        [(m.offset(), decode_checkpoint_record(m)) for m in read[cps]],
    )


def _ends(records: Iterable[tuple[int, int]]) -> dict[int, int]:
    ends: dict[int, int] = {}
    for p, o in records:
        ends[p] = max(ends.get(p, 0), o + 1)
    return ends


def marks_of(s: Snapshot) -> Marks:
    return Marks(
        _ends((r.partition, r.offset) for r in s.inter),
        _ends((m.partition(), m.offset()) for m in s.out),
        _ends((m.partition(), m.offset()) for m in s.changelog),
        max((o + 1 for o, _ in s.checkpoints), default=0),
    )


NO_MARKS = Marks({}, {}, {}, 0)


def since(s: Snapshot, marks: Marks) -> Snapshot:
    """What was written after ``marks`` (the events stay whole)."""
    return Snapshot(
        s.events,
        [r for r in s.inter if r.offset >= marks.inter.get(r.partition, 0)],
        [m for m in s.out if m.offset() >= marks.out.get(m.partition(), 0)],
        [m for m in s.changelog if m.offset() >= marks.changelog.get(m.partition(), 0)],
        [(o, cp) for o, cp in s.checkpoints if o >= marks.checkpoints],
    )


def panes_of(out: Iterable[Message]) -> list[Pane]:
    panes = []
    for m in out:
        body = json.loads(m.value())
        panes.append(Pane(m.key().decode(), [tuple(i) for i in body["items"]], m.timestamp()[1], body.get("key")))
    return panes


Point = tuple[int, int]  # (partition, key bucket; -1 without virtual tasks)


def final_offsets(
    checkpoints: Iterable[tuple[int, Checkpoint]], stream: str, start: dict[Point, int]
) -> dict[Point, int]:
    """(partition, key bucket) -> the last processed offset of ``stream`` in the last of ``checkpoints``."""
    last = dict(start)
    for _, cp in checkpoints:
        for o in cp.input_offsets:
            if o.stream == stream:
                last[(o.partition, o.key_bucket)] = o.offset
    return last


def bucket(m: Message, factor: int) -> int:
    return key_bucket(m.key(), m.offset(), factor) if factor > 1 else -1


def processed_between(
    events: dict[int, list[Message]], factor: int, after: dict[Point, int], upto: dict[Point, int]
) -> Counter[tuple[int, int]]:
    """The (src, seq) of the events each (partition, bucket) processed after ``after`` up to ``upto``."""
    out: Counter[tuple[int, int]] = Counter()
    for p, records in events.items():
        for m in records:
            point = (p, bucket(m, factor))
            if after.get(point, -1) < m.offset() <= upto.get(point, -1):
                out[(p, m.offset())] += 1
    return out


def drain_markers(inter: list[Inter], aggregate: int, run_id: str, producers: int) -> dict[int, Inter]:
    """Partition -> its drain marker for ``run_id``: in the aggregate partition the named
    DrainMessage that completed the set of ``producers`` names, elsewhere the first broadcast copy."""
    markers: dict[int, Inter] = {}
    names: set[str] = set()
    for r in inter:
        c = r.control
        if not isinstance(c, DrainMessage) or c.run_id != run_id or r.partition in markers:
            continue
        if r.partition == aggregate:
            if c.task_name is not None:
                names.add(c.task_name)
                if len(names) == producers:
                    markers[r.partition] = r
        elif c.task_name is None:
            markers[r.partition] = r
    return markers


# -- Running a deployment ---------------------------------------------------------------------------


class Tail:
    """The records of some topic partitions from given offsets on, as they arrive (a thread), each
    noted with when it reached this process (``time.time()`` ms), until ``stop``. For watching the
    checkpoints and the aggregate partition while the job runs, and for AT-A9's arrival times."""

    def __init__(self, bootstrap: str, parts: list[TopicPartition]) -> None:
        self.started_ms = now_ms()  # a record produced before this may have arrived before it was seen
        self.arrived: dict[tuple[str, int, int], int] = {}
        self._records: list[Message] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": "test-drain-tail",
                "enable.auto.commit": False,
                "fetch.wait.max.ms": 10,
            }
        )
        self._consumer.assign(parts)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            batch = self._consumer.consume(1000, 0.02)
            at = now_ms()
            with self._lock:
                for m in batch:
                    if m.error() is None:
                        self.arrived[(m.topic(), m.partition(), m.offset())] = at
                        self._records.append(m)

    def records(self) -> list[Message]:
        with self._lock:
            return list(self._records)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self._consumer.close()


@dataclass
class Deployment:
    """One run of the job: its processors (the last of each id), and what happened."""

    run_id: str = ""
    polls: dict[str, int] = field(default_factory=dict)
    processors: dict[str, Processor] = field(default_factory=dict)
    # processor -> its tasks: in the first stable job model, and (a join) in the one the joiner ran
    owners: dict[str, set[str]] = field(default_factory=dict)
    model: JobModel | None = None
    request_ms: int = 0
    drain_s: float = 0.0
    drain_output: str = ""
    drain_rc: int | None = None
    kill_ms: int | None = None
    join_ms: int | None = None  # when the test saw the joiner run the tasks it was given
    arrived: dict[tuple[int, int], int] = field(default_factory=dict)
    watched_ms: int = 0  # since when arrivals were watched
    timings: dict[str, float] = field(default_factory=dict)


class DrainCall:
    """``samzamp-drain <cfg> --wait`` on a thread, so the test can act while it waits."""

    def __init__(self, job: DrainJob, timeout_s: int) -> None:
        self.result: Any = None
        self.error: BaseException | None = None
        self.request_ms = now_ms()
        self.started = time.monotonic()
        self.finished: float | None = None

        def run() -> None:
            try:
                self.result = run_drain(job.config, job.bootstrap, "--wait", "--timeout", str(timeout_s))
            except BaseException as e:
                self.error = e
            self.finished = time.monotonic()

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()

    def done(self) -> bool:
        return not self._thread.is_alive()

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)
        assert not self._thread.is_alive(), "samzamp-drain --wait did not return"
        assert self.error is None, f"samzamp-drain failed to run: {self.error!r}"


class Watch:
    """A deployment's checkpoints and intermediate records as they are written (a ``Tail`` from
    where the previous run's ended)."""

    def __init__(self, job: DrainJob, marks: Marks) -> None:
        self.job = job
        wait_until(lambda: topic_exists(job.bootstrap, job.intermediate), 30, "the intermediate topic")
        wait_until(lambda: topic_exists(job.bootstrap, checkpoint_topic(job.name)), 30, "the checkpoint topic")
        parts = [TopicPartition(checkpoint_topic(job.name), 0, marks.checkpoints or OFFSET_BEGINNING)]
        parts += [TopicPartition(job.intermediate, p, marks.inter.get(p, OFFSET_BEGINNING)) for p in range(PARTITIONS)]
        self.tail = Tail(job.bootstrap, parts)

    def checkpoints(self) -> list[Checkpoint]:
        name = checkpoint_topic(self.job.name)
        return [decode_checkpoint_record(m) for m in self.tail.records() if m.topic() == name]

    def inter(self) -> list[Inter]:
        return [decode_inter(m) for m in self.tail.records() if m.topic() == self.job.intermediate]

    def saw_records_from(self, since_ms: int) -> bool:
        """An intermediate user record written at ``since_ms`` or later reached the tail."""
        return any(r.item is not None and r.ts >= since_ms for r in self.inter())

    def saw_every_marker(self, run_id: str) -> bool:
        """Every intermediate partition's drain marker of ``run_id`` reached the tail."""
        marked = {
            r.partition for r in self.inter() if isinstance(r.control, DrainMessage) and r.control.run_id == run_id
        }
        return marked >= set(range(PARTITIONS))

    def arrivals(self) -> dict[tuple[int, int], int]:
        """(partition, offset) -> when the intermediate record reached the test."""
        return {(p, o): at for (t, p, o), at in self.tail.arrived.items() if t == self.job.intermediate}

    def both_processed(self, owners: dict[str, set[str]]) -> bool:
        """Each processor's tasks checkpointed source records, and every intermediate partition was read."""
        read_events: set[str] = set()
        read_inter: set[int] = set()
        for cp in self.checkpoints():
            for o in cp.input_offsets:
                if o.stream == self.job.events and o.offset >= 10:
                    read_events.add(cp.task_name)
                if o.stream == self.job.intermediate and o.offset >= 0:
                    read_inter.add(o.partition)
        return all(tasks & read_events for tasks in owners.values()) and read_inter == set(range(PARTITIONS))


def deploy_and_drain(
    job: DrainJob, run: int, feeder_seq: dict[int, int], marks: Marks, kill: bool, join: bool = False
) -> Deployment:
    """Start the two processors, feed them, drain mid-stream (SIGKILL and restart of the aggregator
    in the middle if ``kill``; a third processor started in the middle if ``join``), and wait until
    every processor exited."""
    d = Deployment()
    t0 = time.monotonic()
    agg_task = f"Partition {job.aggregate}"
    # GroupByContainerIds of a fresh job whose p1 registered first: p1 gets the first half of the
    # tasks in order, p2 the rest (also when p1 had them all for a moment: it keeps the first ones).
    owner = "p1" if job.aggregate < PARTITIONS // 2 else "p2"
    ids = (("p1", "A"), ("p2", "B"))
    d.polls = {pid: (SLOW_POLL_MS if (kill or join) and pid != owner else FAST_POLL_MS) for pid, _ in ids}
    feeder = Feeder(job.bootstrap, job.events, feeder_seq)
    watch: Watch | None = None
    started = {}
    try:
        for pid, loc in ids:
            started[pid] = time.monotonic()
            proc = d.processors[pid] = job.processor(pid, loc, d.polls[pid], run)
            # p1 registers first: otherwise p2 may lead and keep the first half (the grouper is sticky).
            wait_until(functools.partial(registered, proc), 30, f"{pid} to register", proc)
        _, d.owners = job.view.wait_stable(list(d.processors.values()))
        latest = job.view.latest()
        assert latest is not None
        d.model = latest[1]
        run_ids = {pid: logged_run_id(p) for pid, p in d.processors.items()}
        assert len(set(run_ids.values())) == 1, f"the processors of one deployment logged run ids {run_ids}"
        d.run_id = run_ids["p1"]
        watch = Watch(job, marks)
        d.watched_ms = watch.tail.started_ms
        wait_until(lambda: watch.both_processed(d.owners), 60, "both processors to process events")
        # Records keep arriving while watched (item 9's arrival times): some written MIN_WATCH_S in.
        watched = d.watched_ms + MIN_WATCH_S * 1000
        wait_until(lambda: watch.saw_records_from(watched), 60, f"records re-keyed {MIN_WATCH_S} s into the watch")
        d.timings["busy"] = time.monotonic() - t0
        if kill or join:
            assert agg_task in d.owners[owner], f"{agg_task} is not {owner}'s: {d.owners}"
            slow = next(pid for pid in d.polls if pid != owner)
            # The slow processor's first look at the drain comes SLOW_POLL_MS after its monitor
            # started, which is after the processor started: the aggregation is half done until then.
            left = started[slow] + SLOW_POLL_MS / 1000 - time.monotonic()
            assert left > 6, f"the job took too long to start: {left:.1f} s left before {slow}'s first poll"
        call = DrainCall(job, 120)
        d.request_ms = call.request_ms
        if kill:
            d.kill_ms = kill_aggregator_mid_drain(job, d, watch, owner, agg_task, run)
        if join:
            d.join_ms = join_mid_drain(job, d, watch, run)
        call.join(SLOW_POLL_MS / 1000 + 120)
        d.drain_s = (call.finished or time.monotonic()) - call.started
        d.drain_rc = call.result.returncode
        d.drain_output = call.result.stdout + call.result.stderr
        d.timings["drained"] = time.monotonic() - t0
        logs = "\n".join(f"--- {pid}:\n{p.log_text()[-3000:]}" for pid, p in d.processors.items())
        assert d.drain_rc == 0, f"item 1: samzamp-drain --wait exited {d.drain_rc}:\n{d.drain_output}\n{logs}"
        assert " drained (" in call.result.stdout, f"item 1: samzamp-drain --wait said:\n{d.drain_output}"
        for pid, p in d.processors.items():
            try:
                rc = p.proc.wait(timeout=60)
            except Exception:
                p.kill()
                raise AssertionError(f"item 1: processor {pid} did not exit after the drain:\n{logs}") from None
            assert rc == 0, f"item 1: processor {pid} exited {rc} after the drain:\n{p.log_text()[-3000:]}"
        # The arrival times (item 9) need every marker's: the tail may still be catching up.
        wait_until(lambda: watch.saw_every_marker(d.run_id), 30, "the tail to see every drain marker of the run")
    finally:
        feeder.stop()
        if watch is not None:
            watch.tail.stop()
            d.arrived = watch.arrivals()
    d.timings["total"] = time.monotonic() - t0
    return d


def kill_aggregator_mid_drain(job: DrainJob, d: Deployment, watch: Watch, owner: str, agg_task: str, run: int) -> int:
    """AT-A6: once the aggregate partition holds 2 named DrainMessages of the run and its task
    checkpointed past them, SIGKILL its processor and start it again (same id). The kill time."""
    named: list[Inter] = []

    def two_named() -> bool:
        named[:] = [
            r
            for r in watch.inter()
            if r.partition == job.aggregate
            and isinstance(r.control, DrainMessage)
            and r.control.run_id == d.run_id
            and r.control.task_name is not None
        ]
        return len({r.control.task_name for r in named if r.control}) >= 2

    wait_until(two_named, 30, "2 named drain messages in the aggregate partition", d.processors[owner])
    first_name = named[0].control.task_name if named[0].control else None
    second = next(r.offset for r in named if r.control and r.control.task_name != first_name)

    def committed_past() -> bool:
        return any(
            o.stream == job.intermediate and o.partition == job.aggregate and o.offset >= second
            for cp in watch.checkpoints()
            if cp.task_name == agg_task
            for o in cp.input_offsets
        )

    wait_until(committed_past, 10, f"{agg_task} to checkpoint past offset {second} of its intermediate partition")
    d.processors[owner].kill()
    killed = now_ms()
    location = "A" if owner == "p1" else "B"
    d.processors[owner] = job.processor(owner, location, d.polls[owner], run + 10)
    return killed


APPLIED_GAINED = re.compile(r"job model version (\d+) applied by processor (\S+): (\d+) tasks; gained (\[.*?\]|none)")
HELD = re.compile(r"tasks (\[.*?\]) drained in run \S+ already")


def tasks_run(p: Processor) -> tuple[int, set[str]] | None:
    """The newest job model version ``p`` applied with tasks, and the tasks it started in the run:
    every task it gained, less those it held drained (never started); None before it had a task."""
    text = p.log_text()
    gained: set[str] = set()
    version = None
    for m in APPLIED_GAINED.finditer(text):
        if m.group(2) == p.pid and int(m.group(3)) > 0:
            version = int(m.group(1))
            gained |= set(ast.literal_eval(m.group(4))) if m.group(4) != "none" else set()
    held = {t for m in HELD.finditer(text) for t in ast.literal_eval(m.group(1))}
    started = gained - held
    return (version, started) if version is not None and started else None


def join_mid_drain(job: DrainJob, d: Deployment, watch: Watch, run: int) -> int:
    """Once the aggregate partition holds a named DrainMessage of the run (the drain is under way),
    start a third processor of the job at another location. It finds the drain notification at
    start and drains once it has tasks; the rebalance moves some of the others' tasks to it. Waits
    until it started at least one of them (its log) and adds its job model to ``d.owners``. When
    the test saw that."""

    def one_named() -> bool:
        return any(
            r.partition == job.aggregate
            and isinstance(r.control, DrainMessage)
            and r.control.run_id == d.run_id
            and r.control.task_name is not None
            for r in watch.inter()
        )

    wait_until(one_named, 30, "a named drain message in the aggregate partition")
    joiner = "p3"
    d.polls[joiner] = FAST_POLL_MS
    d.processors[joiner] = job.processor(joiner, "C", FAST_POLL_MS, run)
    found: list[tuple[int, set[str]]] = []

    def runs_tasks() -> bool:
        got = tasks_run(d.processors[joiner])
        found[:] = [got] if got else []
        return bool(found)

    wait_until(runs_tasks, 30, f"{joiner} to start a task it was given", d.processors[joiner])
    seen = now_ms()
    assert logged_run_id(d.processors[joiner]) == d.run_id, f"{joiner} joined another run than {d.run_id}"
    version, started = found[0]
    model = job_models.read_job_model(job.view.client, job.view.keys, version)
    for pid, c in model.containers.items():
        d.owners.setdefault(pid, set()).update(c.tasks)
    assert started <= d.owners[joiner], f"{joiner} started {started}, not its tasks in version {version}: {model}"
    print(f"{joiner} joined: it started {sorted(started)} of job model version {version}, owners {d.owners}")
    return seen


# -- The checks (each raises AssertionError naming the item it checks) -------------------------------


class Checks:
    """Runs every check; the failures are reported together at the end."""

    def __init__(self) -> None:
        self.failures: list[str] = []

    def __call__(self, label: str, check: Callable[..., None], *args: Any) -> None:
        try:
            check(*args)
        except AssertionError as e:
            message = str(e).split("\nassert ")[0]  # without pytest's rewritten expression
            lines = message.splitlines() or [repr(e)]
            self.failures.append(f"[{label}] {check.__name__}: {lines[0]}")
            self.failures.extend(f"    {line}" for line in lines[1:12])

    def assert_all(self) -> None:
        assert not self.failures, "failed checks:\n" + "\n".join(self.failures)


def _few(items: Iterable[Any], n: int = 8) -> str:
    items = sorted(items)
    return f"{items[:n]}{' ...' if len(items) > n else ''} ({len(items)})"


def check_run_record_says_drained(view: ZkView, d: Deployment) -> None:
    """Item 1: the run record says drained; the run's drain notification is gone."""
    stores = ZkMetadataStores(view.client, view.keys)
    record = read_current_run(stores.namespace(RUN_NAMESPACE))
    assert record is not None, "item 1: no run record in ZooKeeper"
    assert (record.run_id, record.state) == (d.run_id, RunState.DRAINED), (
        f"item 1: the run record is {record.run_id} {record.state}, not {d.run_id} drained"
    )
    left = [n for n in read_drain_notifications(stores.namespace(DRAIN_NAMESPACE)) if n.run_id == d.run_id]
    assert not left, f"item 1: the run's drain notification is still there: {left}"


def check_final_checkpoints_are_drain_checkpoints(
    checkpoints: list[tuple[int, Checkpoint]], tasks: set[str], run_id: str
) -> None:
    """Item 2: each task's last checkpoint of the run is its drain checkpoint of the run (what D_p is read from)."""
    last: dict[str, Checkpoint] = {}
    for _, cp in checkpoints:
        last[cp.task_name] = cp
    missing = sorted(tasks - set(last))
    assert not missing, f"item 2: tasks with no checkpoint in run {run_id}: {missing}"
    not_drained = sorted(t for t in tasks if not last[t].drained_in(run_id))
    assert not not_drained, (
        f"item 2: tasks whose last checkpoint is not their drain checkpoint of run {run_id}: {not_drained}"
    )


def check_panes_hold_exactly_what_was_processed(
    expected: Counter[tuple[int, int]], got: Counter[tuple[int, int]], drain_points: dict[Point, int]
) -> None:
    """Item 2: the (src, seq) over all panes of the run are exactly the records up to each D_p (after
    the previous run's): none missing, none twice, none past D_p."""
    missing = expected - got
    twice = {k: n for k, n in got.items() if n > 1}
    extra = set(got) - set(expected)
    problems = [
        f"{what} {_few(found)}"
        for what, found in (
            ("missing", missing),
            ("repeated", twice),
            ("not processed by this run (past D_p, or before the run)", extra),
        )
        if found
    ]
    assert not problems, (
        f"item 2: the panes do not hold exactly the records up to the drain points {drain_points}:\n"
        + "\n".join(problems)
    )


def check_one_pane_per_key_after_the_request(panes: list[Pane], keys: set[str], request_ms: int) -> None:
    """Item 3: each key that received a record emitted exactly one pane, after the drain request,
    holding records of that key only."""
    count = Counter(p.key for p in panes)
    assert not keys - set(count), f"item 3: keys that got records but no pane: {_few(keys - set(count))}"
    assert not set(count) - keys, f"item 3: panes of keys that got no record: {_few(set(count) - keys)}"
    repeated = [k for k, n in count.items() if n > 1]
    assert not repeated, f"item 3: keys with more than one pane: {_few(repeated)}"
    early = [(p.key, p.ts - request_ms) for p in panes if p.ts < request_ms]
    assert not early, f"item 3: panes emitted before the drain request (key, ms before): {_few(early)}"
    wrong = [
        (p.key, p.body_key, item) for p in panes for item in p.items if p.body_key != p.key or key_of(*item) != p.key
    ]
    assert not wrong, f"item 3: panes holding records of another key (key, its value's key, item): {_few(wrong)}"


def check_window_state_deleted(changelog: list[Message], pane_keys: set[str]) -> None:
    """Item 3: the window's changelog ends with a tombstone for each key that got a pane, and holds
    no other key's state."""
    last: dict[str, bytes | None] = {}
    for m in changelog:
        store_key = json.loads(m.key())
        last[store_key[0] if isinstance(store_key, list) and store_key else repr(store_key)] = m.value()
    no_tombstone = {k for k in pane_keys if k not in last or last[k] is not None}
    left = {k for k, v in last.items() if v is not None}
    assert not no_tombstone, f"item 3: keys with a pane and no tombstone in the changelog: {_few(no_tombstone)}"
    assert not left, f"item 3: window state the changelog still holds after the drain: {_few(left)}"


def check_intermediate_records_all_in_panes(inter: list[Inter], pane_items: Counter[tuple[str, int, int]]) -> None:
    """Item 4: every user record the run wrote to the intermediate topic is in a pane (of its key)."""
    written = Counter(r.item for r in inter if r.item is not None)
    missing = written - pane_items
    unknown = pane_items - written
    assert not missing, f"item 4: intermediate records (k, src, seq) in no pane: {_few(missing)}"
    assert not unknown, f"item 4: pane items never written to the intermediate topic: {_few(unknown)}"


def check_nothing_after_the_drain_markers(inter: list[Inter], markers: dict[int, Inter]) -> None:
    """Item 4: in each intermediate partition no user record of the run lies after its drain marker."""
    assert set(markers) == set(range(PARTITIONS)), (
        f"item 4: intermediate partitions without a drain marker of the run: "
        f"{sorted(set(range(PARTITIONS)) - set(markers))}"
    )
    late = [
        (r.partition, r.offset, r.item) for r in inter if r.item is not None and r.offset > markers[r.partition].offset
    ]
    assert not late, (
        f"item 4: user records after the drain marker (markers at "
        f"{ {p: m.offset for p, m in sorted(markers.items())} }): {_few(late)}"
    )


def check_intermediate_checkpoints_past_the_markers(
    checkpoints: list[tuple[int, Checkpoint]], stream: str, markers: dict[int, Inter]
) -> None:
    """Item 4: each intermediate SSP's final checkpoint is at or past its drain marker."""
    final = final_offsets(checkpoints, stream, {})
    short = {
        point: (offset, markers[point[0]].offset)
        for point, offset in final.items()
        if point[0] in markers and offset < markers[point[0]].offset
    }
    unread = set(markers) - {p for p, _ in final}
    assert not unread, f"item 4: intermediate partitions with no checkpoint in the run: {sorted(unread)}"
    assert not short, (
        f"item 4: intermediate SSPs whose final checkpoint is before their drain marker "
        f"((partition, bucket): (checkpoint, marker)): {short}"
    )


def check_named_drain_messages(
    inter: list[Inter], aggregate: int, run_id: str, producers: set[str], owners: dict[str, set[str]]
) -> None:
    """Item 5: the aggregate partition holds exactly one named DrainMessage of the run per producer
    task (4, or 8 with key buckets), and every processor that ran tasks of the run (``owners``: both,
    and a processor that joined during the drain) ran some of those producer tasks."""
    drains = [
        r
        for r in inter
        if r.partition == aggregate and isinstance(r.control, DrainMessage) and r.control.run_id == run_id
    ]
    names = [r.control.task_name for r in drains if r.control is not None]
    assert sorted(names, key=str) == sorted(producers), (
        f"item 5: the aggregate partition {aggregate} holds the drain messages of run {run_id} (offset, name) "
        f"{[(r.offset, r.control.task_name if r.control else None) for r in drains]}, not one per producer task "
        f"{sorted(producers)}"
    )
    senders = {pid for pid, tasks in owners.items() if tasks & set(names)}
    assert senders == set(owners), (
        f"item 5: the named drain messages came from the tasks of {sorted(senders)} only, not of every "
        f"processor that ran tasks {sorted(owners)}"
    )
    keyed = [r.offset for r in drains if r.key is not None]
    assert not keyed, f"item 5: drain messages with a key at offsets {keyed}"


def check_broadcast_copies(inter: list[Inter], aggregate: int, run_id: str, markers: dict[int, Inter]) -> None:
    """Item 5: every other partition holds a null-named DrainMessage of the run, written after the
    named message that completed the aggregation."""
    assert aggregate in markers, f"item 5: the aggregation of partition {aggregate} never completed"
    complete = markers[aggregate]
    for p in range(PARTITIONS):
        if p == aggregate:
            continue
        copies = [
            r
            for r in inter
            if r.partition == p
            and isinstance(r.control, DrainMessage)
            and r.control.run_id == run_id
            and r.control.task_name is None
        ]
        assert copies, f"item 5: partition {p} holds no broadcast DrainMessage of run {run_id}"
        assert copies[0].ts >= complete.ts, (
            f"item 5: partition {p}'s broadcast copy (ts {copies[0].ts}) was written before the "
            f"aggregation completed (ts {complete.ts})"
        )
        assert copies[0].key is None, f"item 5: partition {p}'s broadcast copy has a key"


def check_one_broadcast_copy_per_partition(inter: list[Inter], aggregate: int, run_id: str) -> None:
    """Issue step 2 / R-A13: the aggregate partition's task (with key buckets: the one owning bucket 0)
    broadcasts one null-named copy to each other partition, not one per virtual task."""
    at: dict[int, list[int]] = {}
    for r in inter:
        if isinstance(r.control, DrainMessage) and r.control.run_id == run_id and r.control.task_name is None:
            at.setdefault(r.partition, []).append(r.offset)
    want = {p: 1 for p in range(PARTITIONS) if p != aggregate}
    assert {p: len(offsets) for p, offsets in at.items()} == want, (
        f"broadcast DrainMessages of run {run_id}, partition -> offsets: {dict(sorted(at.items()))}; want one "
        f"in each partition but the aggregate partition {aggregate}"
    )


def check_drain_bound(d: Deployment) -> None:
    """Item 7 (A.5 bound): the drain completed within the slowest poll interval plus BOUND_S."""
    limit = max(d.polls.values()) / 1000 + BOUND_S
    assert d.drain_s <= limit, f"item 7: the drain took {d.drain_s:.1f} s, more than {limit:.1f} s"


STARTING = re.compile(r"starting offsets (.*)$", re.MULTILINE)
SSP_START = re.compile(r"SystemStreamPartition \[([^,\]]+), ([^,\]]+), (\d+)(?:, (\d+))?\]'?: (\d+|'oldest')")


def starting_offsets(log: str) -> dict[tuple[str, int, int], int | None]:
    """(stream, partition, key bucket) -> the first offset the processor read of it (-1: the
    oldest): the smallest start of its "starting offsets" lines (one per job model it applied)."""
    lines = STARTING.findall(log)
    assert lines, "no 'starting offsets' line in the processor's log"
    out: dict[tuple[str, int, int], int] = {}
    for line in lines:
        for _system, stream, p, kb, offset in SSP_START.findall(line):
            point = (stream, int(p), int(kb) if kb else -1)
            start = -1 if offset == "'oldest'" else int(offset)
            out[point] = min(out.get(point, start), start)
    return out


def check_next_run_starts_after_the_drain(
    second: Deployment,
    events: str,
    inter: str,
    factor: int,
    d1: dict[Point, int],
    i1: dict[Point, int],
    markers1: dict[int, Inter],
) -> None:
    """Item 6: the next deployment started reading each source SSP right after D_p and each
    intermediate SSP after its drain marker (and its last checkpoint)."""
    starts: dict[tuple[str, int, int], int] = {}
    for proc in second.processors.values():
        for point, start in starting_offsets(proc.log_text()).items():
            starts[point] = min(starts.get(point, start), start)
    wrong = []
    for (stream, p, kb), start in sorted(starts.items(), key=str):
        if stream == events:
            want = d1.get((p, kb), -1) + 1
            if start != want:
                wrong.append(f"{stream}[{p}/{kb}] at {start}, not {want} (D_p + 1)")
        elif stream == inter:
            marker = markers1[p].offset if p in markers1 else None
            want = i1.get((p, kb), -1) + 1
            if start != want or marker is None or start <= marker:
                wrong.append(f"{stream}[{p}/{kb}] at {start}: its checkpoint + 1 is {want}, its drain marker {marker}")
    buckets = range(factor) if factor > 1 else (-1,)
    named = {(stream, p, kb) for stream in (events, inter) for p in range(PARTITIONS) for kb in buckets}
    assert named <= set(starts), (
        f"item 6: the second run's logs name no start for {sorted(named - set(starts))} (found {sorted(starts)})"
    )
    assert not wrong, "item 6: the next deployment did not start right after the drain:\n" + "\n".join(wrong)


def check_every_record_in_exactly_one_pane(
    events: dict[int, list[Message]], factor: int, all_items: Counter[tuple[int, int]], drain_points: dict[Point, int]
) -> None:
    """Item 6: over both runs, every record up to the second run's drain points is in exactly one pane."""
    check_panes_hold_exactly_what_was_processed(
        processed_between(events, factor, {}, drain_points), all_items, drain_points
    )


def check_seq_is_offset(events: dict[int, list[Message]]) -> None:
    """The premise of every check: the feeder wrote each partition in order, seq == offset."""
    wrong = []
    for p, records in events.items():
        for m in records:
            body = json.loads(m.value())
            want = {"k": key_of(p, m.offset()), "src": p, "seq": m.offset()}
            if body != want or m.key() != want["k"].encode():
                wrong.append((p, m.offset(), m.key(), body))
    assert not wrong, f"test premise: events not at the offset their seq says, or keyed otherwise: {_few(wrong, 4)}"


def held_records_before_markers(inter: list[Inter], markers: dict[int, Inter], d: Deployment) -> int:
    """AT-A9's premise: the user records that arrived within 1 s before their partition's drain
    marker although they were produced at least HELD_MS earlier (held back by the linger)."""
    n = 0
    arrived = d.arrived
    for r in inter:
        marker = markers.get(r.partition)
        at = arrived.get((r.partition, r.offset))
        if r.item is None or marker is None or at is None or r.ts < d.watched_ms + WARM_UP_MS:
            continue
        marker_at = arrived.get((marker.partition, marker.offset))
        if marker_at is not None and marker_at - 1000 <= at <= marker_at and at - r.ts >= HELD_MS:
            n += 1
    return n


def check_the_linger_held_records(held: int) -> None:
    """AT-A9: with a 1 s linger, records were held back right up to the drain (the flush mattered)."""
    assert held > 0, (
        f"item 9: no intermediate record arrived within 1 s before a drain marker after being held "
        f"{HELD_MS} ms: the linger did not delay records, so this run does not test the flush"
    )


def named_drains_until(inter: list[Inter], aggregate: int, run_id: str, until_ms: int) -> set[str]:
    """The producer names of the run's drain messages written to the aggregate partition by ``until_ms``."""
    return {
        r.control.task_name
        for r in inter
        if r.partition == aggregate
        and isinstance(r.control, DrainMessage)
        and r.control.run_id == run_id
        and r.control.task_name is not None
        and r.ts <= until_ms
    }


def check_the_kill_came_mid_aggregation(inter: list[Inter], aggregate: int, d: Deployment, producers: int) -> None:
    """AT-A6's premise: at the SIGKILL the aggregation had 2 named messages, not all of them."""
    assert d.kill_ms is not None
    named = named_drains_until(inter, aggregate, d.run_id, d.kill_ms)
    assert 2 <= len(named) < producers, (
        f"item 8: at the kill the aggregate partition held {len(named)} named drain messages, "
        f"not between 2 and {producers - 1}: the kill did not come in the middle of the aggregation"
    )


def check_the_join_came_mid_aggregation(inter: list[Inter], aggregate: int, d: Deployment, producers: int) -> None:
    """The join scenario's premise: when the joiner ran its tasks the drain was under way and its
    aggregation incomplete (at least one named message, not all)."""
    assert d.join_ms is not None
    named = named_drains_until(inter, aggregate, d.run_id, d.join_ms)
    assert 1 <= len(named) < producers, (
        f"item 7: when the joiner ran its tasks the aggregate partition held {len(named)} named drain "
        f"messages, not between 1 and {producers - 1}: the join did not come in the middle of the drain"
    )


def check_the_joiner_drained_its_tasks(joiner: Processor, owners: dict[str, set[str]]) -> None:
    """Item 7: the processor that joined during the drain made the final commit of tasks it took
    over (its log): the scenario moved tasks, and their drain completed where they landed."""
    drained = set(re.findall(r"task '([^']+)' drained in \d+ ms; final checkpoint", joiner.log_text()))
    given = owners.get(joiner.pid or "", set())
    assert drained & given, (
        f"item 7: the joiner {joiner.pid} drained {sorted(drained)}, none of the tasks it was given "
        f"{sorted(given)}:\n{joiner.log_text()[-3000:]}"
    )


# -- The scenario -----------------------------------------------------------------------------------


@dataclass
class RunFacts:
    """What one run's checks derived, for the next run's."""

    drain_points: dict[Point, int]
    inter_points: dict[Point, int]
    markers: dict[int, Inter]
    items: Counter[tuple[int, int]]


def check_run(
    checks: Checks,
    label: str,
    job: DrainJob,
    d: Deployment,
    whole: Snapshot,
    marks: Marks,
    before: RunFacts | None,
) -> RunFacts:
    sc = job.scenario
    s = since(whole, marks)
    assert d.model is not None
    producers = {name for name, t in d.model.tasks.items() if any(ssp.stream == job.events for ssp in t.ssps)}
    assert len(producers) == PARTITIONS * sc.factor, f"test premise: producer tasks {sorted(producers)}"
    start_points = before.drain_points if before else {}
    drain_points = final_offsets(s.checkpoints, job.events, start_points)
    inter_points = final_offsets(s.checkpoints, job.intermediate, before.inter_points if before else {})
    expected = processed_between(s.events, sc.factor, start_points, drain_points)
    panes = panes_of(s.out)
    items: Counter[tuple[int, int]] = Counter(i for p in panes for i in p.items)
    pane_items: Counter[tuple[str, int, int]] = Counter((p.key, *i) for p in panes for i in p.items)
    keys = {key_of(src, seq) for src, seq in expected}
    markers = drain_markers(s.inter, job.aggregate, d.run_id, len(producers))

    checks(label, check_run_record_says_drained, job.view, d)
    checks(label, check_final_checkpoints_are_drain_checkpoints, s.checkpoints, set(d.model.tasks), d.run_id)
    checks(label, check_panes_hold_exactly_what_was_processed, expected, items, drain_points)
    checks(label, check_one_pane_per_key_after_the_request, panes, keys, d.request_ms)
    checks(label, check_window_state_deleted, s.changelog, {p.key for p in panes})
    checks(label, check_intermediate_records_all_in_panes, s.inter, pane_items)
    checks(label, check_nothing_after_the_drain_markers, s.inter, markers)
    checks(label, check_intermediate_checkpoints_past_the_markers, s.checkpoints, job.intermediate, markers)
    checks(label, check_named_drain_messages, s.inter, job.aggregate, d.run_id, producers, d.owners)
    checks(label, check_broadcast_copies, s.inter, job.aggregate, d.run_id, markers)
    checks(label, check_one_broadcast_copy_per_partition, s.inter, job.aggregate, d.run_id)
    checks(label, check_drain_bound, d)
    held = held_records_before_markers(s.inter, markers, d)
    if sc.linger_ms is not None:
        checks(label, check_the_linger_held_records, held)
    if d.kill_ms is not None:
        checks(label, check_the_kill_came_mid_aggregation, s.inter, job.aggregate, d, len(producers))
    if d.join_ms is not None:
        checks(label, check_the_join_came_mid_aggregation, s.inter, job.aggregate, d, len(producers))
        checks(label, check_the_joiner_drained_its_tasks, d.processors["p3"], d.owners)
    lags = [
        at - r.ts
        for r in s.inter
        if r.item is not None and r.ts >= d.watched_ms + WARM_UP_MS and (at := d.arrived.get((r.partition, r.offset)))
    ]
    print(
        f"{label}: run {d.run_id}: {sum(expected.values())} records processed, {len(panes)} panes, "
        f"drain {d.drain_s:.1f} s, {held} records held back {HELD_MS} ms arrived within 1 s before a marker "
        f"({sum(lag >= HELD_MS for lag in lags)} of {len(lags)} overall, max lag {max(lags, default=0)} ms), timings "
        f"{ {k: round(v, 1) for k, v in d.timings.items()} }"
    )
    return RunFacts(drain_points, inter_points, markers, items)


@pytest.mark.parametrize("sc", SCENARIOS)
def test_drain_of_a_two_stage_application(broker, zookeeper, unique: str, tmp_path: Path, sc: Scenario) -> None:
    started = time.monotonic()
    bootstrap = broker.bootstrap_servers
    name = f"drain-{unique}"
    events, out = f"events-{unique}", f"out-{unique}"
    create_topic(bootstrap, events, PARTITIONS)
    create_topic(bootstrap, out, PARTITIONS)
    config = tmp_path / "job.toml"
    config.write_text(job_toml(name, zookeeper.connect_string, events, out, sc))
    job = DrainJob(name, config, bootstrap, ZkView(zookeeper.connect_string, name), sc, tmp_path, events, out)
    checks = Checks()
    seq = dict.fromkeys(range(PARTITIONS), 0)
    try:
        first = deploy_and_drain(job, 0, seq, NO_MARKS, sc.kill_aggregator, sc.join)
        snap1 = take_snapshot(job)
        facts1 = check_run(checks, "run 1", job, first, snap1, NO_MARKS, None)

        second = deploy_and_drain(job, 1, seq, marks_of(snap1), False)
        assert second.run_id != first.run_id, f"item 6: the next deployment kept run id {first.run_id}"
        snap2 = take_snapshot(job)
        facts2 = check_run(checks, "run 2", job, second, snap2, marks_of(snap1), facts1)
        checks("both runs", check_seq_is_offset, snap2.events)
        checks(
            "both runs",
            check_next_run_starts_after_the_drain,
            second,
            job.events,
            job.intermediate,
            sc.factor,
            facts1.drain_points,
            facts1.inter_points,
            facts1.markers,
        )
        checks(
            "both runs",
            check_every_record_in_exactly_one_pane,
            snap2.events,
            sc.factor,
            facts1.items + facts2.items,
            facts2.drain_points,
        )
    finally:
        job.view.close()
    print(f"scenario {sc}: {time.monotonic() - started:.1f} s")
    checks.assert_all()
