"""SystemConsumers: the fan-in of every input system into one chooser, by lane.

It owns which lanes are read and from where (``add``, ``remove``), buffers what each poll fetched
for them (``_poll_all``), feeds the chooser one envelope per lane under Samza's flow control, and
puts the drain markers after what each lane buffered. Who polls, and when, is the poll
hand-off's (``samzamp.consume.poll_handoff``); whether a poll is made and which partitions pause is
back-pressure's (``samzamp.consume.backpressure``); the lag metrics read the high watermarks the
poller copies (``samzamp.consume.high_watermarks``).

Threading: every method is for the loop thread except ``buffered``, ``skipped`` and
``high_watermark`` (any thread, for metrics); ``_poll_all`` runs on whichever thread holds the poll
lock, and ``add`` and ``remove`` take that lock, so they never overlap a poll. A lane's buffer is a
deque the poller only appends to and the loop thread pops from the left (putting a control marker
it popped back with ``appendleft``): each atomic in CPython, and a marker is always the last thing
appended.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping

from samzamp.api.envelope import SystemStream, SystemStreamPartition
from samzamp.consume.backpressure import POLL, Backpressure, Decision
from samzamp.consume.chooser import MessageChooser
from samzamp.consume.high_watermarks import HighWatermarks
from samzamp.consume.lane import Lane, lane_ssp, partition_of
from samzamp.consume.packed import Buffered, PackedRun, messages_held, messages_in, pack, unpack
from samzamp.consume.partition_lanes import PartitionLanes, earlier, earliest
from samzamp.consume.poll_handoff import PollHandoff
from samzamp.metrics.registry import MetricsRegistry
from samzamp.systems.base import DRAIN, END_OF_STREAM, OLDEST, WATERMARK_MAX, RawMessage, StartOffset, SystemConsumer

__all__ = ["SystemConsumers"]

log = logging.getLogger(__name__)


def _held_packed(buf: deque[Buffered]) -> int:
    """How many messages a lane's buffer of packed runs holds (any thread)."""
    # tuple(): a copy in one C call, as the other thread may append or pop meanwhile.
    return messages_held(tuple(buf))


class _Held(Mapping[SystemStreamPartition, int]):
    """How many messages are buffered for each partition read (all its lanes'), sealed ones apart,
    as the counts of packed runs keep them: a live view, read by the poller under the poll lock,
    where the partitions read cannot change. A value only falls meanwhile (the loop thread takes)."""

    __slots__ = ("_readers", "_sealed")

    def __init__(
        self, readers: dict[SystemStreamPartition, PartitionLanes], sealed: set[SystemStreamPartition]
    ) -> None:
        self._readers = readers
        self._sealed = sealed

    def __getitem__(self, p: SystemStreamPartition) -> int:
        if p in self._sealed:
            raise KeyError(p)
        r = self._readers[p]
        return r.added - r.taken

    def __iter__(self) -> Iterator[SystemStreamPartition]:
        sealed = self._sealed
        return (p for p in self._readers if p not in sealed)

    def __len__(self) -> int:
        return sum(1 for _ in self)


def _by_system(ssps: Iterable[SystemStreamPartition]) -> dict[str, list[SystemStreamPartition]]:
    """``ssps`` grouped by system, in their order: what one consumer is told at once."""
    out: dict[str, list[SystemStreamPartition]] = {}
    for ssp in ssps:
        out.setdefault(ssp.system, []).append(ssp)
    return out


class SystemConsumers:
    """Reads the lanes of the tasks here and hands the chooser each lane's next envelope.

    Lanes (``samzamp.consume.lane``): what is buffered and chosen is keyed by lane, the way one task
    reads one SSP. A partition is fetched once, whoever reads it; its ``PartitionLanes``
    (``samzamp.consume.partition_lanes``) hands its messages to its lanes and knows where to read it.

    Flow control (Samza's): the chooser holds at most one envelope per lane; the lane's next one is
    handed over only when the loop calls ``try_update(lane)``, i.e. when its task took the last.

    Control markers (``samzamp.systems.base``) travel in the buffers as raw messages with a negative
    offset, in order with the data: ``END_OF_STREAM``, and on a drain ``WATERMARK_MAX`` then ``DRAIN``.

    Packed runs (``pack_runs``, ``samzamp.consume.packed``): when every task runs in a worker
    process, the poller packs each lane's messages into runs already encoded for the worker, and a
    buffer, the chooser and a task's queue hold those runs; the fetch threshold still counts messages.
    Those are counted as they come and go rather than at each poll, which would cost every lane's
    buffer at every poll (thousands of lanes, a few messages each per poll): each partition's reader
    counts what the poller appended to its lanes (``added``) and what the loop thread took from them
    (``taken``, here, the only place that takes from a buffer of packed runs), each count written
    by one thread. Buffers of single messages are counted by their length, as the loop thread's tasks
    take from them directly (``buffer``).
    """

    # The poll hand-off's own method, bound here rather than wrapped: the loop calls it whenever
    # the chooser runs empty, and a wrapper would cost a call each time.
    refill: Callable[[], None]

    def __init__(
        self,
        consumers: dict[str, SystemConsumer],
        ssps: list[SystemStreamPartition],
        chooser: MessageChooser,
        metrics: MetricsRegistry,
        fetch_threshold: int,
        poll_interval_ms: int,
        clock: Callable[[], float] = time.monotonic,
        elasticity_factor: int = 1,
        pack_runs: int = 0,
        intermediate: frozenset[SystemStream] = frozenset(),
    ) -> None:
        """``ssps``: partitions their consumers were registered for already, each read whole by one task.
        ``elasticity_factor``: the key buckets a partition read by bucket is split into.
        ``pack_runs``: buffer messages as packed runs of up to this many (``samzamp.consume.packed``;
        every task runs in a worker process), 0 to buffer them one by one. ``intermediate``: an
        application's intermediate streams, whose control records reach every key bucket."""
        self._intermediate = intermediate
        self._consumers = consumers
        self._pack = pack_runs
        # How many messages one lane's buffer holds (any thread).
        self._count: Callable[[deque[Buffered]], int] = _held_packed if pack_runs else len
        # With packed runs: the messages appended to every buffer of a partition read (the poller's,
        # under the poll lock), and those taken from them (the loop thread's); see the class docstring.
        self._added = 0
        self._taken = 0
        self._clock = clock
        self._factor = elasticity_factor
        self._chooser = chooser
        self._chose = metrics.counter("SystemConsumersMetrics", "chose-object")
        self._polls = metrics.counter("SystemConsumersMetrics", "polls")
        # Messages of key buckets no task here reads, and the time spent computing key buckets.
        self._unowned = metrics.counter("SystemConsumersMetrics", "skipped-envelopes")
        self._keyhash = metrics.timer("SystemConsumersMetrics", "keyhash-ns")
        # Back-pressure at work: polls not made because the buffers were full, and partitions paused
        # because one ran dry meanwhile (each pause costs a refetch of what the consumer prefetched).
        self._held_polls = metrics.counter("SystemConsumersMetrics", "polls-held")
        self._pauses = metrics.counter("SystemConsumersMetrics", "partition-pauses")
        # Replaced, never resized, when lanes come or go: a reader on another thread (a metrics
        # gauge) iterating it sees the old or the new one. An entry is a message, or a packed run
        # of them (``pack_runs``).
        self._buffers: dict[Lane, deque[Buffered]] = {s: deque() for s in ssps}
        self._readers: dict[SystemStreamPartition, PartitionLanes] = {}
        self._reader_of: dict[Lane, PartitionLanes] = {}
        # The partitions read by key bucket, as a consumer that packs runs itself splits them
        # (``samzamp.systems.base.PackedPolling``): (factor, control_to_all). A bounded one is
        # left out: its messages come whole, to be cut at its end one by one.
        self._split: dict[SystemStreamPartition, tuple[int, bool]] = {}
        for ssp in ssps:
            reader = self._readers[ssp] = self._reader(ssp, OLDEST, 1)
            reader.join(ssp, OLDEST)
            self._reader_of[ssp] = reader
        # Lanes whose next envelope the chooser is waiting for (its previous one was taken).
        # Changed in place only: the poll hand-off reads this very set.
        self._needed: set[Lane] = set(ssps)
        self._poll_s = poll_interval_ms / 1000
        self._pressure = Backpressure(fetch_threshold, self._poll_s, clock, len(self._readers))
        self._handoff = PollHandoff(self._poll_all, self._on_fetched, self._needed, self._poll_s)
        self.refill = self._handoff.refill
        self._on_data: Callable[[], None] = lambda: None
        # The lanes whose bounded input ended (a drain leaves them alone).
        self._ended: set[Lane] = set()
        # Source partitions a drain stopped fetching while intermediate ones are still read
        # (``drain``): no longer registered with their consumer, their buffers end with markers.
        self._sealed: set[SystemStreamPartition] = set()
        # Source lanes added after the drain began: only their drain markers, never fetched.
        self._unread: set[Lane] = set()
        self._draining = False
        self._high_watermarks = HighWatermarks(consumers, clock)
        self._held = _Held(self._readers, self._sealed)
        metrics.gauge("SystemConsumersMetrics", "unprocessed-messages", fn=self.buffered)
        metrics.gauge("SystemConsumersMetrics", "ssps-needed-by-chooser", fn=lambda: len(self._needed))
        metrics.gauge("SystemConsumersMetrics", "paused-partitions", fn=lambda: len(self._pressure.paused))

    @property
    def fetching(self) -> bool:
        """False once fetching stopped (``stop_fetching``, or a ``drain`` of a container that reads
        no intermediate stream): no poll is made after that."""
        return self._handoff.fetching

    @property
    def draining(self) -> bool:
        """A drain began: no source partition is fetched any more (intermediate ones may be)."""
        return self._draining or not self.fetching

    def buffered(self) -> int:
        """How many messages are buffered here (the chooser's included)."""
        return sum(map(self._count, self._buffers.values())) + len(self._chooser)

    def skipped(self, lane: Lane) -> int:
        """How many messages ``lane`` skipped because they were at or below its start offset."""
        reader = self._reader_of.get(lane)
        return reader.skipped.get(lane, 0) if reader is not None else 0

    # -- which lanes are read (loop thread) ---------------------------------------------------
    def _reader(self, partition: SystemStreamPartition, start: StartOffset, factor: int) -> PartitionLanes:
        return PartitionLanes(
            partition,
            start,
            factor,
            self._pack,
            self._keyhash,
            self._unowned,
            control_to_all=partition.system_stream in self._intermediate,
        )

    def add(
        self, starts: dict[Lane, StartOffset], ends: Mapping[SystemStreamPartition, int] | None = None
    ) -> set[Lane]:
        """Start reading each lane of ``starts`` from its start offset (OLDEST or an exact offset, such
        as the task's checkpointed one; the caller resolves UPCOMING), the other lanes untouched.
        Their envelopes reach the chooser as they arrive. A partition is registered with its consumer
        at the earliest start of its lanes; one read already is rewound if a new lane starts before
        its position (``samzamp.consume.partition_lanes``).

        Loop thread, before or after ``start``. No poll runs while the lanes are registered: this
        takes the poll lock, so it may block while the fetch thread finishes a poll (at most one poll
        timeout, about task.poll.interval.ms).

        After a drain began, a source lane is drained where it starts: it gets its drain markers at
        once and is never fetched; an intermediate lane is read as any (a task taken over during a
        drain drains at its checkpoint). Returns the lanes that got drain markers.

        ValueError naming a lane read already, or one whose system has no consumer here (the caller
        hands in a consumer for every input system at construction). RuntimeError for an
        intermediate lane once fetching stopped. If a consumer refuses a partition, the lanes this
        call added are removed again before the error is raised.
        """
        intermediate = self._intermediate
        sealed = {s for s in starts if lane_ssp(s).system_stream not in intermediate} if self.draining else set[Lane]()
        if not self.fetching and len(sealed) < len(starts):
            raise RuntimeError(
                f"cannot add {', '.join(sorted(str(lane_ssp(s)) for s in starts if s not in sealed))}: fetching "
                "stopped (a drain began)"
            )
        present = sorted(str(lane_ssp(s)) for s in starts if s in self._buffers)
        if present:
            raise ValueError(f"{', '.join(present)}: read already; remove it first to read it from elsewhere")
        orphans = sorted(str(lane_ssp(s)) for s in starts if lane_ssp(s).system not in self._consumers)
        if orphans:
            raise ValueError(
                f"{', '.join(orphans)}: system has no consumer here; give SystemConsumers a consumer for every input system"
            )
        by_partition: dict[SystemStreamPartition, list[Lane]] = {}
        for lane in starts:
            if lane not in sealed:
                by_partition.setdefault(partition_of(lane), []).append(lane)
        with self._handoff.exclusive():
            added: list[Lane] = []
            try:
                for partition, lanes in by_partition.items():
                    self._join(partition, {lane: starts[lane] for lane in lanes}, (ends or {}).get(partition))
                    added.extend(lanes)
            except BaseException:
                self._leave(added)
                raise
            buffers = {s: deque[Buffered]() for s in added}
            # A bounded partition read from its end on ends at once: no fetch will bring its marker.
            ended = [s for s in added if self._reader_of[s].at_end()]
            for lane in ended:
                reader = self._reader_of[lane]
                reader.ended = True
                buffers[lane].append((END_OF_STREAM, None, None, 0))
                reader.added += 1
                self._added += 1
            self._ended.update(ended)
            for lane in sealed:
                buffers[lane] = deque([(WATERMARK_MAX, None, None, 0), (DRAIN, None, None, 0)])
            self._unread.update(sealed)
            self._buffers = {**self._buffers, **buffers}
            self._needed.update(added)
            self._needed.update(sealed)
            self._pressure.resize(len(self._readers))
            self._high_watermarks.expire()
        if ended or sealed:
            self._on_fetched([*ended, *sealed])
        return sealed

    def _join(self, partition: SystemStreamPartition, starts: dict[Lane, StartOffset], end: int | None) -> None:
        """Register ``starts``' lanes with their partition's reader (poll lock held); ``end``: a
        bounded partition's end offset (for a partition not read yet)."""
        first = earliest(starts.values())
        reader = self._readers.get(partition)
        if reader is None:
            bucketed = any(lane_ssp(lane).key_bucket != -1 for lane in starts)
            reader = self._readers[partition] = self._reader(partition, first, self._factor if bucketed else 1)
            reader.end = end
            try:
                self._consumers[partition.system].register(partition, first)
            except BaseException:
                del self._readers[partition]
                raise
            if reader.factor > 1 and end is None:
                self._split[partition] = (reader.factor, reader.control_to_all)
        elif earlier(first, reader.position):
            # The partition is read already from further on: read it again from ``first``.
            consumer = self._consumers[partition.system]
            consumer.unregister([partition])
            consumer.register(partition, first)
            reader.rewind(first)
            self._pressure.forget((partition,))  # registered anew: fetching, not paused
        for lane, start in starts.items():
            reader.join(lane, start)
            self._reader_of[lane] = reader

    def remove(self, lanes: Iterable[Lane]) -> None:
        """Stop reading ``lanes`` and forget them, the other lanes untouched; a partition no lane reads
        any more is unregistered. What is buffered for them and the envelope the chooser holds for
        one are dropped: nothing of a removed lane is chosen after this returns, and a later
        ``try_update`` of one is ignored. Dropped messages are not lost: the task's checkpoint
        decides where the lane's next reader starts, which reads again whatever was fetched here and
        not processed.

        Loop thread; takes the poll lock like ``add`` (blocks at most about one poll timeout). After
        a drain began, removing a lane drops its drain markers too: do not wait for its DRAIN.
        ValueError naming any lane not read here.
        """
        gone = dict.fromkeys(lanes)  # ordered and without repeats
        unknown = sorted(str(lane_ssp(s)) for s in gone if s not in self._buffers)
        if unknown:
            raise ValueError(f"{', '.join(unknown)}: not read here, so it cannot be removed")
        with self._handoff.exclusive():
            if self._pack:  # what their buffers hold leaves the counts (no poll appends meanwhile)
                for lane in gone:
                    reader = self._reader_of.get(lane)
                    if reader is not None:
                        n = _held_packed(self._buffers[lane])
                        reader.taken += n
                        self._taken += n
            self._leave(list(gone))
            self._buffers = {s: b for s, b in self._buffers.items() if s not in gone}
            self._needed.difference_update(gone)
            self._ended.difference_update(gone)
            self._unread.difference_update(gone)
            for lane in gone:
                self._chooser.remove(lane)
            self._pressure.resize(len(self._readers))

    def _leave(self, lanes: list[Lane]) -> None:
        """Take ``lanes`` off their readers; unregister the partitions left with none (poll lock held)."""
        emptied: dict[str, list[SystemStreamPartition]] = {}
        for lane in lanes:
            reader = self._reader_of.pop(lane, None)
            if reader is None:
                continue
            reader.leave(lane)
            if not reader.lanes:
                del self._readers[reader.ssp]
                self._split.pop(reader.ssp, None)
                if reader.ssp in self._sealed:  # unregistered when the drain sealed it
                    self._sealed.discard(reader.ssp)
                    continue
                emptied.setdefault(reader.ssp.system, []).append(reader.ssp)
        for system, partitions in emptied.items():
            self._consumers[system].unregister(partitions)
            self._pressure.forget(partitions)
            self._high_watermarks.forget(partitions)

    def start(
        self, loop: asyncio.AbstractEventLoop, on_data: Callable[[], None], on_error: Callable[[BaseException], None]
    ) -> None:
        """Start the consumers and the fetch thread. ``on_data`` is called (loop thread) when the
        chooser got an envelope; ``on_error`` (loop thread) when a poll raised."""
        self._on_data = on_data
        for c in self._consumers.values():
            c.start()
        self._handoff.start(loop, on_error, self._poll_s / max(1, len(self._consumers)))

    def stop_fetching(self) -> None:
        """Stop polling; what is already buffered stays and can still be chosen."""
        self._handoff.stop()

    def idle(self) -> None:
        """Loop thread: nothing to do; let the fetch thread wait for data with a blocking poll."""
        self._handoff.idle()

    def drain(self) -> tuple[dict[SystemStreamPartition, int | None], set[Lane]]:
        """Stop fetching the source partitions and append ``WATERMARK_MAX`` and ``DRAIN`` after what
        each of their lanes already buffered (Samza's SystemConsumers.drain), so everything fetched
        is still processed and then each lane reports drained. Lanes whose bounded input ended get
        no markers. Intermediate streams (an application's) are read on: their drain comes through
        the stream itself, as drain messages from the tasks that write to it; in a job with none,
        fetching stops altogether.

        Loop thread. Returns the drain point (the newest offset fetched per source partition, None
        when nothing was fetched in this run) and the lanes that got markers.
        """
        intermediate = self._intermediate
        sources = [
            lane
            for lane in self._buffers
            if lane_ssp(lane).system_stream not in intermediate and lane not in self._unread
        ]
        if not intermediate:  # the job has none: nothing is read after the markers
            self.stop_fetching()  # after this no thread appends to the buffers
            marked = self._mark(sources)
        else:
            with self._handoff.exclusive():  # no poll runs meanwhile; none appends to a source lane after
                self._draining = True
                marked = self._mark(sources)
                sealed = sorted({self._reader_of[lane].ssp for lane in marked})
                for system, partitions in _by_system(sealed).items():
                    self._consumers[system].unregister(partitions)
                self._pressure.forget(sealed)
                self._high_watermarks.forget(sealed)
                self._sealed.update(sealed)
        # The chooser may be waiting for any lane: a marker, or what the fetch thread's last poll
        # buffered (an ended lane's last data and end-of-stream marker included).
        self._on_fetched(list(self._buffers))
        partitions = sorted({self._reader_of[lane].ssp for lane in marked})
        return {p: self._readers[p].fetched for p in partitions}, set(marked)

    def _mark(self, lanes: list[Lane]) -> list[Lane]:
        """Append the drain markers to each of ``lanes`` whose input has not ended; those lanes."""
        marked: list[Lane] = []
        for lane in lanes:
            if lane in self._ended:
                continue
            buf = self._buffers[lane]
            buf.append((WATERMARK_MAX, None, None, 0))
            buf.append((DRAIN, None, None, 0))
            reader = self._reader_of.get(lane)
            if reader is not None:
                reader.added += 2
                self._added += 2
            marked.append(lane)
        return marked

    def stop(self) -> None:
        self.stop_fetching()
        for c in self._consumers.values():
            c.stop()

    # -- polling ------------------------------------------------------------------------------
    def _poll_all(self, timeout_s: float) -> list[Lane] | None:
        """Poll every consumer once (the caller holds the poll lock); returns the lanes that got data,
        or None when the buffers are full and no poll was made."""
        if self._clock() >= self._high_watermarks.due:
            self._high_watermarks.refresh(p for p in self._readers if p not in self._sealed)
        if self._pack:
            decision = self._pressure.decide(self._held, self._starving, self._held_total())
        else:
            decision = self._pressure.decide(self._held_per_partition(), self._starving)
        if decision is not POLL:
            self._pause_and_resume(decision)
            if not decision.poll:
                self._held_polls.inc()
                return None
        got: list[Lane] = []
        buffers = self._buffers
        readers = self._readers
        for c in self._consumers.values():
            poll_packed = getattr(c, "poll_packed", None) if self._pack else None
            if poll_packed is None:
                fetched = c.poll(timeout_s)
            else:  # packed by the consumer: what is left is what a bounded partition cuts one by one
                fetched = self._take_runs(poll_packed(timeout_s, self._pack, self._split, PackedRun), got)
            for ssp, polled in fetched.items():
                reader = readers[ssp]
                msgs = reader.bound(polled) if reader.end is not None else polled
                if not msgs:
                    continue
                added = reader.added
                if reader.plain:
                    buffers[ssp].extend(pack(msgs, self._pack) if self._pack else msgs)
                    reader.added += len(msgs)
                    got.append(ssp)
                else:
                    reader.fan_out(msgs, buffers, got)
                self._added += reader.added - added
                last = msgs[-1][0]
                if last >= 0:
                    reader.fetched = last
                    reader.position = last + 1
                elif last == END_OF_STREAM:
                    self._ended.update(reader.lanes)
                    if len(msgs) > 1:
                        reader.fetched = msgs[-2][0]
        self._polls.count += 1
        return got

    def _take_runs(
        self, polled: dict[SystemStreamPartition, tuple[int, list[list[PackedRun]]]], got: list[Lane]
    ) -> dict[SystemStreamPartition, list[RawMessage]]:
        """Poller: buffer what a consumer polled packed (``samzamp.systems.base.PackedPolling``) for
        each partition's lanes, per run, and add the lanes that got any to ``got``. Returns the
        messages of the partitions that take them one by one (bounded ones), unpacked."""
        readers = self._readers
        rest: dict[SystemStreamPartition, list[RawMessage]] = {}
        for ssp, (last, runs) in polled.items():
            reader = readers[ssp]
            added = reader.added
            if reader.take_runs(runs, self._buffers, got):
                self._added += reader.added - added
                reader.fetched = last
                reader.position = last + 1
            else:  # never split (see ``_split``): one list
                rest[ssp] = [m for run in runs[0] for m in unpack(run)]
        return rest

    def _held_per_partition(self) -> dict[SystemStreamPartition, int]:
        """Poller: how many messages are buffered for each partition read (all its lanes'), sealed
        ones apart, counted in the buffers: buffers of single messages, by their length."""
        count = self._count
        buffers = self._buffers
        sealed = self._sealed
        return {
            p: count(buffers[p]) if r.plain else sum(count(buffers[lane]) for lane in r.lanes)
            for p, r in self._readers.items()
            if p not in sealed
        }

    def _held_total(self) -> int:
        """Poller, with packed runs: how many messages the buffers of the partitions read hold, sealed
        ones apart (what ``_held`` sums to)."""
        total = self._added - self._taken
        sealed = self._sealed
        if sealed:  # a drain of a job with intermediate streams: its source partitions
            total -= sum(r.added - r.taken for p, r in self._readers.items() if p in sealed)
        return total

    def _took(self, lane: Lane, entry: Buffered) -> None:
        """Loop thread, with packed runs: ``entry`` was taken from ``lane``'s buffer."""
        reader = self._reader_of.get(lane)
        if reader is not None:  # else a lane never fetched (sealed when it came): not counted
            n = len(entry.offsets) if type(entry) is PackedRun else 1
            reader.taken += n
            self._taken += n

    def _starving(self) -> Iterator[SystemStreamPartition]:
        """Poller: the partitions of the lanes the chooser waits for with nothing buffered, their
        input not ended (one per such lane)."""
        buffers = self._buffers
        ended = self._ended
        unread = self._unread
        reader_of = self._reader_of
        # tuple(): a copy in one C call, as the loop thread may add to or discard from the set
        # while this runs on the fetch thread.
        sealed = self._sealed
        return (
            p
            for p in (
                reader_of[s].ssp for s in tuple(self._needed) if not buffers[s] and s not in ended and s not in unread
            )
            if p not in sealed
        )

    def _pause_and_resume(self, decision: Decision) -> None:
        """Poller: tell the consumers what back-pressure decided, resumes first."""
        for system, ssps in _by_system(decision.resume).items():
            self._consumers[system].resume(ssps)
        for system, ssps in _by_system(decision.pause).items():
            self._consumers[system].pause(ssps)
        if decision.pause:
            self._pauses.inc(len(decision.pause))

    # -- loop thread -------------------------------------------------------------------------
    def _on_fetched(self, lanes: list[Lane]) -> None:
        """Loop thread: hand the chooser the next envelope of each of ``lanes`` it waits for."""
        fed = False
        needed = self._needed
        for lane in lanes:
            if lane in needed:
                buf = self._buffers[lane]
                if buf:
                    needed.discard(lane)
                    entry = buf.popleft()
                    if self._pack:
                        self._took(lane, entry)
                    self._chooser.update(lane, entry)
                    fed = True
        if fed:
            self._on_data()

    def choose(self) -> tuple[Lane, Buffered] | None:
        chosen = self._chooser.choose()
        if chosen is not None:
            self._chose.count += messages_in(chosen[1]) if self._pack else 1
        return chosen

    def buffer(self, lane: Lane) -> deque[Buffered]:
        """The fetch buffer of ``lane``: the loop thread may ``popleft`` from it (a run of messages
        handed to a task at once) and put a control marker back with ``appendleft``; the fetch
        thread only appends. Not with packed runs: those are taken through ``try_update`` only (a
        worker's task takes a packed run from the chooser), which keeps the counts."""
        return self._buffers[lane]

    def caught_up_to(self, lane: Lane) -> int | None:
        """The newest offset fetched of ``lane``'s partition, if every message of ``lane`` fetched so
        far was taken from here (nothing buffered, the chooser holds none); None otherwise, and while
        nothing was fetched since the partition was (re)registered.

        Loop thread. The fetch thread buffers a poll's messages before it moves this offset, and only
        the loop takes them out, so once the lane is seen empty after the offset was read, its task has
        been handed everything of the lane up to that offset. For a key-bucket lane that is a position
        past its own last message: a bucket that gets few messages, or none, keeps up with its
        siblings this way (``RunLoop`` moves its task's low watermark there).
        """
        reader = self._reader_of.get(lane)
        if reader is None:
            return None
        upto = reader.fetched  # first: see the docstring
        if upto is None or lane not in self._needed or self._buffers[lane]:
            return None
        return upto

    def try_update(self, lane: Lane) -> None:
        """The envelope last chosen from ``lane`` was taken: hand the chooser the next one. Nothing
        for a lane removed since (its task finishing the last envelope it took)."""
        buf = self._buffers.get(lane)
        if buf is None:
            return
        if buf:
            entry = buf.popleft()
            if self._pack:
                self._took(lane, entry)
            self._chooser.update(lane, entry)
        else:
            self._needed.add(lane)

    def high_watermark(self, ssp: SystemStreamPartition) -> int | None:
        """The high watermark of ``ssp``'s partition as the poller last copied it (at most about a
        second old while fetching); None if unknown. Any thread: it never calls into the consumer."""
        return self._high_watermarks.get(ssp)

    # Back-pressure's state, as tests that pin it read it here.
    @property
    def _high(self) -> int:
        return self._pressure.share

    @property
    def _paused(self) -> set[SystemStreamPartition]:
        return self._pressure.paused
