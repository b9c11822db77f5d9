"""CPU scaling: a CPU-bound job with job.container.thread.pool.size 1 (inline) and 2 (and 4 when the machine
has more than 2 cores), side by side on one broker in one run; prints messages/s and the ratio to pool size 1.

The job (bench/cpu_task.py): JSON in, a deterministic pure-Python loop of ~20 µs per message, JSON out, 4 input
partitions, 200,000 messages of ~100 bytes (the input of bench/noop.py). Each configuration's rate is its
steady-state rate (bench/noop.py's steady_rate: the slope of the outputs written, sampled with ListOffsets, from
10% to 90%). Rounds alternate between the configurations; with --repeat the medians are reported.

Target (issue 3): pool size 2 at least 1.7x pool size 1 on a 2-core machine (goal 1.9x). The broker, the
container's loop and its workers all share the machine's cores.

    .venv/bin/python bench/cpu_scaling.py [--messages N] [--repeat R] [--pools 1,2]
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

from samzamp.systems.kafka import EmbeddedBroker

TARGET = 1.7


def job_toml(out_topic: str, pool: int, rep: int) -> str:
    return f"""\
[job]
name = "bench-cpu-{pool}"
id = "{rep}"
default.system = "kafka"
container.thread.pool.size = {pool}

[task]
class = "cpu_task:CpuTask"
inputs = ["kafka.{noop.INPUT_TOPIC}"]
commit.ms = 5000

[systems.kafka]
samza.factory = "kafka"
default.stream.samza.offset.default = "oldest"

[streams.{noop.INPUT_TOPIC}]
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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=200000, help="input messages (default 200000)")
    ap.add_argument("--repeat", type=int, default=1, help="rounds over every pool size; medians reported")
    cores = os.cpu_count() or 1
    default_pools = "1,2,4" if cores > 2 else "1,2"
    ap.add_argument("--pools", default=default_pools, help=f"pool sizes to run (default {default_pools})")
    ap.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="a config override for every container"
    )
    args = ap.parse_args(argv)
    noop.EXTRA_SETS.extend(args.set)
    pools = [int(p) for p in args.pools.split(",")]
    if 1 not in pools:
        ap.error("--pools must include 1 (the baseline)")
    n, reps = args.messages, args.repeat
    noop.set_fetch_queue_backoff(10)

    broker = EmbeddedBroker(die_with_parent=True).start()
    try:
        bs = broker.bootstrap_servers
        broker_pid = broker.process.pid if broker.process is not None else None
        outs = {(p, r): f"bench-cpu-out-{p}-{r}" for p in pools for r in range(reps)}
        noop.create_topics(bs, [noop.INPUT_TOPIC, *outs.values()])
        avg = noop.produce_input(bs, n)
        print(
            f"broker {bs} (tansu); input: {n} messages, {noop.PARTITIONS} partitions, {avg:.0f} B values; "
            f"cpus: {cores}; task: {ITERATIONS} loop iterations = {per_message_us():.1f} µs a message here"
        )
        results: dict[int, list[noop.SamzampResult]] = {p: [] for p in pools}
        with tempfile.TemporaryDirectory(prefix="samzamp-bench-cpu-") as tmp:
            for r in range(reps):
                for pool in pools:
                    out = outs[(pool, r)]
                    res = noop.run_samzamp(bs, out, n, r, Path(tmp), broker_pid, config=job_toml(out, pool, r))
                    results[pool].append(res)
                    print(
                        f"round {r + 1}/{reps}  pool {pool}  {res.rate:>9,.0f} msg/s  (first output -> 90% "
                        f"written {res.seconds:.2f} s; cpu: container and workers {res.cpu:.0%}, "
                        f"broker {res.broker_cpu:.0%}, sampler {res.sampler_cpu:.0%}; "
                        f"start -> first output {res.startup_s:.2f} s)",
                        flush=True,
                    )
                    if res.outputs < n:
                        raise SystemExit(f"pool {pool}: only {res.outputs}/{n} outputs")
    finally:
        broker.stop()

    base = statistics.median(r.rate for r in results[1])
    print()
    print(
        f"{'cpu job, ' + ('median of ' + str(reps) if reps > 1 else '1 run'):<26}{'msg/s':>10}{'x pool 1':>10}{'start':>8}"
    )
    for pool in pools:
        rate = statistics.median(r.rate for r in results[pool])
        start = statistics.median(r.startup_s for r in results[pool])
        print(f"pool size {pool:<16}{rate:>10,.0f}{rate / base:>10.2f}{start:>7.2f}s")
    if 2 in pools:
        ratio = statistics.median(r.rate for r in results[2]) / base
        if reps > 1:
            # Pool 1 and pool 2 run back to back in each round: a round's own ratio sees one host state.
            rounds = [b.rate / a.rate for a, b in zip(results[1], results[2], strict=True)]
            print(f"\npool 2 / pool 1 by round: {', '.join(f'{x:.2f}' for x in rounds)}")
        print(f"\ncpu scaling pool 2 / pool 1: {ratio:.2f} (target >= {TARGET})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
