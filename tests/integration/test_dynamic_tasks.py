"""Against the real broker: a running container applies job models that move tasks out and back in.

One processor in this process (inline, and with worker processes), input flowing the whole time.
The second model drops half the tasks, the third brings them back. The evidence is the task's own
(``recording_tasks.TenureTask``): each tenure (init to close) records every message it processed
with its partition's count from a changelogged store, and holds a per-task flock while it runs.
"""

from __future__ import annotations

import asyncio
import threading
from collections import defaultdict
from pathlib import Path

import pytest
from confluent_kafka import Producer
from kafka_util import counts_store, create_topic, job_toml, whole_lines, write_config

from samzamp.config import load_config, validate
from samzamp.model.job_model import JobModel
from samzamp.processor.stream_processor import StreamProcessor

PARTITIONS = 4
MOVED = ["Partition 1", "Partition 3"]
TIMEOUT_S = 120


class Records:
    """What every tenure of every task recorded (all record files, re-read on each call)."""

    def __init__(self, record_dir: Path) -> None:
        self.dir = record_dir

    def lines(self) -> list[list[str]]:
        return [line.split() for f in sorted(self.dir.glob("*.log")) for line in whole_lines(f)]

    def processed(self) -> dict[int, set[int]]:
        out: dict[int, set[int]] = defaultdict(set)
        for parts in self.lines():
            if parts[0] == "T":
                out[int(parts[2])].add(int(parts[3]))
        return out


def _producer_thread(bootstrap: str, topic: str, stop: threading.Event, sent: dict[int, int]) -> threading.Thread:
    """Produce to every partition in turn until ``stop`` is set (then flush); counts into ``sent``."""

    def run() -> None:
        p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 2})
        i = 0
        while not stop.is_set() or i < 400:  # at least some input before the first apply
            part = i % PARTITIONS
            p.produce(topic, f"m{i}".encode(), str(part).encode(), partition=part)
            sent[part] = sent.get(part, 0) + 1
            i += 1
            if i % 20 == 0:
                p.poll(0)
                stop.wait(0.002)  # paced, so the input keeps flowing through both applies
        assert p.flush(30) == 0

    t = threading.Thread(target=run, name="test-producer", daemon=True)
    t.start()
    return t


async def _until(cond: object, what: str, run: asyncio.Task[None]) -> None:
    """Wait for a condition on the record files (written by the tasks, maybe in other processes)."""
    assert callable(cond)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + TIMEOUT_S
    while not cond():
        if run.done():
            await run  # the processor failed: its error is the news
            raise AssertionError(f"the processor stopped while waiting for {what}")
        assert loop.time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


@pytest.mark.parametrize("pool", [0, 1, 2])
def test_tasks_moved_out_and_back_in_while_input_flows(broker, unique, tmp_path: Path, pool: int) -> None:
    topic = f"dyn-{unique}"
    create_topic(broker.bootstrap_servers, topic, PARTITIONS)
    rec = tmp_path / "rec"
    rec.mkdir()
    locks = tmp_path / "locks"
    locks.mkdir()
    extra = counts_store(f"kafka.counts-log-{unique}")
    top = f'"job.logged.store.base.dir" = "{tmp_path / "state"}"\n"test.lock.dir" = "{locks}"'
    cfg = write_config(
        tmp_path / "job.toml", job_toml(f"dyn-{unique}", "recording_tasks:TenureTask", topic, rec, extra, top)
    )
    settings = validate(
        load_config(
            cfg,
            {"systems.kafka.bootstrap.servers": broker.bootstrap_servers, "job.container.thread.pool.size": pool},
        )
    )
    records = Records(rec)
    stop_producing = threading.Event()
    sent: dict[int, int] = {}
    generations: list[set[str]] = []

    async def main() -> None:
        processor = StreamProcessor(settings)
        run = asyncio.create_task(processor.run())
        producer = _producer_thread(broker.bootstrap_servers, topic, stop_producing, sent)
        try:
            await _until(lambda: all(len(records.processed()[p]) >= 50 for p in range(PARTITIONS)), "a start", run)
            container = processor.container
            assert container is not None
            full = container.job_model
            assert sorted(full.tasks) == [f"Partition {p}" for p in range(PARTITIONS)]
            staying = [n for n in full.tasks if n not in MOVED]
            await container.apply(full.only(staying, generation=2))
            generations.append(set(container.tasks))
            before = {p: len(s) for p, s in records.processed().items()}
            # The staying tasks go on while the moved ones are away.
            await _until(
                lambda: all(len(records.processed()[p]) >= before[p] + 50 for p in (0, 2)), "staying tasks", run
            )
            await container.apply(JobModel(3, dict(full.tasks)))
            generations.append(set(container.tasks))
            await _until(
                lambda: all(len(records.processed()[p]) >= before[p] + 100 for p in range(PARTITIONS)),
                "the moved tasks back at work",
                run,
            )
            stop_producing.set()
            await asyncio.to_thread(producer.join, 60)
            await _until(
                lambda: all(len(records.processed()[p]) >= sent[p] for p in range(PARTITIONS)), "all input", run
            )
            processor.stop()
            await asyncio.wait_for(run, TIMEOUT_S)
        finally:
            stop_producing.set()
            if not run.done():
                processor.stop()
                await asyncio.wait_for(run, TIMEOUT_S)

    asyncio.run(main())
    assert generations == [{"Partition 0", "Partition 2"}, {f"Partition {p}" for p in range(PARTITIONS)}]

    tenures: dict[str, list[tuple[int, int, int]]] = defaultdict(list)  # tenure -> (partition, offset, count)
    spans: dict[str, list[int]] = {}  # tenure -> [init ns, close ns]
    for parts in records.lines():
        if parts[0] == "T":
            tenures[parts[1]].append((int(parts[2]), int(parts[3]), int(parts[4])))
        elif parts[0] == "I":
            spans[parts[1]] = [int(parts[2]), -1]
        elif parts[0] == "E":
            spans[parts[1]][1] = int(parts[2])

    # Every input was processed at least once.
    processed = records.processed()
    for p in range(PARTITIONS):
        assert processed[p] == set(range(sent[p])), f"partition {p}: missing {set(range(sent[p])) - processed[p]}"

    by_partition: dict[int, list[str]] = defaultdict(list)
    for tenure, rows in tenures.items():
        partitions = {p for p, _, _ in rows}
        assert len(partitions) == 1, f"tenure {tenure} processed partitions {partitions}"
        by_partition[partitions.pop()].append(tenure)
        offsets = [o for _, o, _ in rows]
        # Order within the tenure: one partition's offsets, consecutive.
        assert offsets == list(range(offsets[0], offsets[0] + len(offsets))), f"tenure {tenure} out of order"
        # State restored where the task landed: the count goes on from where the last tenure left it
        # (the leaving task's final commit covered all it processed, so nothing was counted twice).
        assert all(n == o + 1 for _, o, n in rows), f"tenure {tenure}: a count does not match its offset"

    for p in range(PARTITIONS):
        ts = sorted(by_partition[p], key=lambda t: spans[t][0])
        # A staying task ran untouched through both applies; a moved one had two tenures.
        assert len(ts) == (2 if f"Partition {p}" in MOVED else 1), f"partition {p}: tenures {ts}"
        for t in ts:
            assert spans[t][1] > spans[t][0], f"tenure {t} of partition {p} never closed"
        # Never in two places at once: each tenure closed before the next one began.
        for a, b in zip(ts, ts[1:], strict=False):
            assert spans[a][1] < spans[b][0], f"partition {p}: tenure {b} began before {a} closed"
