"""Errors of the shared-memory rings, named after trio's channel vocabulary.

SamzampError
└── IpcError               a ring cannot be created, attached or read (wrong fd, corrupt memory, end taken)
    ├── WouldBlock         a non-blocking call could not proceed: the ring is full (send) or empty (receive)
    ├── QueueClosed        this end was closed by its own process; it cannot be used again
    ├── PeerGone           the other process closed its end (consumer) or exited without closing (either)
    ├── EndOfQueue         the producer closed the ring and the consumer has received every record
    └── SendTimeout        a blocking send timed out (also a builtin TimeoutError); ``sent`` counts what went in

A record bigger than the ring's limit (capacity / 2) raises the builtin ``ValueError`` (a caller mistake,
not a ring state), and a timed-out blocking receive the builtin ``TimeoutError``.
The native extension ``samzamp._ring`` raises these very classes (it imports this module).
"""

from __future__ import annotations

from samzamp.api.errors import SamzampError

__all__ = ["EndOfQueue", "IpcError", "PeerGone", "QueueClosed", "SendTimeout", "WouldBlock"]


class IpcError(SamzampError):
    """Root of the ring errors; raised itself when a ring cannot be attached or is corrupt."""


class WouldBlock(IpcError):
    """A ``*_nowait`` call could not proceed without waiting: the ring is full, or empty."""


class QueueClosed(IpcError):
    """This end was closed (by ``close()`` in this process) and cannot be used again."""


class PeerGone(IpcError):
    """The other end is gone: for a sender, the receiver closed or its process exited; for a receiver,
    the sender's process exited without closing, and every record it published has been received."""


class EndOfQueue(IpcError):
    """The sender closed the ring and every record it sent has been received: the normal end."""


class SendTimeout(IpcError, TimeoutError):
    """A blocking send did not finish in time. ``sent`` records of the call went in; the rest did not."""

    def __init__(self, message: str, sent: int) -> None:
        super().__init__(message)
        self.sent = sent
