"""The coordinator stream read in steps: each read returns what one read of the whole topic would
(the newest value of each live key), whatever was written, deleted or held back in between."""

from __future__ import annotations

import random

from samzamp.coordinator.metadata_store import CoordinatorStreamStore
from samzamp.systems.base import RawMessage
from samzamp.systems.inmemory.system import InMemoryStreams, InMemorySystemAdmin, InMemorySystemProducer

TOPIC = "__samza_coordinator_inc_1"


class HidingAdmin(InMemorySystemAdmin):
    """Reads as the in-memory admin does, except that the offsets in ``hidden`` are not there yet
    (a batch another producer's write makes visible only after later ones)."""

    def __init__(self, streams: InMemoryStreams) -> None:
        super().__init__(streams)
        self.hidden: set[int] = set()
        self.starts: list[int] = []  # where each read began

    def read_all(self, stream: str, partition: int, start: int = 0) -> list[RawMessage]:
        self.starts.append(start)
        return [m for m in super().read_all(stream, partition, start) if m[0] not in self.hidden]


def _stores() -> tuple[InMemoryStreams, CoordinatorStreamStore, CoordinatorStreamStore, HidingAdmin]:
    """The streams, a writer, and a reader that reads in steps through a ``HidingAdmin``."""
    streams = InMemoryStreams()
    writer = CoordinatorStreamStore(InMemorySystemAdmin(streams), InMemorySystemProducer(streams), TOPIC)
    writer.create_topic()
    admin = HidingAdmin(streams)
    reader = CoordinatorStreamStore(admin, InMemorySystemProducer(streams), TOPIC)
    return streams, writer, reader, admin


def _fresh(streams: InMemoryStreams) -> dict[tuple[str, str], bytes]:
    return CoordinatorStreamStore(InMemorySystemAdmin(streams), InMemorySystemProducer(streams), TOPIC).read()


def test_a_read_in_steps_equals_a_fresh_read_and_starts_where_the_last_one_stopped() -> None:
    rng = random.Random(7)
    streams, writer, reader, admin = _stores()
    for _ in range(40):
        for _ in range(rng.randrange(1, 6)):
            ns, key = rng.choice("ab"), str(rng.randrange(8))
            if rng.random() < 0.2:
                writer.namespace(ns).delete(key)
            else:
                writer.namespace(ns).put(key, str(rng.random()).encode())
        assert reader.read() == _fresh(streams)
    end = len(streams.partitions[TOPIC][0])
    assert admin.starts[-1] > 0
    assert reader.read() == _fresh(streams)
    assert admin.starts[-1] == end


def test_a_batch_held_back_is_read_at_the_next_read() -> None:
    streams, writer, reader, admin = _stores()
    writer.namespace("a").put("k", b"1")
    writer.namespace("a").put("k", b"2")  # offset 1: held back, as another producer's batch can be
    writer.namespace("a").delete("gone")
    writer.namespace("a").put("j", b"3")
    admin.hidden = {1}
    assert reader.read() == {("a", "k"): b"1", ("a", "j"): b"3"}
    admin.hidden = set()
    assert reader.read() == _fresh(streams) == {("a", "k"): b"2", ("a", "j"): b"3"}
    assert admin.starts[-1] == 1  # read again from the hole
    # Held back at the start of a read, and still missing when read again from there (compacted):
    # passed then.
    admin.hidden = {4}
    writer.namespace("b").put("x", b"4")
    writer.namespace("b").put("y", b"5")
    assert ("b", "y") in reader.read()
    assert admin.starts[-1] == 4
    reader.read()
    assert admin.starts[-1] == 4
    reader.read()
    assert admin.starts[-1] == 6


def test_a_recreated_topic_is_read_whole_again() -> None:
    class FromOldest(HidingAdmin):  # a broker that answers a read past the end from the oldest record
        def read_all(self, stream: str, partition: int, start: int = 0) -> list[RawMessage]:
            records = super().read_all(stream, partition, start)
            return records or super().read_all(stream, partition, 0)

    streams, writer, _reader, _admin = _stores()
    reader = CoordinatorStreamStore(FromOldest(streams), InMemorySystemProducer(streams), TOPIC)
    for i in range(5):
        writer.namespace("a").put(str(i), b"old")
    assert len(reader.read()) == 5
    streams.partitions[TOPIC][0].clear()  # recreated, shorter
    writer.namespace("b").put("new", b"1")
    assert reader.read() == {("b", "new"): b"1"}


def test_the_caller_owns_what_a_read_returns() -> None:
    _streams, writer, reader, _admin = _stores()
    writer.namespace("a").put("k", b"1")
    first = reader.read()
    first.clear()
    assert reader.read() == {("a", "k"): b"1"}


def test_namespaces_come_from_one_read() -> None:
    _streams, writer, reader, admin = _stores()
    for ns in "abc":
        writer.namespace(ns).put_all({f"{ns}{i}": str(i).encode() for i in range(3)})
    assert reader.namespaces("a", "b", "x") == {
        "a": writer.namespace("a").all(),
        "b": writer.namespace("b").all(),
        "x": {},
    }
    assert len(admin.starts) == 1
