"""Stateful throughput with store checksums against without, side by side in one run, taking turns.

One embedded broker (Tansu, memory only, 127.0.0.1) serves every run. The input topic (4 partitions,
``--messages`` of noop's ~100-byte JSON clicks) is written once; then, ``--repeat`` rounds, for each
pool size (``--pools``, default 0,2) two containers of the job run at once, one with
``stores.counts.lmdb.checksums = true`` (store format 2: a CRC32C sealed with each value, checked on
every read) and one with false (format 1: plain values, no check), each with its own job.id, output
and changelog topics and store directory, reading the input from its oldest offset.

They take turns (bench/turns.py, as bench/cpu_scaling.py and bench/elasticity.py do): both run, but
only one at a time is let run, for slices of 3 s (SIGSTOP and SIGCONT of its process group; a
slice spans several commits, which one-second slices cut into unequal shares of the commit work),
cycles alternating their order, so both see the same phases of the shared machine's speed: measured
one after the other, on this 2-core machine, rounds of the same container differed by up to 1.7x. A
slice's rate counts the outputs whose CreateTime falls in its measured part; each container's rate is
its outputs over its measured time, and the ratio per round is checksums / plain.

The job is bench/stateful_task.py:StatefulCountTask: per message a store read, a store write (logged
to the store's changelog) and one output. Its keys are ``u<id % --keys>`` (default 100,000), so most
reads miss the write buffer and read LMDB, where the check runs; a commit about every second of a
container's own running time (task.commit.ms = 1000 x the containers taking turns) seals the buffer
into LMDB. Every output must be written and each container exit 0 on SIGTERM.

Prints each round (rates, and checksums / plain slice by slice: its spread is the noise left), then
per pool the medians and the median of the rounds' ratios. Target: >= 0.95 (at most 5% slower).
Exits 0 whatever the ratio. With BENCH_LOG_DIR, the container logs are kept there.

    .venv/bin/python bench/stateful.py [--messages N] [--keys K] [--repeat R] [--pools 0,2]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import noop
from turns import SAMPLE_S, Contender, Runner, by_cycle, by_round, start_container, turns_round

from samzamp.systems.kafka import EmbeddedBroker

TARGET = 0.95
MODES = {"checksums": "true", "plain": "false"}
COMMIT_MS = 1000  # of a container's own running time


def job_toml(mode: str, pool: int, rep: int, keys: int, state: Path, commit_ms: int) -> str:
    run = f"{mode}-p{pool}-r{rep}"
    return f"""\
"job.logged.store.base.dir" = "{state / run}"
"bench.keys" = {keys}

[job]
name = "bench-stateful"
id = "{run}"
default.system = "kafka"
container.thread.pool.size = {pool}

[task]
class = "stateful_task:StatefulCountTask"
inputs = ["kafka.{noop.INPUT_TOPIC}"]
commit.ms = {commit_ms}

[systems.kafka]
samza.factory = "kafka"
default.stream.samza.offset.default = "oldest"

[streams.{noop.INPUT_TOPIC}]
samza.key.serde = "string"
samza.msg.serde = "json"

[streams.{out_topic(mode, pool, rep)}]
samza.key.serde = "string"
samza.msg.serde = "json"
partitions = {noop.PARTITIONS}

[stores.counts]
factory = "lmdb"
changelog = "kafka.bench-stateful-changelog-{run}"
key.serde = "string"
msg.serde = "json"
lmdb.checksums = {MODES[mode]}
"""


def out_topic(mode: str, pool: int, rep: int) -> str:
    return f"bench-stateful-{mode}-p{pool}-r{rep}"


def label(mode: str, pool: int) -> str:
    return f"pool {pool} {mode}"


def run_round(
    bs: str, broker_pid: int | None, pool: int, n: int, rep: int, keys: int, args: argparse.Namespace, workdir: Path
) -> dict[str, Contender]:
    """Both containers of ``pool`` started (each alone, stopped at its first output, the order
    alternating by round), then taking turns until one is near its end, then both finishing."""
    log_dir = Path(os.environ.get("BENCH_LOG_DIR") or workdir)
    modes = list(MODES) if rep % 2 == 0 else list(MODES)[::-1]
    runners = [Runner(label(m, pool), out_topic(m, pool, rep), bs, log_dir) for m in modes]

    def launch() -> None:
        for mode, r in zip(modes, runners, strict=True):
            config = job_toml(mode, pool, rep, keys, workdir / "state", COMMIT_MS * len(runners))
            start_container(r, config, bs, workdir)

    order = turns_round(runners, launch, [], n, args, broker_pid, bs, workdir)
    return {c.label: c for c in order}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=1_000_000, help="input messages (default 1000000)")
    ap.add_argument("--keys", type=int, default=100_000, help="distinct store keys (default 100000)")
    ap.add_argument("--repeat", type=int, default=3, help="rounds (default 3); medians reported")
    ap.add_argument("--pools", default="0,2", help="pool sizes, comma-separated (default 0,2)")
    ap.add_argument("--slice", type=float, default=3.0, help="seconds each runs in its turn (default 3)")
    ap.add_argument("--settle", type=float, default=0.5, help="seconds of a slice not measured (default 0.5)")
    args = ap.parse_args(argv)
    if not 0 <= args.settle < args.slice - 3 * SAMPLE_S:
        ap.error("--settle must leave at least 3 samples of each slice")
    pools = [int(p) for p in args.pools.split(",")]
    n, reps = args.messages, args.repeat
    noop.set_fetch_queue_backoff(10)

    broker = EmbeddedBroker(die_with_parent=True).start()
    rounds: dict[int, list[dict[str, Contender]]] = {p: [] for p in pools}
    try:
        bs = broker.bootstrap_servers
        broker_pid = broker.process.pid if broker.process is not None else None
        noop.create_topics(
            bs, [noop.INPUT_TOPIC, *(out_topic(m, p, r) for r in range(reps) for p in pools for m in MODES)]
        )
        t = time.perf_counter()
        avg = noop.produce_input(bs, n)
        print(
            f"broker {bs} (tansu); input: {n} messages, {noop.PARTITIONS} partitions, {avg:.0f} B values, "
            f"written in {time.perf_counter() - t:.1f} s; {args.keys} keys; pools {pools}; {reps} rounds; "
            f"slices of {args.slice:g} s, the first {args.settle:g} s not measured; cpus: {os.cpu_count()}"
        )
        with tempfile.TemporaryDirectory(prefix="samzamp-bench-stateful-") as tmp:
            for rep in range(reps):
                for pool in pools:
                    res = run_round(bs, broker_pid, pool, n, rep, args.keys, args, Path(tmp))
                    rounds[pool].append(res)
                    for c in res.values():
                        print(
                            f"round {rep + 1}/{reps} {c.label:<16} {c.rate:>9,.0f} msg/s  "
                            f"(cpu: container {c.cpu_s / c.running_s:.0%}, broker {c.broker_cpu_s / c.running_s:.0%}; "
                            f"start -> first output {c.startup_s:.2f} s)"
                        )
                    on, off = label("checksums", pool), label("plain", pool)
                    print(f"round {rep + 1}/{reps} pool {pool} checksums / plain {by_cycle(res, off, on)}")
    finally:
        broker.stop()

    print()
    print(f"median of {reps} rounds:")
    for pool in pools:
        on, off = label("checksums", pool), label("plain", pool)
        ratios = [res[on].rate / res[off].rate for res in rounds[pool]]
        rate_on = statistics.median(res[on].rate for res in rounds[pool])
        rate_off = statistics.median(res[off].rate for res in rounds[pool])
        print(
            f"  pool {pool}: checksums {rate_on:>9,.0f} msg/s, plain {rate_off:>9,.0f} msg/s; by round {by_round(ratios)}"
        )
        print(f"stateful checksums / plain pool {pool}: {statistics.median(ratios):.3f} (target >= {TARGET})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
