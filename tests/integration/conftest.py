"""Session fixtures: one real embedded broker (Tansu on 127.0.0.1) and one real ZooKeeper (from
pyspark's jars, on 127.0.0.1) for every integration test that asks for them; Spark's JVMs set to
start quick."""

from __future__ import annotations

import itertools
import os
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


@pytest.fixture(scope="session", autouse=True)
def _spark_jvms_start_quick() -> Iterator[None]:
    """The Spark driver JVMs the tests start (the offline commands in local mode, and
    test_offline_spark's session) compile with C1 only: their jobs are a few dozen records, and
    C2's compiler threads, busy warming up code that will not run long, cost more than they win
    (about a quarter of a command's start on a 2-core machine). pyspark passes
    PYSPARK_SUBMIT_ARGS to spark-submit; a value already set is left alone."""
    mp = pytest.MonkeyPatch()
    if "PYSPARK_SUBMIT_ARGS" not in os.environ:
        mp.setenv("PYSPARK_SUBMIT_ARGS", "--driver-java-options=-XX:TieredStopAtLevel=1 pyspark-shell")
    try:
        yield
    finally:
        mp.undo()


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
