"""The checkpoint topic read in steps and written in batches: a read after others returns what one
read of the whole topic would (the newest record of each task), whatever was written between, a
hole in flight included; concurrent writes go out together and each waits for its own."""

from __future__ import annotations

import asyncio
import random

from samzamp.api.envelope import SystemStreamPartition
from samzamp.commit.checkpoint import Checkpoint
from samzamp.commit.checkpoint_writes import CheckpointWrites
from samzamp.commit.topic_checkpoint import TopicCheckpointManager
from samzamp.systems.base import RawMessage
from samzamp.systems.inmemory.system import InMemoryStreams, InMemorySystemAdmin, InMemorySystemProducer

TOPIC = "__samza_checkpoint_ver_1_for_inc_1"
GROUPER = "GroupByPartition"


def _ssp(task: int) -> SystemStreamPartition:
    return SystemStreamPartition("kafka", "in", task)


class HidingAdmin(InMemorySystemAdmin):
    """Reads as the in-memory admin does, except that the offsets in ``hidden`` are not there yet
    (a batch another producer's write makes visible only after later ones)."""

    hidden: set[int] = set()

    def read_all(self, stream: str, partition: int, start: int = 0) -> list[RawMessage]:
        return [m for m in super().read_all(stream, partition, start) if m[0] not in self.hidden]


def _pair(streams: InMemoryStreams) -> tuple[TopicCheckpointManager, TopicCheckpointManager]:
    """A writer, and a reader that reads in steps through a ``HidingAdmin``."""
    writer = TopicCheckpointManager(InMemorySystemAdmin(streams), InMemorySystemProducer(streams), TOPIC, GROUPER)
    writer.create_topic()
    admin = HidingAdmin(streams)
    admin.hidden = set()
    reader = TopicCheckpointManager(admin, InMemorySystemProducer(streams), TOPIC, GROUPER)
    return writer, reader


def _offsets(found: dict[str, Checkpoint]) -> dict[str, dict[SystemStreamPartition, int]]:
    return {task: dict(c.offsets()) for task, c in found.items()}


def _fresh(streams: InMemoryStreams) -> dict[str, dict[SystemStreamPartition, int]]:
    """What one read of the whole topic says."""
    manager = TopicCheckpointManager(InMemorySystemAdmin(streams), InMemorySystemProducer(streams), TOPIC, GROUPER)
    return _offsets(manager.read_last_checkpoints())


def test_reads_in_steps_say_what_one_read_of_the_whole_topic_says() -> None:
    rng = random.Random(7)
    streams = InMemoryStreams()
    writer, reader = _pair(streams)
    for _round in range(30):
        for _ in range(rng.randrange(0, 20)):
            task = rng.randrange(8)
            writer.write_checkpoint(f"Partition {task}", {_ssp(task): rng.randrange(1000)})
        assert _offsets(reader.read_last_checkpoints()) == _fresh(streams)


def test_a_hole_in_flight_at_one_read_is_read_at_the_next() -> None:
    streams = InMemoryStreams()
    writer, reader = _pair(streams)
    admin = reader._admin
    assert isinstance(admin, HidingAdmin)
    for offset in range(6):  # offsets 0-5: task 0 at 0, 10, 20; task 1 at 0, 10, 20
        writer.write_checkpoint(f"Partition {offset % 2}", {_ssp(offset % 2): offset * 10 // 2})
    admin.hidden = {3, 4}  # task 1's 10 and task 0's 20 are not visible yet; 5 is
    seen = _offsets(reader.read_last_checkpoints())
    assert seen == {"Partition 0": {_ssp(0): 10}, "Partition 1": {_ssp(1): 25}}
    admin.hidden = set()
    assert _offsets(reader.read_last_checkpoints()) == _fresh(streams)
    writer.write_checkpoint("Partition 0", {_ssp(0): 99})
    assert _offsets(reader.read_last_checkpoints()) == _fresh(streams)


def test_a_hole_where_a_read_in_steps_starts_is_read_at_the_next() -> None:
    streams = InMemoryStreams()
    writer, reader = _pair(streams)
    admin = reader._admin
    assert isinstance(admin, HidingAdmin)
    for offset in range(3):  # offsets 0-2
        writer.write_checkpoint("Partition 0", {_ssp(0): offset})
    assert _offsets(reader.read_last_checkpoints()) == {"Partition 0": {_ssp(0): 2}}
    writer.write_checkpoint("Partition 1", {_ssp(1): 7})  # offset 3, just past where that read stopped
    writer.write_checkpoint("Partition 0", {_ssp(0): 9})
    admin.hidden = {3}  # not visible yet; 4 is
    assert _offsets(reader.read_last_checkpoints()) == {"Partition 0": {_ssp(0): 9}}
    admin.hidden = set()
    assert (
        _offsets(reader.read_last_checkpoints())
        == _fresh(streams)
        == {
            "Partition 0": {_ssp(0): 9},
            "Partition 1": {_ssp(1): 7},
        }
    )


def test_a_hole_that_stays_is_passed() -> None:
    streams = InMemoryStreams()
    writer, reader = _pair(streams)
    admin = reader._admin
    assert isinstance(admin, HidingAdmin)
    for offset in range(4):
        writer.write_checkpoint("Partition 0", {_ssp(0): offset})
    admin.hidden = {1}  # as a compacted record: never there
    assert _offsets(reader.read_last_checkpoints()) == {"Partition 0": {_ssp(0): 3}}
    assert reader._read.position.next_offset == 1  # read again from the hole once
    assert _offsets(reader.read_last_checkpoints()) == {"Partition 0": {_ssp(0): 3}}
    assert reader._read.position.next_offset == 4  # then passed


def test_a_topic_recreated_shorter_is_read_whole_again() -> None:
    streams = InMemoryStreams()
    writer, reader = _pair(streams)
    for offset in range(5):
        writer.write_checkpoint(f"Partition {offset}", {_ssp(offset): offset})
    assert len(reader.read_last_checkpoints()) == 5
    streams.partitions[TOPIC][0].clear()  # recreated: empty, then one record at offset 0
    writer.write_checkpoint("Partition 9", {_ssp(9): 1})
    assert isinstance(reader._admin, HidingAdmin)
    # The in-memory admin reads nothing from past the end: read from offset 0 as a broker's reset would.
    reader._admin.read_all = lambda stream, partition, start=0: InMemorySystemAdmin.read_all(  # type: ignore[method-assign]
        reader._admin, stream, partition, 0 if start > len(streams.partitions[TOPIC][0]) else start
    )
    assert _offsets(reader.read_last_checkpoints()) == {"Partition 9": {_ssp(9): 1}}


def test_concurrent_writes_go_out_together_and_each_is_written() -> None:
    streams = InMemoryStreams()
    writer, _ = _pair(streams)
    flushes = 0
    producer = writer._producer
    flush = producer.flush

    def counting_flush(timeout_s: float) -> int:
        nonlocal flushes
        flushes += 1
        return flush(timeout_s)

    producer.flush = counting_flush  # type: ignore[method-assign]

    writes = CheckpointWrites(writer)

    async def main() -> list[None]:
        return await asyncio.gather(*(writes.write(f"Partition {t}", {_ssp(t): t + 1}, {}) for t in range(200)))

    asyncio.run(main())
    assert _fresh(streams) == {f"Partition {t}": {_ssp(t): t + 1} for t in range(200)}
    assert flushes <= 2  # the first alone, then everything that arrived while it waited
