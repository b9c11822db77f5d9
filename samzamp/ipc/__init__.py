"""Shared-memory SPSC ring queues between processes (the native ``samzamp._ring``, typed).

The only package that imports ``samzamp._ring``. See ``samzamp.ipc.ring`` for the calling contract
(who may call what, from which process and thread), the limits and the event-loop protocol, and
``samzamp.ipc.errors`` for the error tree.
"""

from samzamp.ipc.errors import EndOfQueue, IpcError, PeerGone, QueueClosed, SendTimeout, WouldBlock
from samzamp.ipc.ring import (
    MAX_CAPACITY,
    MIN_CAPACITY,
    BytesLike,
    ReceiveEnd,
    ReceiveStatistics,
    Ring,
    RingSpec,
    SendEnd,
    SendStatistics,
    attach_ring,
    create_ring,
)

__all__ = [
    "MAX_CAPACITY",
    "MIN_CAPACITY",
    "BytesLike",
    "EndOfQueue",
    "IpcError",
    "PeerGone",
    "QueueClosed",
    "ReceiveEnd",
    "ReceiveStatistics",
    "Ring",
    "RingSpec",
    "SendEnd",
    "SendStatistics",
    "SendTimeout",
    "WouldBlock",
    "attach_ring",
    "create_ring",
]
