"""CPU scaling: a CPU-bound job with job.container.thread.pool.size 1 (inline) and 2 (and 4 when the machine
has more than 2 cores), on one broker in one run; prints messages/s and the ratio to pool size 1.

The job (bench/cpu_task.py): JSON in, a deterministic pure-Python loop of ~20 µs per message, JSON out, 4 input
partitions, 600,000 messages of ~100 bytes (the input of bench/noop.py).

Why the containers take turns. The machines this runs on are shared, and their speed moves in phases, each
core on its own: the same pure-Python loop took 21 µs a message on one core while it took 35 µs on the
other, and on one core 22 µs for a stretch of 20 s and 35 µs the next. Runs one after the other (pool 1
for 8 s, then pool 2 for 5 s) land in different phases: the ratio of two such rates moved between 1.2 and
2.2 from round to round. So every configuration runs at once, but only one is let run at a time: each in
turn gets a *slice* (``--slice``, 1 s) and is then stopped with SIGSTOP (its whole process group: the
container and its workers) while the next one runs. A cycle gives each one slice; cycles alternate their
order, so that a drift within a cycle favours no one. The first cycle only warms up.

The machine's own ceiling, measured in the same turns: "burn x1" and "burn x2" run the task's loop alone
(cpu_task.burn; no samzamp, no broker) in one and in two processes. burn x2 / burn x1 is what this host
gives two processes over one in those slices: on two equal idle cores it is 2.0; it falls when the
host slows one core. pool 2 / pool 1 divided by it is samzamp's own efficiency.

- A container starts while the others are stopped, and is stopped at its first output; start-up is
  reported apart ("start -> first output").
- A slice is measured after ``--settle`` (0.2 s), to its end. Meanwhile this process samples how many
  outputs the topic holds every 100 ms (one ListOffsets request), which tells when to stop taking
  turns. The rates are counted after the round: a slice's outputs are those whose CreateTime (the
  wall clock at produce(), stamped by librdkafka) falls in its measured part. A configuration's rate
  is its outputs in all measured parts over their time. (The sampled slope is not used: on Tansu a
  ListOffsets answer lags by the last producer batch of each partition, and it read one-producer
  configurations 6-10% high.)
- A commit comes due by wall time, stopped or not: so that each container commits about every 5 s of
  its own running time, as it would alone, task.commit.ms is 5 s times the number of turns in a cycle.
- Measuring ends once some container wrote 90% of its outputs (or could write the rest in one slice);
  then all run to the end, every output must be written, and each container must exit 0 on SIGTERM.

Printed per configuration and round: its rate; CPU of the container and its workers, of the broker, and
how much of the machine stayed idle, over its slices; the per-cycle ratios, whose spread shows the noise
left. ``--repeat`` starts fresh containers each round and reports medians. With BENCH_THREADS=1, each
thread's share of the slices; with BENCH_LOG_DIR, the container logs are kept there.

Target: pool size 2 at least 1.7x pool size 1 on a 2-core machine (goal 1.9x). The broker, the
container's loop and its workers all share the machine's cores.

    .venv/bin/python bench/cpu_scaling.py [--messages N] [--repeat R] [--pools 1,2] [--slice S]
                                          [--variant KEY=VALUE[,KEY=VALUE]]
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
from cpu_task import ITERATIONS, burn
from turns import (
    SAMPLE_S,
    Contender,
    Runner,
    by_round,
    median_of,
    ratios,
    report_round,
    start_container,
    turns_round,
)

from samzamp.systems.kafka import EmbeddedBroker

TARGET = 1.7
COMMIT_MS = 5000  # task.commit.ms in a container's own running time


def job_toml(
    out_topic: str, pool: int, rep: int, commit_ms: int, input_topic: str = noop.INPUT_TOPIC, factor: int = 1
) -> str:
    """The cpu job reading ``input_topic``, with ``pool`` worker processes and elasticity factor ``factor``."""
    return f"""\
[job]
name = "bench-cpu-{pool}"
id = "{rep}"
default.system = "kafka"
container.thread.pool.size = {pool}
elasticity.factor = {factor}

[task]
class = "cpu_task:CpuTask"
inputs = ["kafka.{input_topic}"]
commit.ms = {commit_ms}

[systems.kafka]
samza.factory = "kafka"
default.stream.samza.offset.default = "oldest"

[streams.{input_topic}]
samza.key.serde = "string"
samza.msg.serde = "json"

[streams.{out_topic}]
samza.key.serde = "string"
samza.msg.serde = "json"
partitions = {noop.PARTITIONS}
"""


def per_message_us() -> float:
    n = 20000
    t = time.perf_counter()
    for i in range(n):
        burn(i)
    return (time.perf_counter() - t) / n * 1e6


class Container(Runner):
    """A container of the cpu job under test, with job.container.thread.pool.size = ``pool``."""

    def __init__(
        self, label: str, pool: int, out_topic: str, bs: str, log_dir: Path, sets: tuple[str, ...] = ()
    ) -> None:
        super().__init__(label, out_topic, bs, log_dir)
        self.pool = pool
        self.sets = sets
        self.commit_ms = COMMIT_MS


def start(c: Container, bs: str, rep: int, workdir: Path) -> None:
    """Start ``c``'s container (alone: the others are stopped) and stop it at its first output."""
    start_container(c, job_toml(c.out_topic, c.pool, rep, c.commit_ms), bs, workdir, c.sets)


def run_round(
    bs: str, broker_pid: int | None, pools: list[int], n: int, rep: int, args: argparse.Namespace, workdir: Path
) -> list[Contender]:
    """Start one container per pool size (and per variant) and the burn references, let them take
    turns until one container wrote 90% of its outputs, then let the containers finish."""
    log_dir = Path(os.environ.get("BENCH_LOG_DIR") or workdir)
    containers = [Container(f"pool {p}", p, f"bench-cpu-out-{p}-{rep}", bs, log_dir) for p in pools]
    for i, variant in enumerate(args.variant):
        sets = tuple(variant.split(","))
        label = f"pool {max(pools)} {variant}"
        containers.append(Container(label, max(pools), f"bench-cpu-out-v{i}-{rep}", bs, log_dir, sets))
    for c in containers:
        c.commit_ms = COMMIT_MS * (len(containers) + len(pools))  # and a burn reference per pool size

    def launch() -> None:
        for c in containers:
            start(c, bs, rep, workdir)

    return turns_round(containers, launch, pools, n, args, broker_pid, bs, workdir)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=600000, help="input messages (default 600000)")
    ap.add_argument("--repeat", type=int, default=1, help="rounds, each with fresh containers; medians reported")
    cores = os.cpu_count() or 1
    default_pools = "1,2,4" if cores > 2 else "1,2"
    ap.add_argument("--pools", default=default_pools, help=f"pool sizes to run (default {default_pools})")
    ap.add_argument("--slice", type=float, default=1.0, help="seconds each runs in its turn (default 1)")
    ap.add_argument("--settle", type=float, default=0.2, help="seconds of a slice not measured (default 0.2)")
    ap.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="a config override for every container"
    )
    ap.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="KEY=VALUE[,KEY=VALUE]",
        help="also run the largest pool size with these overrides, in the same turns (an A/B of settings)",
    )
    args = ap.parse_args(argv)
    if not 0 <= args.settle < args.slice - 3 * SAMPLE_S:
        ap.error("--settle must leave at least 3 samples of each slice")
    noop.EXTRA_SETS.extend(args.set)
    pools = [int(p) for p in args.pools.split(",")]
    if 1 not in pools:
        ap.error("--pools must include 1 (the baseline)")
    n, reps = args.messages, args.repeat
    noop.set_fetch_queue_backoff(10)

    broker = EmbeddedBroker(die_with_parent=True).start()
    rounds: list[dict[str, Contender]] = []
    try:
        bs = broker.bootstrap_servers
        broker_pid = broker.process.pid if broker.process is not None else None
        outs = [
            f"bench-cpu-out-{p}-{r}"
            for p in [*pools, *(f"v{i}" for i in range(len(args.variant)))]
            for r in range(reps)
        ]
        noop.create_topics(bs, [noop.INPUT_TOPIC, *outs])
        avg = noop.produce_input(bs, n)
        print(
            f"broker {bs} (tansu); input: {n} messages, {noop.PARTITIONS} partitions, {avg:.0f} B values; "
            f"cpus: {cores}; task: {ITERATIONS} loop iterations = {per_message_us():.1f} µs a message here; "
            f"slices of {args.slice:g} s, the first {args.settle:g} s not measured"
        )
        with tempfile.TemporaryDirectory(prefix="samzamp-bench-cpu-") as tmp:
            for r in range(reps):
                res = {c.label: c for c in run_round(bs, broker_pid, pools, n, r, args, Path(tmp))}
                rounds.append(res)
                report_round(res, f"round {r + 1}/{reps}", "pool 1")
    finally:
        broker.stop()

    def median(label: str, attr: str) -> float:
        return median_of(rounds, label, attr)

    print()
    title = "cpu job, " + (f"median of {reps}" if reps > 1 else "1 round")
    print(f"{title:<34}{'msg/s':>10}{'x pool 1':>10}{'start':>8}")
    for label in rounds[0]:
        if label.startswith("pool"):
            rate = median(label, "rate")
            ratio = statistics.median(ratios(rounds, label, "pool 1"))
            print(f"{label:<34}{rate:>10,.0f}{ratio:>10.2f}{median(label, 'startup_s'):>7.2f}s")
    if 2 in pools:
        scaling = ratios(rounds, "pool 2", "pool 1")
        ceilings = ratios(rounds, "burn x2", "burn x1")
        if reps > 1:
            print(f"\npool 2 / pool 1 by round: {by_round(scaling)}")
            print(f"the machine's own 2 / 1 by round: {by_round(ceilings)}")
        print(
            f"\nthe machine's own scaling (the task's loop alone, 2 processes / 1, in the same slices): "
            f"{statistics.median(ceilings):.2f}"
        )
        efficiency = statistics.median(r / c for r, c in zip(scaling, ceilings, strict=True))
        print(f"samzamp's efficiency (pool 2 / pool 1 over the machine's own, by round): {efficiency:.2f}")
        print(f"cpu scaling pool 2 / pool 1: {statistics.median(scaling):.2f} (target >= {TARGET})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
