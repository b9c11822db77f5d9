"""``make demo``: the word-count example end to end on the embedded broker, then its output.

Starts Tansu on 127.0.0.1, writes the words of a short text to the ``lines`` topic (keyed by word,
so each word lives in one partition and one task counts it), runs configs/word-count.toml in this
process until every word is counted and the last window has emitted, stops it (final commit), and
prints the top counts read back from ``word-counts``.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from pathlib import Path

from samzamp.cli.common import report_failure
from samzamp.config import load_config, validate
from samzamp.processor.stream_processor import StreamProcessor
from samzamp.systems.kafka import EmbeddedBroker, KafkaClientSettings, KafkaSystemAdmin, KafkaSystemProducer

__all__ = ["main"]

TEXT = """
Samza processes streams of messages. A job is made of tasks, and each task owns partitions of its
input streams. The container runs the tasks in an event loop; it checkpoints the offsets of the
messages its tasks have fully processed, so that after a failure the job resumes where it was.
Tasks can keep state in local stores, and every change to a store goes to a changelog stream, so
the state survives the loss of the machine. Streams in, streams out, state that survives.
"""

CONFIG = Path(__file__).resolve().parents[2] / "configs" / "word-count.toml"


async def _run(bootstrap: str, words: list[str]) -> dict[str, int]:
    config = load_config(CONFIG, {"systems.kafka.bootstrap.servers": bootstrap, "metrics.log.interval.ms": 0})
    processor = StreamProcessor(validate(config))
    run = asyncio.create_task(processor.run())
    while processor.run_loop is None or not processor.run_loop.tasks:
        await asyncio.sleep(0.05)
        if run.done():
            await run
    assert processor.container is not None
    tasks = processor.container.tasks.values()
    # samzamp's own Kafka clients play the outside world's part: confluent-kafka stays in systems/kafka.
    clients = KafkaClientSettings("kafka", bootstrap, "samzamp-demo")
    producer = KafkaSystemProducer(clients)
    for w in words:
        producer.send("lines", w.encode(), w.encode(), None, None)
    producer.flush(30)
    producer.stop()
    print(f"demo: wrote {len(words)} words to 'lines'; counting ...", flush=True)
    # Done when every word was processed, then one more window so the last counts are emitted.
    while sum(t.m_processed.count for t in tasks) < len(words):
        await asyncio.sleep(0.05)
    windows = sum(t.m_window_calls.count for t in tasks)
    while sum(t.m_window_calls.count for t in tasks) < windows + len(tasks):
        await asyncio.sleep(0.05)
    processor.stop()
    await run

    admin = KafkaSystemAdmin(clients)
    counts: dict[str, int] = {}
    for p in range(admin.partition_counts(["word-counts"])["word-counts"]):
        for _offset, key, value, _ts in admin.read_all("word-counts", p):  # oldest first: the last count wins
            counts[(key or b"").decode()] = int.from_bytes(value or b"", "big", signed=True)
    admin.stop()
    return counts


def main() -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    words = [w.strip(".,;").lower() for w in TEXT.split()]
    started = time.monotonic()
    try:
        broker = EmbeddedBroker().start()
    except Exception as e:  # e.g. no samzamp[embedded]: one line that says what to install
        return report_failure("demo", e)
    try:
        print(f"demo: embedded broker (tansu) at {broker.bootstrap_servers}", flush=True)
        counts = asyncio.run(_run(broker.bootstrap_servers, words))
    finally:
        broker.stop()
    expected: dict[str, int] = {}
    for w in words:
        expected[w] = expected.get(w, 0) + 1
    print("demo: top words from 'word-counts':")
    for word, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:10]:
        print(f"  {word:<12} {n}")
    ok = counts == expected
    print(
        f"demo: {len(counts)} distinct words, {'all counts correct' if ok else 'COUNTS DIFFER'} ({time.monotonic() - started:.1f} s)"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
