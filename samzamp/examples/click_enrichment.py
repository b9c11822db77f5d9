"""Click enrichment as an application: a stream-table join.

``profiles`` (user -> profile, JSON) fills the table ``profiles``: each message upserts its user's
record, a null profile deletes it. Each message of ``clicks`` (user -> click, JSON, the click
carrying its ``user``) joins its user's profile and goes to ``enriched-clicks`` as user -> the click
with the profile's fields; a click whose user has no profile is dropped (counted in the task's
``join-dropped-messages``).

A table is local to a task: ``profiles`` and ``clicks`` must be partitioned alike (the same
partition count, keys placed by the same partitioner), so a user's clicks reach the task that holds
the user's profile. The table is an LMDB store changelogged to ``<job.name>-<job.id>-table-profiles``.
"""

from __future__ import annotations

from typing import Any

from samzamp import KV, StreamApplication, StreamApplicationDescriptor

__all__ = ["ClickEnrichmentApp", "enrich"]


def enrich(click: dict[str, Any], profile: dict[str, Any]) -> KV:
    """The click with its user's profile: ``KV(user, click + profile)`` (the click's fields win)."""
    return KV(click["user"], {**profile, **click})


class ClickEnrichmentApp(StreamApplication):
    """``profiles`` -> table; ``clicks`` joined with the table -> ``enriched-clicks``."""

    def describe(self, app: StreamApplicationDescriptor) -> None:
        profiles = app.table("profiles")
        app.input_stream("profiles", key_serde="string", msg_serde="json").send_to(profiles)
        (
            app.input_stream("clicks", key_serde="string", msg_serde="json")
            .join(profiles, enrich)
            .send_to(app.output_stream("enriched-clicks", key_serde="string", msg_serde="json"))
        )
