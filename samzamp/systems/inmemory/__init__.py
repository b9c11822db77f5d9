"""An in-process system for unit tests and ``samzamp.testing``: streams are lists in memory."""

from samzamp.systems.inmemory.system import (
    InMemoryStreams,
    InMemorySystemAdmin,
    InMemorySystemConsumer,
    InMemorySystemProducer,
)

__all__ = ["InMemoryStreams", "InMemorySystemAdmin", "InMemorySystemConsumer", "InMemorySystemProducer"]
