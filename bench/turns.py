"""Taking turns: the harness of the benchmarks that compare configurations on a shared machine
(bench/cpu_scaling.py, bench/elasticity.py).

Shared machines change speed in phases, each core on its own, so configurations measured one after the
other land in different phases. Here every configuration runs at once, but only one is let run at a
time: each in turn gets a *slice* and is then stopped with SIGSTOP (its whole process group) while the
next one runs. A cycle gives each one slice; cycles alternate their order, so that a drift within a
cycle favours no one. The first cycle only warms up. bench/cpu_scaling.py's docstring gives the
measurements behind this and how a slice is measured.

- ``Contender``: one configuration, its process groups, and its figures so far.
- ``BurnReference``: the machine's own ceiling, k processes running only the CPU task's loop.
- ``Runner``: a process under test that writes one output per input to its own output topic. While
  the turns go on, its progress is sampled on the broker (noop.OutputWatch); its rate is counted after
  the round, from its outputs' CreateTimes (``Runner.finish``). ``start_container`` runs
  ``bin/samzamp-container`` as one (``container_args``: its command line), of this checkout or of
  another (``noop.Checkout``: a bench's ``--base``).
- ``take_turns`` lets the contenders run slice by slice until some runner is near its end;
  ``run_to_end`` then lets every runner finish, checks every output is written and that each exits 0.
"""

from __future__ import annotations

import argparse
import bisect
import mmap
import os
import signal
import statistics
import struct
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import noop

SAMPLE_S = 0.1
# How long ``Runner.finish`` waits for a runner's outputs (BENCH_FINISH_TIMEOUT_S): a machine lent for
# minutes wants a short one, to learn which outputs are missing before its time runs out.
FINISH_TIMEOUT_S = float(os.environ.get("BENCH_FINISH_TIMEOUT_S", "600"))


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
    count: Callable[[], int]  # outputs so far (a runner) or loop calls so far (a burn reference)
    pgids: list[int] = field(default_factory=list)  # each leads its own process group (workers included)
    startup_s: float = 0.0
    measured_s: float = 0.0  # the measured part of its slices
    measured_outputs: float = 0.0  # over the measured parts: a runner's outputs counted, a burn's slope x time
    running_s: float = 0.0  # whole slices, settling included: the CPU figures' denominator
    cpu_s: float = 0.0
    broker_cpu_s: float = 0.0
    idle_s: float = 0.0  # the machine's idle CPU time (all cores) during its slices
    slopes: list[float] = field(default_factory=list)  # each measured slice's rate
    windows: list[tuple[float, float]] = field(default_factory=list)  # each measured part, wall clock
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


class Runner:
    """A process under test (a container, or a plain loop) that writes one output per input to
    ``out_topic``; its contender counts the outputs on the broker."""

    def __init__(self, label: str, out_topic: str, bs: str, log_dir: Path, partitions: int = noop.PARTITIONS) -> None:
        self.label = label
        self.out_topic = out_topic
        self.partitions = partitions
        self.log_path = log_dir / f"container-{out_topic}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.watch = noop.OutputWatch(bs, out_topic, partitions)
        self.contender = Contender(label, self.watch.count)

    def start(self, args: Sequence[str], env: dict[str, str], cwd: Path | None = None) -> None:
        """Start the process (alone: the others are stopped) in its own process group, and stop it
        at its first output."""
        with open(self.log_path, "wb") as log:
            t0 = time.perf_counter()
            self.proc = subprocess.Popen(
                args,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=cwd,
                start_new_session=True,
            )
        self.contender.pgids = [self.proc.pid]  # it leads a group with its workers
        deadline = time.monotonic() + 120
        while self.contender.count() == 0:
            self.check_alive()
            if time.monotonic() > deadline:
                raise SystemExit(f"{self.label}: no output within 120 s of start")
            time.sleep(SAMPLE_S)
        self.contender.startup_s = time.perf_counter() - t0
        self.contender.signal(signal.SIGSTOP)

    def check_alive(self) -> None:
        assert self.proc is not None
        if self.proc.poll() is not None:
            tail = self.log_path.read_text(errors="replace").splitlines()[-30:]
            print("\n".join(["--- container log (last lines) ---", *tail, "---"]), file=sys.stderr)
            raise SystemExit(f"{self.label}: container exited with {self.proc.returncode}")

    def finish(self, bs: str, n: int) -> None:
        """Let it run to the end: every output written, then SIGTERM, exit 0, and no output lost. Then
        its rate: the outputs it wrote in the measured part of each slice (``count_measured``)."""
        assert self.proc is not None
        times = noop.output_times(bs, self.out_topic, n, timeout_s=FINISH_TIMEOUT_S, partitions=self.partitions)
        written = len(times)
        self.count_measured(times)
        if written < n:
            self.check_alive()
            # Tell a hole in the log (offsets the broker skipped) from outputs never written.
            ends = noop.OutputWatch(bs, self.out_topic, self.partitions).offsets()
            again = len(noop.output_times(bs, self.out_topic, n, timeout_s=30, partitions=self.partitions))
            raise SystemExit(
                f"{self.label}: only {written}/{n} outputs ({again} on a second read; ListOffsets per "
                f"partition: {ends})"
            )
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            raise SystemExit(f"{self.label}: container did not exit within 120 s of SIGTERM") from None
        if self.proc.returncode != 0:
            self.check_alive()

    def count_measured(self, times: list[float]) -> None:
        """Replace each slice's sampled rate by the count of outputs whose CreateTime (``times``,
        sorted) falls in its measured part. Exact to the millisecond, where the samples are not: on
        Tansu a ListOffsets answer lags by the last producer batch of each partition, and that lag
        differs between the two ends of a slice. Side by side on bench/elasticity the sampled slopes
        read pool 1 F=1 6-7% and the plain loop 8-10% above their counts, pool 2 F=2 0-2%."""
        c = self.contender
        counts = [bisect.bisect_left(times, b) - bisect.bisect_left(times, a) for a, b in c.windows]
        c.slopes = [k / (b - a) for k, (a, b) in zip(counts, c.windows, strict=True)]
        c.measured_outputs = float(sum(counts))
        c.measured_s = sum(b - a for a, b in c.windows)

    def close(self) -> None:
        """Kill it if it still runs (a round that failed), and close its output watch."""
        if self.proc is not None and self.proc.poll() is None:
            self.contender.signal(signal.SIGKILL)
            self.proc.wait()
        self.watch.close()


def bench_env(out_topic: str) -> dict[str, str]:
    """The environment of a process under test: bench/ on its path, its output topic in BENCH_NOOP_OUTPUT."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(x for x in (str(noop.BENCH_DIR), env.get("PYTHONPATH", "")) if x)
    env["BENCH_NOOP_OUTPUT"] = out_topic
    return env


def start_container(
    r: Runner, config: str, bs: str, workdir: Path, sets: Sequence[str] = (), checkout: noop.Checkout = noop.THIS
) -> tuple[int, int]:
    """Start ``checkout``'s ``bin/samzamp-container`` with the job ``config`` (TOML) as ``r``, with noop's
    consumer settings and --set overrides and then ``sets``, and stop it at its first output. Returns
    how many of its processes (container and workers) are checked to run ``checkout``'s samzamp, of
    how many (``noop.Checkout.check_running``; it exits on one that does not)."""
    toml_path = workdir / f"job-{r.out_topic}.toml"
    toml_path.write_text(config)
    r.start(container_args(toml_path, bs, sets, checkout), checkout.env(r.out_topic), cwd=workdir)
    assert r.proc is not None
    return checkout.check_running(r.proc.pid)


def container_args(
    toml_path: Path, bs: str, sets: Sequence[str] = (), checkout: noop.Checkout = noop.THIS
) -> list[str]:
    """The command line of ``checkout``'s ``bin/samzamp-container`` with the job ``toml_path`` on broker
    ``bs``, noop's consumer settings and --set overrides, and then ``sets``."""
    args = [str(checkout.container_bin), str(toml_path), "--set", f"systems.kafka.bootstrap.servers={bs}"]
    return args + noop.extra_sets() + [a for kv in (*noop.EXTRA_SETS, *sets) for a in ("--set", kv)]


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
        to_wall = time.time() - time.perf_counter()  # outputs carry wall-clock CreateTimes
        c.windows.append((samples[0][0] + to_wall, samples[-1][0] + to_wall))
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


def take_turns(
    order: list[Contender], runners: list[Runner], n: int, slice_s: float, settle_s: float, broker_pid: int | None
) -> None:
    """Cycle through ``order``, one slice each (the first cycle a warm-up), until some runner is near
    the end of its ``n`` outputs; every runner must stay alive."""
    cycle = 0
    while not any(near_the_end(r.contender, n, slice_s) for r in runners):
        for c in order if cycle % 2 == 0 else reversed(order):
            # The first cycle warms up: a container's first slice ran slow in trials (0.6x the rest).
            run_slice(c, slice_s, settle_s, broker_pid, measure=cycle > 0)
        for r in runners:
            r.check_alive()
        cycle += 1


def add_variant_argument(ap: argparse.ArgumentParser) -> None:
    """``--variant``: the largest pool size once more with config overrides, in the same turns."""
    ap.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="KEY=VALUE[,KEY=VALUE]",
        help="also run the largest pool size with these overrides, in the same turns (an A/B of settings)",
    )


def run_to_end(runners: list[Runner], bs: str, n: int) -> None:
    """Let every runner run at once to its end: every output written, each exits 0 on SIGTERM."""
    for r in runners:
        r.contender.signal(signal.SIGCONT)
    for r in runners:
        r.finish(bs, n)


def turns_round(
    runners: Sequence[Runner],
    launch: Callable[[], None],
    burn_counts: Sequence[int],
    n: int,
    args: Any,
    broker_pid: int | None,
    bs: str,
    workdir: Path,
) -> list[Contender]:
    """One round: ``launch`` the runners (each alone, stopped at its first output), add a burn
    reference per count, let all take turns (``args.slice``, ``args.settle``) until a runner is near
    the end of its ``n`` outputs, then let the runners finish; everything is closed, also on failure.
    The contenders, in the order they took turns."""
    burns: list[BurnReference] = []
    try:
        launch()
        burns = [BurnReference(k, workdir) for k in burn_counts]
        order = [r.contender for r in runners] + [b.contender for b in burns]
        take_turns(order, list(runners), n, args.slice, args.settle, broker_pid)
        for b in burns:
            b.close()
        burns = []
        run_to_end(list(runners), bs, n)
    finally:
        for b in burns:
            b.close()
        for r in runners:
            r.close()
    return order


def median_of(rounds: list[dict[str, Contender]], label: str, attr: str) -> float:
    """The median over the rounds of contender ``label``'s ``attr`` (rate, startup_s)."""
    return float(statistics.median(getattr(res[label], attr) for res in rounds))


def ratios(rounds: list[dict[str, Contender]], a: str, b: str) -> list[float]:
    """``a``'s rate over ``b``'s, round by round."""
    return [res[a].rate / res[b].rate for res in rounds]


def by_round(xs: list[float]) -> str:
    return ", ".join(f"{x:.2f}" for x in xs)


def report_threads(res: dict[str, Contender]) -> None:
    """With BENCH_THREADS: each thread's share of its contender's slices (those above 1%)."""
    for label, c in res.items():
        for (pid, tid, comm), run_s in sorted(c.threads.items()):
            if run_s > 0.01 * c.running_s:
                print(f"    {label:<8} pid {pid} thread {tid} {comm:<16} running {run_s / c.running_s:4.0%}")


def by_cycle(res: dict[str, Contender], a: str, b: str) -> str:
    """``b``'s rate over ``a``'s, and the same ratio cycle by cycle (its spread shows the noise left)."""
    x, y = res[a], res[b]
    cycles = [q / p for p, q in zip(x.slopes, y.slopes, strict=False)]
    return f"{y.rate / x.rate:.2f}; by cycle {', '.join(f'{r:.2f}' for r in cycles)}"


def report_round(res: dict[str, Contender], title: str, base: str, pairs: Sequence[tuple[str, str]] = ()) -> None:
    """One line per contender (rate, slices, CPU), then each runner's rate over ``base``'s (or, given
    ``pairs``, each pair's first over its second) and each burn xK / burn x1, each with its per-cycle ratios."""
    unmeasured = [label for label, c in res.items() if not c.running_s]
    if unmeasured:
        raise SystemExit(
            f"{title}: no measured slice for {', '.join(unmeasured)}: the input ran out within the "
            "warm-up cycle; give more --messages"
        )
    width = max(8, *(len(label) for label in res))
    for label, c in res.items():
        burn = label.startswith("burn")
        what = "loops/s" if burn else "msg/s"
        cpu = f"cpu {c.cpu_s / c.running_s:.0%}"
        if not burn:
            who = "container and workers" if label.startswith("pool") else "process"
            cpu = f"cpu: {who} {c.cpu_s / c.running_s:.0%}, broker {c.broker_cpu_s / c.running_s:.0%}"
            cpu += f"; machine idle {c.idle_s / c.running_s:.0%} of a core; start -> first output {c.startup_s:.2f} s"
        print(
            f"{title}  {label:<{width}}{c.rate:>9,.0f} {what:<8}({len(c.slopes)} slices, {c.measured_s:.1f} s measured; {cpu})",
            flush=True,
        )
    report_threads(res)
    pairs = pairs or [(label, base) for label in res if not label.startswith("burn") and label != base]
    for a, b in pairs:
        print(f"{title}  {a} / {b}: {by_cycle(res, b, a)}")
    for label in res:
        if label.startswith("burn x") and label != "burn x1":
            print(f"{title}  {label} / burn x1: {by_cycle(res, 'burn x1', label)}", flush=True)
