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
- In a slice, after ``--settle`` (0.2 s), this process samples how many outputs the topic holds every
  100 ms (one ListOffsets request; on Tansu it lags by up to a producer batch, which the slope ignores)
  and takes the slice's rate as the least-squares slope of those samples. A configuration's rate is
  its measured outputs over its measured time, over all its slices.
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
import mmap
import os
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import noop
from cpu_task import ITERATIONS, burn

from samzamp.systems.kafka import EmbeddedBroker

TARGET = 1.7
SAMPLE_S = 0.1
COMMIT_MS = 5000  # task.commit.ms in a container's own running time


def job_toml(out_topic: str, pool: int, rep: int, commit_ms: int) -> str:
    return f"""\
[job]
name = "bench-cpu-{pool}"
id = "{rep}"
default.system = "kafka"
container.thread.pool.size = {pool}

[task]
class = "cpu_task:CpuTask"
inputs = ["kafka.{noop.INPUT_TOPIC}"]
commit.ms = {commit_ms}

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


def slope(samples: list[tuple[float, int]]) -> float:
    """Least-squares messages/s of (time, count) samples; NaN with fewer than 3."""
    if len(samples) < 3:
        return float("nan")
    t0 = samples[0][0]
    xs = [t - t0 for t, _ in samples]
    ys = [float(c) for _, c in samples]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx if sxx else float("nan")


@dataclass
class Contender:
    """One configuration under test, its processes, and its time running so far."""

    label: str
    count: Callable[[], int]  # outputs so far (a container) or loop calls so far (a burn reference)
    pgids: list[int] = field(default_factory=list)  # each leads its own process group (workers included)
    startup_s: float = 0.0
    measured_s: float = 0.0  # the measured part of its slices
    measured_outputs: float = 0.0  # slope x measured time, summed over slices
    running_s: float = 0.0  # whole slices, settling included: the CPU figures' denominator
    cpu_s: float = 0.0
    broker_cpu_s: float = 0.0
    idle_s: float = 0.0  # the machine's idle CPU time (all cores) during its slices
    slopes: list[float] = field(default_factory=list)
    last: int = 0
    threads: dict[tuple[int, int, str], float] = field(default_factory=dict)  # with BENCH_THREADS: run time

    @property
    def rate(self) -> float:
        return self.measured_outputs / self.measured_s if self.measured_s else float("nan")

    def signal(self, sig: int) -> None:
        for pgid in self.pgids:
            os.killpg(pgid, sig)

    def cpu(self) -> float:
        return sum(noop.tree_cpu_seconds(pid) for pid in self.pgids)


BURN_LOOP = """\
import mmap, struct, sys
sys.path.insert(0, sys.argv[1])
from cpu_task import burn
slot = 8 * int(sys.argv[3])
with open(sys.argv[2], "r+b") as f:
    counts = mmap.mmap(f.fileno(), 0)
n = 0
while True:
    for _ in range(100):
        burn(n)
        n += 1
    struct.pack_into("q", counts, slot, n)
"""


class BurnReference:
    """The machine's own scaling, in the same slices: ``k`` processes that run only the task's loop
    (cpu_task.burn, no samzamp, no broker), each in its own process group."""

    def __init__(self, k: int, workdir: Path) -> None:
        path = workdir / f"burn-{k}.counts"
        path.write_bytes(bytes(8 * k))
        self._file = open(path, "r+b")  # noqa: SIM115 - kept open for the mmap's life
        self._counts = mmap.mmap(self._file.fileno(), 0)
        self.procs = [
            subprocess.Popen(
                [sys.executable, "-c", BURN_LOOP, str(noop.BENCH_DIR), str(path), str(i)],
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
            for i in range(k)
        ]
        self.contender = Contender(f"burn x{k}", self.count, [p.pid for p in self.procs])
        deadline = time.monotonic() + 60
        while any(c == 0 for c in struct.unpack_from(f"{k}q", self._counts)):  # every process is looping
            if time.monotonic() > deadline or any(p.poll() is not None for p in self.procs):
                raise SystemExit(f"burn x{k}: the reference loops did not start")
            time.sleep(SAMPLE_S)
        self.contender.signal(signal.SIGSTOP)

    def count(self) -> int:
        return sum(struct.unpack_from(f"{len(self.procs)}q", self._counts))

    def close(self) -> None:
        for p in self.procs:
            p.kill()
            p.wait()
        self._counts.close()
        self._file.close()


class Container:
    """A container of the cpu job under test, with job.container.thread.pool.size = ``pool``."""

    def __init__(
        self, label: str, pool: int, out_topic: str, bs: str, log_dir: Path, sets: tuple[str, ...] = ()
    ) -> None:
        self.pool = pool
        self.out_topic = out_topic
        self.sets = sets
        self.commit_ms = COMMIT_MS
        self.log_path = log_dir / f"container-{out_topic}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.watch = noop.OutputWatch(bs, out_topic)
        self.contender = Contender(label, self.watch.count)


def start(c: Container, bs: str, rep: int, workdir: Path) -> None:
    """Start ``c``'s container (alone: the others are stopped) and stop it at its first output."""
    toml_path = workdir / f"job-{c.out_topic}.toml"
    toml_path.write_text(job_toml(c.out_topic, c.pool, rep, c.commit_ms))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(x for x in (str(noop.BENCH_DIR), env.get("PYTHONPATH", "")) if x)
    env["BENCH_NOOP_OUTPUT"] = c.out_topic
    args = [str(noop.CONTAINER_BIN), str(toml_path), "--set", f"systems.kafka.bootstrap.servers={bs}"]
    args += noop.extra_sets() + [a for kv in (*noop.EXTRA_SETS, *c.sets) for a in ("--set", kv)]
    with open(c.log_path, "wb") as log:
        t0 = time.perf_counter()
        c.proc = subprocess.Popen(
            args, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
    c.contender.pgids = [c.proc.pid]  # the container leads a group with its workers
    deadline = time.monotonic() + 120
    while c.contender.count() == 0:
        check_alive(c)
        if time.monotonic() > deadline:
            raise SystemExit(f"pool {c.pool}: no output within 120 s of start")
        time.sleep(SAMPLE_S)
    c.contender.startup_s = time.perf_counter() - t0
    c.contender.signal(signal.SIGSTOP)


def check_alive(c: Container) -> None:
    assert c.proc is not None
    if c.proc.poll() is not None:
        tail = c.log_path.read_text(errors="replace").splitlines()[-30:]
        print("\n".join(["--- container log (last lines) ---", *tail, "---"]), file=sys.stderr)
        raise SystemExit(f"pool {c.pool}: container exited with {c.proc.returncode}")


def run_slice(c: Contender, slice_s: float, settle_s: float, broker_pid: int | None, measure: bool = True) -> None:
    """Let ``c`` run for one slice, measure its rate after ``settle_s``, and stop it again (without
    ``measure``, only let it run: a warm-up)."""
    cpu0, bcpu0, idle0 = c.cpu(), noop.cpu_seconds(broker_pid), machine_idle_s()
    threads0 = thread_times(c) if os.environ.get("BENCH_THREADS") else None
    t_on = time.perf_counter()
    c.signal(signal.SIGCONT)
    time.sleep(settle_s)
    samples: list[tuple[float, int]] = []
    end = t_on + slice_s
    while (now := time.perf_counter()) < end:
        c.last = c.count()
        samples.append((time.perf_counter(), c.last))
        time.sleep(min(SAMPLE_S, max(0.0, end - now)))
    c.signal(signal.SIGSTOP)
    t_off = time.perf_counter()
    if not measure:
        return
    c.running_s += t_off - t_on
    c.cpu_s += c.cpu() - cpu0
    c.broker_cpu_s += noop.cpu_seconds(broker_pid) - bcpu0
    c.idle_s += machine_idle_s() - idle0
    if threads0 is not None:
        for key, run_s in thread_times(c).items():
            c.threads[key] = c.threads.get(key, 0.0) + run_s - threads0.get(key, 0.0)
    rate = slope(samples)
    if rate == rate:  # not NaN
        span = samples[-1][0] - samples[0][0]
        c.slopes.append(rate)
        c.measured_s += span
        c.measured_outputs += rate * span


def machine_idle_s() -> float:
    """Idle CPU seconds of the whole machine since boot, all cores (/proc/stat: idle + iowait)."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()
    return (int(fields[4]) + int(fields[5])) / os.sysconf("SC_CLK_TCK")


def thread_times(c: Contender) -> dict[tuple[int, int, str], float]:
    """Seconds each thread of ``c``'s processes (and their descendants) has run, by (pid, tid, name)."""
    return {key: run for pid in c.pgids for key, (run, _wait) in noop.thread_times(pid).items()}


def near_the_end(c: Contender, n: int, slice_s: float) -> bool:
    """True once ``c`` wrote 90% of its outputs, or could write the rest in its next slice (a slice
    that runs out of input would measure the end, not the steady state)."""
    fastest = max(c.slopes, default=0.0)
    return c.last >= 0.9 * n or c.last + 1.5 * fastest * slice_s >= n


def finish(c: Container, bs: str, n: int) -> None:
    """Let ``c`` run to the end: every output written, then SIGTERM, exit 0, and no output lost."""
    assert c.proc is not None
    written = noop.count_topic(bs, c.out_topic, n, timeout_s=600)
    if written < n:
        check_alive(c)
        raise SystemExit(f"pool {c.pool}: only {written}/{n} outputs")
    c.proc.send_signal(signal.SIGTERM)
    try:
        c.proc.wait(timeout=120)
    except subprocess.TimeoutExpired:
        raise SystemExit(f"pool {c.pool}: container did not exit within 120 s of SIGTERM") from None
    if c.proc.returncode != 0:
        check_alive(c)


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
    burns: list[BurnReference] = []
    for c in containers:
        c.commit_ms = COMMIT_MS * (len(containers) + len(pools))  # and a burn reference per pool size
    try:
        for c in containers:
            start(c, bs, rep, workdir)
        for k in pools:
            burns.append(BurnReference(k, workdir))
        order = [c.contender for c in containers] + [b.contender for b in burns]
        cycle = 0
        while not any(near_the_end(c.contender, n, args.slice) for c in containers):
            for c in order if cycle % 2 == 0 else reversed(order):
                # The first cycle warms up: a container's first slice ran slow in trials (0.6x the rest).
                run_slice(c, args.slice, args.settle, broker_pid, measure=cycle > 0)
            for container in containers:
                check_alive(container)
            cycle += 1
        for b in burns:
            b.close()
        burns = []
        for c in containers:
            c.contender.signal(signal.SIGCONT)
        for c in containers:
            finish(c, bs, n)
    finally:
        for b in burns:
            b.close()
        for c in containers:
            if c.proc is not None and c.proc.poll() is None:
                c.contender.signal(signal.SIGKILL)
                c.proc.wait()
            c.watch.close()
    return order


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
                report_round(res, f"round {r + 1}/{reps}")
    finally:
        broker.stop()

    def median(label: str, attr: str) -> float:
        return statistics.median(getattr(res[label], attr) for res in rounds)

    print()
    title = "cpu job, " + (f"median of {reps}" if reps > 1 else "1 round")
    print(f"{title:<34}{'msg/s':>10}{'x pool 1':>10}{'start':>8}")
    for label in rounds[0]:
        if label.startswith("pool"):
            rate = median(label, "rate")
            ratio = statistics.median(res[label].rate / res["pool 1"].rate for res in rounds)
            print(f"{label:<34}{rate:>10,.0f}{ratio:>10.2f}{median(label, 'startup_s'):>7.2f}s")
    if 2 in pools:
        ratios = [res["pool 2"].rate / res["pool 1"].rate for res in rounds]
        ceilings = [res["burn x2"].rate / res["burn x1"].rate for res in rounds]
        if reps > 1:
            print(f"\npool 2 / pool 1 by round: {', '.join(f'{x:.2f}' for x in ratios)}")
            print(f"the machine's own 2 / 1 by round: {', '.join(f'{x:.2f}' for x in ceilings)}")
        print(
            f"\nthe machine's own scaling (the task's loop alone, 2 processes / 1, in the same slices): "
            f"{statistics.median(ceilings):.2f}"
        )
        efficiency = statistics.median(r / c for r, c in zip(ratios, ceilings, strict=True))
        print(f"samzamp's efficiency (pool 2 / pool 1 over the machine's own, by round): {efficiency:.2f}")
        print(f"cpu scaling pool 2 / pool 1: {statistics.median(ratios):.2f} (target >= {TARGET})")
    return 0


def report_round(res: dict[str, Contender], title: str) -> None:
    for label, c in res.items():
        what = "msg/s" if label.startswith("pool") else "loops/s"
        cpu = f"cpu {c.cpu_s / c.running_s:.0%}"
        if label.startswith("pool"):
            cpu = f"cpu: container and workers {c.cpu_s / c.running_s:.0%}, broker {c.broker_cpu_s / c.running_s:.0%}"
            cpu += f"; machine idle {c.idle_s / c.running_s:.0%} of a core; start -> first output {c.startup_s:.2f} s"
        print(
            f"{title}  {label:<8}{c.rate:>9,.0f} {what:<8}({len(c.slopes)} slices, {c.measured_s:.1f} s measured; {cpu})",
            flush=True,
        )

    for label, c in res.items():
        for (pid, tid, comm), run_s in sorted(c.threads.items()):
            if run_s > 0.01 * c.running_s:
                print(f"    {label:<8} pid {pid} thread {tid} {comm:<16} running {run_s / c.running_s:4.0%}")

    def by_cycle(a: str, b: str) -> str:
        x, y = res[a], res[b]
        cycles = [q / p for p, q in zip(x.slopes, y.slopes, strict=False)]
        return f"{y.rate / x.rate:.2f}; by cycle {', '.join(f'{r:.2f}' for r in cycles)}"

    for label in res:
        if label.startswith("pool") and label != "pool 1":
            print(f"{title}  {label} / pool 1: {by_cycle('pool 1', label)}")
    print(f"{title}  burn x2 / burn x1: {by_cycle('burn x1', 'burn x2')}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
