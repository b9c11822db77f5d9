"""The plug-in face of a system, as Samza's ``SystemFactory``: one factory per kind of system makes,
for each configured system of that kind, the clients a process needs (admin, producers, consumers).

``SystemFactory.open`` is called once per system and process, by whoever owns the process's
clients (the processor's ``Systems``, a worker process, ``samzamp-drain``, the offline jobs); what
it returns, a ``System``, makes clients on demand and owns none of them: the caller stops each client
it made. What the systems of one process share (an embedded broker, the in-memory streams) lives in
the caller's ``Place``, never in the factory, so that several jobs in one process (tests) stay apart.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from samzamp.config.settings import JobSettings
from samzamp.config.system_kinds import SystemKind
from samzamp.systems.base import GroupOffsetCommitter, SystemAdmin, SystemConsumer, SystemProducer

__all__ = ["Place", "System", "SystemFactory"]


@dataclass
class Place:
    """Where a process's system clients are made, and what its systems share there.

    ``process`` is named in client ids ("" for the processor, ``worker-3``, ``drain``, ``offline``).
    ``embedded``: a system whose config names no address may be served by something this process
    starts (the Kafka system's embedded broker); False where another process owns the system's address.
    ``shared``: per kind (by its name), what that kind's systems share in this process (the in-memory
    streams, the embedded broker); each factory keeps its own entry and types it.
    ``stoppers``: what a factory started for the process (the embedded broker), stopped by ``stop()``
    after every client.
    """

    process: str = ""
    embedded: bool = False
    shared: dict[str, Any] = field(default_factory=dict)
    stoppers: list[Callable[[], None]] = field(default_factory=list)

    def stop(self) -> None:
        """Stop what the factories started here, last started first."""
        while self.stoppers:
            self.stoppers.pop()()


class System(ABC):
    """One configured system's clients in one process, made on demand.

    Only the ``Place`` owner's thread calls these (before the clients start); each client is
    stopped by the caller that made it.
    """

    def __init__(self, name: str) -> None:
        self.name = name

    @abstractmethod
    def admin(self) -> SystemAdmin:
        """A new admin: stream metadata, offsets, stream creation."""

    @abstractmethod
    def producer(self) -> SystemProducer:
        """A new producer for the tasks' outputs."""

    @abstractmethod
    def checkpoint_producer(self, outputs: SystemProducer) -> SystemProducer:
        """The producer for the job's own records (checkpoints), given the system's ``outputs``
        producer: a system whose flush waits for every send returns a producer of its own, so that a
        checkpoint never waits for task outputs; one that cannot fall behind may return ``outputs``."""

    def metrics_producer(self, outputs: SystemProducer) -> SystemProducer:
        """The producer of the metrics snapshots (a snapshot reporter's), given the system's ``outputs``
        producer: as ``checkpoint_producer``, one of its own where a flush waits for every send, so
        that a report never waits for task outputs nor a commit for a report, and a report's failed
        delivery never reaches a commit."""
        return self.checkpoint_producer(outputs)

    @abstractmethod
    def consumer(self, group_id: str) -> SystemConsumer:
        """A new consumer for the tasks' inputs, in consumer group ``group_id`` where the system has groups."""

    def group_offsets(self, group_id: str) -> GroupOffsetCommitter | None:
        """A new committer of input offsets to the consumer group that ``consumer(group_id)``'s
        consumers are in; None for a system without consumer groups."""
        return None

    def changelog_clients(self) -> Any:
        """What the stores' changelog reader and producer take to reach this system
        (``storage.manager.TaskStorage``); only a kind that can hold changelogs has them.

        Typed ``Any`` because this module sits below each kind's own client types (the Kafka
        system's ``KafkaClientSettings``), and the changelog code is the Kafka system's.
        """
        msg = f"system {self.name!r} cannot hold changelogs"
        raise NotImplementedError(msg)

    def address_config(self) -> dict[str, Any]:
        """Config keys, with the values this process resolved, that another process needs to reach
        this system as this one does (a Kafka system's brokers, maybe the embedded broker's); {} if none."""
        return {}


class SystemFactory(ABC):
    """Makes the ``System`` of each configured system of one kind; registered by the kind's name."""

    kind: SystemKind

    @abstractmethod
    def open(self, settings: JobSettings, system: str, place: Place) -> System:
        """``system``'s clients for this process (``settings.systems[system]`` is of this kind).
        May start what ``place`` allows (an embedded broker); raises ConfigError or MissingExtraError
        when the system cannot be reached from here."""
