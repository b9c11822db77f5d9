"""DrainNotification and the drain utilities (Samza's DrainUtils): write, read, clean up.

A notification asks the deployment with run id ``run_id`` to drain. It lives in the metadata store
under namespace ``samza-drain-v1`` keyed by its uuid, as JSON with Samza's field names
(``{"uuid", "runId", "drainMode"}``). Containers act only on notifications for their own run id;
the container that drained a run deletes that run's notifications (``cleanup``).
"""

from __future__ import annotations

import enum
import logging
import uuid

import msgspec

from samzamp.coordinator.metadata_store import MetadataStore

__all__ = [
    "DRAIN_NAMESPACE",
    "DrainMode",
    "DrainNotification",
    "cleanup",
    "cleanup_all",
    "read_drain_notifications",
    "write_drain_notification",
]

log = logging.getLogger(__name__)

DRAIN_NAMESPACE = "samza-drain-v1"


class DrainMode(enum.StrEnum):
    """DEFAULT: process what was fetched, flush windows, commit, stop (user state is not drained)."""

    DEFAULT = "DEFAULT"


class DrainNotification(msgspec.Struct, frozen=True, rename={"run_id": "runId", "drain_mode": "drainMode"}):
    uuid: str
    run_id: str
    drain_mode: DrainMode = DrainMode.DEFAULT


def write_drain_notification(store: MetadataStore, run_id: str) -> DrainNotification:
    """Ask the deployment ``run_id`` to drain (a new notification with a random uuid)."""
    if not run_id:
        raise ValueError("a drain notification needs a run id")
    notification = DrainNotification(str(uuid.uuid4()), run_id)
    store.put(notification.uuid, msgspec.json.encode(notification))
    return notification


def read_drain_notifications(store: MetadataStore) -> list[DrainNotification]:
    """Every notification in the store (of any run), oldest write first."""
    out = []
    for key, raw in store.all().items():
        try:
            out.append(msgspec.json.decode(raw, type=DrainNotification))
        except msgspec.DecodeError as e:
            log.warning("ignoring an unreadable drain notification %r: %s", key, e)
    return out


def cleanup(store: MetadataStore, run_id: str) -> int:
    """Delete the notifications for ``run_id``; returns how many."""
    mine = [n for n in read_drain_notifications(store) if n.run_id == run_id]
    for n in mine:
        store.delete(n.uuid)
    return len(mine)


def cleanup_all(store: MetadataStore) -> int:
    """Delete every notification; returns how many."""
    keys = list(store.all())
    for key in keys:
        store.delete(key)
    return len(keys)
