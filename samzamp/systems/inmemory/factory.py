"""The in-memory system's factory: its streams are lists in this process, shared by its clients."""

from __future__ import annotations

from samzamp.config.settings import JobSettings
from samzamp.config.system_kinds import INMEMORY
from samzamp.systems.base import SystemAdmin, SystemConsumer, SystemProducer
from samzamp.systems.factory import Place, System, SystemFactory
from samzamp.systems.inmemory.system import (
    InMemoryStreams,
    InMemorySystemAdmin,
    InMemorySystemConsumer,
    InMemorySystemProducer,
)
from samzamp.systems.registry import register

__all__ = ["InMemorySystem", "InMemorySystemFactory", "inmemory_streams"]


def inmemory_streams(place: Place) -> dict[str, InMemoryStreams]:
    """The in-memory systems' streams in ``place``, by system name (the owner may have put them there)."""
    streams: dict[str, InMemoryStreams] = place.shared.setdefault(INMEMORY.name, {})
    return streams


class InMemorySystem(System):
    def __init__(self, name: str, streams: InMemoryStreams) -> None:
        super().__init__(name)
        self.streams = streams

    def admin(self) -> SystemAdmin:
        return InMemorySystemAdmin(self.streams)

    def producer(self) -> SystemProducer:
        return InMemorySystemProducer(self.streams)

    def checkpoint_producer(self, outputs: SystemProducer) -> SystemProducer:
        return outputs  # a send is a list append: a checkpoint never waits behind outputs

    def consumer(self, group_id: str) -> SystemConsumer:
        return InMemorySystemConsumer(self.streams)


class InMemorySystemFactory(SystemFactory):
    kind = INMEMORY

    def open(self, settings: JobSettings, system: str, place: Place) -> System:
        return InMemorySystem(system, inmemory_streams(place).setdefault(system, InMemoryStreams()))


register(InMemorySystemFactory())
