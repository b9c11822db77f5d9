"""The checkpoint topic read ahead of a rebalance: the container's one read ahead, which a version on
its way (``expect``) and a membership change (the listener) both ask for. One read at a time, in a
thread; a read that fails is only logged, and the next request reads again."""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any

import pytest

from samzamp.container.container import SamzaContainer
from samzamp.processor.listener import ContainerListener


class _Checkpoints:
    """A checkpoint manager whose reads wait for ``release`` (or raise ``error``)."""

    def __init__(self, error: Exception | None = None) -> None:
        self.threads: list[str] = []
        self.started = threading.Semaphore(0)
        self.release = threading.Event()
        self.error = error

    def read_last_checkpoints(self) -> dict[str, Any]:
        self.threads.append(threading.current_thread().name)
        self.started.release()
        if self.error is not None:
            raise self.error
        self.release.wait(10)
        return {}


class _Container:
    """What ``SamzaContainer.read_checkpoints_ahead`` uses of a container, and the method itself."""

    read_checkpoints_ahead = SamzaContainer.read_checkpoints_ahead

    def __init__(self, checkpoints: _Checkpoints) -> None:
        self._checkpoints = checkpoints
        self._loop = asyncio.get_running_loop()
        self._prefetch: asyncio.Task[object] | None = None


async def _started(checkpoints: _Checkpoints) -> None:
    assert await asyncio.to_thread(checkpoints.started.acquire, True, 10), "no read started"


def test_a_membership_change_reads_ahead_one_read_at_a_time_off_the_loop() -> None:
    checkpoints = _Checkpoints()

    async def main() -> None:
        container = _Container(checkpoints)
        listener = ContainerListener(container, None)  # type: ignore[arg-type]
        listener.on_membership_change()
        await _started(checkpoints)
        listener.on_membership_change()  # one is under way: not a second
        container.read_checkpoints_ahead()  # nor for a version on its way
        assert len(checkpoints.threads) == 1
        first = container._prefetch
        assert first is not None
        checkpoints.release.set()
        await first
        listener.on_membership_change()  # the first ended: read again
        await _started(checkpoints)
        assert container._prefetch is not first
        await container._prefetch
        assert len(checkpoints.threads) == 2

    asyncio.run(main())
    assert threading.main_thread().name not in checkpoints.threads


def test_a_read_ahead_that_fails_is_logged_and_the_next_request_reads_again(caplog: pytest.LogCaptureFixture) -> None:
    checkpoints = _Checkpoints(OSError("the broker is away"))

    async def main() -> None:
        container = _Container(checkpoints)
        container.read_checkpoints_ahead()
        failed = container._prefetch
        assert failed is not None
        await asyncio.wait({failed})
        container.read_checkpoints_ahead()
        assert container._prefetch is not failed
        await asyncio.wait({container._prefetch})

    with caplog.at_level(logging.DEBUG, logger="samzamp.container.container"):
        asyncio.run(main())
    assert len(checkpoints.threads) == 2
    said = [r.getMessage() for r in caplog.records if "ahead of a rebalance" in r.getMessage()]
    assert said == ["reading the checkpoint topic ahead of a rebalance: the broker is away"] * 2
