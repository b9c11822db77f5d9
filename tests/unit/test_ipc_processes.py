"""The ring between processes: order, wrap-around, peer death, and the asyncio fileno()/arm() protocol.

Children are this file run as a script (``python test_ipc_processes.py ROLE SPEC [N]``): they attach to
the ring through its spec and the fds passed with ``pass_fds``, as the worker pool's children do.
Children report readiness on stdout; nothing waits on a sleep.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from samzamp.ipc import EndOfQueue, PeerGone, ReceiveEnd, Ring, SendEnd, attach_ring, create_ring

Spawn = Callable[..., "subprocess.Popen[str]"]


def expected(i: int) -> bytes:
    """Record i of a stream: 0 to 500 bytes, contents unique to i."""
    size = (i * 7919) % 501
    return (i.to_bytes(4, "little") * (size // 4 + 1))[:size]


def wait_for(condition: Callable[[], bool], what: str) -> None:
    """Poll a condition another thread or process makes true (not a sleep standing in for synchronisation)."""
    deadline = time.monotonic() + 10
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.001)


def receive_all(rx: ReceiveEnd) -> list[bytes]:
    got: list[bytes] = []
    while True:
        try:
            got += rx.receive_many(timeout=10)
        except EndOfQueue:
            return got


@pytest.fixture
def spawn() -> Iterator[Spawn]:
    children: list[subprocess.Popen[str]] = []

    def start(role: str, ring: Ring, n: int = 0) -> subprocess.Popen[str]:
        child = subprocess.Popen(
            [sys.executable, __file__, role, ring.spec().encode(), str(n)],
            pass_fds=ring.fds(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        children.append(child)
        return child

    yield start
    for child in children:
        if child.poll() is None:
            child.kill()
        child.wait(10)
        for pipe in (child.stdin, child.stdout):
            if pipe is not None:
                pipe.close()


def say(child: subprocess.Popen[str]) -> str:
    assert child.stdout is not None
    return child.stdout.readline().strip()


def test_order_of_many_variable_records_child_to_parent(spawn: Spawn) -> None:
    n = 150_000
    with create_ring(1 << 16) as ring:  # ~38 MB through 64 KiB: hundreds of wraps and waits
        child = spawn("produce", ring, n)
        got = receive_all(ring.receiver())
        assert child.wait(10) == 0
    assert len(got) == n
    for i, rec in enumerate(got):
        assert rec == expected(i), f"record {i} differs"


def test_order_of_many_variable_records_parent_to_child(spawn: Spawn) -> None:
    n = 150_000
    with create_ring(1 << 16) as ring:
        tx = ring.sender()
        child = spawn("consume", ring, n)
        for start in range(0, n, 500):
            tx.send_many([expected(i) for i in range(start, min(n, start + 500))], timeout=10)
        tx.close()
        assert child.wait(10) == 0, "the child saw a record out of order or different (see its stderr)"


def test_killed_consumer_frees_a_blocked_producer(spawn: Spawn) -> None:
    with create_ring(4096) as ring:
        tx = ring.sender()
        child = spawn("hold-consumer", ring)
        assert say(child) == "ready"
        while tx.send_many_nowait([b"x" * 100] * 8):
            pass
        killed_at: list[float] = []

        def kill_once_blocked() -> None:
            wait_for(lambda: tx.statistics().times_blocked == 1, "the producer to block")
            killed_at.append(time.monotonic())
            child.send_signal(signal.SIGKILL)  # not reaped until the end: a zombie meanwhile

        killer = threading.Thread(target=kill_once_blocked)
        killer.start()
        with pytest.raises(PeerGone, match="the receiver closed its end of the ring or its process exited"):
            tx.send(b"x" * 100)
        noticed = time.monotonic() - killed_at[0]
        killer.join(5)
        assert noticed < 1.0
        assert tx.peer_gone()


def test_killed_producer_leaves_its_records_then_peer_gone(spawn: Spawn) -> None:
    with create_ring(1 << 16) as ring:
        rx = ring.receiver()
        child = spawn("produce-then-hold", ring, 100)  # ~25 KB: all fit
        assert say(child) == "sent"
        child.send_signal(signal.SIGKILL)
        assert child.wait(10) == -signal.SIGKILL
        got: list[bytes] = []
        while len(got) < 100:
            got += rx.receive_many(timeout=10)
        assert got == [expected(i) for i in range(100)]
        with pytest.raises(PeerGone, match=r"exited without closing the ring; every record it sent was received"):
            rx.receive_many(timeout=10)
        assert rx.peer_gone()


def test_killed_producer_frees_a_blocked_consumer(spawn: Spawn) -> None:
    with create_ring(1 << 16) as ring:
        rx = ring.receiver()
        child = spawn("produce-then-hold", ring, 10)
        assert say(child) == "sent"
        assert len(rx.receive_many(max_count=10)) == 10
        killed_at: list[float] = []

        def kill_once_blocked() -> None:
            wait_for(lambda: rx.statistics().times_blocked == 1, "the consumer to block")
            killed_at.append(time.monotonic())
            child.send_signal(signal.SIGKILL)

        killer = threading.Thread(target=kill_once_blocked)
        killer.start()
        with pytest.raises(PeerGone):
            rx.receive()
        noticed = time.monotonic() - killed_at[0]
        killer.join(5)
        assert noticed < 1.0


def test_asyncio_receiver_gets_every_record(spawn: Spawn) -> None:
    n = 20_000

    async def receive(rx: ReceiveEnd) -> list[bytes]:
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        got: list[bytes] = []

        def on_readable() -> None:
            rx.clear()
            while True:
                try:
                    batch = rx.receive_many_nowait(max_count=64)
                except EndOfQueue:
                    loop.remove_reader(rx.fileno())
                    done.set_result(None)
                    return
                if batch:
                    got.extend(batch)
                elif not rx.arm():
                    return

        loop.add_reader(rx.fileno(), on_readable)
        on_readable()  # drain what came before the reader was added, and arm
        await asyncio.wait_for(done, 20)
        return got

    with create_ring(1 << 14) as ring:  # small: the producer must wait on this loop's progress
        rx = ring.receiver()
        child = spawn("produce", ring, n)
        got = asyncio.run(receive(rx))
        assert child.wait(10) == 0
        assert rx.statistics().times_blocked > 0  # the loop did arm and wait
    assert got == [expected(i) for i in range(n)]


def test_asyncio_sender_waits_for_room_without_blocking_the_loop(spawn: Spawn) -> None:
    n = 20_000
    records = [expected(i) for i in range(n)]

    async def send(tx: SendEnd) -> int:
        loop = asyncio.get_running_loop()
        room: asyncio.Event = asyncio.Event()
        loop.add_reader(tx.fileno(), room.set)
        ticks = 0

        async def ticker() -> None:  # proves the loop keeps running while the ring is full
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0)

        ticking = asyncio.create_task(ticker())
        sent = 0
        while sent < n:
            sent += tx.send_many_nowait(records, sent)
            if sent < n and not tx.arm(len(records[sent])):
                await room.wait()
                room.clear()
                tx.clear()
        tx.close()
        loop.remove_reader(tx.fileno())
        ticking.cancel()
        return ticks

    with create_ring(1 << 14) as ring:
        tx = ring.sender()
        child = spawn("consume", ring, n)
        ticks = asyncio.run(send(tx))
        assert child.wait(10) == 0
        assert tx.statistics().times_blocked > 0
        assert ticks > 0


# ---- the children ----


def child_main(role: str, spec: str, n: int) -> int:
    ring = attach_ring(spec)
    if role == "produce":
        tx = ring.sender()
        for start in range(0, n, 300):
            tx.send_many([expected(i) for i in range(start, min(n, start + 300))], timeout=10)
        tx.close()
    elif role == "produce-then-hold":
        ring.sender().send_many([expected(i) for i in range(n)], timeout=10)
        print("sent", flush=True)
        sys.stdin.readline()  # until killed
    elif role == "consume":
        rx = ring.receiver()
        got = receive_all(rx)
        for i, rec in enumerate(got):
            if rec != expected(i):
                print(f"record {i}: {len(rec)} bytes, expected {len(expected(i))}", file=sys.stderr)
                return 1
        if len(got) != n:
            print(f"got {len(got)} records, expected {n}", file=sys.stderr)
            return 1
    elif role == "hold-consumer":
        ring.receiver()
        print("ready", flush=True)
        sys.stdin.readline()  # until killed
    ring.close()
    return 0


if __name__ == "__main__":
    sys.exit(child_main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
