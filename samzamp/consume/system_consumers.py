"""SystemConsumers: the fan-in of every input system into one chooser.

Who polls: while the loop is busy, the loop thread itself polls, without blocking, whenever the
chooser lacks an SSP's next message (``refill``): no thread hand-off, no wake-up, no GIL contention
on the hot path. When the loop runs out of work it calls ``idle()`` and the fetch thread takes over
with a blocking poll, posting what it got to the loop with ``call_soon_threadsafe``. A lock that the
loop only ever *tries* to take makes sure one of them polls at a time. Raw messages go to per-SSP
deques (append by the poller; popleft on the loop thread, which puts a control marker it popped
back with appendleft: each atomic in CPython, and a marker is always the last thing appended).

Back-pressure: no poll while the buffers hold task.fetch.threshold messages or more; the consumer's
own bounded prefetch then stops fetching too. Pausing an SSP is kept for the case where that would
starve one: when some SSP has been dry for a poll interval (task.poll.interval.ms) while the buffers
are full, the SSPs holding more than their share of the threshold are paused (until they drain to
half of it), their buffers stop counting, and the poll goes on for the rest. So the buffers hold at
most about twice the threshold. Pausing is the last resort because librdkafka drops what it
prefetched for a paused partition and fetches it again on resume (librdkafka issue 5343): pausing
whenever an SSP passed its share cost the no-op benchmark about a tenth of its throughput in
refetches and idle waits.

Only the thread that polls calls into a consumer once fetching started: confluent-kafka (2.x) lets
one thread at a time into a client, and a second caller waits, retrying now and then, while the
fetch thread on idle input polls back to back: a loop-thread call could wait until data arrives.
So the high watermarks the lag metrics read are copied out by the poller (every
``HIGH_WATERMARK_REFRESH_S``).

Flow control (Samza's): the chooser holds at most one envelope per SSP; the SSP's next envelope is
handed over only when the loop calls ``try_update(ssp)``, i.e. when its task takes the previous one.

Which SSPs are read may change while fetching (``add`` / ``remove``, loop thread, as tasks come
and go): both take the poll lock, so a consumer is never asked to register or unregister during a
poll, and a removed SSP leaves nothing behind (buffer, chooser envelope, pause, high watermark).

Control markers (``samzamp.systems.base``) travel in the buffers as raw messages with a negative
offset, in order with the data: ``END_OF_STREAM`` (a bounded partition ended), and on a drain
``WATERMARK_MAX`` (the SSP's watermark goes to infinity) followed by ``DRAIN`` (nothing more will
come from this SSP).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager

from samzamp.api.envelope import SystemStreamPartition
from samzamp.consume.chooser import MessageChooser
from samzamp.metrics.registry import MetricsRegistry
from samzamp.systems.base import DRAIN, END_OF_STREAM, WATERMARK_MAX, RawMessage, StartOffset, SystemConsumer

__all__ = ["SystemConsumers"]

log = logging.getLogger(__name__)

# How often the poller copies the high watermarks the lag metrics read.
HIGH_WATERMARK_REFRESH_S = 1.0


class SystemConsumers:
    def __init__(
        self,
        consumers: dict[str, SystemConsumer],
        ssps: list[SystemStreamPartition],
        chooser: MessageChooser,
        metrics: MetricsRegistry,
        fetch_threshold: int,
        poll_interval_ms: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._consumers = consumers
        self._clock = clock
        # When the buffers were first found full with some SSP run dry (None: not so now).
        self._starved_since: float | None = None
        self._chooser = chooser
        # Replaced, never resized, when SSPs come or go: a reader on another thread (a metrics
        # gauge) iterating it sees the old or the new one.
        self._buffers: dict[SystemStreamPartition, deque[RawMessage]] = {s: deque() for s in ssps}
        # SSPs whose next envelope the chooser is waiting for (its previous one was taken).
        self._needed: set[SystemStreamPartition] = set(ssps)
        self._threshold = fetch_threshold
        self._high = self._share()
        self._poll_s = poll_interval_ms / 1000
        self._paused: set[SystemStreamPartition] = set()
        self._stop = threading.Event()
        self._want_fetch = threading.Event()
        self._loop_idle = False
        self._poll_lock = threading.Lock()
        # Held by the fetch thread only while it takes the poll lock, and by ``add`` and ``remove``
        # while they wait for it: the fetch thread then waits behind them.
        self._turnstile = threading.Lock()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._on_data: Callable[[], None] = lambda: None
        self._on_error: Callable[[BaseException], None] = lambda e: None
        self.fetching = True
        # Offset of the newest message fetched per SSP (what a drain must still process), and the
        # SSPs whose bounded input ended (a drain leaves them alone).
        self._fetched_upto: dict[SystemStreamPartition, int] = {}
        self._ended: set[SystemStreamPartition] = set()
        self._ssps = list(ssps)
        self._high_watermarks: dict[SystemStreamPartition, int | None] = {}
        self._high_watermarks_due = 0.0
        self._chose = metrics.counter("SystemConsumersMetrics", "chose-object")
        self._polls = metrics.counter("SystemConsumersMetrics", "polls")
        metrics.gauge("SystemConsumersMetrics", "unprocessed-messages", fn=self.buffered)
        metrics.gauge("SystemConsumersMetrics", "ssps-needed-by-chooser", fn=lambda: len(self._needed))

    def buffered(self) -> int:
        return sum(len(b) for b in self._buffers.values()) + len(self._chooser)

    # -- which SSPs are read (loop thread) ----------------------------------------------------
    def add(self, starts: dict[SystemStreamPartition, StartOffset]) -> None:
        """Start reading each SSP of ``starts`` from its start offset (OLDEST or an exact offset, such
        as the task's checkpointed one; the caller resolves UPCOMING), the other SSPs untouched. Their
        envelopes reach the chooser as they arrive.

        Loop thread, before or after ``start``. No poll runs while the SSPs are registered: this takes
        the poll lock, so it may block while the fetch thread finishes a poll (at most one poll
        timeout, about task.poll.interval.ms).

        ValueError naming an SSP read already, or one whose system has no consumer here (the caller
        hands in a consumer for every input system at construction). RuntimeError once fetching
        stopped (a drain began): a draining container takes no new work. If a consumer refuses an
        SSP, those this call registered are unregistered again before the error is raised.
        """
        if not self.fetching:
            raise RuntimeError(
                f"cannot add {', '.join(map(str, sorted(starts)))}: fetching stopped (a drain began), "
                "and a draining container takes no new SSPs"
            )
        present = sorted(s for s in starts if s in self._buffers)
        if present:
            raise ValueError(f"{', '.join(map(str, present))}: read already; remove it first to read it from elsewhere")
        orphans = sorted(s for s in starts if s.system not in self._consumers)
        if orphans:
            raise ValueError(
                f"{', '.join(map(str, orphans))}: system has no consumer here; "
                "give SystemConsumers a consumer for every input system"
            )
        with self._exclusive():
            added: list[SystemStreamPartition] = []
            try:
                for ssp, start in starts.items():
                    self._consumers[ssp.system].register(ssp, start)
                    added.append(ssp)
            except BaseException:
                self._unregister(added)
                raise
            self._buffers = {**self._buffers, **{s: deque() for s in added}}
            self._ssps.extend(added)
            self._needed.update(added)
            self._high = self._share()
            self._high_watermarks_due = 0.0  # the next poll copies the new SSPs' high watermarks

    def remove(self, ssps: Iterable[SystemStreamPartition]) -> None:
        """Stop reading ``ssps`` and forget them, the other SSPs untouched. What is buffered for them
        and the envelope the chooser holds for one are dropped: nothing of a removed SSP is chosen
        after this returns, and a later ``try_update`` of one is ignored. Dropped messages are not
        lost: the task's checkpoint decides where the SSP's next reader starts, which reads again
        whatever was fetched here and not processed.

        Loop thread; takes the poll lock like ``add`` (blocks at most about one poll timeout). After
        a drain began, removing an SSP drops its drain markers too: do not wait for its DRAIN.
        ValueError naming any SSP not read here.
        """
        gone = dict.fromkeys(ssps)  # ordered and without repeats
        unknown = sorted(s for s in gone if s not in self._buffers)
        if unknown:
            raise ValueError(f"{', '.join(map(str, unknown))}: not read here, so it cannot be removed")
        with self._exclusive():
            self._unregister(list(gone))
            self._buffers = {s: b for s, b in self._buffers.items() if s not in gone}
            self._ssps = [s for s in self._ssps if s not in gone]
            self._needed.difference_update(gone)
            self._paused.difference_update(gone)
            self._ended.difference_update(gone)
            for ssp in gone:
                self._fetched_upto.pop(ssp, None)
                self._chooser.remove(ssp)
            self._high_watermarks = {s: hw for s, hw in self._high_watermarks.items() if s not in gone}
            self._high = self._share()

    @contextmanager
    def _exclusive(self) -> Iterator[None]:
        """Hold the poll lock, taking it ahead of the fetch thread: on idle input that thread takes
        the lock again right after letting it go, and a plain wait for it lasted several polls."""
        with self._turnstile, self._poll_lock:
            yield

    def _unregister(self, ssps: list[SystemStreamPartition]) -> None:
        by_system: dict[str, list[SystemStreamPartition]] = {}
        for ssp in ssps:
            by_system.setdefault(ssp.system, []).append(ssp)
        for system, group in by_system.items():
            self._consumers[system].unregister(group)

    def _share(self) -> int:
        """An SSP's share of the fetch threshold (what it may hold before back-pressure pauses it)."""
        return max(64, self._threshold // max(1, len(self._buffers)))

    def start(
        self, loop: asyncio.AbstractEventLoop, on_data: Callable[[], None], on_error: Callable[[BaseException], None]
    ) -> None:
        self._loop = loop
        self._on_data = on_data
        self._on_error = on_error
        for c in self._consumers.values():
            c.start()
        self._thread = threading.Thread(target=self._fetch_loop, name="samzamp-fetch", daemon=True)
        self._thread.start()

    def stop_fetching(self) -> None:
        """Stop polling; what is already buffered stays and can still be chosen."""
        self.fetching = False
        self._stop.set()
        self._want_fetch.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)

    def drain(self) -> tuple[dict[SystemStreamPartition, int | None], set[SystemStreamPartition]]:
        """Stop fetching and append ``WATERMARK_MAX`` and ``DRAIN`` after what each SSP already
        buffered (Samza's SystemConsumers.drain), so everything fetched is still processed and
        then each SSP reports drained. SSPs whose bounded input ended get no markers.

        Loop thread. Returns the drain point (the newest offset fetched per SSP, None when nothing
        was fetched in this run) and the SSPs that got markers.
        """
        self.stop_fetching()  # after this no thread appends to the buffers
        marked = set()
        for ssp, buf in self._buffers.items():
            if ssp in self._ended:
                continue
            buf.append((WATERMARK_MAX, None, None, 0))
            buf.append((DRAIN, None, None, 0))
            marked.add(ssp)
        # The chooser may be waiting for any SSP: a marker, or what the fetch thread's last poll
        # buffered (an ended SSP's last data and end-of-stream marker included).
        self._on_fetched(list(self._buffers))
        return {s: self._fetched_upto.get(s) for s in sorted(marked)}, marked

    def stop(self) -> None:
        self.stop_fetching()
        for c in self._consumers.values():
            c.stop()

    # -- polling ------------------------------------------------------------------------------
    def _poll_all(self, timeout_s: float) -> list[SystemStreamPartition] | None:
        """Poll every consumer once (the caller holds the poll lock); returns the SSPs that got data,
        or None when the buffers are full and no poll was made."""
        if self._clock() >= self._high_watermarks_due:
            self._refresh_high_watermarks()
        if not self._apply_backpressure():
            return None
        got: list[SystemStreamPartition] = []
        buffers = self._buffers
        upto = self._fetched_upto
        for c in self._consumers.values():
            for ssp, msgs in c.poll(timeout_s).items():
                buffers[ssp].extend(msgs)
                got.append(ssp)
                last = msgs[-1][0]
                if last >= 0:
                    upto[ssp] = last
                elif last == END_OF_STREAM:
                    self._ended.add(ssp)
                    if len(msgs) > 1:
                        upto[ssp] = msgs[-2][0]
        self._polls.count += 1
        return got

    def refill(self) -> None:
        """Loop thread: poll without blocking if the chooser is waiting for some SSP and nobody else
        is polling, and hand the chooser what arrived."""
        if not self._needed or not self.fetching or not self._poll_lock.acquire(blocking=False):
            return
        try:
            got = self._poll_all(0)
        except BaseException as e:
            self._on_error(e)
            return
        finally:
            self._poll_lock.release()
        if got:
            self._on_fetched(got)

    def idle(self) -> None:
        """Loop thread: nothing to do; let the fetch thread wait for data with a blocking poll."""
        self._loop_idle = True
        self._want_fetch.set()

    def _fetch_loop(self) -> None:
        loop = self._loop
        assert loop is not None
        timeout = self._poll_s / max(1, len(self._consumers))
        try:
            while not self._stop.is_set():
                if not self._want_fetch.wait(self._poll_s):
                    continue
                self._want_fetch.clear()
                with self._turnstile:
                    self._poll_lock.acquire()
                try:
                    if self._stop.is_set():
                        break
                    got = self._poll_all(timeout)
                finally:
                    self._poll_lock.release()
                if got and not self._stop.is_set():
                    loop.call_soon_threadsafe(self._on_fetched, got)
                elif self._loop_idle:
                    if got is None:  # buffers full: the loop has work queued; look again later
                        self._stop.wait(self._poll_s)
                    self._want_fetch.set()  # still nothing: keep waiting while the loop has nothing
        except BaseException as e:
            if not self._stop.is_set():
                loop.call_soon_threadsafe(self._on_error, e)

    def _apply_backpressure(self) -> bool:
        """Resume paused SSPs that drained to half their share; True if a poll may be made now."""
        buffers = self._buffers
        paused = self._paused
        resume: dict[str, list[SystemStreamPartition]] = {}
        if paused:
            for ssp in list(paused):
                if len(buffers[ssp]) <= self._high // 2:
                    paused.discard(ssp)
                    resume.setdefault(ssp.system, []).append(ssp)
            for system, ssps in resume.items():
                self._consumers[system].resume(ssps)
        # A paused SSP's buffer only shrinks: leaving it out of the total lets the others fill up
        # to the threshold, rather than wait for the paused one to drain.
        if paused:
            total = sum(len(b) for s, b in buffers.items() if s not in paused)
        else:
            total = sum(map(len, buffers.values()))
        if total < self._threshold:
            self._starved_since = None
            return True
        ended = self._ended
        # tuple(): a copy in one C call, as the loop thread may add to or discard from the set
        # while this runs on the fetch thread.
        if not any(not buffers[s] and s not in paused and s not in ended for s in tuple(self._needed)):
            self._starved_since = None
            return False  # nothing runs dry: what is buffered keeps the tasks busy
        # An SSP ran dry while the others fill the buffers. Usually that passes by itself (the
        # consumer hands out partitions in turns, and the others drain); it takes a pause when it
        # lasts a poll interval (a slow task's SSP holds the buffers).
        now = self._clock()
        if self._starved_since is None:
            self._starved_since = now
        if now - self._starved_since < self._poll_s:
            return False
        self._starved_since = None
        pause: dict[str, list[SystemStreamPartition]] = {}
        for ssp, buf in buffers.items():
            if ssp not in paused and len(buf) >= self._high:
                paused.add(ssp)
                pause.setdefault(ssp.system, []).append(ssp)
        for system, ssps in pause.items():
            self._consumers[system].pause(ssps)
        return True

    # -- loop thread -------------------------------------------------------------------------
    def _on_fetched(self, ssps: list[SystemStreamPartition]) -> None:
        self._loop_idle = False
        fed = False
        needed = self._needed
        for ssp in ssps:
            if ssp in needed:
                buf = self._buffers[ssp]
                if buf:
                    needed.discard(ssp)
                    self._chooser.update(ssp, buf.popleft())
                    fed = True
        if fed:
            self._on_data()

    def choose(self) -> tuple[SystemStreamPartition, RawMessage] | None:
        chosen = self._chooser.choose()
        if chosen is not None:
            self._chose.count += 1
        return chosen

    def buffer(self, ssp: SystemStreamPartition) -> deque[RawMessage]:
        """The fetch buffer of ``ssp``: the loop thread may ``popleft`` from it (a run of messages
        handed to a task at once) and put a control marker back with ``appendleft``; the fetch
        thread only appends."""
        return self._buffers[ssp]

    def try_update(self, ssp: SystemStreamPartition) -> None:
        """The envelope last chosen from ``ssp`` was taken: hand the chooser the next one. Nothing for
        an SSP removed since (its task finishing the last envelope it took)."""
        buf = self._buffers.get(ssp)
        if buf is None:
            return
        if buf:
            self._chooser.update(ssp, buf.popleft())
        else:
            self._needed.add(ssp)

    def _refresh_high_watermarks(self) -> None:
        """Poller (holding the poll lock): copy each SSP's high watermark for ``high_watermark``."""
        self._high_watermarks_due = self._clock() + HIGH_WATERMARK_REFRESH_S
        hw: dict[SystemStreamPartition, int | None] = {}
        for ssp in self._ssps:
            c = self._consumers.get(ssp.system)
            hw[ssp] = c.high_watermark(ssp) if c is not None else None
        self._high_watermarks = hw  # one assignment: a reader on another thread sees old or new

    def high_watermark(self, ssp: SystemStreamPartition) -> int | None:
        """``ssp``'s high watermark as the poller last copied it (at most about a second old while
        fetching); None if unknown. Any thread: it never calls into the consumer."""
        return self._high_watermarks.get(ssp)
