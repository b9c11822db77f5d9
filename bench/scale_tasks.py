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
  (bench/scale_loop.py's figure), for where the throughput goes; also by thread of the main process
  ("python" is every Python thread, "rdk:*" are librdkafka's own).
- SIGTERM -> exit: the shutdown, whose final commit grows with the task count.
- samzamp µs/msg: what samzamp itself spends per message, wherever it runs: the CPU of the main process
  and of its workers from 10% to 90% of the outputs (start-up and shutdown outside), over the outputs
  in that window; "x 4 tasks" is that over the same round's 4-task figure (a pair; 1.00 means a task
  count that costs samzamp nothing). Beside it, the broker's CPU per message over the same window
  (its process sampled every 20 ms by a thread of this one, read at the window's ends by
  interpolation): on this machine broker and samzamp share two cores, so the wall-clock rate is
  bounded by both; where the broker runs elsewhere, samzamp's CPU per message is what bounds it.
- projected x 4 tasks: the throughput ratio where the broker runs elsewhere and each of samzamp's
  processes has a core: a processor's rate is bounded by its busiest process, the main one (loop
  µs/msg) or a worker (workers µs/msg / pool), so the ratio of 1e6 / max(loop, workers / 2) of
  4,096 tasks to that of 4 tasks.

Printed: each run, then per contender the medians over ``--repeat`` rounds and the ratios by round.

With ``--profile FILE``, after the rounds, ``--profile-runs`` more runs of 4,096 tasks are recorded with
py-spy (bench/scale_loop.py's profile_runs: the main process, Python frames, 10% to 90% of the
outputs) and FILE gets the summary. Those runs count in no figure.

Before the runs, samzamp's modules are byte-compiled (``compileall``), as installing a wheel does: a
checkout installed in place (pip -e) under PYTHONDONTWRITEBYTECODE, as on the machine this bench was
written on, has no .pyc, and then the container and each worker compile every samzamp module at each
start (about half a second of the start on 2 cores, alike for every task count). ``--no-compile``
leaves them as they are.

With ``--base DIR`` (another checkout of samzamp, its extensions built in place: see bench/noop.py)
each contender also runs on that checkout's container, in the same rounds: its ratios are over its
own 4-task run, and "this tree / base" gives each figure against its before, round by round.

With ``--tasks 4,4096`` only those contenders run (4 tasks always: the ratios are over it).

    .venv/bin/python bench/scale_tasks.py [--messages N] [--repeat R] [--quick] [--tasks N,N] [--base DIR]
        [--profile FILE]
"""

from __future__ import annotations

import argparse
import compileall
import os
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import noop
from scale_loop import POOL, RunFigures, delete_topics, job_toml, profile_runs, run_container

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
    checkout: noop.Checkout = noop.THIS  # whose container runs it (``--base``: another checkout)


SHAPES = [
    Shape("4 tasks (4 x 1)", 4, INPUT_4, 1),
    Shape("1,024 tasks (1,024 x 1)", 1024, INPUT_1024, 1),
    Shape("4,096 tasks (1,024 x 4)", 4096, INPUT_1024, 4),
]
BASE = SHAPES[0].label


def four(shape: Shape) -> str:
    """The label of the 4-task contender of ``shape``'s checkout: what its ratios are over."""
    return SHAPES[0].label + shape.checkout.suffix


class CpuSampler:
    """The CPU seconds of process ``pid`` (the broker), sampled every ``period_s`` by a thread of its own
    while in use (``with``), for reading at any instant of that time (``at``)."""

    def __init__(self, pid: int, period_s: float = 0.02) -> None:
        self._pid = pid
        self._period_s = period_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-broker-cpu", daemon=True)
        self.samples: list[tuple[float, float]] = []  # (perf_counter, CPU seconds)

    def _run(self) -> None:
        while True:
            self.samples.append((time.perf_counter(), noop.cpu_seconds(self._pid)))
            if self._stop.wait(self._period_s):
                self.samples.append((time.perf_counter(), noop.cpu_seconds(self._pid)))
                return

    def __enter__(self) -> CpuSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def at(self, t: float) -> float:
        """The process's CPU seconds at ``t`` (perf_counter), interpolated between the samples around it."""
        xs = self.samples
        if not xs:
            return float("nan")
        if t <= xs[0][0]:
            return xs[0][1]
        for (t0, c0), (t1, c1) in zip(xs, xs[1:], strict=False):
            if t0 <= t <= t1:
                return c0 + (c1 - c0) * (t - t0) / (t1 - t0) if t1 > t0 else c1
        return xs[-1][1]


@dataclass
class TaskRun:
    """One container run's figures, and the broker's CPU over the same window."""

    fig: RunFigures
    broker: list[tuple[float, float]] = field(default_factory=list)  # the broker's CPU samples during the run

    def samzamp_us(self, n: int) -> float:
        """The main process's and the workers' CPU per message from 10% to 90% of the outputs."""
        a, b = self.fig.window(0.1, 0.9, n)
        cpu = (b.main_cpu - a.main_cpu) + (b.workers_cpu - a.workers_cpu)
        return cpu / (b.count - a.count) * 1e6 if b.count > a.count else float("nan")

    def broker_us(self, n: int) -> float:
        """The broker's CPU per message over the same window."""
        a, b = self.fig.window(0.1, 0.9, n)
        sampler = CpuSampler(0)
        sampler.samples = self.broker
        cpu = sampler.at(b.t) - sampler.at(a.t)
        return cpu / (b.count - a.count) * 1e6 if b.count > a.count else float("nan")

    def ceiling(self, n: int) -> float:
        """Messages per second where each of samzamp's processes has a core and the broker runs
        elsewhere: bounded by the busiest process, the main one or a worker."""
        busiest = max(self.fig.loop_us(n), self.fig.workers_us(n) / POOL)
        return 1e6 / busiest if busiest > 0 else float("nan")


def run_shape(
    shape: Shape,
    rep: int | str,
    n: int,
    bs: str,
    workdir: Path,
    profile_to: Path | None = None,
    broker_pid: int = 0,
) -> TaskRun:
    tag = shape.checkout.tag
    out = f"bench-scale-tasks-out-{rep}-{shape.tasks}{tag}"
    name = f"bench-scale-tasks-{rep}{tag}"
    config = job_toml("noop", shape.input_topic, out, f"{shape.tasks}-{os.getpid()}", factor=shape.factor, name=name)
    noop.create_topics(bs, [out])
    # run_container starts noop's container of noop.THIS: the shape's checkout's, for this run.
    this, this_bin = noop.THIS, noop.CONTAINER_BIN
    noop.THIS, noop.CONTAINER_BIN = shape.checkout, shape.checkout.container_bin
    try:
        with CpuSampler(broker_pid) as sampler:
            fig = run_container(config, out, n, bs, workdir, profile_to, label=shape.label)
        return TaskRun(fig, sampler.samples if broker_pid else [])
    finally:
        noop.THIS, noop.CONTAINER_BIN = this, this_bin
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
        "--base",
        metavar="DIR",
        help="also run each contender on another checkout of samzamp (a commit to compare with; its "
        "extensions built in place: see bench/noop.py), side by side in each round",
    )
    ap.add_argument("--no-compile", action="store_true", help="do not byte-compile samzamp's modules before the runs")
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
    if args.base:
        other = noop.base_checkout(ap, args.base)
        with tempfile.TemporaryDirectory() as scratch:
            other.check_imports(Path(scratch))
        SHAPES.extend(Shape(s.label + other.suffix, s.tasks, s.input_topic, s.factor, other) for s in list(SHAPES))
    if n < 1000 or reps < 0:
        ap.error("--messages must be >= 1000 and --repeat >= 0")
    noop.EXTRA_SETS.extend(args.set)
    noop.set_fetch_queue_backoff(10)
    print(f"command: {' '.join(['.venv/bin/python', *sys.argv])}")
    if not args.no_compile:
        # As a wheel install does; py_compile writes the .pyc files whatever PYTHONDONTWRITEBYTECODE says.
        for checkout in {s.checkout for s in SHAPES}:
            compileall.compile_dir(str(checkout.package), quiet=1)
    print("samzamp's modules " + ("left as they are (--no-compile)" if args.no_compile else "byte-compiled first"))

    broker = EmbeddedBroker(die_with_parent=True).start()
    assert broker.process is not None
    broker_pid = broker.process.pid
    results: dict[str, list[TaskRun]] = {s.label: [] for s in SHAPES}
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
                    run = run_shape(shape, r, n, bs, Path(tmp), broker_pid=broker_pid)
                    results[shape.label].append(run)
                    fig = run.fig
                    print(
                        f"round {r + 1}/{reps}  {shape.label:<24} start -> first output {fig.startup_s:5.2f} s, "
                        f"{fig.rate():>9,.0f} msg/s, main RSS {fig.rss(n) / 2**20:6.1f} MiB, "
                        f"(at first output {fig.samples[0].rss / 2**20:.1f}), loop {fig.loop_us(n):.2f} µs/msg, "
                        f"workers {fig.workers_us(n):.2f} µs/msg, samzamp {run.samzamp_us(n):.2f} µs/msg, "
                        f"broker {run.broker_us(n):.2f} µs/msg, SIGTERM -> exit 0 in {fig.shutdown_s:.2f} s",
                        flush=True,
                    )
            if args.profile:
                profiled = [s for s in SHAPES if s.checkout is noop.THIS][-1]
                workdir = Path(tmp)
                profile_runs(
                    lambda tag, to: run_shape(profiled, tag, n, bs, workdir, profile_to=to).fig,
                    f"no-op task, pool 2, {profiled.label}",
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


def report(results: dict[str, list[TaskRun]], n: int, reps: int) -> None:
    print()
    title = f"pool 2, no-op, {n:,} msgs, " + (f"median of {reps}" if reps > 1 else "1 round")
    print(
        f"{title:<40}{'first out':>10}{'msg/s':>10}{'x 4 tasks':>11}{'main RSS':>10}{'RSS/task':>10}{'loop µs/msg':>13}"
        f"{'SIGTERM->exit':>15}"
    )
    for s in SHAPES:
        rs = [r.fig for r in results[s.label]]
        bs = [b.fig for b in results[four(s)]]
        first = statistics.median(r.startup_s for r in rs)
        rate = statistics.median(r.rate() for r in rs)
        ratio = statistics.median(r.rate() / b.rate() for r, b in zip(rs, bs, strict=True))
        rss = statistics.median(r.rss(n) / 2**20 for r in rs)
        per_task = (
            f"{statistics.median((r.rss(n) - b.rss(n)) / (s.tasks - 4) / 1024 for r, b in zip(rs, bs, strict=True)):>7.1f} KiB"
            if s.tasks > 4
            else f"{'':>11}"
        )
        loop = statistics.median(r.loop_us(n) for r in rs)
        down = statistics.median(r.shutdown_s for r in rs)
        print(
            f"{s.label:<40}{first:>9.2f}s{rate:>10,.0f}{ratio:>11.2f}{rss:>6.1f} MiB{per_task}{loop:>13.2f}{down:>14.2f}s"
        )
    print()
    print("CPU per message over the steady window (10% to 90% of the outputs), medians; x 4 tasks by pair:")
    print(
        f"{'':<40}{'loop µs':>9}{'workers µs':>12}{'samzamp µs':>12}{'x 4 tasks':>11}{'broker µs':>11}"
        f"{'projected x 4 tasks':>21}"
    )
    for s in SHAPES:
        trs = results[s.label]
        pairs = list(zip(trs, results[four(s)], strict=True))
        print(
            f"{s.label:<40}{statistics.median(r.fig.loop_us(n) for r in trs):>9.2f}"
            f"{statistics.median(r.fig.workers_us(n) for r in trs):>12.2f}"
            f"{statistics.median(r.samzamp_us(n) for r in trs):>12.2f}"
            f"{statistics.median(r.samzamp_us(n) / b.samzamp_us(n) for r, b in pairs):>11.2f}"
            f"{statistics.median(r.broker_us(n) for r in trs):>11.2f}"
            f"{statistics.median(r.ceiling(n) / b.ceiling(n) for r, b in pairs):>21.2f}"
        )
    split = {s.label: [r.fig.threads_us() for r in results[s.label]] for s in SHAPES}
    names = sorted({k for runs in split.values() for d in runs for k in d})
    cells = {(lbl, k): statistics.median([d.get(k, 0.0) for d in runs]) for lbl, runs in split.items() for k in names}
    shown = sorted(
        (k for k in names if max(cells[(s.label, k)] for s in SHAPES) >= 0.02),
        key=lambda k: -max(cells[(s.label, k)] for s in SHAPES),
    )
    print("the loop's µs/msg by thread of the main process (/proc schedstat; medians):")
    print(f"{'thread':<40}" + "".join(f"{s.label:>26}" for s in SHAPES))
    for k in shown:
        print(f"{k:<40}" + "".join(f"{cells[(s.label, k)]:>26.2f}" for s in SHAPES))
    print()
    for s in SHAPES:
        if s.tasks == 4:
            continue
        tpairs = list(zip(results[s.label], results[four(s)], strict=True))
        print(
            f"{s.label} / {four(s)}, msg/s by round: {by_round([r.fig.rate() / b.fig.rate() for r, b in tpairs])}; "
            f"samzamp CPU per message by round: {by_round([r.samzamp_us(n) / b.samzamp_us(n) for r, b in tpairs])}; "
            f"projected by round: {by_round([r.ceiling(n) / b.ceiling(n) for r, b in tpairs])}"
        )
    for s in SHAPES:
        print(f"{s.label}: start -> first output by round (s): {by_round([r.fig.startup_s for r in results[s.label]])}")
    print()
    for s in SHAPES:
        if s.checkout is noop.THIS:
            continue
        mine = s.label.removesuffix(s.checkout.suffix)
        pairs = list(zip(results[mine], results[s.label], strict=True))
        print(
            f"{mine}: this tree / base by round: msg/s "
            f"{by_round([r.fig.rate() / b.fig.rate() for r, b in pairs])}; samzamp CPU per message "
            f"{by_round([r.samzamp_us(n) / b.samzamp_us(n) for r, b in pairs])}; loop µs/msg "
            f"{by_round([r.fig.loop_us(n) / b.fig.loop_us(n) for r, b in pairs])}; workers µs/msg "
            f"{by_round([r.fig.workers_us(n) / b.fig.workers_us(n) for r, b in pairs])}; start -> first output "
            f"{by_round([r.fig.startup_s - b.fig.startup_s for r, b in pairs], '+.2f')} s"
        )
    print()
    big_label = next((s.label for s in SHAPES if s.tasks == 4096 and s.checkout is noop.THIS), None)
    if big_label is None:
        return
    base = results[BASE]
    big = [r.fig for r in results[big_label]]
    bs = [b.fig for b in base]
    ratio = statistics.median(r.rate() / b.rate() for r, b in zip(big, bs, strict=True))
    first = statistics.median(r.startup_s for r in big)
    rss_task = statistics.median((r.rss(n) - b.rss(n)) / (4096 - 4) / 1024 for r, b in zip(big, bs, strict=True))
    today_task = (BEFORE["rss_mib"][1] - BEFORE["rss_mib"][0]) * 1024 / (4096 - 4)
    runs = list(zip(results[big_label], base, strict=True))
    cpu_ratio = statistics.median(r.samzamp_us(n) / b.samzamp_us(n) for r, b in runs)
    projected = statistics.median(r.ceiling(n) / b.ceiling(n) for r, b in runs)
    print(
        f"4,096 tasks / 4 tasks msg/s: {ratio:.2f} (target >= {TARGET_RATIO}; before the scale work ~0.48, pairs 0.47-0.81)"
    )
    print(
        f"4,096 tasks / 4 tasks, samzamp's CPU per message: {cpu_ratio:.2f} (throughput where samzamp's CPU "
        f"bounds it: {1 / cpu_ratio:.2f} of 4 tasks); projected with the broker elsewhere, a core per process: "
        f"{projected:.2f}"
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
