"""The high-level API (app.class) on the real embedded broker: word count through an intermediate
topic and a window, inline, in worker processes and with virtual tasks; windows across SIGKILLs;
stream-table and stream-stream joins; bad applications; the example configs as they are."""

from __future__ import annotations

import json
import random
import re
import signal
import struct
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import msgspec
import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from graph_apps import TTL
from kafka_util import ROOT, Container, child_env, create_topic, read_all, read_checkpoint_records, wait_until

from samzamp.commit.checkpoint import Checkpoint, decode_checkpoint, decode_key
from samzamp.config.settings import checkpoint_topic_name
from samzamp.consume.key_bucket import key_bucket
from samzamp.systems.partitioner import murmur2_partition

pytestmark = pytest.mark.integration

WORD_COUNT_APP = "samzamp.examples.word_count_app:WordCountApp"


def app_toml(job: str, app_class: str, topics: dict[str, tuple[str, int]], state: Path | None = None) -> str:
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
{streams}"""


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
    assert last.startswith("samzamp run: config error: "), last
    for name in names:
        assert name in last, f"{name!r} not in {last!r}"
    return last


# -- Acceptance 4: bad applications exit 2 with one line naming the thing ----------------------------

UNREACHABLE = "127.0.0.1:9"  # never contacted: these fail while the config is planned


@pytest.mark.parametrize(
    ("app_class", "extra", "names"),
    [
        pytest.param(
            "samzamp.examples.word_count_app:WordCountApp",
            '[task]\nclass = "samzamp.examples.word_count:WordCountTask"\n',
            ("app.class", "task.class", "both set"),
            id="app-and-task-class",
        ),
        pytest.param(
            "graph_apps:NotAnApp",
            "",
            ("app.class", "graph_apps:NotAnApp", "StreamApplication"),
            id="not-a-stream-application",
        ),
        pytest.param(
            "graph_apps:DuplicateIdApp",
            "",
            ("app.class", "bad-1-partition_by-twice", "'twice'"),
            id="duplicate-op-id",
        ),
    ],
)
def test_a_bad_application_exits_2_naming_it(
    tmp_path: Path, app_class: str, extra: str, names: tuple[str, ...]
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


class TopicTail:
    """The records of a topic's partitions from the oldest on, as they arrive: each ``read`` adds
    what the broker hands over now. For waiting on progress; a complete read after the writers
    stopped is ``read_all``'s (Tansu's ListOffsets lags a producer batch behind, so ends are never
    taken from it)."""

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        self.records: list[Message] = []
        self._consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "test-app-tail"})
        self._consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])

    def read(self) -> list[Message]:
        """Every record so far."""
        while batch := self._consumer.consume(5000, 0.1):
            self.records += [m for m in batch if m.error() is None]
        return self.records

    def close(self) -> None:
        self._consumer.close()


def read_partitions(bootstrap: str, topic: str, partitions: int) -> dict[int, list[Message]]:
    """Every record of the topic by partition, in offset order (the writers stopped)."""
    out: dict[int, list[Message]] = {p: [] for p in range(partitions)}
    for m in read_all(bootstrap, topic, list(range(partitions))):
        out[m.partition()].append(m)
    for p, records in out.items():
        records.sort(key=lambda m: m.offset())
        offsets = [m.offset() for m in records]
        assert offsets == list(range(len(records))), f"{topic}[{p}]: offsets {offsets[:5]}..{offsets[-5:]}"
    return out


def long_counts(records: Iterable[Message]) -> Counter[str]:
    """The sum of the counts per word of ``word -> count`` records (string keys, long values)."""
    out: Counter[str] = Counter()
    for m in records:
        out[m.key().decode()] += struct.unpack(">q", m.value())[0]
    return out


def partition_count(bootstrap: str, topic: str) -> int | None:
    topics = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).topics
    return len(topics[topic].partitions) if topic in topics else None


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
    out = TopicTail(bootstrap, counts_topic, PARTITIONS)
    try:
        wait_until(lambda: sum(long_counts(out.read()).values()) >= WORDS, 180, "every word counted", c)
        counted = time.monotonic() - started
        assert long_counts(out.read()) == expected
        # They stay so: one more word for each task, sent now, comes out in a pane of a later window,
        # which its task fires after every window it had open before (a timer fires in end order).
        marks = sentinels("zz-mark-", PARTITIONS, factor)
        produce_lines(bootstrap, lines_topic, PARTITIONS, marks)
        wait_until(lambda: set(marks) <= set(long_counts(out.read())), 60, "every task's mark", c)
        assert c.stop() == 0, c.log_text()[-3000:]
    finally:
        out.close()
    assert long_counts(read_all(bootstrap, counts_topic, list(range(PARTITIONS)))) == expected + Counter(marks)
    assert partition_count(bootstrap, intermediate_topic(job)) == PARTITIONS
    print(f"{WORDS} words: counted {counted:.1f} s after the start (pool {pool}, factor {factor})")


# -- Acceptance 2: windows across SIGKILLs --------------------------------------------------------------

KILLS = 5
CHUNK_WORDS = 20_000  # each run's new input; the clean run's too


def _last_checkpoints(checkpoints: Iterable[Checkpoint]) -> dict[tuple[str, int], int]:
    """(stream, partition) -> the offset the last of ``checkpoints`` covers (the last processed)."""
    last: dict[tuple[str, int], int] = {}
    for cp in checkpoints:
        for o in cp.input_offsets:
            last[(o.stream, o.partition)] = o.offset
    return last


def _decoded(records: Iterable[Message]) -> list[Checkpoint]:
    out = []
    for m in records:
        key = decode_key(m.key())
        assert key is not None
        out.append(decode_checkpoint(key.task_name, m.value()))
    return out


def _replayed(
    words: dict[int, list[list[str]]], checkpoints: dict[tuple[str, int], int], topic: str, ends: dict[int, int]
) -> Counter[str]:
    """The words a restart may read again: in each partition of ``topic``, from the offset after the
    last checkpointed one (the oldest without a checkpoint) to the end the partition had at the kill.
    ``words``: partition -> the words of the record at each offset."""
    out: Counter[str] = Counter()
    for p, end in ends.items():
        start = checkpoints.get((topic, p), -1) + 1
        out.update(w for record in words[p][start:end] for w in record)
    return out


def test_windows_across_sigkills_lose_no_word_and_repeat_only_what_at_least_once_allows(
    broker, unique: str, tmp_path: Path
) -> None:
    """Five SIGKILLs at random points of a windowed word count (pool 2), then a clean run.

    What at least once allows, and why. A run is killed; the next restores each task's window store
    to the task's last checkpoint (its changelog up to the checkpoint's marker) and reads its inputs
    again from that checkpoint on. So:

    - the store never counts a record twice: it holds what was folded up to the checkpoint, and only
      what came after the checkpoint is folded again;
    - stage 1 (lines -> partition_by) sends again the words of the lines it reads again: the
      intermediate topic holds I(w) >= input(w) records of word w, at most input(w) + R1(w), where
      R1(w) counts w in each lines partition from its last checkpoint to its end at each kill;
    - stage 2 (intermediate -> window): a window that fired after the checkpoint fires again from its
      restored state, with the same WindowKey (word, pane id) and a count no larger than before, so
      panes are deduplicated by (word, pane id), keeping the largest count. But the records after the
      checkpoint are folded again into the window open *at the restart* (processing time), another
      pane: so a word's deduplicated total T(w) counts each of its intermediate records at least once,
      T(w) >= I(w), and at most R2(w) more, R2(w) counting w in each intermediate partition from its
      last checkpoint to its end at each kill.

    So input(w) <= I(w) <= input(w) + R1(w) and I(w) <= T(w) <= I(w) + R2(w). And windows opened in a
    killed run come out of a later run (restored, not lost).
    """
    bootstrap = broker.bootstrap_servers
    job, lines_topic, counts_topic = f"wk-{unique}", f"lines-{unique}", f"counts-{unique}"
    intermediate = intermediate_topic(job)
    create_topic(bootstrap, lines_topic, PARTITIONS)
    rng = random.Random(31)
    vocabulary = [f"word{i}" for i in range(300)]
    config = tmp_path / "job.toml"
    config.write_text(
        app_toml(
            job,
            "graph_apps:PaneCountApp",
            {"lines": (lines_topic, PARTITIONS), "word-counts": (counts_topic, PARTITIONS)},
            state=tmp_path / "state",
        )
    )
    overrides = ("job.container.thread.pool.size=2", "streams.word-counts.samza.msg.serde=json")
    all_lines: list[str] = []  # line i is at offset i // 4 of partition i % 4 (one producer, in order)

    def lines_ends() -> dict[int, int]:
        return {p: len(all_lines[p::PARTITIONS]) for p in range(PARTITIONS)}

    def add_lines(lines: list[str]) -> None:
        produce_lines(bootstrap, lines_topic, PARTITIONS, lines, first=len(all_lines))
        all_lines.extend(lines)

    # Per kill: the last checkpoints, and the ends of the lines and of the intermediate topic.
    kills: list[tuple[dict[tuple[str, int], int], dict[int, int], dict[int, int]]] = []
    run_starts: list[float] = []
    out = TopicTail(bootstrap, counts_topic, PARTITIONS)
    sent = TopicTail(bootstrap, intermediate, PARTITIONS)
    try:
        for run in range(KILLS):
            before = sum(count_words(all_lines).values())
            add_lines(make_lines(rng, CHUNK_WORDS, vocabulary))
            run_starts.append(time.time())
            c = Container(config, bootstrap, *overrides, log=tmp_path / f"run-{run}.log")
            # A random point of the run: once stage 1 sent some part of the new words on; in every
            # other run also once a pane came out (so windows fired after the last checkpoint).
            target = before + int(rng.uniform(0.2, 1.0) * CHUNK_WORDS)
            wait_until(lambda t=target: len(sent.read()) >= t, 120, f"run {run}: {target} words sent on", c)
            if run % 2:
                seen = len(out.read())
                wait_until(lambda n=seen: len(out.read()) > n, 60, f"run {run}: a pane", c)
            c.kill()
            assert c.proc.returncode == -signal.SIGKILL, f"run {run} exited by itself:\n{c.log_text()[-3000:]}"
            ends = {p: len(records) for p, records in read_partitions(bootstrap, intermediate, PARTITIONS).items()}
            kills.append((_last_checkpoints(read_checkpoint_records(bootstrap, job)), lines_ends(), ends))
        # The clean run, with new input too. Once stage 1 checkpointed every line (so every word it
        # sends is in the intermediate topic), one more word for each task: its pane comes out after
        # every window the task had open (a timer fires windows in the order they end).
        add_lines(make_lines(rng, CHUNK_WORDS, vocabulary))
        run_starts.append(time.time())
        c = Container(config, bootstrap, *overrides, log=tmp_path / "run-clean.log")
        final = lines_ends()
        checkpoints = TopicTail(bootstrap, checkpoint_topic_name(job, "1"), 1)

        def every_line_checkpointed() -> bool:
            last = _last_checkpoints(_decoded(checkpoints.read()))
            return all(last.get((lines_topic, p), -1) == n - 1 for p, n in final.items())

        try:
            wait_until(every_line_checkpointed, 120, "every line processed and checkpointed", c)
        finally:
            checkpoints.close()
        marks = sentinels("zz-mark-", PARTITIONS)
        add_lines(marks)
        wait_until(lambda: set(marks) <= {m.key().decode() for m in out.read()}, 60, "every task's mark", c)
        assert c.stop() == 0, c.log_text()[-3000:]
    finally:
        out.close()
        sent.close()

    expected = count_words(all_lines)
    panes: dict[tuple[str, str], int] = {}  # (word, pane id) -> the largest count it came with
    restored = 0  # panes of windows opened in one run that a later run fired
    emitted = [m for records in read_partitions(bootstrap, counts_topic, PARTITIONS).values() for m in records]
    for m in emitted:
        word, value = m.key().decode(), json.loads(m.value())
        key = (word, value["pane"])
        panes[key] = max(panes.get(key, 0), value["count"])
        emitted_ms = m.timestamp()[1]
        run_start = max(t for t in run_starts if emitted_ms >= t * 1000)
        restored += int(value["pane"]) < run_start * 1000
    totals: Counter[str] = Counter()
    for (word, _pane), n in panes.items():
        totals[word] += n

    # The words of each record by partition and offset: the lines as produced, the intermediate
    # records as read back (each a word as its JSON key).
    lines_at = {p: [line.lower().split() for line in all_lines[p::PARTITIONS]] for p in range(PARTITIONS)}
    inter_at = {
        p: [[json.loads(m.key())] for m in records]
        for p, records in read_partitions(bootstrap, intermediate, PARTITIONS).items()
    }
    written = Counter(w for records in inter_at.values() for record in records for w in record)
    r1: Counter[str] = Counter()
    r2: Counter[str] = Counter()
    for checkpoints, lines_end, inter_end in kills:
        r1 += _replayed(lines_at, checkpoints, lines_topic, lines_end)
        r2 += _replayed(inter_at, checkpoints, intermediate, inter_end)

    assert set(written) == set(expected)
    lost_on_the_way = {w: (written[w], n) for w, n in expected.items() if written[w] < n}
    assert not lost_on_the_way, f"words lost on the way to the intermediate topic: {lost_on_the_way}"
    lost = {w: (totals[w], written[w]) for w in expected if totals[w] < written[w]}
    assert not lost, f"words lost from the windows' totals (total, intermediate records): {lost}"
    too_many_sent = {w: (written[w], n, r1[w]) for w, n in expected.items() if written[w] > n + r1[w]}
    assert not too_many_sent, f"intermediate records beyond what stage 1's replays allow: {too_many_sent}"
    too_many = {w: (totals[w], written[w], r2[w]) for w in expected if totals[w] > written[w] + r2[w]}
    assert not too_many, f"counts beyond what stage 2's replays allow (total, intermediate, replayable): {too_many}"
    assert restored > 0, "no window opened in a killed run came out of a later run"
    print(
        f"words {sum(expected.values())}; intermediate records {sum(written.values())} (replayable lines' "
        f"words {sum(r1.values())}); window totals {sum(totals.values())} (replayable records "
        f"{sum(r2.values())}); panes {len(emitted)}, {len(panes)} distinct, {restored} of restored windows"
    )


# -- Acceptance 3: joins -----------------------------------------------------------------------------


def produce_keyed(bootstrap: str, topic: str, records: Iterable[tuple[str, Any]], *, as_json: bool = True) -> None:
    """Values as JSON (None: a null), or strings as they are, under string keys, placed as Kafka's
    Java client places them (murmur2): two topics with one partition count put a key in the same
    partition."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "partitioner": "murmur2_random"})
    for key, value in records:
        p.produce(topic, (json.dumps(value) if as_json else value).encode(), key.encode())
    assert p.flush(30) == 0


def keyed_json(records: Iterable[Message]) -> list[tuple[str | None, Any]]:
    return [(None if m.key() is None else m.key().decode(), json.loads(m.value())) for m in records]


def test_stream_table_join_enriches_each_click_with_the_profile_its_user_had(
    broker, unique: str, tmp_path: Path
) -> None:
    """The click enrichment example: a table filled from "profiles", "clicks" joined with it. Each
    phase's profiles are in the table (its changelog shows them) before its clicks are sent, so every
    output is known exactly: a click of a user with a profile comes out once, with the profile the
    user had; one with none (never had one, or deleted) is dropped."""
    bootstrap = broker.bootstrap_servers
    job = f"ce-{unique}"
    profiles_topic, clicks_topic, out_topic = f"profiles-{unique}", f"clicks-{unique}", f"enriched-{unique}"
    partitions = 2
    for topic in (profiles_topic, clicks_topic):
        create_topic(bootstrap, topic, partitions)
    config = tmp_path / "job.toml"
    config.write_text(
        app_toml(
            job,
            "samzamp.examples.click_enrichment:ClickEnrichmentApp",
            {
                "profiles": (profiles_topic, partitions),
                "clicks": (clicks_topic, partitions),
                "enriched-clicks": (out_topic, partitions),
            },
            state=tmp_path / "state",
        )
    )
    changelog = f"{job}-1-table-profiles"
    users = [f"user{i}" for i in range(40)]
    profiles = {u: {"name": f"Name {i}", "tier": "gold" if i % 3 == 0 else "basic"} for i, u in enumerate(users)}
    c = Container(config, bootstrap, "job.container.thread.pool.size=2", log=tmp_path / "run.log")
    table_log = TopicTail(bootstrap, changelog, partitions)
    out = TopicTail(bootstrap, out_topic, partitions)
    expected: list[tuple[str, Any]] = []

    def clicks_phase(phase: int, table: dict[str, Any]) -> None:
        # Clicks of every user, after each one of a user the table never had: once every click
        # of a user with a profile came out, every click before it in its partition was processed.
        clicks = [(u, {"user": u, "page": f"/p{phase}-{j}"}) for j in range(3) for u in [f"nobody{phase}", *users]]
        produce_keyed(bootstrap, clicks_topic, clicks)
        expected.extend((u, {**table[u], **click}) for u, click in clicks if u in table)
        wait_until(lambda: len(out.read()) >= len(expected), 60, f"phase {phase}'s enriched clicks", c)

    try:
        produce_keyed(bootstrap, profiles_topic, profiles.items())
        wait_until(lambda: len(table_log.read()) >= len(users), 60, "every profile in the table's changelog", c)
        clicks_phase(0, profiles)
        # Some profiles change and some are deleted (a null profile).
        changed = {u: {"name": profiles[u]["name"], "tier": "platinum"} for u in users[:10]}
        deleted = users[10:15]
        produce_keyed(bootstrap, profiles_topic, [*changed.items(), *((u, None) for u in deleted)])
        wait_until(
            lambda: len(table_log.read()) >= len(users) + len(changed) + len(deleted), 60, "the changes logged", c
        )
        assert sum(m.value() is None for m in table_log.read()) == len(deleted)
        table = {u: p for u, p in {**profiles, **changed}.items() if u not in deleted}
        clicks_phase(1, table)
        assert c.stop() == 0, c.log_text()[-3000:]
    finally:
        table_log.close()
        out.close()
    got = keyed_json(m for records in read_partitions(bootstrap, out_topic, partitions).values() for m in records)
    assert sorted(got, key=repr) == sorted(expected, key=repr)


def test_stream_stream_join_joins_each_pair_within_the_ttl_once_and_none_further_apart(
    broker, unique: str, tmp_path: Path
) -> None:
    """graph_apps.StreamJoinApp: orders joined with payments of the same key, ttl 1 s.

    Pairs sent together are joined once each (by the second of the two to arrive). Then orders whose
    payments come late: once the orders are in the join's left store (its changelog shows them, so
    they were processed by then), the test waits the ttl out in real time and only then sends their
    payments, together with new pairs: the new pairs join (so the late payments were processed),
    the late ones do not."""
    bootstrap = broker.bootstrap_servers
    job = f"sj-{unique}"
    orders_topic, payments_topic, out_topic = f"orders-{unique}", f"payments-{unique}", f"paid-{unique}"
    partitions = 2
    for topic in (orders_topic, payments_topic):
        create_topic(bootstrap, topic, partitions)
    config = tmp_path / "job.toml"
    config.write_text(
        app_toml(
            job,
            "graph_apps:StreamJoinApp",
            {"orders": (orders_topic, partitions), "payments": (payments_topic, partitions), "paid": (out_topic, 2)},
            state=tmp_path / "state",
        )
    )
    left_log = TopicTail(bootstrap, f"{job}-1-join-paid-L", partitions)
    out = TopicTail(bootstrap, out_topic, partitions)
    c = Container(config, bootstrap, "job.container.thread.pool.size=0", log=tmp_path / "run.log")
    pairs = [f"o{i}" for i in range(100)]
    late = [f"late{i}" for i in range(50)]
    fresh = [f"n{i}" for i in range(50)]
    # Each partition has late keys and fresh ones after them: the fresh pairs' joins show the late
    # payments before them were processed.
    assert {murmur2_partition(k.encode(), partitions) for k in late} == set(range(partitions))
    assert {murmur2_partition(k.encode(), partitions) for k in fresh} == set(range(partitions))
    try:
        # Pairs sent together: the payments after the orders, and the other way round.
        produce_keyed(bootstrap, orders_topic, ((k, f"{k}:order") for k in pairs[:50]), as_json=False)
        produce_keyed(bootstrap, payments_topic, ((k, f"{k}:payment") for k in pairs), as_json=False)
        produce_keyed(bootstrap, orders_topic, ((k, f"{k}:order") for k in pairs[50:]), as_json=False)
        wait_until(lambda: len(out.read()) >= len(pairs), 60, "every pair joined", c)
        # Orders whose payments come after the ttl.
        logged = len(left_log.read())
        produce_keyed(bootstrap, orders_topic, ((k, f"{k}:order") for k in late), as_json=False)
        wait_until(lambda: len(left_log.read()) >= logged + len(late), 60, "the late orders stored", c)
        # The ttl is processing time: it passes on the wall clock, which no event marks.
        time.sleep(TTL.total_seconds() + 0.2)
        produce_keyed(
            bootstrap,
            payments_topic,
            [*((k, f"{k}:payment") for k in late), *((k, f"{k}:payment") for k in fresh)],
            as_json=False,
        )
        produce_keyed(bootstrap, orders_topic, ((k, f"{k}:order") for k in fresh), as_json=False)
        wait_until(lambda: len(out.read()) >= len(pairs) + len(fresh), 60, "the fresh pairs joined", c)
        assert c.stop() == 0, c.log_text()[-3000:]
    finally:
        left_log.close()
        out.close()
    got = [v for _k, v in keyed_json(m for rs in read_partitions(bootstrap, out_topic, 2).values() for m in rs)]
    expected = [{"order": f"{k}:order", "payment": f"{k}:payment"} for k in [*pairs, *fresh]]
    assert sorted(got, key=repr) == sorted(expected, key=repr)


# -- Acceptance 7: the example configs, as they are ------------------------------------------------------


class ExampleJob:
    """``samzamp-container configs/<name>.toml`` with nothing changed: its own embedded broker, its
    stores under the test's directory (the current directory of the container)."""

    def __init__(self, name: str, tmp_path: Path) -> None:
        self.log = tmp_path / f"{name}.log"
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "samzamp.cli.container", str(ROOT / "configs" / f"{name}.toml")],
                stdout=out,
                stderr=out,
                cwd=str(tmp_path),
                env=child_env(),
            )
        wait_until(lambda: "starting offsets" in self.text() or self.proc.poll() is not None, 60, f"{name} to start")
        assert self.proc.poll() is None, self.text()[-3000:]
        found = re.search(r"samzamp: embedded broker at (\S+)", self.text())
        assert found, self.text()[-3000:]
        self.bootstrap = found.group(1)

    def text(self) -> str:
        return self.log.read_text()

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        assert self.proc.wait(timeout=60) == 0, self.text()[-3000:]

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)


def test_example_word_count_application_runs_as_it_is(tmp_path: Path) -> None:
    """configs/word-count-app.toml on its own embedded broker: lines in, a count per word and window
    out, summing to the words sent."""
    job = ExampleJob("word-count-app", tmp_path)
    try:
        lines = ["To be or not to be", "that is the question", "to be"]
        produce_lines(job.bootstrap, "lines", 4, lines)
        expected = count_words(lines)
        out = TopicTail(job.bootstrap, "word-counts", 4)
        try:
            wait_until(lambda: long_counts(out.read()) == expected, 60, "the counts")
        finally:
            out.close()
        assert partition_count(job.bootstrap, "word-count-app-1-partition_by-by-word") == 4
        job.stop()
    finally:
        job.kill()


def test_example_click_enrichment_runs_as_it_is(tmp_path: Path) -> None:
    """configs/click-enrichment.toml on its own embedded broker: profiles in, then clicks, enriched
    clicks out (the click of a user without a profile dropped)."""
    job = ExampleJob("click-enrichment", tmp_path)
    try:
        produce_keyed(job.bootstrap, "profiles", [("ada", {"name": "Ada", "tier": "gold"}), ("bob", {"name": "Bob"})])
        table = TopicTail(job.bootstrap, "click-enrichment-1-table-profiles", 2)
        try:
            wait_until(lambda: len(table.read()) == 2, 60, "the profiles in the table")
        finally:
            table.close()
        # eve has no profile; bob's click comes after hers in their partition, so once bob's
        # enriched click is out, eve's click was processed (and dropped).
        assert murmur2_partition(b"eve", 2) == murmur2_partition(b"bob", 2)
        clicks = [("eve", {"user": "eve", "page": "/"}), ("ada", {"user": "ada", "page": "/pricing"})]
        clicks += [("bob", {"user": "bob", "page": "/docs"})]
        produce_keyed(job.bootstrap, "clicks", clicks)
        out = TopicTail(job.bootstrap, "enriched-clicks", 2)
        try:
            wait_until(lambda: len(out.read()) >= 2, 60, "the enriched clicks")
        finally:
            out.close()
        # All of it, before the container (and its broker) stops.
        got = keyed_json(
            m for records in read_partitions(job.bootstrap, "enriched-clicks", 2).values() for m in records
        )
        assert sorted(got, key=repr) == [
            ("ada", {"user": "ada", "page": "/pricing", "name": "Ada", "tier": "gold"}),
            ("bob", {"user": "bob", "page": "/docs", "name": "Bob"}),
        ]
        job.stop()
    finally:
        job.kill()
