"""The word-count application against the same job written as a low-level StreamTask, side by side.

One embedded broker (Tansu, memory only, 127.0.0.1) serves both. The input topic (4 partitions,
``--words`` words in lines of 10, drawn from ``--vocabulary`` words with Zipf-like frequencies) is
written once; then, ``--repeat`` rounds, each job runs once per pool size (``--pools``, default 2),
the two jobs alternating which goes first from round to round. Each run is a fresh container with
its own job.id, its own re-keying and output topics and its own stores, reading the input from its
oldest offset:

app        bench/app_word_count_task.py:BenchWordCountApp: the example application
           (samzamp.examples.word_count_app: flat_map -> partition_by(word) -> keyed tumbling window
           -> send_to) with 1 s windows.
low-level  bench/app_word_count_task.py:WordCountLowLevelTask: the same two stages by hand in one
           StreamTask: lines are split and each word sent keyed by itself to a re-keying topic (JSON
           key and value); words read back are counted in a changelogged LMDB store; each window
           (task.window.ms = 1000) sends the counts of the words counted since the last one and
           deletes them from the store.

Both do the same work per word: a keyed send through a topic of 4 partitions, a read back, a store
read and write (each logged to the store's changelog), and one output per word and window.

A run is timed by its outputs: this process reads them as they land (a few thousand: one per word
and window) and keeps (CreateTime, words counted so far). The rate is their steady rate (noop's
steady_rate: the slope from 10% to 90% of the words, so neither start-up nor the last window's wait
counts). Also printed: start -> the first re-keyed word (start-up), first re-keyed word -> the
output that completes the count (end to end, which includes up to two windows' wait at the end),
and the CPU of the container and its workers over the run. A run must count every word exactly and
exit 0 on SIGTERM.

Prints each round's rates and app / low-level, then the medians and the median of the rounds'
ratios. Target: app / low-level >= 0.7 at pool 2. Exits 0 whatever the ratio. With BENCH_LOG_DIR,
the container logs are kept there.

    .venv/bin/python bench/app_word_count.py [--words N] [--vocabulary V] [--repeat R] [--pools 2]
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import noop
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from samzamp.systems.kafka import EmbeddedBroker

INPUT_TOPIC = "bench-wc-lines"
PARTITIONS = noop.PARTITIONS
TARGET = 0.7
WORDS_PER_LINE = 10
JOBS = ("app", "low-level")


@dataclass(frozen=True)
class Result:
    job: str
    pool: int
    rate: float  # steady rate of words counted, words/s
    startup_s: float  # container start -> the first re-keyed word
    end_to_end_s: float  # the first re-keyed word -> the output completing the count
    cpu: float  # CPU seconds of the container and its workers over the run, per second of it
    outputs: int


def make_lines(words: int, vocabulary: int, seed: int = 11) -> list[str]:
    rng = random.Random(seed)
    names = [f"word{i}" for i in range(vocabulary)]
    weights = [1.0 / (i + 1) for i in range(vocabulary)]
    drawn = rng.choices(names, weights, k=words)
    return [" ".join(drawn[i : i + WORDS_PER_LINE]) for i in range(0, words, WORDS_PER_LINE)]


def produce_lines(bootstrap: str, lines: list[str]) -> None:
    p = Producer({"bootstrap.servers": bootstrap, **noop.PRODUCER_CONF})
    for i, line in enumerate(lines):
        while True:
            try:
                p.produce(INPUT_TOPIC, line.encode(), partition=i % PARTITIONS)
                break
            except BufferError:
                p.poll(0.01)
        if i % 1000 == 0:
            p.poll(0)
    if p.flush(60) != 0:
        raise SystemExit("input: flush timed out")


def topics(job: str, pool: int, rep: int) -> tuple[str, str]:
    """The run's re-keying and output topics."""
    tag = f"{job}-p{pool}-{rep}"
    rekeyed = f"bench-wc-app-{pool}-{rep}-partition_by-by-word" if job == "app" else f"bench-wc-rekeyed-{tag}"
    return rekeyed, f"bench-wc-out-{tag}"


def job_toml(job: str, pool: int, rep: int, state: Path) -> str:
    rekeyed, out = topics(job, pool, rep)
    common = f"""\
"job.logged.store.base.dir" = "{state}"
"job.non-logged.store.base.dir" = "{state}"
"bench.rekeyed" = "{rekeyed}"
"bench.output" = "{out}"

[job]
name = "bench-wc-{job}-{pool}"
id = "{rep}"
default.system = "kafka"
container.thread.pool.size = {pool}

[systems.kafka]
samza.factory = "kafka"
default.stream.samza.offset.default = "oldest"
"""
    if job == "app":
        return (
            common
            + f"""
[app]
class = "app_word_count_task:BenchWordCountApp"

[task]
commit.ms = 5000

[streams.lines]
samza.physical.name = "{INPUT_TOPIC}"

[streams.word-counts]
samza.physical.name = "{out}"
partitions = {PARTITIONS}
"""
        )
    return (
        common
        + f"""
[task]
class = "app_word_count_task:WordCountLowLevelTask"
inputs = ["kafka.{INPUT_TOPIC}", "kafka.{rekeyed}"]
window.ms = 1000
commit.ms = 5000

[streams.{INPUT_TOPIC}]
samza.msg.serde = "string"

[streams.{rekeyed}]
samza.key.serde = "json"
samza.msg.serde = "json"
partitions = {PARTITIONS}

[streams.{out}]
samza.key.serde = "string"
samza.msg.serde = "long"
partitions = {PARTITIONS}

[stores.counts]
factory = "lmdb"
changelog = "kafka.bench-wc-low-level-{pool}-{rep}-counts"
key.serde = "string"
msg.serde = "long"
"""
    )


def first_time(bootstrap: str, topic: str) -> float:
    """The CreateTime (s) of the earliest record of ``topic``: the first of some partition."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-wc-first-{topic}", **noop.CONSUMER_CONF})
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    firsts: dict[int, float] = {}
    deadline = time.monotonic() + 30
    try:
        while len(firsts) < PARTITIONS and time.monotonic() < deadline:
            for m in c.consume(PARTITIONS, 0.2):
                partition = m.partition()
                if m.error() is None and partition is not None:
                    firsts.setdefault(partition, m.timestamp()[1] / 1000)
    finally:
        c.close()
    if not firsts:
        raise RuntimeError(f"{topic} holds no record")
    return min(firsts.values())


def run_job(bootstrap: str, job: str, pool: int, rep: int, words: int, workdir: Path) -> Result:
    """One container of ``job`` until it has counted every word of the input; then SIGTERM."""
    rekeyed, out = topics(job, pool, rep)
    config = workdir / f"{job}-{pool}-{rep}.toml"
    config.write_text(job_toml(job, pool, rep, workdir / f"state-{job}-{pool}-{rep}"))
    log_path = Path(os.environ.get("BENCH_LOG_DIR") or workdir) / f"container-{job}-{pool}-{rep}.log"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(noop.BENCH_DIR), env.get("PYTHONPATH", "")])
    reader = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-wc-{out}", **noop.CONSUMER_CONF})
    reader.assign([TopicPartition(out, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    outputs: list[tuple[float, int]] = []  # (CreateTime s, count)
    counted = 0
    with open(log_path, "wb") as log:
        t0 = time.time()
        proc = subprocess.Popen(
            [
                str(noop.CONTAINER_BIN),
                str(config),
                "--set",
                f"systems.kafka.bootstrap.servers={bootstrap}",
                *noop.extra_sets(),
            ],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=workdir,
        )
        try:
            deadline = time.monotonic() + 600
            while counted < words:
                if proc.poll() is not None:
                    raise RuntimeError(f"{job}: container exited with {proc.returncode} after {counted}/{words} words")
                if time.monotonic() > deadline:
                    written = noop.count_topic(bootstrap, out, 0, timeout_s=30)
                    raise RuntimeError(
                        f"{job}: only {counted}/{words} words counted within 600 s ({len(outputs)} outputs read "
                        f"as they came, {written} in {out} now)"
                    )
                for m in reader.consume(10000, 0.1):
                    value = m.value()
                    if m.error() is None and value is not None:
                        n = struct.unpack(">q", value)[0]
                        outputs.append((m.timestamp()[1] / 1000, n))
                        counted += n
            cpu = noop.tree_cpu_seconds(proc.pid)
            t_end = time.time()
            if counted != words:
                raise RuntimeError(f"{job}: counted {counted} words of {words}")
            proc.send_signal(signal.SIGTERM)
            try:
                rc = proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                raise RuntimeError(f"{job}: container did not exit within 120 s of SIGTERM") from None
            if rc != 0:
                raise RuntimeError(f"{job}: container exited with {rc} after SIGTERM")
        except BaseException as e:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            log.flush()
            tail_lines = log_path.read_text(errors="replace").splitlines()[-30:]
            print("\n".join(["--- container log (last lines) ---", *tail_lines, "---"]), file=sys.stderr)
            if isinstance(e, RuntimeError):
                raise SystemExit(f"bench: {e}") from None
            raise
        finally:
            reader.close()
    t_rekeyed = first_time(bootstrap, rekeyed)
    outputs.sort()
    samples: list[tuple[float, int]] = []
    total = 0
    for t, n in outputs:
        total += n
        samples.append((t, total))
    return Result(
        job,
        pool,
        noop.steady_rate(samples),
        t_rekeyed - t0,
        outputs[-1][0] - t_rekeyed,
        cpu / (t_end - t0),
        len(outputs),
    )


def show(r: Result) -> str:
    return (
        f"{r.job:<10} pool {r.pool}: {r.rate:>9,.0f} words/s  start {r.startup_s:5.2f} s  "
        f"end to end {r.end_to_end_s:6.2f} s  cpu {r.cpu:4.2f}  outputs {r.outputs}"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--words", type=int, default=1_000_000, help="input words (default 1000000)")
    ap.add_argument("--vocabulary", type=int, default=1000, help="distinct words (default 1000)")
    ap.add_argument("--repeat", type=int, default=3, help="rounds (default 3); medians reported")
    ap.add_argument("--pools", default="2", help="pool sizes, comma-separated (default 2)")
    args = ap.parse_args(argv)
    pools = [int(p) for p in args.pools.split(",")]
    lines = make_lines(args.words, args.vocabulary)
    words = sum(len(line.split()) for line in lines)
    noop.set_fetch_queue_backoff(10)

    broker = EmbeddedBroker(die_with_parent=True).start()
    results: list[list[Result]] = []
    try:
        bs = broker.bootstrap_servers
        # Every run's topics up front: the reader of its outputs never waits for a topic to appear.
        runs = [
            topic for rep in range(args.repeat) for pool in pools for job in JOBS for topic in topics(job, pool, rep)
        ]
        noop.create_topics(bs, [INPUT_TOPIC, *runs])
        produce_lines(bs, lines)
        print(
            f"broker {bs} (tansu); input: {words} words in {len(lines)} lines, {PARTITIONS} partitions, "
            f"{args.vocabulary} distinct words; cpus: {os.cpu_count()}; pools {pools}; {args.repeat} rounds"
        )
        with tempfile.TemporaryDirectory(prefix="samzamp-bench-wc-") as tmp:
            for rep in range(args.repeat):
                order = JOBS if rep % 2 == 0 else JOBS[::-1]
                round_results = [run_job(bs, job, pool, rep, words, Path(tmp)) for pool in pools for job in order]
                results.append(round_results)
                print(f"round {rep + 1}/{args.repeat}:")
                for r in round_results:
                    print("  " + show(r))
                for pool in pools:
                    rate = {r.job: r.rate for r in round_results if r.pool == pool}
                    print(f"  pool {pool}: app / low-level {rate['app'] / rate['low-level']:.2f}")
    finally:
        broker.stop()

    print()
    print(f"median of {args.repeat} rounds:")
    for pool in pools:
        by_job = {job: [r for rs in results for r in rs if r.job == job and r.pool == pool] for job in JOBS}
        for job, rs in by_job.items():
            print(
                f"  {job:<10} pool {pool}: {statistics.median(r.rate for r in rs):>9,.0f} words/s  "
                f"start {statistics.median(r.startup_s for r in rs):5.2f} s  "
                f"end to end {statistics.median(r.end_to_end_s for r in rs):6.2f} s  "
                f"cpu {statistics.median(r.cpu for r in rs):4.2f}"
            )
        ratios = [a.rate / b.rate for a, b in zip(by_job["app"], by_job["low-level"], strict=True)]
        e2e = [b.end_to_end_s / a.end_to_end_s for a, b in zip(by_job["app"], by_job["low-level"], strict=True)]
        target = f" (target >= {TARGET})" if pool == 2 else ""
        print(f"app / low-level, pool {pool}, by round: {', '.join(f'{x:.2f}' for x in ratios)}")
        print(f"app word count / low-level pool {pool}: {statistics.median(ratios):.2f}{target}")
        print(f"  (end to end, low-level time / app time: {statistics.median(e2e):.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
