"""Shared-memory SPSC ring queues between processes: the typed face of ``samzamp._ring`` (native/).

A ring carries variable-length byte records from exactly one producer process to exactly one consumer
process, in order. The pool sends batches of envelopes to a worker over one ring and gets completions back
over another. Nothing is pickled: records are bytes, encoded by the caller (msgspec frames).

Setting up::

    ring = create_ring(1 << 20)                        # in the creating process
    child = subprocess.Popen([sys.executable, "child.py", ring.spec().encode()], pass_fds=ring.fds())
    tx = ring.sender()                                 # the creator is the producer here...
    # in child.py:
    rx = attach_ring(sys.argv[1]).receiver()           # ...and the child the consumer

Who may call what: each end belongs to the process that took it (``sender()``/``receiver()`` register
its pid in the ring's header), and to one thread of that process at a time. A ``Ring`` must not cross a
``fork()``; hand the child the spec and the fds instead.

Limits:

- capacity: a power of two from 4 KiB to 1 GiB, in bytes.
- a record's payload is at most ``capacity // 2`` bytes (``Ring.max_record``); a bigger one raises
  ``ValueError`` and nothing is sent. Callers split their batches to fit. Zero-length records are fine.
- each record takes 8 bytes of header plus its payload padded to 8 bytes, and a record that would cross
  the end of the buffer starts over at offset 0 (the bytes it skips count as used until it is received).
- a dead peer is noticed by a blocked call within about 100 ms (its pid is gone, or a zombie); a pid
  reused by a new process before that check would look alive, so pair blocking calls with a timeout
  where that matters. Non-blocking calls never look at the peer's pid.

Event-loop integration (the container's asyncio loop, no thread ever blocks)::

    def on_readable():                  # loop.add_reader(rx.fileno(), on_readable)
        rx.clear()
        while True:
            batch = rx.receive_many_nowait()   # EndOfQueue when the producer closed and all is read
            if batch:
                handle(batch)
            elif not rx.arm():                 # armed: the producer will make fileno() readable
                return

The producer side is the same with ``SendEnd.fileno()``, ``arm(nbytes)`` and ``clear()``, for a loop
that must wait for room without blocking (back-pressure).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Final

import msgspec

from samzamp import _ring
from samzamp.ipc.errors import IpcError, PeerGone, QueueClosed, SendTimeout, WouldBlock

__all__ = [
    "MAX_CAPACITY",
    "MIN_CAPACITY",
    "BytesLike",
    "ReceiveEnd",
    "ReceiveStatistics",
    "Ring",
    "RingSpec",
    "SendEnd",
    "SendStatistics",
    "attach_ring",
    "create_ring",
]

BytesLike = bytes | bytearray | memoryview

MIN_CAPACITY: Final = _ring.MIN_CAPACITY
MAX_CAPACITY: Final = _ring.MAX_CAPACITY
_UNLIMITED: Final = sys.maxsize
DEFAULT_MAX_COUNT: Final = 1024


class RingSpec(msgspec.Struct, frozen=True):
    """What a child process needs to attach to a ring: its format version, capacity and fd numbers.

    The fds must reach the child under the same numbers (``subprocess.Popen(pass_fds=ring.fds())``
    does that). ``encode()`` gives a short JSON string for argv or the environment.
    """

    version: int
    capacity: int
    mem_fd: int
    data_fd: int
    space_fd: int

    def encode(self) -> str:
        """This spec as a JSON string."""
        return msgspec.json.encode(self).decode()

    @classmethod
    def decode(cls, text: str | bytes) -> RingSpec:
        """Parse what ``encode()`` wrote."""
        return msgspec.json.decode(text, type=cls)


@dataclass(frozen=True, slots=True)
class SendStatistics:
    """A snapshot of a ring from its producer's side."""

    capacity: int
    max_record: int
    bytes_used: int  # headers, padding and skipped tail bytes included
    records_sent: int  # since the ring was created
    times_blocked: int  # waits that had to sleep, and arm() calls that armed
    receiver_closed: bool


@dataclass(frozen=True, slots=True)
class ReceiveStatistics:
    """A snapshot of a ring from its consumer's side."""

    capacity: int
    max_record: int
    bytes_used: int
    records_received: int
    times_blocked: int
    sender_closed: bool


def _nbytes(record: BytesLike) -> int:
    return record.nbytes if isinstance(record, memoryview) else len(record)


def _deadline(timeout: float | None) -> float | None:
    return None if timeout is None else time.monotonic() + timeout


def _left(deadline: float | None) -> float | None:
    return None if deadline is None else max(0.0, deadline - time.monotonic())


class SendEnd:
    """The producer end. Only the process that took it (``Ring.sender()``) calls it, from one thread.

    Non-blocking calls copy into shared memory and never make a system call unless the consumer sleeps.
    Blocking calls sleep with the GIL released. Sending after the receiver closed or died raises
    ``PeerGone``; sending after ``close()`` raises ``QueueClosed``.
    """

    __slots__ = ("_h",)

    def __init__(self, handle: _ring.RingHandle) -> None:
        self._h = handle

    def send_nowait(self, record: BytesLike) -> None:
        """Send one record, or raise ``WouldBlock`` if it does not fit now (or ``ValueError`` if it never will)."""
        self._h.push(record)

    def send_many_nowait(self, records: Sequence[BytesLike], start: int = 0) -> int:
        """Send ``records[start:]`` in order as far as they fit, with one publish; return how many went in.

        Stops at the first record that does not fit. A record over the limit (or not bytes-like) raises
        ``ValueError`` (``TypeError``) when it is the first of the call; after others, the call stops
        before it and the next call (which starts at it) raises.
        """
        return self._h.push_many(records, start)

    def send(self, record: BytesLike, timeout: float | None = None) -> None:
        """Send one record, waiting for room. ``SendTimeout`` (a ``TimeoutError``) after ``timeout`` seconds."""
        deadline = _deadline(timeout)
        while True:
            try:
                self._h.push(record)
                return
            except WouldBlock:
                pass
            self._wait(_nbytes(record), deadline, 0)

    def send_many(self, records: Sequence[BytesLike], timeout: float | None = None) -> None:
        """Send every record in order, waiting for room as needed.

        On timeout raises ``SendTimeout`` whose ``sent`` says how many of ``records`` went in.
        """
        deadline = _deadline(timeout)
        total = len(records)
        sent = self._h.push_many(records, 0)
        while sent < total:
            self._wait(_nbytes(records[sent]), deadline, sent)
            sent += self._h.push_many(records, sent)

    def _wait(self, nbytes: int, deadline: float | None, sent: int) -> None:
        result = self._h.wait_writable(nbytes, _left(deadline))
        if result == _ring.WAIT_READY:
            return
        if result == _ring.WAIT_TIMEOUT:
            msg = f"no room for a {nbytes}-byte record in the ring in time ({sent} records of this call were sent)"
            raise SendTimeout(msg, sent)
        if result == _ring.WAIT_PEER_GONE:
            msg = "the receiver closed its end of the ring or its process exited"
            raise PeerGone(msg)
        msg = "this sender was closed"
        raise QueueClosed(msg)

    def fileno(self) -> int:
        """The eventfd that becomes readable when the receiver frees room (after ``arm``) or closes."""
        return self._h.space_fd

    def arm(self, nbytes: int) -> bool:
        """Ask to be woken through ``fileno()`` once a record of ``nbytes`` fits.

        Returns True if it fits already (send now; nothing armed), False if armed: it is then safe to
        wait for ``fileno()`` to become readable. A receiver that closed makes this return True, so the
        next send raises ``PeerGone``.
        """
        try:
            return self._h.arm_writable(nbytes)
        except PeerGone:
            return True

    def clear(self) -> None:
        """Reset ``fileno()``'s counter; call it first thing in the reader callback."""
        self._h.clear_space()

    def close(self) -> None:
        """Close this end: the receiver gets what was sent, then ``EndOfQueue``. Idempotent."""
        if not self._h.closed:
            self._h.close_producer()

    def peer_gone(self) -> bool:
        """True if the receiver closed its end or its process is gone (zombie included)."""
        return self._h.peer_gone(False)

    def statistics(self) -> SendStatistics:
        """A snapshot of the ring's counters from this side."""
        cap, used, pushed, _, blocked, _, _, rx_closed, _, _ = self._h.stats()
        return SendStatistics(cap, self._h.max_record, used, pushed, blocked, bool(rx_closed))


class ReceiveEnd:
    """The consumer end. Only the process that took it (``Ring.receiver()``) calls it, from one thread.

    Records come out in the order they were sent, as new ``bytes`` objects (nothing refers to the ring
    after a call returns). Once the sender closed and every record was received, receiving raises
    ``EndOfQueue``; if the sender's process died without closing, blocking receives raise ``PeerGone``
    once the ring is drained. Receiving after ``close()`` raises ``QueueClosed``.
    """

    __slots__ = ("_h",)

    def __init__(self, handle: _ring.RingHandle) -> None:
        self._h = handle

    def receive_nowait(self) -> bytes:
        """The next record, or ``WouldBlock`` if there is none yet (``EndOfQueue`` if there never will be)."""
        return self._h.pop()

    def receive_many_nowait(self, *, max_count: int = DEFAULT_MAX_COUNT, max_bytes: int | None = None) -> list[bytes]:
        """Up to ``max_count`` records, with one release of their space; ``[]`` if none yet.

        ``max_bytes`` bounds the payload bytes returned, except that one record is always returned if there
        is one, however big. Raises ``EndOfQueue`` when the sender closed and everything was received.
        """
        return self._h.pop_many(max_count, _UNLIMITED if max_bytes is None else max_bytes)

    def receive(self, timeout: float | None = None) -> bytes:
        """The next record, waiting for it; ``TimeoutError`` after ``timeout`` seconds."""
        deadline = _deadline(timeout)
        while True:
            try:
                return self._h.pop()
            except WouldBlock:
                pass
            self._wait(deadline)

    def receive_many(
        self, *, max_count: int = DEFAULT_MAX_COUNT, max_bytes: int | None = None, timeout: float | None = None
    ) -> list[bytes]:
        """At least one record (as ``receive_many_nowait``), waiting until there is one."""
        deadline = _deadline(timeout)
        limit = _UNLIMITED if max_bytes is None else max_bytes
        while True:
            batch = self._h.pop_many(max_count, limit)
            if batch:
                return batch
            self._wait(deadline)

    def _wait(self, deadline: float | None) -> None:
        result = self._h.wait_readable(_left(deadline))
        if result == _ring.WAIT_READY:
            return
        if result == _ring.WAIT_TIMEOUT:
            msg = "no record arrived in the ring in time"
            raise TimeoutError(msg)
        if result == _ring.WAIT_PEER_GONE:
            pid = self._h.stats()[8]
            msg = f"the sender (pid {pid}) exited without closing the ring; every record it sent was received"
            raise PeerGone(msg)
        msg = "this receiver was closed"
        raise QueueClosed(msg)

    def fileno(self) -> int:
        """The eventfd that becomes readable when the sender publishes (after ``arm``) or closes."""
        return self._h.data_fd

    def arm(self) -> bool:
        """Ask to be woken through ``fileno()`` when data arrives.

        Returns True if there is data (or the sender's close) to receive already (drain again; nothing
        armed), False if armed: it is then safe to wait for ``fileno()`` to become readable.
        """
        return self._h.arm_readable()

    def clear(self) -> None:
        """Reset ``fileno()``'s counter; call it first thing in the reader callback."""
        self._h.clear_data()

    def close(self) -> None:
        """Close this end: the sender's next send raises ``PeerGone``. Idempotent."""
        if not self._h.closed:
            self._h.close_consumer()

    def peer_gone(self) -> bool:
        """True if the sender closed its end or its process is gone (zombie included)."""
        return self._h.peer_gone(True)

    def statistics(self) -> ReceiveStatistics:
        """A snapshot of the ring's counters from this side."""
        cap, used, _, popped, _, blocked, tx_closed, _, _, _ = self._h.stats()
        return ReceiveStatistics(cap, self._h.max_record, used, popped, blocked, bool(tx_closed))


class Ring:
    """One process's view of a ring: its memory and fds, and the end (or ends) this process takes.

    Made by ``create_ring`` or ``attach_ring``. ``close()`` (or leaving a ``with`` block) closes the ends
    taken here, unmaps the memory and closes the fds; the peer keeps its own mapping.
    """

    __slots__ = ("_h", "_receiver", "_sender")

    def __init__(self, handle: _ring.RingHandle) -> None:
        self._h = handle
        self._sender: SendEnd | None = None
        self._receiver: ReceiveEnd | None = None

    @property
    def capacity(self) -> int:
        """Data bytes (the header is extra)."""
        return self._h.capacity

    @property
    def max_record(self) -> int:
        """The largest record payload accepted: ``capacity // 2``."""
        return self._h.max_record

    def spec(self) -> RingSpec:
        """What a child needs to ``attach_ring``; pass ``fds()`` with it."""
        h = self._h
        return RingSpec(_ring.VERSION, h.capacity, h.mem_fd, h.data_fd, h.space_fd)

    def fds(self) -> list[int]:
        """The fds to hand a child (``pass_fds``): the memfd and both eventfds."""
        h = self._h
        return [h.mem_fd, h.data_fd, h.space_fd]

    def sender(self) -> SendEnd:
        """Take the producer end for this process (once per process and ring)."""
        if self._sender is not None:
            msg = "sender() was already taken from this ring in this process; share that SendEnd"
            raise IpcError(msg)
        self._h.take_producer()
        self._sender = SendEnd(self._h)
        return self._sender

    def receiver(self) -> ReceiveEnd:
        """Take the consumer end for this process (once per process and ring)."""
        if self._receiver is not None:
            msg = "receiver() was already taken from this ring in this process; share that ReceiveEnd"
            raise IpcError(msg)
        self._h.take_consumer()
        self._receiver = ReceiveEnd(self._h)
        return self._receiver

    def close(self) -> None:
        """Close the ends taken here, unmap the ring and close its fds. Idempotent."""
        if self._h.closed:
            return
        if self._sender is not None:
            self._sender.close()
        if self._receiver is not None:
            self._receiver.close()
        self._h.destroy()

    def __enter__(self) -> Ring:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def create_ring(capacity_bytes: int) -> Ring:
    """A new ring of ``capacity_bytes`` (a power of two, 4 KiB to 1 GiB), owned by this process."""
    return Ring(_ring.create(capacity_bytes))


def attach_ring(spec: RingSpec | str | bytes) -> Ring:
    """Attach to a ring created by another process, from its spec (fds inherited under the same numbers).

    The ring takes ownership of the three fds: ``Ring.close()`` closes them.
    """
    if not isinstance(spec, RingSpec):
        spec = RingSpec.decode(spec)
    if spec.version != _ring.VERSION:
        msg = f"ring spec has format version {spec.version}, this samzamp reads version {_ring.VERSION}"
        raise IpcError(msg)
    return Ring(_ring.attach(spec.mem_fd, spec.data_fd, spec.space_fd, spec.capacity))
