"""What the container needs of the processor's system clients (``samzamp.processor.systems.Systems``).

The processor owns the clients for the life of the process; the container, one layer below, only
uses them while it holds a job model, so it sees them through this protocol.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol

from samzamp.systems.base import GroupOffsetCommitter, SystemAdmin, SystemConsumer, SystemProducer

if TYPE_CHECKING:
    from samzamp.storage.manager import ChangelogSink
    from samzamp.systems.kafka.client_config import KafkaClientSettings

__all__ = ["SystemClients"]


class SystemClients(Protocol):
    """Event loop thread only, between the processor's start and stop of the clients."""

    @property
    def admins(self) -> Mapping[str, SystemAdmin]:
        """Each system's admin, by system name."""

    @property
    def producers(self) -> dict[str, SystemProducer]:
        """Each system's producer for task outputs, by system name; the tasks send through them."""

    @property
    def kafka(self) -> Mapping[str, KafkaClientSettings]:
        """The clients of the systems that hold changelogs: the stores read their changelogs with them."""

    def consumer(self, system: str) -> SystemConsumer:
        """A new consumer of ``system`` for the tasks' inputs; the container starts and stops it."""

    def group_offsets(self, system: str) -> GroupOffsetCommitter | None:
        """The committer of input offsets to the consumer group of ``system``'s input consumers,
        owned by the processor; None for a system without consumer groups."""

    def changelog_producers(self) -> Mapping[str, ChangelogSink]:
        """The stores' changelog producers, one per changelog system, owned by the processor."""
