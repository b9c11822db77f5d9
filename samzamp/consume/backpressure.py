"""Back-pressure: before each poll, whether to poll at all, and which partitions to pause or resume.

The bound is task.fetch.threshold messages buffered: no poll while the buffers hold that many and
every lane the chooser waits for has something buffered; the consumer's own bounded prefetch then
stops fetching too. A lane that ran dry lets the polls go on, up to twice the threshold: what it
needs is usually in the consumer's queue already, behind what it fetched for the others (librdkafka
fetches up to a megabyte per partition at once, so one fetch of 16 partitions brings about 110,000
messages of 100 bytes: more than the default threshold, and holding the polls there starved half of
16 workers on a 16-core machine). Pausing a partition is kept for when that is not enough: when
some partition has been dry for a poll interval (task.poll.interval.ms) while the buffers hold twice
the threshold, the partitions holding their share of the threshold or more are paused (until they
drain to half of it), their buffers stop counting, and the poll goes on for the rest. Pausing is
the last resort because librdkafka drops what it prefetched for a paused partition and fetches it
again on resume (librdkafka issue 5343): pausing whenever a partition passed its share cost the
no-op benchmark about a tenth of its throughput in refetches and idle waits.

Partitions, not lanes, are counted and paused: a partition is what a consumer fetches, so one slow
lane holds back its partition's siblings (they share one position, as in Samza).

``Backpressure`` only decides: it is fed buffer sizes and says what to do, and its caller does it.
Threading: ``decide`` is called by whichever thread polls, holding the poll lock
(``samzamp.consume.poll_handoff``); ``resize`` and ``forget`` by the loop thread holding the same
lock. So one thread at a time, and it needs no lock of its own.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import NamedTuple

from samzamp.api.envelope import SystemStreamPartition

__all__ = ["HOLD", "POLL", "Backpressure", "Decision"]

# The smallest share of the threshold a partition gets, however many there are: below it, a
# partition would be paused with less than a poll's worth buffered.
MIN_SHARE = 64
# How far past the threshold the buffers may grow while a lane that ran dry waits for its messages.
DRY_LANE_LIMIT = 2


class Decision(NamedTuple):
    """What the poller does now: resume ``resume``, pause ``pause`` (in that order), then poll if ``poll``."""

    poll: bool
    pause: tuple[SystemStreamPartition, ...] = ()
    resume: tuple[SystemStreamPartition, ...] = ()


# The common decisions, made without building one.
POLL = Decision(True)
HOLD = Decision(False)


class Backpressure:
    """The pause and resume policy for the partitions one ``SystemConsumers`` reads."""

    __slots__ = ("_clock", "_interval_s", "_limit", "_starved_since", "_threshold", "paused", "share")

    def __init__(self, threshold: int, poll_interval_s: float, clock: Callable[[], float], partitions: int) -> None:
        self._threshold = threshold
        self._limit = DRY_LANE_LIMIT * threshold
        self._interval_s = poll_interval_s
        self._clock = clock
        # When the buffers were first found full with some partition run dry (None: not so now).
        self._starved_since: float | None = None
        self.paused: set[SystemStreamPartition] = set()
        self.share = 0  # what one partition may hold before it is paused
        self.resize(partitions)

    def resize(self, partitions: int) -> None:
        """The number of partitions read changed: each gets an equal share of the threshold."""
        self.share = max(MIN_SHARE, self._threshold // max(1, partitions))

    def forget(self, partitions: Iterable[SystemStreamPartition]) -> None:
        """``partitions`` were unregistered, or registered anew (which fetches them unpaused)."""
        self.paused.difference_update(partitions)

    def decide(
        self,
        held: Mapping[SystemStreamPartition, int],
        starving: Callable[[], Iterable[SystemStreamPartition]],
        total: int | None = None,
    ) -> Decision:
        """Decide, before a poll, given ``held`` (messages buffered per partition read, every partition
        read included) and ``starving`` (the partitions of the lanes that the chooser waits for with
        nothing buffered, their input not ended). ``starving`` is called only when the buffers are
        full, as it looks at every such lane. ``total``: what ``held`` sums to, where the caller
        keeps it (then ``held`` is read only for the paused partitions, and for every partition
        only when the buffers are full and a partition ran dry for a poll interval: ``held`` may
        be a view that counts on each look-up). What it decides to pause or resume counts as
        paused or resumed from now on: the caller must do it.
        """
        paused = self.paused
        resume: tuple[SystemStreamPartition, ...] = ()
        if paused:
            low = self.share // 2
            resume = tuple(p for p in paused if held[p] <= low)
            paused.difference_update(resume)
        # A paused partition's buffers only shrink: leaving them out of the total lets the others
        # fill up to the threshold, rather than wait for the paused one to drain.
        if total is None:
            total = sum(n for p, n in held.items() if p not in paused) if paused else sum(held.values())
        elif paused:
            total -= sum(held[p] for p in paused)
        if total < self._threshold:
            self._starved_since = None
            return Decision(True, (), resume) if resume else POLL
        if not any(p not in paused for p in starving()):
            self._starved_since = None
            # Nothing runs dry: what is buffered keeps the tasks busy.
            return Decision(False, (), resume) if resume else HOLD
        # A partition ran dry while the others fill the buffers. Usually a poll brings what it needs
        # (the consumer queued it behind the others' messages), so the polls go on, up to the limit.
        now = self._clock()
        if self._starved_since is None:
            self._starved_since = now
        if total < self._limit:
            return Decision(True, (), resume) if resume else POLL
        # At the limit it takes a pause when the dry spell lasts a poll interval (a slow task's
        # partition holds the buffers); shorter ones pass as the others drain.
        if now - self._starved_since < self._interval_s:
            return Decision(False, (), resume) if resume else HOLD
        self._starved_since = None
        share = self.share
        pause = tuple(p for p, n in held.items() if p not in paused and n >= share)
        paused.update(pause)
        return Decision(True, pause, resume)
