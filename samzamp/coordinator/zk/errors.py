"""The errors of the ZooKeeper parts, beside samzamp.api.errors' tree::

SystemFailureError
├── ZkProtocolError   the job's coordination data was written by an incompatible protocol version
├── ZkValueError      a value stored on ZooKeeper is torn, corrupt or not samzamp's
└── MembershipExpired (samzamp.coordinator.job_coordinator)
    └── ZkSessionExpired   its session expired: it abandons its tasks and joins again
"""

from __future__ import annotations

from samzamp.api.errors import SystemFailureError
from samzamp.coordinator.job_coordinator import MembershipExpired

__all__ = ["ZkProtocolError", "ZkSessionExpired", "ZkValueError"]


class ZkProtocolError(SystemFailureError):
    """The root znode of a job holds another protocol version than this samzamp speaks.

    ``path``, ``found`` and ``expected`` hold its parts; the message says what to do.
    """

    def __init__(self, path: str, found: str, expected: str) -> None:
        super().__init__(
            f"ZooKeeper node {path} holds coordination protocol version {found!r}, this samzamp speaks "
            f"{expected!r}: run every processor of the job with one samzamp version, or give the job "
            "another job.id (or delete the node once no processor of the old version runs)"
        )
        self.path = path
        self.found = found
        self.expected = expected


class ZkValueError(SystemFailureError):
    """A value read from ZooKeeper failed its checks (torn, corrupt, or not written by samzamp):
    nothing of it is returned. ``path`` names its znode."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(
            f"the value at ZooKeeper node {path} {problem}: it was not written whole by samzamp's ZooKeeper "
            "store; write it again (or delete the node) once whatever damaged it is fixed"
        )
        self.path = path
        self.problem = problem


class ZkSessionExpired(MembershipExpired):
    """The processor's ZooKeeper session expired: its tasks may run elsewhere now. It abandons them
    without a commit and joins the job again as a new member."""
