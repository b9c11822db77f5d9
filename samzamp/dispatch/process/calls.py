"""Which process() call a worker is in, in shared memory the loop reads without the worker's help.

task.callback.timeout.ms for a task in a worker: a worker stuck in process() cannot answer, and
the loop's view of a task's in-flight messages is too coarse to say which one is running (messages
queue behind each other and behind other tasks' work, and completions are reported in batches). So
each worker writes, around every process() call, the call's start (CLOCK_MONOTONIC ns, the same
clock in every process), task index, SSP index and offset into a slot of four int64s; the loop
reads the slots on a timer and fails the container when a call has run longer than the timeout.
The timeout thus counts from the call's own start: never from queueing.

The worker writes the start last and clears it after the call; the loop reads it first and again
after the other fields, so it never reports a mix of two calls. Aligned 8-byte stores and loads are
single instructions on the platforms samzamp runs on.

A fifth field goes the other way: the fence (``set_fence``), written by the loop and read by the
worker before each call. A standalone processor may process only while its ZooKeeper session is
known to be alive; the fence is when that knowledge runs out (CLOCK_MONOTONIC ns; 0: no fence). A
worker past it starts no call until the loop moves it on, or kills the worker: so a processor
continued after a pause longer than its session, workers included, processes nothing of the tasks it
has lost meanwhile.
"""

from __future__ import annotations

import mmap
import os
import time

__all__ = ["FENCE", "CallSlot", "wait_for_fence"]

_FIELDS = 5  # started_ns (0: not in process()), task index, SSP index, offset; the fence (loop -> worker)
FENCE = 4  # the field index of the fence
FENCE_POLL_S = 0.005
_BYTES = 8 * _FIELDS


class CallSlot:
    """One worker's slot. The loop creates it (``create``) and hands ``fd`` to the worker, which
    opens it with ``attach``. Only the worker writes the call's ``fields`` (in its process loop, in
    the order the module docstring gives) and only the loop reads them (``current``); only the loop
    writes the fence (``set_fence``) and only the worker reads it."""

    def __init__(self, fd: int, owner: bool) -> None:
        self.fd = fd
        self._map = mmap.mmap(fd, _BYTES)
        self._owner = owner
        self.fields = memoryview(self._map).cast("q")
        if not owner:  # the worker keeps the mapping only
            os.close(fd)
            self.fd = -1

    @classmethod
    def create(cls) -> CallSlot:
        """A new zeroed slot (a memfd: pass ``fd`` to the worker in ``pass_fds``)."""
        fd = os.memfd_create("samzamp-calls", os.MFD_CLOEXEC)
        os.ftruncate(fd, _BYTES)
        return cls(fd, owner=True)

    @classmethod
    def attach(cls, fd: int) -> CallSlot:
        """The worker's view of the slot whose fd it inherited."""
        return cls(fd, owner=False)

    def current(self) -> tuple[int, int, int, int] | None:
        """(started_ns, task index, SSP index, offset) of the call the worker is in, or None."""
        f = self.fields
        started = f[0]
        if not started:
            return None
        task, ssp, offset = f[1], f[2], f[3]
        return (started, task, ssp, offset) if f[0] == started else None

    def set_fence(self, until_ns: int) -> None:
        """The worker starts no process() call at or after ``until_ns`` (0: no fence)."""
        self.fields[FENCE] = until_ns

    def close(self) -> None:
        self.fields.release()
        self._map.close()
        if self._owner and self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def wait_for_fence(fields: memoryview, now_ns: int) -> int:
    """The worker's side of the fence: return at once while ``now_ns`` is before it, else wait until
    the loop moves it past now (the loop kills the worker instead when its tasks are lost). The time
    it returns at."""
    while True:
        fence = fields[FENCE]
        if not fence or now_ns < fence:
            return now_ns
        time.sleep(FENCE_POLL_S)
        now_ns = time.monotonic_ns()
