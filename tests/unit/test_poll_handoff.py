"""The poll hand-off (``samzamp.consume.poll_handoff``) on its own: the loop thread polls without
blocking while the chooser waits for something, the fetch thread takes over when the loop goes
idle, and one of them polls at a time. A stub poll stands in for SystemConsumers'."""

from __future__ import annotations

import asyncio
import threading
import time

from samzamp.api.envelope import SystemStreamPartition
from samzamp.consume.lane import Lane
from samzamp.consume.poll_handoff import PollHandoff

A = SystemStreamPartition("s", "in", 0)


class Poller:
    """Records each poll (its timeout and thread) and delivery; each poll gets ``A`` once armed."""

    def __init__(self) -> None:
        self.polls: list[tuple[float, str]] = []
        self.delivered: list[list[Lane]] = []
        self.armed = True
        self.error: BaseException | None = None

    def poll(self, timeout_s: float) -> list[Lane] | None:
        self.polls.append((timeout_s, threading.current_thread().name))
        if self.error is not None:
            raise self.error
        return [A] if self.armed else []

    def deliver(self, lanes: list[Lane]) -> None:
        self.delivered.append(lanes)


def handoff(wanted: set[Lane]) -> tuple[PollHandoff, Poller]:
    p = Poller()
    return PollHandoff(p.poll, p.deliver, wanted, 0.02), p


def test_the_loop_polls_without_blocking_only_while_the_chooser_waits_for_a_lane() -> None:
    wanted: set[Lane] = set()
    h, p = handoff(wanted)
    h.refill()
    assert p.polls == []
    wanted.add(A)  # changed in place: the hand-off sees it
    h.refill()
    assert p.polls == [(0, threading.current_thread().name)]
    assert p.delivered == [[A]]


def test_no_poll_while_the_lock_is_held_exclusively_or_after_stop() -> None:
    h, p = handoff({A})
    with h.exclusive():
        h.refill()
    assert p.polls == []
    h.stop()
    assert not h.fetching
    h.refill()
    assert p.polls == []


def test_a_failed_loop_poll_goes_to_on_error_and_delivers_nothing() -> None:
    h, p = handoff({A})
    errors: list[BaseException] = []

    async def main() -> None:
        h.start(asyncio.get_running_loop(), errors.append, 0.01)
        p.error = RuntimeError("broker gone")
        h.refill()
        h.stop()

    asyncio.run(main())
    assert [str(e) for e in errors] == ["broker gone"]
    assert p.delivered == []


def test_once_the_loop_is_idle_the_fetch_thread_polls_and_delivers_on_the_loop() -> None:
    p = Poller()
    p.armed = False
    threads: list[str] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        got: asyncio.Future[list[Lane]] = loop.create_future()

        def deliver(lanes: list[Lane]) -> None:
            threads.append(threading.current_thread().name)
            if not got.done():
                got.set_result(lanes)

        two_polls = threading.Event()

        def poll(timeout_s: float) -> list[Lane] | None:
            time.sleep(timeout_s)  # a blocking poll that waits out its timeout
            lanes = p.poll(timeout_s)
            if len(p.polls) >= 2:
                two_polls.set()
            return lanes

        h = PollHandoff(poll, deliver, {A}, 0.02)
        h.start(loop, lambda e: None, 0.01)
        h.idle()
        # Nothing arrives: the fetch thread keeps polling while the loop is idle.
        await asyncio.to_thread(two_polls.wait, 5)
        assert len(p.polls) >= 2
        p.armed = True
        assert await asyncio.wait_for(got, 5) == [A]
        h.stop()

    asyncio.run(main())
    assert {name for _, name in p.polls} == {"samzamp-fetch"}
    assert {timeout for timeout, _ in p.polls} == {0.01}
    assert threads[0] == threading.main_thread().name
