"""A changelog reader never waits forever, against the real broker: a partition or topic that does
not exist is an error within the bound, naming the topic, the partition and how many partitions the
topic has; a broker that does not answer is an error within the bound as well. The one reader
(``ChangelogReader``), as the container (restore, trim) and the offline jobs call it.

Not here: a start offset the partition does not hold. The reader fails on it (auto.offset.reset =
error) where Kafka answers OFFSET_OUT_OF_RANGE; Tansu answers a fetch past the end with nothing (the
reader then fails at its stall bound) and has no DeleteRecords to trim a partition's start."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Iterable, Iterator

import pytest
from kafka_util import create_topic, produce

from samzamp.api.errors import SystemFailureError
from samzamp.offline.changelog import ChangelogError, ChangelogSource, PartitionReader
from samzamp.systems.kafka import EmbeddedBroker, KafkaClientSettings
from samzamp.systems.kafka.changelog import CHANGELOG_STALL_S, read_changelog

pytestmark = pytest.mark.integration

# Far below the bound: a missing partition is known from the topic's metadata, not by waiting.
PROMPTLY_S = 10.0


def _clients(bootstrap: str) -> KafkaClientSettings:
    return KafkaClientSettings("kafka", bootstrap, "samzamp-test-changelog-reader")


def _read(records: Callable[[], Iterable[object]], limit_s: float) -> tuple[list[object], BaseException | None, float]:
    """Everything ``records()`` yields and what it raised, read on a thread so that a reader that
    hangs fails the test after ``limit_s`` instead of hanging it."""
    got: list[object] = []
    raised: list[BaseException] = []

    def run() -> None:
        try:
            got.extend(records())
        except BaseException as e:  # the outcome under test
            raised.append(e)

    started = time.monotonic()
    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(limit_s)
    assert not t.is_alive(), f"the reader was still waiting after {limit_s:.0f} s"
    return got, (raised[0] if raised else None), time.monotonic() - started


@pytest.fixture
def changelog(broker: EmbeddedBroker, unique: str) -> str:
    name = f"changelog-{unique}"
    create_topic(broker.bootstrap_servers, name, 2)
    produce(broker.bootstrap_servers, name, 2, 6)
    return name


@pytest.mark.parametrize("last", [None, 4], ids=["to-end", "to-a-cut"])
def test_a_missing_partition_is_an_error_naming_topic_partition_and_count(
    broker: EmbeddedBroker, changelog: str, last: int | None
) -> None:
    clients = _clients(broker.bootstrap_servers)
    got, error, took = _read(lambda: read_changelog(clients, changelog, 5, -2, last), PROMPTLY_S * 3)
    assert got == []
    assert isinstance(error, SystemFailureError), error
    assert took < PROMPTLY_S, f"took {took:.1f} s"
    message = str(error)
    assert f"changelog {changelog}[5] does not exist" in message
    assert "has 2 partitions (0..1)" in message
    assert "add partitions" in message
    # The partitions that exist read as before.
    got, error, _ = _read(lambda: read_changelog(clients, changelog, 1, -2, None), PROMPTLY_S * 3)
    assert error is None
    assert [o for o, _k, _v in got] == [0, 1, 2]  # type: ignore[misc]


def test_a_missing_topic_is_an_error(broker: EmbeddedBroker, unique: str) -> None:
    clients = _clients(broker.bootstrap_servers)
    topic = f"no-such-changelog-{unique}"
    got, error, took = _read(lambda: read_changelog(clients, topic, 0, -2, None), PROMPTLY_S * 3)
    assert isinstance(error, SystemFailureError), error
    assert took < PROMPTLY_S, f"took {took:.1f} s"
    assert f"changelog topic {topic} does not exist" in str(error)


def test_the_offline_reader_fails_the_same_way(broker: EmbeddedBroker, changelog: str) -> None:
    source = ChangelogSource("kafka", changelog, _clients(broker.bootstrap_servers))
    got, error, took = _read(lambda: PartitionReader(source, 3), PROMPTLY_S * 3)
    assert isinstance(error, ChangelogError), error
    assert took < PROMPTLY_S, f"took {took:.1f} s"
    assert f"changelog {changelog}[3] does not exist" in str(error)
    assert "has 2 partitions" in str(error)
    got, error, _ = _read(lambda: PartitionReader(source, 0), PROMPTLY_S * 3)
    assert error is None
    assert [o for o, _k, _v in got] == [0, 1, 2]  # type: ignore[misc]


def test_a_start_at_the_end_reads_nothing_promptly_and_is_no_error(broker: EmbeddedBroker, changelog: str) -> None:
    # A local store that is up to date restores from the changelog's end. The readers fail on a start
    # the partition does not hold (auto.offset.reset = error); the end itself is one it holds, even
    # where ListOffsets answers lower than the end (Tansu). Partition 0 holds offsets 0..2.
    clients = _clients(broker.bootstrap_servers)
    got, error, took = _read(lambda: read_changelog(clients, changelog, 0, 3, None), PROMPTLY_S * 3)
    assert (got, error) == ([], None)
    assert took < PROMPTLY_S, f"took {took:.1f} s"
    reader = PartitionReader(ChangelogSource("kafka", changelog, clients), 0, start=3)
    got, error, _ = _read(lambda: reader, PROMPTLY_S * 3)
    assert (got, error, reader.end) == ([], None, 3)


@pytest.fixture
def paused_broker() -> Iterator[EmbeddedBroker]:
    """A broker of this test's own (the session's is shared), stopped with SIGSTOP: connections are
    accepted by the kernel, nothing is ever answered."""
    b = EmbeddedBroker(die_with_parent=True).start()
    try:
        create_topic(b.bootstrap_servers, "paused", 1)
        os.kill(b.process.pid, signal.SIGSTOP)
        try:
            yield b
        finally:
            os.kill(b.process.pid, signal.SIGCONT)
    finally:
        b.stop()


def test_a_broker_that_does_not_answer_is_an_error_within_the_bound(paused_broker: EmbeddedBroker) -> None:
    clients = _clients(paused_broker.bootstrap_servers)
    stall_s = 3.0
    assert stall_s < CHANGELOG_STALL_S  # the bound a job gets; this test cannot wait a minute
    _, error, took = _read(lambda: read_changelog(clients, "paused", 0, -2, None, stall_s=stall_s), stall_s * 10)
    assert isinstance(error, SystemFailureError), error
    assert stall_s <= took < stall_s + PROMPTLY_S, f"took {took:.1f} s"
    assert "changelog paused[0]" in str(error)
    assert "within 3 s" in str(error)
