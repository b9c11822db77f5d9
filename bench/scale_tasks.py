"""Cost as tasks grow: one processor of 4, 1,024 and 4,096 tasks at pool 2 on the no-op task, side by
side in one run.

One embedded broker (Tansu, memory only, 127.0.0.1). Two input topics, written once before measuring,
each ``--messages`` JSON values of ~100 bytes with keys ``str(i % 10000)`` (bench/noop.py's input):
one of 4 partitions and one of 1,024 (created once per run and read by every round: creating 1,024
partitions on Tansu takes a while). Three contenders, each ``bin/samzamp-container`` running
bench/noop_task.py with job.container.thread.pool.size = 2:

4 tasks       the 4-partition topic, job.elasticity.factor 1
1,024 tasks   the 1,024-partition topic, factor 1: from 4 tasks, only the partition count grows
4,096 tasks   the 1,024-partition topic, factor 4 (the scale targets' shape): from 1,024 tasks, only the key
              buckets (virtual tasks) grow; each task's share of a fetch is a few messages

With 10,000 keys over 1,024 partitions each partition holds ~10 keys, so at factor 4 every bucket gets
messages (a few empty ones would not change the task count: a task exists whether or not it gets any).

A round runs each contender once, one at a time, in an order that reverses every other round; each run
has its own output topic (4 partitions), and its own job.name and job.id (``bench-scale-tasks-<round>``),
so it starts from no checkpoint. While it runs this process samples, every 20 ms, how many outputs the
topic holds (bench/noop.py's OutputWatch) and the container's main process: CPU (/proc/<pid>/stat) and
RSS (psutil). At 90% of the outputs (or when the count stops moving for a second) the container is
stopped with SIGTERM and must exit 0. Per run:

- start -> first output: from just before the container is spawned to the first output seen (≤ 20 ms
  late, alike for all).
- msg/s: the steady rate, bench/noop.py's steady_rate: the least-squares slope of the sampled count
  from 10% to 90% of the outputs. "x 4 tasks" is that over the same round's 4-task run (a pair),
  and its median over the rounds (single runs here vary by 2x; the pairs vary less).
- main RSS: the main process's largest RSS from 10% to 90% of the outputs (its steady state; workers
  apart). RSS per task: (main RSS - the same round's 4-task main RSS) / (tasks - 4).
  Caveat: the steady RSS includes what the consumer has fetched ahead, which is larger for the fast
  4-task job (its RSS grows ~40 MiB after the first output, the 1,024-task job's less), so this
  per-task figure can come out negative for 1,024 tasks; "at first output" is printed beside it.
- loop µs/msg: the main process's CPU from 10% to 90% of the outputs over the outputs in that window
  (bench/scale_loop.py's figure), for where the throughput goes.
- SIGTERM -> exit: the shutdown, whose final commit grows with the task count.

Printed: each run, then per contender the medians over ``--repeat`` rounds and the ratios by round.

With ``--profile FILE``, after the rounds, ``--profile-runs`` more runs of 4,096 tasks are recorded with
py-spy (bench/scale_loop.py's profile_runs: the main process, Python frames, 10% to 90% of the
outputs) and FILE gets the summary. Those runs count in no figure.

With ``--tasks 4,4096`` only those contenders run (4 tasks always: the ratios are over it).

    .venv/bin/python bench/scale_tasks.py [--messages N] [--repeat R] [--quick] [--tasks N,N] [--profile FILE]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import noop
from scale_loop import RunFigures, delete_topics, job_toml, profile_runs, run_container

from samzamp.systems.kafka import EmbeddedBroker

INPUT_4 = "bench-scale-tasks-in-4"
INPUT_1024 = "bench-scale-tasks-in-1024"
# The figures before the scale work (600,000 messages, 3 alternating pairs, medians) and targets for 4,096 tasks.
BEFORE = {"first_s": (0.9, 3.3), "rate": (275_000, 133_000), "rss_mib": (123, 139)}
TARGET_RATIO = 0.85  # 4,096 tasks: throughput at least 0.85 of the 4-task figure
TARGET_FIRST_S = 1.5  # 4,096 tasks: start to first output at most 1.5 s


@dataclass(frozen=True)
class Shape:
    label: str
    tasks: int
    input_topic: str
    factor: int


SHAPES = [
    Shape("4 tasks (4 x 1)", 4, INPUT_4, 1),
    Shape("1,024 tasks (1,024 x 1)", 1024, INPUT_1024, 1),
    Shape("4,096 tasks (1,024 x 4)", 4096, INPUT_1024, 4),
]
BASE = SHAPES[0].label


def run_shape(
    shape: Shape, rep: int | str, n: int, bs: str, workdir: Path, profile_to: Path | None = None
) -> RunFigures:
    out = f"bench-scale-tasks-out-{rep}-{shape.tasks}"
    name = f"bench-scale-tasks-{rep}"
    config = job_toml("noop", shape.input_topic, out, f"{shape.tasks}-{os.getpid()}", factor=shape.factor, name=name)
    noop.create_topics(bs, [out])
    try:
        return run_container(config, out, n, bs, workdir, profile_to, label=shape.label)
    finally:
        delete_topics(bs, [out])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=600_000, help="input messages per topic (default 600,000)")
    ap.add_argument("--repeat", type=int, default=5, help="rounds, order alternating; medians reported (default 5)")
    ap.add_argument("--quick", action="store_true", help="a smoke check: 150,000 messages, 1 round")
    ap.add_argument("--profile", metavar="FILE", help="after the rounds, profile the 4,096-task loop into FILE")
    ap.add_argument("--profile-runs", type=int, default=2, help="runs recorded for --profile (default 2)")
    ap.add_argument(
        "--tasks",
        default="4,1024,4096",
        metavar="N,N",
        help="the contenders to run, by task count (default 4,1024,4096; 4 is always run: the ratios are over it)",
    )
    ap.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="a config override for every container"
    )
    args = ap.parse_args(argv)
    if args.quick:
        args.messages, args.repeat = 150_000, 1
    n, reps = args.messages, args.repeat
    wanted = {int(t) for t in args.tasks.split(",")} | {SHAPES[0].tasks}
    if not wanted <= {s.tasks for s in SHAPES}:
        ap.error(f"--tasks: one of {', '.join(str(s.tasks) for s in SHAPES)}")
    SHAPES[:] = [s for s in SHAPES if s.tasks in wanted]
    if n < 1000 or reps < 0:
        ap.error("--messages must be >= 1000 and --repeat >= 0")
    noop.EXTRA_SETS.extend(args.set)
    noop.set_fetch_queue_backoff(10)
    print(f"command: {' '.join(['.venv/bin/python', *sys.argv])}")

    broker = EmbeddedBroker(die_with_parent=True).start()
    results: dict[str, list[RunFigures]] = {s.label: [] for s in SHAPES}
    try:
        bs = broker.bootstrap_servers
        t = time.perf_counter()
        noop.create_topics(bs, [INPUT_4])
        noop.create_topics(bs, [INPUT_1024], partitions=1024)
        made = time.perf_counter() - t
        t = time.perf_counter()
        avg = noop.produce_input(bs, n, INPUT_4)
        noop.produce_input(bs, n, INPUT_1024)
        print(
            f"broker {bs} (tansu); input: {n:,} messages of {avg:.0f} B in a 4-partition and in a 1,024-partition "
            f"topic (created in {made:.1f} s, written in {time.perf_counter() - t:.1f} s); cpus: {os.cpu_count()}; "
            f"pool 2, no-op task; {reps} rounds"
        )
        with tempfile.TemporaryDirectory(prefix="bench-scale-tasks-") as tmp:
            for r in range(reps):
                for shape in SHAPES if r % 2 == 0 else SHAPES[::-1]:
                    fig = run_shape(shape, r, n, bs, Path(tmp))
                    results[shape.label].append(fig)
                    print(
                        f"round {r + 1}/{reps}  {shape.label:<24} start -> first output {fig.startup_s:5.2f} s, "
                        f"{fig.rate():>9,.0f} msg/s, main RSS {fig.rss(n) / 2**20:6.1f} MiB, "
                        f"(at first output {fig.samples[0].rss / 2**20:.1f}), loop {fig.loop_us(n):.2f} µs/msg, "
                        f"SIGTERM -> exit 0 in {fig.shutdown_s:.2f} s",
                        flush=True,
                    )
            if args.profile:
                workdir = Path(tmp)
                profile_runs(
                    lambda tag, to: run_shape(SHAPES[-1], tag, n, bs, workdir, profile_to=to),
                    f"no-op task, pool 2, {SHAPES[-1].label}",
                    args.profile_runs,
                    n,
                    workdir,
                    Path(args.profile).resolve(),
                    native=False,
                )
    finally:
        broker.stop()
    if reps:
        report(results, n, reps)
    return 0


def by_round(xs: list[float], fmt: str = ".2f") -> str:
    return ", ".join(f"{x:{fmt}}" for x in xs)


def report(results: dict[str, list[RunFigures]], n: int, reps: int) -> None:
    base = results[BASE]
    print()
    title = f"pool 2, no-op, {n:,} msgs, " + (f"median of {reps}" if reps > 1 else "1 round")
    print(
        f"{title:<40}{'first out':>10}{'msg/s':>10}{'x 4 tasks':>11}{'main RSS':>10}{'RSS/task':>10}{'loop µs/msg':>13}"
        f"{'SIGTERM->exit':>15}"
    )
    for s in SHAPES:
        rs = results[s.label]
        first = statistics.median(r.startup_s for r in rs)
        rate = statistics.median(r.rate() for r in rs)
        ratio = statistics.median(r.rate() / b.rate() for r, b in zip(rs, base, strict=True))
        rss = statistics.median(r.rss(n) / 2**20 for r in rs)
        per_task = (
            f"{statistics.median((r.rss(n) - b.rss(n)) / (s.tasks - 4) / 1024 for r, b in zip(rs, base, strict=True)):>7.1f} KiB"
            if s.tasks > 4
            else f"{'':>11}"
        )
        loop = statistics.median(r.loop_us(n) for r in rs)
        down = statistics.median(r.shutdown_s for r in rs)
        print(
            f"{s.label:<40}{first:>9.2f}s{rate:>10,.0f}{ratio:>11.2f}{rss:>6.1f} MiB{per_task}{loop:>13.2f}{down:>14.2f}s"
        )
    print()
    for s in SHAPES[1:]:
        rs = results[s.label]
        print(
            f"{s.label} / {BASE}, msg/s by round: {by_round([r.rate() / b.rate() for r, b in zip(rs, base, strict=True)])}"
        )
    for s in SHAPES:
        print(f"{s.label}: start -> first output by round (s): {by_round([r.startup_s for r in results[s.label]])}")
    print()
    if SHAPES[-1].tasks != 4096:
        return
    big = results[SHAPES[-1].label]
    ratio = statistics.median(r.rate() / b.rate() for r, b in zip(big, base, strict=True))
    first = statistics.median(r.startup_s for r in big)
    rss_task = statistics.median((r.rss(n) - b.rss(n)) / (4096 - 4) / 1024 for r, b in zip(big, base, strict=True))
    today_task = (BEFORE["rss_mib"][1] - BEFORE["rss_mib"][0]) * 1024 / (4096 - 4)
    print(
        f"4,096 tasks / 4 tasks msg/s: {ratio:.2f} (target >= {TARGET_RATIO}; before the scale work ~0.48, pairs 0.47-0.81)"
    )
    print(
        f"4,096 tasks start -> first output: {first:.2f} s (target <= {TARGET_FIRST_S} s; before the scale work 3.3 s)"
    )
    print(
        f"4,096 tasks main RSS per task: {rss_task:.1f} KiB (target: no more than before; before the scale work "
        f"~{today_task:.1f} KiB: {BEFORE['rss_mib'][1]} - {BEFORE['rss_mib'][0]} MiB over 4,092 tasks)"
    )


if __name__ == "__main__":
    sys.exit(main())
