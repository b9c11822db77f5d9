"""The changelog readers' progress bound (``samzamp.systems.kafka.changelog.batches``): waiting that
brings nothing for the bound ends the read, while a read that progresses, however slowly, and the
caller's own time between batches never count against it. A scripted consumer and clock stand in
for librdkafka (the real broker's cases are in tests/integration/test_changelog_reader.py)."""

from __future__ import annotations

from collections import deque
from typing import Any

from samzamp.systems.kafka.changelog import batches


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Consumer:
    """``consume`` answers from a script: a number is how many seconds of waiting bring nothing (in
    steps of the timeout it is called with), a list is a batch."""

    def __init__(self, clock: Clock, script: list[float | list[str]]) -> None:
        self.clock = clock
        self.script: deque[float | list[str]] = deque(script)

    def consume(self, n: int, timeout: float) -> list[Any]:
        while self.script:
            head = self.script[0]
            if isinstance(head, list):
                if timeout == 0 and n < len(head):
                    raise AssertionError("batch larger than asked")
                self.script.popleft()
                return head
            if head <= 0:
                self.script.popleft()
                continue
            if timeout == 0:
                return []
            step = min(timeout, head)
            self.clock.now += step
            self.script[0] = head - step
            return []
        self.clock.now += timeout
        return []


def _read(script: list[float | list[str]], stall_s: float, caller_s: float = 0.0) -> tuple[list[str], float]:
    """What ``batches`` yields before it ends, and when it ended; the caller takes ``caller_s`` per batch."""
    clock = Clock()
    got: list[str] = []
    for batch in batches(Consumer(clock, script), stall_s, clock):  # type: ignore[arg-type]
        got.extend(batch)
        clock.now += caller_s
    return got, clock.now


def test_waiting_with_nothing_coming_ends_within_the_bound() -> None:
    got, ended = _read([], stall_s=60)
    assert got == []
    assert 60 <= ended <= 61


def test_a_slow_read_that_progresses_is_never_cut_off() -> None:
    # A record every 50 s of waiting, twenty times: 1000 s in all, far past the 60 s bound.
    script: list[float | list[str]] = []
    for i in range(20):
        script += [50.0, [f"r{i}"]]
    got, ended = _read(script, stall_s=60)
    assert got == [f"r{i}" for i in range(20)]
    assert ended >= 1000 + 60  # then nothing more came: the bound ended it


def test_the_callers_time_between_batches_does_not_count_as_waiting() -> None:
    # Each batch takes the caller 120 s (a big LMDB apply); the broker answers at once every time.
    got, _ = _read([["a"], 1.0, ["b"], 1.0, ["c"]], stall_s=60, caller_s=120)
    assert got == ["a", "b", "c"]
