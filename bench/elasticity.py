"""Elasticity: a CPU-bound job on a one-partition topic, pool 1 with job.elasticity.factor 1 against pool 2
with factor 2 (and pool 4 with factor 4 when the machine has at least 4 cores), beside the machine's own
ceiling and a plain confluent-kafka loop on the same partition; on one broker in one run.

With one partition a job has one task, so a pool of workers has nothing to spread: what every Python
peer is stuck at (one process per partition). With job.elasticity.factor F the partition is split into
F key buckets, each its own (virtual) task, and the pool spreads them over its workers.

The input: ``--messages`` JSON values of ~100 bytes (bench/noop.py's input) in a topic of **one**
partition, keys ``str(i % 10000)`` (10,000 distinct keys, so the buckets get even shares). The job:
bench/cpu_task.py (bench/cpu_scaling.py's task: a deterministic pure-Python loop of ~20 µs a message).

Contenders, taking turns in slices as bench/cpu_scaling.py's do (bench/turns.py: all run at once, only one
is let run at a time, SIGSTOP/SIGCONT of its process group, cycles alternate their order, the first
cycle warms up; a rate is the count of outputs whose CreateTime falls in the measured parts of the
slices, read back after the round; a burn reference's is the slope of its loop counter):

pool N F=N  ``bin/samzamp-container`` with job.container.thread.pool.size = N and job.elasticity.factor
            = N (pool 1 runs its one task inline on the loop).
plain       a Python process with one confluent-kafka Consumer (assign, the one partition) and one
            Producer, the same librdkafka settings as samzamp's; per message: JSON decode, the same
            loop, JSON encode, produce with the key. What any peer does with one partition.
burn xK     the task's loop alone (cpu_task.burn: no Kafka, no JSON) in K processes: burn x2 / burn x1
            is what this machine gives two processes over one in those slices, the ceiling for
            pool 2 / pool 1.

Printed per round: each contender's rate, CPU and start-up, and per-cycle ratios; then the medians over
``--repeat`` rounds: pool 2 F=2 / pool 1 F=1 (target >= 1.8), that ratio over the machine's own (samzamp's
efficiency), pool 2 F=2 against burn x2's loops/s (the share of two cores' bare loop it reaches), and
each pool against the plain loop. Every output must be written and each contender must exit 0 on
SIGTERM. With BENCH_THREADS=1, each thread's share of its slices; with BENCH_LOG_DIR, the logs are kept.

    .venv/bin/python bench/elasticity.py [--messages N] [--repeat R] [--pools 1,2[,4]] [--slice S]
                                         [--variant KEY=VALUE[,KEY=VALUE]]

``--variant`` runs the largest pool size once more with those config overrides, in the same turns,
labelled with them: an A/B of settings on one broker and in the same phases of the machine.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import sys
import tempfile
from pathlib import Path

import msgspec
import noop
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from cpu_scaling import COMMIT_MS, job_toml, per_message_us
from cpu_task import ITERATIONS, burn
from turns import (
    SAMPLE_S,
    Contender,
    Runner,
    add_variant_argument,
    bench_env,
    by_round,
    median_of,
    report_round,
    start_container,
    turns_round,
)
from turns import ratios as round_ratios

from samzamp.systems.kafka import EmbeddedBroker

TARGET = 1.8
INPUT_TOPIC = "bench-elastic-in"
FETCH_QUEUE_BACKOFF_MS = 10  # for every consumer, as bench/cpu_scaling.py (bench/noop.py says why)
BASE = "pool 1 F=1"
PLAIN = "plain"


def plain_loop(bootstrap: str, out_topic: str) -> None:
    """The plain loop's process: consume the one input partition, run the task's work on each message,
    produce it; on SIGTERM flush and return."""
    stopping = False

    def on_term(_sig: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, on_term)
    noop.set_fetch_queue_backoff(FETCH_QUEUE_BACKOFF_MS)
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-elastic-{out_topic}", **noop.CONSUMER_CONF})
    c.assign([TopicPartition(INPUT_TOPIC, 0, OFFSET_BEGINNING)])
    p = Producer({"bootstrap.servers": bootstrap, **noop.PRODUCER_CONF})
    decode = msgspec.json.Decoder().decode
    encode = msgspec.json.Encoder().encode
    try:
        while not stopping:
            for m in c.consume(1000, 0.1):
                if m.error() is not None:
                    continue
                message = decode(m.value() or b"")
                message["h"] = burn(message["id"])
                value = encode(message)
                while True:
                    try:
                        p.produce(out_topic, value, m.key())
                        break
                    except BufferError:
                        p.poll(0.01)
            p.poll(0)
        if p.flush(60) != 0:
            raise SystemExit("plain: flush timed out")
    finally:
        c.close()


def run_round(
    bs: str, broker_pid: int | None, pools: list[int], n: int, rep: int, args: argparse.Namespace, workdir: Path
) -> list[Contender]:
    """Start a container per pool size (factor = pool size), the plain loop and the burn references, let
    them take turns until one wrote 90% of its outputs, then let the containers and the loop finish."""
    log_dir = Path(os.environ.get("BENCH_LOG_DIR") or workdir)
    # (runner, pool size, the variant's overrides)
    containers = [(Runner(label(p), f"bench-elastic-out-{p}-{rep}", bs, log_dir), p, ()) for p in pools]
    top = max(pools)
    containers += [
        (Runner(f"{label(top)} {v}", f"bench-elastic-out-v{i}-{rep}", bs, log_dir), top, tuple(v.split(",")))
        for i, v in enumerate(args.variant)
    ]
    plain = Runner(PLAIN, f"bench-elastic-out-plain-{rep}", bs, log_dir)
    runners = [*(c for c, _, _ in containers), plain]
    commit_ms = COMMIT_MS * (len(runners) + len(pools))  # a burn reference per pool size

    def launch() -> None:
        for c, pool, sets in containers:
            config = job_toml(c.out_topic, pool, rep, commit_ms, input_topic=INPUT_TOPIC, factor=pool)
            start_container(c, config, bs, workdir, sets)
        code = "import sys, elasticity; elasticity.plain_loop(*sys.argv[1:])"
        plain.start([sys.executable, "-c", code, bs, plain.out_topic], bench_env(plain.out_topic))

    return turns_round(runners, launch, pools, n, args, broker_pid, bs, workdir)


def label(pool: int) -> str:
    return f"pool {pool} F={pool}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=600000, help="input messages (default 600000)")
    ap.add_argument("--repeat", type=int, default=1, help="rounds, each with fresh processes; medians reported")
    cores = os.cpu_count() or 1
    default_pools = "1,2,4" if cores >= 4 else "1,2"
    ap.add_argument(
        "--pools", default=default_pools, help=f"pool sizes, each with factor = pool size (default {default_pools})"
    )
    ap.add_argument("--slice", type=float, default=1.0, help="seconds each runs in its turn (default 1)")
    ap.add_argument("--settle", type=float, default=0.2, help="seconds of a slice not measured (default 0.2)")
    ap.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="a config override for every container"
    )
    add_variant_argument(ap)
    args = ap.parse_args(argv)
    if not 0 <= args.settle < args.slice - 3 * SAMPLE_S:
        ap.error("--settle must leave at least 3 samples of each slice")
    noop.EXTRA_SETS.extend(args.set)
    pools = [int(p) for p in args.pools.split(",")]
    if 1 not in pools or 2 not in pools:
        ap.error("--pools must include 1 (the baseline) and 2")
    n, reps = args.messages, args.repeat
    noop.set_fetch_queue_backoff(FETCH_QUEUE_BACKOFF_MS)
    if 4 not in pools and cores < 4:
        print(f"pool 4 F=4 skipped: this machine has {cores} cores (it runs with 4 or more)")

    broker = EmbeddedBroker(die_with_parent=True).start()
    rounds: list[dict[str, Contender]] = []
    try:
        bs = broker.bootstrap_servers
        broker_pid = broker.process.pid if broker.process is not None else None
        variants = [f"v{i}" for i in range(len(args.variant))]
        outs = [f"bench-elastic-out-{p}-{r}" for p in [*pools, *variants, PLAIN] for r in range(reps)]
        noop.create_topics(bs, [INPUT_TOPIC], partitions=1)
        noop.create_topics(bs, outs)
        avg = noop.produce_input(bs, n, INPUT_TOPIC)
        print(
            f"broker {bs} (tansu); input: {n} messages, 1 partition, 10000 keys, {avg:.0f} B values; "
            f"cpus: {cores}; task: {ITERATIONS} loop iterations = {per_message_us():.1f} µs a message here; "
            f"slices of {args.slice:g} s, the first {args.settle:g} s not measured"
        )
        with tempfile.TemporaryDirectory(prefix="samzamp-bench-elastic-") as tmp:
            for r in range(reps):
                res = {c.label: c for c in run_round(bs, broker_pid, pools, n, r, args, Path(tmp))}
                rounds.append(res)
                report_round(res, f"round {r + 1}/{reps}", BASE)
    finally:
        broker.stop()
    report(rounds, pools, args.variant)
    return 0


def report(rounds: list[dict[str, Contender]], pools: list[int], variants: list[str]) -> None:
    """The medians over the rounds, and the ratios the benchmark is for."""

    def median(key: str, attr: str) -> float:
        return median_of(rounds, key, attr)

    def ratios(a: str, b: str) -> list[float]:
        return round_ratios(rounds, a, b)

    reps = len(rounds)
    print()
    title = "cpu job, 1 partition, " + (f"median of {reps}" if reps > 1 else "1 round")
    print(f"{title:<40}{'msg/s':>10}{'x pool 1':>10}{'x plain':>9}{'start':>8}")
    for key in [*map(label, pools), *(f"{label(max(pools))} {v}" for v in variants), PLAIN]:
        print(
            f"{key:<40}{median(key, 'rate'):>10,.0f}{statistics.median(ratios(key, BASE)):>10.2f}"
            f"{statistics.median(ratios(key, PLAIN)):>9.2f}{median(key, 'startup_s'):>7.2f}s"
        )
    for k in pools:
        print(f"{f'burn x{k} (the loop alone, loops/s)':<40}{median(f'burn x{k}', 'rate'):>10,.0f}")
    print()
    for k in pools[1:]:
        scaling = ratios(label(k), BASE)
        ceilings = ratios(f"burn x{k}", "burn x1")
        efficiency = [s / c for s, c in zip(scaling, ceilings, strict=True)]
        share = ratios(label(k), f"burn x{k}")
        print(f"{label(k)} / {BASE} by round: {by_round(scaling)}")
        print(f"the machine's own {k} / 1 by round (burn x{k} / burn x1): {by_round(ceilings)}")
        print(f"{label(k)} over the machine's own, by round: {by_round(efficiency)}")
        print(f"{label(k)} msg/s over burn x{k} loops/s, by round: {by_round(share)}")
        print(f"{label(k)} / {PLAIN} by round: {by_round(ratios(label(k), PLAIN))}")
        print(
            f"  medians: x pool 1 {statistics.median(scaling):.2f}, machine's own {statistics.median(ceilings):.2f}, "
            f"efficiency {statistics.median(efficiency):.2f}, of burn x{k} {statistics.median(share):.2f}, "
            f"x plain {statistics.median(ratios(label(k), PLAIN)):.2f}"
        )
    print(f"\n{BASE} / {PLAIN} by round: {by_round(ratios(BASE, PLAIN))}")
    print(f"elasticity {label(2)} / {BASE}: {statistics.median(ratios(label(2), BASE)):.2f} (target >= {TARGET})")


if __name__ == "__main__":
    sys.exit(main())
