"""The high-level API (app.class) on the real embedded broker: word count through an intermediate
topic and a window, inline, in worker processes and with virtual tasks; windows across SIGKILLs;
stream-table and stream-stream joins; bad applications; the example configs as they are."""

from __future__ import annotations

import random
import struct
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path

import msgspec
import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from kafka_util import ROOT, Container, child_env, create_topic, wait_until

from samzamp.consume.key_bucket import key_bucket
from samzamp.systems.partitioner import murmur2_partition

pytestmark = pytest.mark.integration

WORD_COUNT_APP = "samzamp.examples.word_count_app:WordCountApp"


def app_toml(
    job: str, app_class: str, topics: dict[str, tuple[str, int]], extra: str = "", state: Path | None = None
) -> str:
    """A job running ``app_class``; ``topics``: stream id -> (its topic, its partition count), so
    tests sharing the broker never share a topic; its stores under ``state`` (else ./state)."""
    top = f'"job.logged.store.base.dir" = "{state}"\n"job.non-logged.store.base.dir" = "{state}"\n' if state else ""
    streams = "".join(
        f'\n[streams.{sid}]\nsamza.physical.name = "{topic}"\npartitions = {n}\n' for sid, (topic, n) in topics.items()
    )
    return f"""{top}
[job]
name = "{job}"
default.system = "kafka"

[app]
class = "{app_class}"

[task]
commit.ms = 500

[systems.kafka]
samza.factory = "kafka"
default.stream.samza.offset.default = "oldest"

[metrics]
log.interval.ms = 0
{streams}
{extra}
"""


def _run_to_exit(config: Path, bootstrap: str | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    args = [sys.executable, "-m", "samzamp.cli.container", str(config)]
    if bootstrap is not None:
        args += ["--set", f"systems.kafka.bootstrap.servers={bootstrap}"]
    return subprocess.run(
        args, env=child_env(), cwd=str(ROOT), capture_output=True, text=True, timeout=timeout, check=False
    )


def _assert_exit_2_naming(proc: subprocess.CompletedProcess[str], *names: str) -> str:
    """The container exited 2 and its last line on stderr is a config error naming each of ``names``."""
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 2, f"exit {proc.returncode}\n{proc.stderr[-3000:]}"
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("samzamp-container: config error: "), last
    for name in names:
        assert name in last, f"{name!r} not in {last!r}"
    return last


# -- Acceptance 4: bad applications exit 2 with one line naming the thing ----------------------------

UNREACHABLE = "127.0.0.1:9"  # never contacted: these fail while the config is planned


@pytest.mark.parametrize(
    ("case", "app_class", "extra", "names"),
    [
        (
            "app-and-task-class",
            "samzamp.examples.word_count_app:WordCountApp",
            '[task]\nclass = "samzamp.examples.word_count:WordCountTask"\n',
            ("app.class", "task.class", "both set"),
        ),
        (
            "not-a-stream-application",
            "graph_apps:NotAnApp",
            "",
            ("app.class", "graph_apps:NotAnApp", "StreamApplication"),
        ),
        ("duplicate-op-id", "graph_apps:DuplicateIdApp", "", ("app.class", "bad-1-partition_by-twice", "'twice'")),
    ],
)
def test_a_bad_application_exits_2_naming_it(
    tmp_path: Path, case: str, app_class: str, extra: str, names: tuple[str, ...]
) -> None:
    # Without the broker: the base points at a port nothing listens on, so a case that got past
    # planning would not exit 2 with a config error.
    config = tmp_path / "job.toml"
    config.write_text(
        f"""
[job]
name = "bad"
default.system = "kafka"

[app]
class = "{app_class}"

[systems.kafka]
samza.factory = "kafka"
bootstrap.servers = "{UNREACHABLE}"

[streams.lines]
samza.msg.serde = "string"

{extra}
"""
    )
    proc = _run_to_exit(config, timeout=60)
    _assert_exit_2_naming(proc, *names)
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_an_intermediate_topic_with_another_partition_count_exits_2_naming_it(
    broker, unique: str, tmp_path: Path
) -> None:
    """The job's partition_by topic exists with 2 partitions; the job wants 4 (its input's count)."""
    job = f"wc-{unique}"
    lines = f"lines-{unique}"
    intermediate = f"{job}-1-partition_by-by-word"
    create_topic(broker.bootstrap_servers, lines, 4)
    create_topic(broker.bootstrap_servers, intermediate, 2)
    config = tmp_path / "job.toml"
    config.write_text(
        app_toml(
            job,
            "samzamp.examples.word_count_app:WordCountApp",
            {"lines": (lines, 4), "word-counts": (f"counts-{unique}", 4)},
        )
    )
    last = _assert_exit_2_naming(
        _run_to_exit(config, broker.bootstrap_servers), intermediate, "2 partitions", "wants 4"
    )
    assert "job.intermediate.stream.partitions" in last


def test_a_join_of_streams_with_different_partition_counts_exits_2_naming_it(
    broker, unique: str, tmp_path: Path
) -> None:
    job = f"join-{unique}"
    config = tmp_path / "job.toml"
    orders, payments = f"orders-{unique}", f"payments-{unique}"
    config.write_text(
        app_toml(
            job,
            "graph_apps:StreamJoinApp",
            {"orders": (orders, 2), "payments": (payments, 4), "paid": (f"paid-{unique}", 2)},
        )
    )
    last = _assert_exit_2_naming(
        _run_to_exit(config, broker.bootstrap_servers), f"{job}-1-join-paid", f"{orders}: 2", f"{payments}: 4"
    )
    assert "different partition counts" in last


# -- Helpers: feeding lines, reading what came out ----------------------------------------------------


def intermediate_topic(job: str, op_id: str = "by-word") -> str:
    """The documented name of a partition_by's topic: ``<job.name>-<job.id>-partition_by-<id>``."""
    return f"{job}-1-partition_by-{op_id}"


def make_lines(rng: random.Random, words: int, vocabulary: list[str], per_line: int = 10) -> list[str]:
    """Lines of ``per_line`` words drawn from ``vocabulary`` (skewed: the first words are the most
    frequent; some capitalized, which the application lower-cases)."""
    weights = [1.0 / (i + 1) for i in range(len(vocabulary))]
    drawn = rng.choices(vocabulary, weights, k=words)
    drawn = [w.upper() if rng.random() < 0.05 else w for w in drawn]
    return [" ".join(drawn[i : i + per_line]) for i in range(0, words, per_line)]


def count_words(lines: Iterable[str]) -> Counter[str]:
    return Counter(w for line in lines for w in line.lower().split())


def produce_lines(bootstrap: str, topic: str, partitions: int, lines: list[str], first: int = 0) -> None:
    """Line i goes to partition (first + i) % partitions."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i, line in enumerate(lines):
        p.produce(topic, line.encode(), partition=(first + i) % partitions)
        if i % 2000 == 0:
            p.poll(0)
    assert p.flush(30) == 0


def sentinels(prefix: str, partitions: int, factor: int = 1) -> list[str]:
    """One word for each task of a word count over ``partitions`` partitions and ``factor`` key
    buckets: the task its partition_by (JSON key, murmur2) and key bucket send it to."""
    found: dict[tuple[int, int], str] = {}
    i = 0
    while len(found) < partitions * factor:
        word = f"{prefix}{i}"
        key = msgspec.json.encode(word)
        found.setdefault((murmur2_partition(key, partitions), key_bucket(key, 0, factor)), word)
        i += 1
    return [found[k] for k in sorted(found)]


class TopicReader:
    """Every record of a topic's partitions from the oldest, read on: ``read`` adds what arrived
    since the last read, up to each partition's end as it is when the read starts."""

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        self.records: list[Message] = []
        self._topic = topic
        self._next = dict.fromkeys(range(partitions), 0)  # partition -> the next offset to read
        self._consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "test-app-read"})
        self._consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])

    def read(self, timeout: float = 30) -> list[Message]:
        """Every record so far."""
        ends = {p: self._end(p) for p in self._next}
        deadline = time.monotonic() + timeout
        while any(self._next[p] < end for p, end in ends.items()):
            assert time.monotonic() < deadline, f"reading {self._topic} did not reach {ends} (at {self._next})"
            for m in self._consumer.consume(5000, 0.2):
                if m.error() is None:
                    self.records.append(m)
                    self._next[m.partition()] = m.offset() + 1
        return self.records

    def _end(self, partition: int) -> int:
        try:
            return int(
                self._consumer.get_watermark_offsets(TopicPartition(self._topic, partition), timeout=10, cached=False)[
                    1
                ]
            )
        except KafkaException as e:
            if e.args[0].code() == KafkaError._UNKNOWN_PARTITION:  # noqa: SLF001 - not created yet
                return 0
            raise

    def close(self) -> None:
        self._consumer.close()


def long_counts(records: Iterable[Message]) -> Counter[str]:
    """The sum of the counts per word of ``word -> count`` records (string keys, long values)."""
    out: Counter[str] = Counter()
    for m in records:
        out[m.key().decode()] += struct.unpack(">q", m.value())[0]
    return out


def partition_count(bootstrap: str, topic: str) -> int | None:
    topics = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).topics
    return len(topics[topic].partitions) if topic in topics else None


def wait_for(cond: Callable[[], bool], timeout: float, what: str, container: Container) -> None:
    wait_until(cond, timeout, what, container)


# -- Acceptance 1: word count as an application --------------------------------------------------------

WORDS = 200_000
PARTITIONS = 4


@pytest.mark.parametrize(("pool", "factor"), [(0, 1), (2, 1), (2, 2)], ids=["inline", "pool2", "pool2-factor2"])
def test_word_count_application_counts_every_word_exactly(
    broker, unique: str, tmp_path: Path, pool: int, factor: int
) -> None:
    """The example word count (flat_map -> partition_by(word) -> 2 s keyed tumbling window -> send_to)
    over 4 input partitions: the counts of all panes of a word sum to the word's count in the input,
    exactly, and stay so; the words went through the intermediate topic of the documented name,
    with the input's partition count."""
    bootstrap = broker.bootstrap_servers
    job, lines_topic, counts_topic = f"wc-{unique}", f"lines-{unique}", f"counts-{unique}"
    create_topic(bootstrap, lines_topic, PARTITIONS)
    vocabulary = [f"word{i}" for i in range(500)]
    lines = make_lines(random.Random(7), WORDS, vocabulary)
    expected = count_words(lines)
    assert sum(expected.values()) == WORDS
    produce_lines(bootstrap, lines_topic, PARTITIONS, lines)
    config = tmp_path / "job.toml"
    config.write_text(
        app_toml(
            job,
            WORD_COUNT_APP,
            {"lines": (lines_topic, PARTITIONS), "word-counts": (counts_topic, PARTITIONS)},
            state=tmp_path / "state",
        )
    )
    started = time.monotonic()
    c = Container(
        config,
        bootstrap,
        f"job.container.thread.pool.size={pool}",
        f"job.elasticity.factor={factor}",
        log=tmp_path / "run.log",
    )
    out = TopicReader(bootstrap, counts_topic, PARTITIONS)
    try:
        wait_for(lambda: sum(long_counts(out.read()).values()) >= WORDS, 180, "every word counted", c)
        counted = time.monotonic() - started
        assert long_counts(out.records) == expected
        # They stay so: one more word for each task, sent now, comes out in a pane of a later window,
        # which its task fires after every window it had open before (a timer fires in end order).
        marks = sentinels("zz-mark-", PARTITIONS, factor)
        produce_lines(bootstrap, lines_topic, PARTITIONS, marks)
        wait_for(lambda: set(marks) <= set(long_counts(out.read())), 60, "every task's mark", c)
        assert c.stop() == 0, c.log_text()[-3000:]
        out.read()
    finally:
        out.close()
    assert long_counts(out.records) == expected + Counter(marks)
    assert partition_count(bootstrap, intermediate_topic(job)) == PARTITIONS
    print(f"{WORDS} words: counted {counted:.1f} s after the start (pool {pool}, factor {factor})")
