"""One partition, fetched once, and the lanes it feeds: which messages each lane takes, and from where.

A partition read whole by one task (the usual case) has one lane, the partition itself (``plain``),
and ``SystemConsumers`` puts its messages straight into that lane's buffer. Otherwise ``fan_out``
hands them out (``take_runs`` when the consumer packed them already, by key bucket): with key buckets (job.elasticity.factor) each message to the lane of its bucket,
computed from the serialized key before anything is decoded (``split_by_key_bucket``); on a
broadcast partition every message to every lane; control markers to every lane. The partition is
read from the lowest position any of its lanes needs, and each lane skips what is at or below its
own start (a virtual task whose checkpoint is ahead of its siblings'). A lane that joins a partition
read already from further on rewinds it (``rewind``), and the other lanes skip what they had.
A bounded partition (``end``) is read up to its end offset, and then ends (``bound``).

Threading: ``join``, ``leave`` and ``rewind`` are called by the loop thread holding the poll lock
(``samzamp.consume.poll_handoff``), ``fan_out`` and the moves of ``position`` and ``fetched`` by the
thread that polls, holding it too: one thread at a time. ``fetched`` and ``skipped`` are also read
without the lock (the loop thread, a metrics gauge): each is one value or one dict entry, read whole.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterable

from samzamp.api.envelope import SystemStreamPartition
from samzamp.consume.key_bucket import split_by_key_bucket
from samzamp.consume.lane import Lane, lane_ssp
from samzamp.consume.packed import Buffered, PackedRun, pack, unpack
from samzamp.metrics.registry import Counter, Timer
from samzamp.systems.base import END_OF_STREAM, OLDEST, RawMessage, StartOffset

__all__ = ["PartitionLanes", "earliest", "earlier"]


def earlier(a: StartOffset, b: StartOffset) -> bool:
    """Whether start ``a`` is before start ``b`` (OLDEST is before every offset)."""
    if a == OLDEST:
        return b != OLDEST
    return b != OLDEST and int(a) < int(b)


def earliest(starts: Iterable[StartOffset]) -> StartOffset:
    """The first of ``starts`` (OLDEST if any is)."""
    return min(starts, key=lambda s: (s != OLDEST, s if isinstance(s, int) else 0))


class PartitionLanes:
    """One registered partition and the lanes it feeds."""

    __slots__ = (
        "_keyhash",
        "_pack",
        "_unowned",
        "added",
        "buckets",
        "control_to_all",
        "end",
        "ended",
        "factor",
        "fetched",
        "lanes",
        "plain",
        "position",
        "skip",
        "skipped",
        "ssp",
        "taken",
    )

    def __init__(
        self,
        ssp: SystemStreamPartition,
        start: StartOffset,
        factor: int,
        pack_runs: int,
        keyhash: Timer,
        unowned: Counter,
        control_to_all: bool = False,
    ) -> None:
        """``factor``: key buckets, 1 when every lane reads every message. ``pack_runs``: as
        ``SystemConsumers``'. ``keyhash`` times the key-bucket split; ``unowned`` counts the data
        messages of buckets that no lane here reads. ``control_to_all``: the partition is an
        application's intermediate stream, whose control records go to every key bucket."""
        self.control_to_all = control_to_all
        self.ssp = ssp
        self.lanes: list[Lane] = []
        # Per lane: its key bucket (-1: every message), and the offset up to which it skips.
        self.buckets: dict[Lane, int] = {}
        self.skip: dict[Lane, int] = {}
        # Per lane: how many messages it skipped because they were at or below its start.
        self.skipped: dict[Lane, int] = {}
        self.factor = factor
        self.plain = False  # one lane, the partition itself: messages go straight to its buffer
        self.position: StartOffset = start  # the next offset fetched (what a new lane compares with)
        # The newest offset fetched (what a drain must still process); None while nothing was
        # fetched since the partition was (re)registered.
        self.fetched: int | None = None
        # A bounded partition's end: the first offset it does not read (None: unbounded); ``ended``
        # once its end-of-stream marker went out: nothing more of it is taken.
        self.end: int | None = None
        self.ended = False
        # Messages (a control marker counts as one) appended to the lanes' buffers, by the thread
        # that polls (``fan_out``, or ``SystemConsumers``), and taken from them, by the loop thread
        # (``SystemConsumers``): what is buffered for the partition is the difference.
        self.added = 0
        self.taken = 0
        self._pack = pack_runs
        self._keyhash = keyhash
        self._unowned = unowned

    def join(self, lane: Lane, start: StartOffset) -> None:
        """``lane`` reads this partition from ``start`` on; ValueError if it reads it by key bucket
        and the lanes here read it whole, or the other way round."""
        ssp = lane_ssp(lane)
        if self.lanes and (ssp.key_bucket == -1) != (self.factor == 1):
            raise ValueError(f"{ssp}: {self.ssp} is read by key bucket and as a whole at once")
        self.lanes.append(lane)
        self.buckets[lane] = ssp.key_bucket
        self.skip[lane] = start - 1 if isinstance(start, int) else -1
        self.plain = len(self.lanes) == 1 and lane == self.ssp

    def leave(self, lane: Lane) -> None:
        self.lanes.remove(lane)
        del self.buckets[lane]
        del self.skip[lane]
        self.skipped.pop(lane, None)
        self.plain = len(self.lanes) == 1 and self.lanes[0] == self.ssp

    def at_end(self) -> bool:
        """A bounded partition whose lanes all start at or past its end: it ends before any fetch."""
        end = self.end
        if end is None or self.ended:
            return False
        return end == 0 if self.position == OLDEST else int(self.position) >= end

    def bound(self, msgs: list[RawMessage]) -> list[RawMessage]:
        """A poll's messages of a bounded partition: those before its end, then its end-of-stream
        marker once the end was reached (nothing after it)."""
        end = self.end
        if end is None:
            return msgs
        if self.ended:
            return []
        kept = [m for m in msgs if m[0] < end]  # its own end-of-stream marker, if any, included
        newest = max((m[0] for m in msgs), default=-1)
        if newest >= end - 1 or (kept and kept[-1][0] == END_OF_STREAM):
            if not kept or kept[-1][0] != END_OF_STREAM:
                kept.append((END_OF_STREAM, None, None, 0))
            self.ended = True
        return kept

    def rewind(self, start: StartOffset) -> None:
        """The partition is read again from ``start``, before ``position`` (its consumer registered it
        anew): the lanes it has skip what they had."""
        had = self.fetched
        if had is not None:
            for lane in self.lanes:
                self.skip[lane] = max(self.skip[lane], had)
        self.position = start
        self.fetched = None

    def fan_out(self, msgs: list[RawMessage], buffers: dict[Lane, deque[Buffered]], got: list[Lane]) -> None:
        """Append a poll's messages of this partition to its lanes' ``buffers``: each lane its key
        bucket's (or all), past its start; add each lane that got any to ``got``, and what each got
        to ``added``."""
        parts: list[list[RawMessage]] = []
        if self.factor > 1:
            started = time.perf_counter_ns()
            parts = split_by_key_bucket(msgs, self.factor, self.control_to_all)
            self._keyhash.update(time.perf_counter_ns() - started)
            if len(self.lanes) < self.factor:  # buckets that no task here reads
                owned = set(self.buckets.values())
                self._unowned.count += sum(
                    1 for b, part in enumerate(parts) if b not in owned for m in part if m[0] >= 0
                )
        size = self._pack
        # ``msgs`` packed once for every lane that takes all of it (a broadcast partition's); a lane's
        # own part (its key bucket's, or what is past its start) packed for it alone. Not by id() of
        # the list: a part dropped earlier in this loop leaves its id to the next one built.
        whole: list[Buffered] | None = None
        for lane in self.lanes:
            bucket = self.buckets[lane]
            mine = msgs if bucket == -1 else parts[bucket]
            skip = self.skip[lane]
            if skip >= 0 and mine:
                kept = [m for m in mine if m[0] < 0 or m[0] > skip]
                self.skipped[lane] = self.skipped.get(lane, 0) + len(mine) - len(kept)
                if mine[-1][0] > skip:
                    self.skip[lane] = -1  # past its start: nothing more to skip
                mine = kept
            if mine:
                self.added += len(mine)  # as many messages as packed runs and markers hold
                if size:
                    if mine is not msgs:
                        buffers[lane].extend(pack(mine, size))
                    else:
                        if whole is None:
                            whole = pack(msgs, size)
                        buffers[lane].extend(whole)
                else:
                    buffers[lane].extend(mine)
                got.append(lane)

    def take_runs(self, runs: list[list[PackedRun]], buffers: dict[Lane, deque[Buffered]], got: list[Lane]) -> bool:
        """``fan_out`` for a poll's messages of this partition that its consumer packed already: one
        list of runs, or with key buckets one per bucket (``samzamp.systems.base.PackedPolling``).
        Appends them to the lanes' ``buffers``, each lane its own (past its start), and adds each
        lane that got any to ``got``, and what each got to ``added``. False, and nothing taken, for a bounded partition, which cuts
        its messages at its end one by one (``bound``), or runs not split as this partition is."""
        if self.end is not None or len(runs) != self.factor:
            return False
        if self.plain:
            if runs[0]:
                buffers[self.ssp].extend(runs[0])
                self.added += _in_runs(runs[0])
                got.append(self.ssp)
            return True
        if len(self.lanes) < self.factor:  # buckets that no task here reads
            owned = set(self.buckets.values())
            self._unowned.count += sum(
                len(run.offsets) for b, part in enumerate(runs) if b not in owned for run in part
            )
        for lane in self.lanes:
            bucket = self.buckets[lane]
            mine = runs[0] if bucket == -1 else runs[bucket]
            if mine and self.skip[lane] >= 0:
                mine = self._past_skip(lane, mine)
            if mine:
                buffers[lane].extend(mine)
                self.added += _in_runs(mine)
                got.append(lane)
        return True

    def _past_skip(self, lane: Lane, runs: list[PackedRun]) -> list[PackedRun]:
        """The part of ``runs`` past ``lane``'s start (``skip``), counted in ``skipped``; a run that
        straddles it is unpacked and packed again."""
        skip = self.skip[lane]
        kept: list[PackedRun] = []
        dropped = 0
        for run in runs:
            offsets = run.offsets
            if offsets[0] > skip:
                kept.append(run)
            elif offsets[-1] <= skip:
                dropped += len(offsets)
            else:
                msgs = [m for m in unpack(run) if m[0] > skip]
                dropped += len(offsets) - len(msgs)
                kept.extend(r for r in pack(msgs, self._pack) if type(r) is PackedRun)
        self.skipped[lane] = self.skipped.get(lane, 0) + dropped
        if runs[-1].offsets[-1] > skip:
            self.skip[lane] = -1  # past its start: nothing more to skip
        return kept


def _in_runs(runs: list[PackedRun]) -> int:
    """How many messages ``runs`` hold."""
    return sum(len(run.offsets) for run in runs)
