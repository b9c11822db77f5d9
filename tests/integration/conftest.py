"""Session fixtures: one real embedded broker (Tansu on 127.0.0.1) and one real ZooKeeper (from
pyspark's jars, on 127.0.0.1) for every integration test that asks for them."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest
from kafka_util import Container, forget_record_files

from samzamp.coordinator.zk.server import EmbeddedZooKeeper
from samzamp.systems.kafka import EmbeddedBroker

_names = itertools.count()


@pytest.fixture(scope="session")
def broker() -> Iterator[EmbeddedBroker]:
    b = EmbeddedBroker(die_with_parent=True).start()
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture(scope="session")
def zookeeper() -> Iterator[EmbeddedZooKeeper]:
    """Its tick is 500 ms: sessions of 1 s and more are honoured (see samzamp.coordinator.zk.server)."""
    z = EmbeddedZooKeeper(die_with_parent=True).start()
    try:
        yield z
    finally:
        z.stop()


@pytest.fixture
def unique() -> str:
    """A fresh suffix for topic and job names, so tests sharing the broker never collide."""
    return f"t{next(_names)}"


@pytest.fixture(autouse=True)
def _no_container_outlives_its_test() -> Iterator[None]:
    """A failed test must not leave its container (and its workers) running into the next tests;
    what was read of its record files is forgotten."""
    yield
    for c in list(Container.started):
        if c.alive():
            c.kill()
    Container.started.clear()
    forget_record_files()
