"""Stateful throughput with store checksums against without, side by side in one run.

One embedded broker (Tansu, memory only, 127.0.0.1) serves every run. The input topic (4 partitions,
``--messages`` of noop's ~100-byte JSON clicks) is written once; then, ``--repeat`` rounds, each pool
size (``--pools``, default 0,2) runs the job twice, once with ``stores.counts.lmdb.checksums = true``
(store format 2: a CRC32C sealed with each value, checked on every read) and once with false (format
1: plain values, no check), the two alternating which goes first from round to round.

The job is bench/stateful_task.py:StatefulCountTask: per message a store read, a store write (logged
to the store's changelog) and one output. Its keys are ``u<id % --keys>`` (default 100,000), so most
reads miss the write buffer and read LMDB, where the check runs; ``task.commit.ms`` is 1000, so every
second the buffer is sealed into LMDB. Each run is a fresh container with its own job.id, output and
changelog topics and store directory, reading the input from its oldest offset; it is timed by its
outputs as noop times its container (run_samzamp: OutputWatch, steady_rate from 10% to 90%), must
write every output and exit 0 on SIGTERM.

Prints each run, then per pool the medians and the median of the rounds' ratios checksums / plain.
Target: >= 0.95 (at most 5% slower). Exits 0 whatever the ratio. With BENCH_LOG_DIR, the container
logs are kept there.

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

from samzamp.systems.kafka import EmbeddedBroker

TARGET = 0.95
MODES = {"checksums": "true", "plain": "false"}


def job_toml(mode: str, pool: int, rep: int, keys: int, state: Path) -> str:
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
commit.ms = 1000

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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=300_000, help="input messages (default 300000)")
    ap.add_argument("--keys", type=int, default=100_000, help="distinct store keys (default 100000)")
    ap.add_argument("--repeat", type=int, default=5, help="rounds (default 5); medians reported")
    ap.add_argument("--pools", default="0,2", help="pool sizes, comma-separated (default 0,2)")
    args = ap.parse_args(argv)
    pools = [int(p) for p in args.pools.split(",")]
    n, reps = args.messages, args.repeat
    noop.set_fetch_queue_backoff(10)

    broker = EmbeddedBroker(die_with_parent=True).start()
    rates: dict[tuple[str, int], list[float]] = {(m, p): [] for m in MODES for p in pools}
    try:
        bs = broker.bootstrap_servers
        broker_pid = broker.process.pid if broker.process is not None else None
        outs = [out_topic(m, p, r) for r in range(reps) for p in pools for m in MODES]
        noop.create_topics(bs, [noop.INPUT_TOPIC, *outs])
        t = time.perf_counter()
        avg = noop.produce_input(bs, n)
        print(
            f"broker {bs} (tansu); input: {n} messages, {noop.PARTITIONS} partitions, {avg:.0f} B values, "
            f"written in {time.perf_counter() - t:.1f} s; {args.keys} keys; pools {pools}; {reps} rounds; "
            f"cpus: {os.cpu_count()}"
        )
        with tempfile.TemporaryDirectory(prefix="samzamp-bench-stateful-") as tmp:
            work = Path(tmp)
            for rep in range(reps):
                for pool in pools:
                    order = list(MODES) if rep % 2 == 0 else list(MODES)[::-1]
                    for mode in order:
                        config = job_toml(mode, pool, rep, args.keys, work / "state")
                        r = noop.run_samzamp(bs, out_topic(mode, pool, rep), n, rep, work, broker_pid, config=config)
                        rates[mode, pool].append(r.rate)
                        extra = f", {r.outputs - n} extra outputs" if r.outputs != n else ""
                        print(
                            f"round {rep + 1}/{reps} pool {pool} {mode:<9} {r.rate:>9,.0f} msg/s  "
                            f"(cpu: container {r.cpu:.0%}, broker {r.broker_cpu:.0%}; start -> first output "
                            f"{r.startup_s:.2f} s{extra})"
                        )
                    ratio = rates["checksums", pool][-1] / rates["plain", pool][-1]
                    print(f"round {rep + 1}/{reps} pool {pool} checksums / plain {ratio:.3f}")
    finally:
        broker.stop()

    print()
    print(f"median of {reps} rounds:")
    for pool in pools:
        on, off = rates["checksums", pool], rates["plain", pool]
        ratios = [a / b for a, b in zip(on, off, strict=True)]
        print(
            f"  pool {pool}: checksums {statistics.median(on):>9,.0f} msg/s, plain {statistics.median(off):>9,.0f} "
            f"msg/s; by round {', '.join(f'{x:.3f}' for x in ratios)}"
        )
        print(f"stateful checksums / plain pool {pool}: {statistics.median(ratios):.3f} (target >= {TARGET})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
