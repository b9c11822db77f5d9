"""The slot a worker publishes its current process() call in, read by the loop (task.callback.timeout.ms)."""

from __future__ import annotations

import subprocess
import sys
import time

from samzamp.dispatch.process.calls import CallSlot

_CHILD = """
import sys, time
from samzamp.dispatch.process.calls import CallSlot
f = CallSlot.attach(int(sys.argv[1])).fields
f[1] = 2; f[2] = 1; f[3] = 4711; f[0] = time.monotonic_ns()
print("in", flush=True)
sys.stdin.readline()
f[0] = 0
print("out", flush=True)
sys.stdin.readline()
"""


def test_the_loop_sees_the_call_a_worker_process_is_in_and_when_it_started() -> None:
    slot = CallSlot.create()
    try:
        assert slot.current() is None
        with subprocess.Popen(
            [sys.executable, "-c", _CHILD, str(slot.fd)],
            pass_fds=[slot.fd],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        ) as child:
            assert child.stdin is not None
            assert child.stdout is not None
            before = time.monotonic_ns()
            assert child.stdout.readline() == "in\n"
            call = slot.current()
            assert call is not None
            started, task, ssp, offset = call
            assert (task, ssp, offset) == (2, 1, 4711)
            assert started <= time.monotonic_ns()  # the same clock in both processes
            assert started >= before - 5_000_000_000
            child.stdin.write("\n")
            child.stdin.flush()
            assert child.stdout.readline() == "out\n"
            assert slot.current() is None
            child.stdin.write("\n")
            child.stdin.flush()
            assert child.wait(timeout=10) == 0
    finally:
        slot.close()
