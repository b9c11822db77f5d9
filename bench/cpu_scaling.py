"""CPU scaling: a CPU-bound job with job.container.thread.pool.size 1 (inline) and 2 (and 4 when the machine
has more than 2 cores), on one broker in one run; prints messages/s and the ratio to pool size 1.

The job (bench/cpu_task.py): JSON in, a deterministic pure-Python loop of ~20 µs per message, JSON out, 4 input
partitions (``--partitions``), 600,000 messages of ~100 bytes (the input of bench/noop.py).

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

Before and after, in one run: ``--base DIR`` names another checkout of samzamp (a commit to compare
with), whose extensions are built in place with this checkout's interpreter. From this checkout's root:

    git worktree add --detach /tmp/base main
    (py=$PWD/.venv/bin/python && cd /tmp/base && $py setup.py --quiet build_ext --inplace)
    .venv/bin/python bench/cpu_scaling.py --repeat 3 --base /tmp/base

Each pool size then also runs from DIR, "pool N (base)": its bin/samzamp-container and its samzamp
package, with this interpreter, its libraries and bench/cpu_task.py (bench/noop.py's ``Checkout``),
as one more configuration in the same turns, right after this tree's pool N (so both meet the same
phases of the machine); its own job.id, so it starts from no checkpoint of the other's. Before the
rounds, each checkout's environment must import its own samzamp with both extensions; once each
container is up, every samzamp extension it and its workers have mapped must be that checkout's
(/proc/<pid>/maps); else the bench exits. Printed: per round, pool N / pool 1 of each and pool N /
pool N (base) by cycle; then per pool size both checkouts' rates, ratios to pool 1 and start-up side
by side with this tree / base, and pool N / pool 1 of both beside the machine's own. ``--variant``
runs for this tree only.

    .venv/bin/python bench/cpu_scaling.py [--messages N] [--repeat R] [--pools 1,2] [--slice S]
                                          [--variant KEY=VALUE[,KEY=VALUE]] [--base DIR]
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
    add_variant_argument,
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
    out_topic: str,
    pool: int,
    job_id: int | str,
    commit_ms: int,
    input_topic: str = noop.INPUT_TOPIC,
    factor: int = 1,
    partitions: int = noop.PARTITIONS,
) -> str:
    """The cpu job reading ``input_topic``, with ``pool`` worker processes and elasticity factor ``factor``,
    writing an output topic of ``partitions`` partitions."""
    return f"""\
[job]
name = "bench-cpu-{pool}"
id = "{job_id}"
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
partitions = {partitions}
"""


def per_message_us() -> float:
    n = 20000
    t = time.perf_counter()
    for i in range(n):
        burn(i)
    return (time.perf_counter() - t) / n * 1e6


class Container(Runner):
    """A container of the cpu job under test, with job.container.thread.pool.size = ``pool``, from
    ``checkout`` (this one, or --base)."""

    def __init__(
        self,
        label: str,
        pool: int,
        out_topic: str,
        bs: str,
        log_dir: Path,
        sets: tuple[str, ...] = (),
        checkout: noop.Checkout = noop.THIS,
        partitions: int = noop.PARTITIONS,
    ) -> None:
        super().__init__(label, out_topic, bs, log_dir, partitions)
        self.pool = pool
        self.sets = sets
        self.checkout = checkout
        self.commit_ms = COMMIT_MS
        self.checked = (0, 0)  # its processes checked to run its checkout's samzamp, of all


def out_topic(what: str, rep: int) -> str:
    """The output topic of round ``rep``'s container ``what``: its pool size and its checkout's tag, or v<variant>."""
    return f"bench-cpu-out-{what}-{rep}"


def start(c: Container, bs: str, rep: int, workdir: Path) -> None:
    """Start ``c``'s container (alone: the others are stopped) and stop it at its first output."""
    # Each checkout's containers have their own job.id: with the other's, they would start from its checkpoints.
    config = job_toml(c.out_topic, c.pool, f"{rep}{c.checkout.tag}", c.commit_ms, partitions=c.partitions)
    c.checked = start_container(c, config, bs, workdir, c.sets, c.checkout)


def run_round(
    bs: str,
    broker_pid: int | None,
    pools: list[int],
    checkouts: list[noop.Checkout],
    n: int,
    rep: int,
    args: argparse.Namespace,
    workdir: Path,
) -> list[Contender]:
    """Start one container per pool size and checkout (and per variant, of this one) and the burn
    references, let them take turns until one container wrote 90% of its outputs, then let the
    containers finish. Each pool size's containers of both checkouts take their turns one after the
    other."""
    log_dir = Path(os.environ.get("BENCH_LOG_DIR") or workdir)
    containers = [
        Container(
            f"pool {p}{k.suffix}", p, out_topic(f"{p}{k.tag}", rep), bs, log_dir, checkout=k, partitions=args.partitions
        )
        for p in pools
        for k in checkouts
    ]
    for i, variant in enumerate(args.variant):
        sets = tuple(variant.split(","))
        label = f"pool {max(pools)} {variant}"
        containers.append(
            Container(label, max(pools), out_topic(f"v{i}", rep), bs, log_dir, sets, partitions=args.partitions)
        )
    for c in containers:
        c.commit_ms = COMMIT_MS * (len(containers) + len(pools))  # and a burn reference per pool size

    def launch() -> None:
        for c in containers:
            start(c, bs, rep, workdir)
        if len(checkouts) > 1:
            checked = ", ".join(f"{c.label} {c.checked[0]}/{c.checked[1]}" for c in containers)
            print(f"round {rep + 1}: processes checked to run their checkout's samzamp: {checked}")

    return turns_round(containers, launch, pools, n, args, broker_pid, bs, workdir)


def round_pairs(pools: list[int], checkouts: list[noop.Checkout], variants: list[str]) -> list[tuple[str, str]]:
    """The ratios each round reports: each pool size over pool 1 of its checkout, each variant over
    pool 1, then with --base each pool size of this checkout over the base's."""
    pairs = [(f"pool {p}{k.suffix}", f"pool 1{k.suffix}") for k in checkouts for p in pools if p != 1]
    pairs += [(f"pool {max(pools)} {v}", "pool 1") for v in variants]
    return pairs + [(f"pool {p}", f"pool {p}{k.suffix}") for k in checkouts[1:] for p in pools]


def report_base(rounds: list[dict[str, Contender]], pools: list[int], suffix: str) -> None:
    """With --base: per pool size, the rate, the ratio to pool 1 and the start-up of this checkout and
    of the base's side by side, and this over base (each ratio the median of the rounds'); then
    pool N / pool 1 of both beside the machine's own (burn xN / burn x1)."""
    reps = len(rounds)

    def median(label: str, attr: str) -> float:
        return median_of(rounds, label, attr)

    def columns(label: str, one: str) -> str:
        ratio = statistics.median(ratios(rounds, label, one))
        return f"{median(label, 'rate'):>10,.0f}{ratio:>10.2f}{median(label, 'startup_s'):>7.2f}s"

    print()
    title = "cpu job, " + (f"median of {reps}" if reps > 1 else "1 round")
    print(f"{'':<34}{'this tree':^28}  {'base':^28}")
    print(
        f"{title:<34}{'msg/s':>10}{'x pool 1':>10}{'start':>8}  {'msg/s':>10}{'x pool 1':>10}{'start':>8}{'this/base':>11}"
    )
    for label in rounds[0]:
        if not label.startswith("pool") or label.endswith(suffix):
            continue
        line = f"{label:<34}{columns(label, 'pool 1')}"
        if label + suffix in rounds[0]:
            over_base = statistics.median(ratios(rounds, label, label + suffix))
            line += f"  {columns(label + suffix, 'pool 1' + suffix)}{over_base:>11.2f}"
        print(line)
    print()
    for p in pools:
        if p == 1:
            continue
        scaling = ratios(rounds, f"pool {p}", "pool 1")
        base_scaling = ratios(rounds, f"pool {p}{suffix}", f"pool 1{suffix}")
        ceilings = ratios(rounds, f"burn x{p}", "burn x1")
        if reps > 1:
            print(f"pool {p} / pool 1 by round: this tree {by_round(scaling)}; base {by_round(base_scaling)}")
            print(f"the machine's own {p} / 1 by round: {by_round(ceilings)}")
        print(f"the machine's own scaling (burn x{p} / burn x1, in the same slices): {statistics.median(ceilings):.2f}")
        efficiency = [
            statistics.median(r / c for r, c in zip(x, ceilings, strict=True)) for x in (scaling, base_scaling)
        ]
        print(
            f"samzamp's efficiency (pool {p} / pool 1 over the machine's own, by round): "
            f"this tree {efficiency[0]:.2f}, base {efficiency[1]:.2f}"
        )
        target = f" (target >= {TARGET})" if p == 2 else ""
        print(f"cpu scaling pool {p} / pool 1: {statistics.median(scaling):.2f}{target}")
        print(f"cpu scaling pool {p} / pool 1, base: {statistics.median(base_scaling):.2f}")
    this_base = {p: ratios(rounds, f"pool {p}", f"pool {p}{suffix}") for p in pools}
    if reps > 1:
        print("this tree / base by round: " + "; ".join(f"pool {p} {by_round(x)}" for p, x in this_base.items()))
    medians = ", ".join(f"pool {p} {statistics.median(x):.2f}" for p, x in this_base.items())
    print(f"cpu this tree / base: {medians} (medians of the rounds')")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=600000, help="input messages (default 600000)")
    ap.add_argument("--repeat", type=int, default=1, help="rounds, each with fresh containers; medians reported")
    cores = os.cpu_count() or 1
    default_pools = "1,2,4" if cores > 2 else "1,2"
    ap.add_argument("--pools", default=default_pools, help=f"pool sizes to run (default {default_pools})")
    ap.add_argument(
        "--partitions",
        type=int,
        default=noop.PARTITIONS,
        help=f"partitions of the input and output topics (default {noop.PARTITIONS}); 16 for a 16-core machine",
    )
    ap.add_argument("--slice", type=float, default=1.0, help="seconds each runs in its turn (default 1)")
    ap.add_argument("--settle", type=float, default=0.2, help="seconds of a slice not measured (default 0.2)")
    ap.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="a config override for every container"
    )
    add_variant_argument(ap)
    ap.add_argument(
        "--base",
        metavar="DIR",
        help="also run each pool size from the samzamp checkout in DIR, in the same turns (before and after)",
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
    checkouts = [noop.THIS] + ([noop.base_checkout(ap, args.base)] if args.base else [])
    noop.print_checkouts(checkouts)

    broker = EmbeddedBroker(die_with_parent=True).start()
    rounds: list[dict[str, Contender]] = []
    try:
        bs = broker.bootstrap_servers
        broker_pid = broker.process.pid if broker.process is not None else None
        names = [f"{p}{k.tag}" for p in pools for k in checkouts] + [f"v{i}" for i in range(len(args.variant))]
        outs = [out_topic(x, r) for x in names for r in range(reps)]
        noop.create_topics(bs, [noop.INPUT_TOPIC, *outs], partitions=args.partitions)
        avg = noop.produce_input(bs, n)
        print(
            f"broker {bs} (tansu); input: {n} messages, {args.partitions} partitions, {avg:.0f} B values; "
            f"cpus: {cores}; task: {ITERATIONS} loop iterations = {per_message_us():.1f} µs a message here; "
            f"slices of {args.slice:g} s, the first {args.settle:g} s not measured"
        )
        pairs = round_pairs(pools, checkouts, args.variant)
        with tempfile.TemporaryDirectory(prefix="samzamp-bench-cpu-") as tmp:
            for r in range(reps):
                res = {c.label: c for c in run_round(bs, broker_pid, pools, checkouts, n, r, args, Path(tmp))}
                rounds.append(res)
                report_round(res, f"round {r + 1}/{reps}", "pool 1", pairs)
    finally:
        broker.stop()

    if len(checkouts) > 1:
        report_base(rounds, pools, checkouts[1].suffix)
        return 0

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
    for p in pools:
        if p == 1:
            continue
        scaling = ratios(rounds, f"pool {p}", "pool 1")
        ceilings = ratios(rounds, f"burn x{p}", "burn x1")
        if reps > 1:
            print(f"\npool {p} / pool 1 by round: {by_round(scaling)}")
            print(f"the machine's own {p} / 1 by round: {by_round(ceilings)}")
        print(
            f"\nthe machine's own scaling (the task's loop alone, {p} processes / 1, in the same slices): "
            f"{statistics.median(ceilings):.2f}"
        )
        efficiency = statistics.median(r / c for r, c in zip(scaling, ceilings, strict=True))
        print(f"samzamp's efficiency (pool {p} / pool 1 over the machine's own, by round): {efficiency:.2f}")
        target = f" (target >= {TARGET})" if p == 2 else ""
        print(f"cpu scaling pool {p} / pool 1: {statistics.median(scaling):.2f}{target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
