"""The processor's listener reads the checkpoint topic ahead when the job's membership changes: one
read at a time, in a thread, and a read that fails is only logged (the start of tasks reads again)."""

from __future__ import annotations

import asyncio
import threading

from samzamp.processor.listener import ContainerListener


def test_a_membership_change_reads_ahead_one_read_at_a_time() -> None:
    release = threading.Event()
    reads: list[str] = []

    def read() -> None:
        reads.append(threading.current_thread().name)
        release.wait(5)

    async def main() -> None:
        listener = ContainerListener(None, None, read)  # type: ignore[arg-type]
        listener.on_membership_change()
        await asyncio.sleep(0.05)
        listener.on_membership_change()  # one is under way: not a second
        await asyncio.sleep(0.05)
        assert len(reads) == 1
        release.set()
        await asyncio.sleep(0.05)
        listener.on_membership_change()
        await asyncio.sleep(0.05)
        assert len(reads) == 2

    asyncio.run(main())
    assert threading.main_thread().name not in reads


def test_a_read_ahead_that_fails_is_only_logged() -> None:
    def read() -> None:
        raise OSError("the broker is away")

    async def main() -> None:
        listener = ContainerListener(None, None, read)  # type: ignore[arg-type]
        listener.on_membership_change()
        await asyncio.sleep(0.05)
        listener.on_membership_change()  # the failed one is done: read again

    asyncio.run(main())


def test_without_a_read_ahead_a_membership_change_does_nothing() -> None:
    async def main() -> None:
        ContainerListener(None, None).on_membership_change()  # type: ignore[arg-type]

    asyncio.run(main())
