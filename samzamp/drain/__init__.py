"""Drain (Samza SEP-31): stop a job once everything it already fetched is processed and committed."""

from samzamp.drain.notification import (
    DRAIN_NAMESPACE,
    DrainMode,
    DrainNotification,
    cleanup,
    cleanup_all,
    read_drain_notifications,
    write_drain_notification,
)

__all__ = [
    "DRAIN_NAMESPACE",
    "DrainMode",
    "DrainNotification",
    "cleanup",
    "cleanup_all",
    "read_drain_notifications",
    "write_drain_notification",
]
