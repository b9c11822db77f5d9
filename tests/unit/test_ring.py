"""The shared-memory ring in one process: limits, wrap-around, back-pressure, close, arm/fileno, stub.

Both ends live in this process here (a ring allows that); tests/unit/test_ipc_processes.py runs them
in separate processes.
"""

from __future__ import annotations

import ast
import os
import random
import select
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import samzamp
from samzamp import _ring
from samzamp.ipc import (
    EndOfQueue,
    IpcError,
    PeerGone,
    QueueClosed,
    ReceiveEnd,
    Ring,
    RingSpec,
    SendEnd,
    SendTimeout,
    WouldBlock,
    attach_ring,
    create_ring,
)

CAP = 4096


@pytest.fixture
def ring() -> Iterator[Ring]:
    with create_ring(CAP) as r:
        yield r


@pytest.fixture
def ends(ring: Ring) -> tuple[SendEnd, ReceiveEnd]:
    return ring.sender(), ring.receiver()


def readable(fd: int) -> bool:
    return bool(select.select([fd], [], [], 0)[0])


def wait_for(condition: Callable[[], bool], what: str) -> None:
    """Poll a condition another thread makes true (not a sleep standing in for synchronisation)."""
    deadline = time.monotonic() + 10
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.001)


def receive_all(rx: ReceiveEnd, max_count: int = 1024) -> list[bytes]:
    """Blocking receives until EndOfQueue."""
    got: list[bytes] = []
    while True:
        try:
            got += rx.receive_many(max_count=max_count, timeout=10)
        except EndOfQueue:
            return got


def record(i: int, size: int) -> bytes:
    return (i.to_bytes(4, "little") * (size // 4 + 1))[:size]


def test_stub_matches_extension() -> None:
    stub = ast.parse(Path(samzamp.__file__).with_name("_ring.pyi").read_text())
    top: set[str] = set()
    members: set[str] = set()
    for node in stub.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            top.add(node.target.id)
        elif isinstance(node, ast.FunctionDef):
            top.add(node.name)
        elif isinstance(node, ast.ClassDef):
            top.add(node.name)
            members |= {n.name for n in node.body if isinstance(n, ast.FunctionDef)}
    public = {n for n in dir(_ring) if not n.startswith("_")}
    assert top == public
    assert members == {n for n in dir(_ring.RingHandle) if not n.startswith("_")}


@pytest.mark.parametrize("capacity", [0, 1024, 2048, 4095, 4096 + 8, 3 * 4096, 1 << 31])
def test_capacity_must_be_a_power_of_two_in_range(capacity: int) -> None:
    with pytest.raises(ValueError, match=f"ring capacity {capacity} is not a power of two between 4096"):
        create_ring(capacity)


def test_roundtrip_of_every_bytes_like(ends: tuple[SendEnd, ReceiveEnd]) -> None:
    tx, rx = ends
    with pytest.raises(WouldBlock):
        rx.receive_nowait()
    assert rx.receive_many_nowait() == []
    tx.send_nowait(b"bytes")
    tx.send_nowait(bytearray(b"bytearray"))
    tx.send_nowait(memoryview(b"xxmemoryviewxx")[2:-2])
    tx.send_nowait(b"")
    assert tx.send_many_nowait([b"a", bytearray(b"b"), memoryview(b"c"), b""]) == 4
    assert rx.receive_nowait() == b"bytes"
    assert rx.receive_many_nowait(max_count=2) == [b"bytearray", b"memoryview"]
    got = rx.receive_many_nowait()
    assert got == [b"", b"a", b"b", b"c", b""]
    assert all(type(b) is bytes for b in got)
    with pytest.raises(TypeError):
        tx.send_nowait("text")  # type: ignore[arg-type]
    with pytest.raises(BufferError):
        tx.send_nowait(memoryview(b"abcdef")[::2])  # not contiguous


def test_oversize_record_is_rejected_with_size_and_limit(ends: tuple[SendEnd, ReceiveEnd]) -> None:
    tx, rx = ends
    limit = CAP // 2
    expected = rf"record of {limit + 1} bytes is larger than the ring's limit of {limit} bytes \(capacity {CAP} / 2\)"
    with pytest.raises(ValueError, match=expected):
        tx.send_nowait(b"x" * (limit + 1))
    with pytest.raises(ValueError, match=expected):
        tx.send_many_nowait([b"x" * (limit + 1)])
    with pytest.raises(ValueError, match=expected):
        tx.send(b"x" * (limit + 1), timeout=1)
    # A batch stops before the oversize record; the next call, which starts at it, raises.
    batch = [b"a", b"b", b"x" * (limit + 1), b"c"]
    assert tx.send_many_nowait(batch) == 2
    with pytest.raises(ValueError, match=expected):
        tx.send_many_nowait(batch, 2)
    assert rx.receive_many_nowait() == [b"a", b"b"]
    assert tx.statistics().max_record == limit


def framed_size(position: int, size: int, capacity: int = CAP) -> int:
    """Ring bytes a record takes at a write position, as samzamp.ipc.ring documents it."""
    padded = (size + 7) // 8 * 8
    tail = capacity - position % capacity
    return 8 + padded if tail >= 8 + padded else tail + padded


def test_exactly_half_fits_an_empty_ring_at_every_offset(ends: tuple[SendEnd, ReceiveEnd]) -> None:
    tx, rx = ends
    half = b"h" * (CAP // 2)
    position = 0
    for offset in range(0, CAP, 8):
        while position % CAP != offset:  # a zero-length record takes 8 bytes
            tx.send_nowait(b"")
            assert rx.receive_nowait() == b""
            position += 8
        tx.send_nowait(half)
        assert tx.statistics().bytes_used == framed_size(position, len(half))
        position += framed_size(position, len(half))
        assert rx.receive_nowait() == half
        assert rx.statistics().bytes_used == 0


def test_many_wraps_byte_for_byte() -> None:
    rng = random.Random(1234)
    with create_ring(8192) as ring:
        tx, rx = ring.sender(), ring.receiver()
        limit = ring.max_record
        sizes = [
            rng.choice((0, 1, 7, 8, 9, limit, limit - 1)) if rng.random() < 0.1 else rng.randrange(600)
            for _ in range(30000)
        ]
        expected = deque[bytes]()
        sent = received = 0
        while received < len(sizes):
            batch = [record(sent + k, size) for k, size in enumerate(sizes[sent : sent + rng.randrange(1, 40)])]
            n = tx.send_many_nowait(batch)
            expected.extend(batch[:n])
            sent += n
            for got in rx.receive_many_nowait(max_count=rng.randrange(1, 40), max_bytes=rng.randrange(1, 8192)):
                assert got == expected.popleft()
                received += 1
        assert tx.statistics().records_sent == rx.statistics().records_received == len(sizes)
        assert rx.statistics().bytes_used == 0


def fill(tx: SendEnd, size: int = 100) -> int:
    """Send records of ``size`` bytes, then empty ones, until not a byte is free; return how many went in."""
    total = 0
    for chunk in ([b"f" * size] * 8, [b""] * 8):
        while n := tx.send_many_nowait(chunk):
            total += n
    assert tx.statistics().bytes_used == tx.statistics().capacity
    return total


def test_full_ring_pushes_back(ends: tuple[SendEnd, ReceiveEnd]) -> None:
    tx, rx = ends
    n = tx.send_many_nowait([b"r" * 100] * 1000)
    assert 0 < n < 1000
    assert n == CAP // framed_size(0, 100)  # 36 records of 112 bytes in 4096
    with pytest.raises(WouldBlock, match="the ring is full"):
        tx.send_nowait(b"r" * 100)
    assert tx.send_many_nowait([b"r" * 100]) == 0
    assert rx.receive_nowait() == b"r" * 100
    tx.send_nowait(b"r" * 100)  # the freed room is usable at once
    assert len(rx.receive_many_nowait()) == n


def test_blocked_send_completes_once_the_consumer_receives(ends: tuple[SendEnd, ReceiveEnd]) -> None:
    tx, rx = ends
    filled = fill(tx)
    outcome: list[str] = []

    def blocked_send() -> None:
        tx.send_many([b"late"] * 3, timeout=10)
        outcome.append("sent")

    sender = threading.Thread(target=blocked_send)
    sender.start()
    wait_for(lambda: tx.statistics().times_blocked == 1, "the sender to block")
    assert sender.is_alive()
    got: list[bytes] = []
    while len(got) < filled + 3:
        got += rx.receive_many(timeout=10)
    sender.join(10)
    assert outcome == ["sent"]
    assert got[-3:] == [b"late"] * 3
    assert rx.statistics().records_received == filled + 3


def test_send_timeout_reports_what_was_sent(ends: tuple[SendEnd, ReceiveEnd]) -> None:
    tx, _ = ends
    fill(tx, 8)
    with pytest.raises(SendTimeout) as info:
        tx.send(b"x", timeout=0.02)
    assert info.value.sent == 0
    assert isinstance(info.value, TimeoutError)


def test_send_many_timeout_counts_partial_progress(ends: tuple[SendEnd, ReceiveEnd]) -> None:
    tx, _ = ends
    fits = CAP // framed_size(0, 100)  # 36 records of 112 bytes; the 37th would not fit the 64-byte tail
    with pytest.raises(SendTimeout, match=f"{fits} records of this call were sent") as info:
        tx.send_many([b"r" * 100] * 50, timeout=0.02)
    assert info.value.sent == fits


def test_receive_timeout(ends: tuple[SendEnd, ReceiveEnd]) -> None:
    _, rx = ends
    with pytest.raises(TimeoutError):
        rx.receive(timeout=0.02)
    with pytest.raises(TimeoutError):
        rx.receive_many(timeout=0)


def test_close_lets_the_receiver_drain_then_end(ends: tuple[SendEnd, ReceiveEnd]) -> None:
    tx, rx = ends
    tx.send_many([b"1", b"2", b"3"])
    tx.close()
    tx.close()  # idempotent
    with pytest.raises(QueueClosed, match="this producer end of the ring was closed"):
        tx.send_nowait(b"4")
    with pytest.raises(QueueClosed):
        tx.send_many([b"4"])
    assert rx.statistics().sender_closed
    assert rx.arm() is True  # the close itself is something to drain
    assert rx.receive_nowait() == b"1"
    assert rx.receive_many_nowait() == [b"2", b"3"]
    with pytest.raises(EndOfQueue):
        rx.receive_many_nowait()
    with pytest.raises(EndOfQueue):
        rx.receive_nowait()
    with pytest.raises(EndOfQueue):
        rx.receive(timeout=1)
    with pytest.raises(EndOfQueue):
        rx.receive_many(timeout=None)


def test_receiver_close_makes_sends_fail(ends: tuple[SendEnd, ReceiveEnd]) -> None:
    tx, rx = ends
    tx.send_nowait(b"unread")
    rx.close()
    rx.close()
    with pytest.raises(QueueClosed, match="this consumer end"):
        rx.receive_nowait()
    with pytest.raises(QueueClosed):
        rx.receive_many(timeout=1)
    assert tx.peer_gone()
    assert tx.statistics().receiver_closed
    with pytest.raises(PeerGone, match="the consumer .* closed its end"):
        tx.send_nowait(b"x")
    with pytest.raises(PeerGone):
        tx.send_many_nowait([b"x"])
    assert tx.arm(10) is True  # so the caller sends and learns PeerGone


def test_receiver_close_wakes_a_blocked_sender(ends: tuple[SendEnd, ReceiveEnd]) -> None:
    tx, rx = ends
    fill(tx)
    outcome: list[BaseException] = []

    def blocked_send() -> None:
        try:
            tx.send(b"x" * 100)
        except PeerGone as exc:
            outcome.append(exc)

    sender = threading.Thread(target=blocked_send)
    sender.start()
    wait_for(lambda: tx.statistics().times_blocked == 1, "the sender to block")
    rx.close()
    sender.join(5)
    assert not sender.is_alive()
    assert len(outcome) == 1


def test_sender_close_wakes_a_blocked_receiver(ends: tuple[SendEnd, ReceiveEnd]) -> None:
    tx, rx = ends
    outcome: list[BaseException] = []

    def blocked_receive() -> None:
        try:
            rx.receive_many()
        except EndOfQueue as exc:
            outcome.append(exc)

    receiver = threading.Thread(target=blocked_receive)
    receiver.start()
    wait_for(lambda: rx.statistics().times_blocked == 1, "the receiver to block")
    tx.close()
    receiver.join(5)
    assert not receiver.is_alive()
    assert len(outcome) == 1


def test_arm_and_fileno_protocol(ends: tuple[SendEnd, ReceiveEnd]) -> None:
    tx, rx = ends
    assert rx.fileno() != tx.fileno()
    assert rx.arm() is False  # empty: armed
    assert not readable(rx.fileno())
    tx.send_nowait(b"wake")
    assert readable(rx.fileno())  # the send saw the consumer armed and signalled
    rx.clear()
    assert not readable(rx.fileno())
    assert rx.arm() is True  # data is there: drain, nothing armed
    tx.send_nowait(b"quiet")
    assert not readable(rx.fileno())  # not armed: no system call on the send
    assert rx.receive_many_nowait() == [b"wake", b"quiet"]

    n = fill(tx)
    assert tx.arm(100) is False
    assert not readable(tx.fileno())
    rx.receive_nowait()
    assert not readable(tx.fileno())  # the producer asked for a quarter of the ring, not one record
    rx.receive_many_nowait(max_count=n // 4)
    assert readable(tx.fileno())
    tx.clear()
    assert not readable(tx.fileno())
    assert tx.arm(100) is True
    assert tx.statistics().times_blocked == 1
    assert rx.statistics().times_blocked == 1


def test_statistics(ends: tuple[SendEnd, ReceiveEnd]) -> None:
    tx, rx = ends
    tx.send_many_nowait([b"abc", b""])
    s = tx.statistics()
    assert (s.capacity, s.max_record, s.bytes_used, s.records_sent, s.times_blocked) == (CAP, CAP // 2, 24, 2, 0)
    rx.receive_nowait()
    r = rx.statistics()
    assert (r.bytes_used, r.records_received, r.sender_closed) == (8, 1, False)
    with pytest.raises(AttributeError):
        r.bytes_used = 0  # type: ignore[misc]


def test_ends_are_taken_once_per_process(ring: Ring) -> None:
    ring.sender()
    with pytest.raises(IpcError, match=r"sender\(\) was already taken"):
        ring.sender()
    ring.receiver()
    with pytest.raises(IpcError, match=r"receiver\(\) was already taken"):
        ring.receiver()


def test_closed_ring_refuses_calls() -> None:
    ring = create_ring(CAP)
    tx, rx = ring.sender(), ring.receiver()
    ring.close()
    ring.close()
    with pytest.raises(QueueClosed):
        tx.send_nowait(b"x")
    with pytest.raises(QueueClosed):
        rx.receive_many_nowait()
    tx.close()
    rx.close()


def test_spec_roundtrip_and_attach_in_process(ring: Ring) -> None:
    spec = ring.spec()
    assert RingSpec.decode(spec.encode()) == spec
    assert spec.capacity == CAP
    assert ring.fds() == [spec.mem_fd, spec.data_fd, spec.space_fd]
    # A second view of the same memory (what a child does with inherited fds; dup'ed here).
    dup = RingSpec(spec.version, spec.capacity, *(os.dup(fd) for fd in ring.fds()))
    with attach_ring(dup.encode()) as other:
        tx = ring.sender()
        rx = other.receiver()
        tx.send_nowait(b"across views")
        assert rx.receive_nowait() == b"across views"


def test_attach_rejects_what_is_not_a_ring(ring: Ring) -> None:
    spec = ring.spec()
    with pytest.raises(IpcError, match="format version 99"):
        attach_ring(RingSpec(99, spec.capacity, spec.mem_fd, spec.data_fd, spec.space_fd))
    with pytest.raises(IpcError, match="with the expected capacity"):
        attach_ring(RingSpec(spec.version, 8192, spec.mem_fd, spec.data_fd, spec.space_fd))
    r, w = os.pipe()
    try:
        with pytest.raises(IpcError, match=f"fd {r} is not a samzamp ring"):
            attach_ring(RingSpec(spec.version, CAP, r, spec.data_fd, spec.space_fd))
    finally:
        os.close(r)
        os.close(w)


def test_two_threads_blocking_both_ways() -> None:
    """Producer and consumer threads of one process, both sleeping in turn with the GIL released."""
    n = 100_000
    with create_ring(1 << 14) as ring:
        tx, rx = ring.sender(), ring.receiver()
        records = [record(i, i % 200) for i in range(n)]

        def produce() -> None:
            for start in range(0, n, 100):
                tx.send_many(records[start : start + 100], timeout=10)
            tx.close()

        producer = threading.Thread(target=produce)
        producer.start()
        got = receive_all(rx, max_count=77)
        producer.join(10)
        assert got == records
