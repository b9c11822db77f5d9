"""The poll hand-off: who polls the consumers, the loop thread or the fetch thread, one at a time.

While the loop is busy, the loop thread itself polls, without blocking, whenever the chooser waits
for a lane's next message (``refill``): no thread hand-off, no wake-up, no GIL contention on the hot
path. When the loop runs out of work it calls ``idle`` and the fetch thread takes over with a
blocking poll, and posts what it got to the loop with ``call_soon_threadsafe``. A lock that the loop
only ever *tries* to take for a poll makes sure one of them polls at a time; whoever holds it is the
one thread that may call into a consumer (``samzamp.systems.base``). ``exclusive`` takes it outright,
ahead of the fetch thread, so that partitions are registered and unregistered between polls.

What a poll does is the owner's (``SystemConsumers._poll_all``): it returns the lanes that got data,
or None when back-pressure held the poll back. What was fetched is handed over with ``deliver`` on
the loop thread.

Threading: every method is called by the loop thread. The poll runs on whichever thread holds the
poll lock; ``deliver`` and ``on_error`` always run on the loop thread.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager

from samzamp.consume.lane import Lane

__all__ = ["PollHandoff"]


class PollHandoff:
    """Runs one owner's polls on the loop thread or on a fetch thread of its own, never both at once."""

    __slots__ = (
        "_deliver",
        "_interval_s",
        "_loop",
        "_loop_idle",
        "_on_error",
        "_poll",
        "_poll_lock",
        "_stop",
        "_thread",
        "_turnstile",
        "_wanted",
        "_want_fetch",
        "fetching",
    )

    def __init__(
        self,
        poll: Callable[[float], list[Lane] | None],
        deliver: Callable[[list[Lane]], None],
        wanted: Collection[Lane],
        poll_interval_s: float,
    ) -> None:
        """``poll(timeout_s)``: one poll of every consumer (see the module docstring).
        ``deliver(lanes)``: hand what the poll fetched for ``lanes`` on (loop thread).
        ``wanted``: the lanes the chooser waits for; the loop thread polls only while it holds any.
        It is read, never copied, so the owner changes it in place.
        ``poll_interval_s``: task.poll.interval.ms; how long the fetch thread waits at a time."""
        self._poll = poll
        self._deliver = deliver
        self._wanted = wanted
        self._interval_s = poll_interval_s
        self._stop = threading.Event()
        self._want_fetch = threading.Event()
        self._loop_idle = False
        self._poll_lock = threading.Lock()
        # Held by the fetch thread only while it takes the poll lock, and by ``exclusive`` while it
        # waits for it: the fetch thread then waits behind the loop thread.
        self._turnstile = threading.Lock()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._on_error: Callable[[BaseException], None] = lambda e: None
        self.fetching = True  # False once ``stop`` was called: no poll is made after that

    def start(
        self, loop: asyncio.AbstractEventLoop, on_error: Callable[[BaseException], None], timeout_s: float
    ) -> None:
        """Start the fetch thread, which polls with ``timeout_s`` once the loop goes idle. A poll that
        raises goes to ``on_error`` on ``loop``'s thread, and the fetch thread ends."""
        self._loop = loop
        self._on_error = on_error
        self._thread = threading.Thread(target=self._fetch_loop, args=(timeout_s,), name="samzamp-fetch", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop polling, and wait (at most 5 s) for the fetch thread's poll in progress to end."""
        self.fetching = False
        self._stop.set()
        self._want_fetch.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        """Hold the poll lock, taking it ahead of the fetch thread: on idle input that thread takes
        the lock again right after letting it go, and a plain wait for it lasted several polls.
        Blocks while a poll is in progress (at most about one poll timeout)."""
        with self._turnstile, self._poll_lock:
            yield

    def refill(self) -> None:
        """Loop thread: poll without blocking if the chooser is waiting for some lane and nobody else
        is polling, and hand on what arrived."""
        if not self._wanted or not self.fetching or not self._poll_lock.acquire(blocking=False):
            return
        try:
            got = self._poll(0)
        except BaseException as e:
            self._on_error(e)
            return
        finally:
            self._poll_lock.release()
        if got:
            self._loop_idle = False
            self._deliver(got)

    def idle(self) -> None:
        """Loop thread: nothing to do; let the fetch thread wait for data with a blocking poll."""
        self._loop_idle = True
        self._want_fetch.set()

    def _delivered(self, lanes: list[Lane]) -> None:
        """Loop thread, posted by the fetch thread: the loop has work again."""
        self._loop_idle = False
        self._deliver(lanes)

    def _fetch_loop(self, timeout_s: float) -> None:
        loop = self._loop
        assert loop is not None
        try:
            while not self._stop.is_set():
                if not self._want_fetch.wait(self._interval_s):
                    continue
                self._want_fetch.clear()
                with self._turnstile:
                    self._poll_lock.acquire()
                try:
                    if self._stop.is_set():
                        break
                    got = self._poll(timeout_s)
                finally:
                    self._poll_lock.release()
                if got and not self._stop.is_set():
                    loop.call_soon_threadsafe(self._delivered, got)
                elif self._loop_idle:
                    if got is None:  # buffers full: the loop has work queued; look again later
                        self._stop.wait(self._interval_s)
                    self._want_fetch.set()  # still nothing: keep waiting while the loop has nothing
        except BaseException as e:
            if not self._stop.is_set():
                loop.call_soon_threadsafe(self._on_error, e)
