"""Standalone mode: the CPU-bound job on 8 partitions with 1, 2 and 3 processors of pool 1 on one machine, side
by side in one run; then the pause time of a rebalance, as the processors see it and as the outputs show it.

The job: bench/cpu_task.py (bench/cpu_scaling.py's task: JSON in, a deterministic pure-Python loop of ~20 µs a
message, JSON out, keyed as its input) with job.coordinator.factory = "zk", job.container.thread.pool.size = 1
(each processor runs its tasks inline on its loop: one process), on an embedded ZooKeeper
(samzamp.coordinator.zk.server) and the embedded broker. The input: ``--messages`` JSON values of ~100 bytes
(bench/noop.py's input), keys ``str(i % 10000)``, in a topic of 8 partitions, so the job has 8 tasks.
job.debounce.time.ms is 200 (the leader waits that long after the last change of the processors before it
computes a job model: waiting, not work); zk.consensus.timeout.ms 20 s.

**Throughput.** A configuration is a job of N processors (``--processors``, 1,2,3): N ``bin/samzamp-container``
processes of the same job (job.name bench-zk-N), each its own process group, all reading the one input topic
from the oldest offset (every job reads it all, with its own checkpoints and ZooKeeper tree) and writing its
own output topic. The jobs take turns as bench/cpu_scaling.py's containers do (bench/turns.py: all run at
once, one job at a time is let run, by SIGSTOP/SIGCONT of all its processors' groups together; cycles
alternate their order; the first cycle warms up; a slice's rate is the count of outputs whose CreateTime
falls in its measured part, read back after the round). A job starts while the others are stopped; its start-up ("start -> stable") runs until
every one of its N processors applied one job model that gives tasks to all N, and it wrote an output. Its
processors' ZooKeeper sessions must outlive the time the job stays stopped while the others start and take
their turns: zk.session.timeout.ms is 60 s there. Beside them, "burn xK" runs the task's loop alone in K
processes (turns.BurnReference): burn xK / burn x1 is the machine's own ceiling for K processes over one.
On a 2-core machine 3 processors oversubscribe the cores (and the broker and ZooKeeper share them too):
3 processors can gain nothing over 2 there, and burn x3 / burn x1 shows what the machine itself gives 3.

**Rebalance pause.** Then one more job (bench-zk-rebalance; zk.session.timeout.ms 6 s) reads a topic of 8
partitions that this process feeds at ``--flow-rate`` messages a second (well under one processor's capacity,
so the outputs follow the input and a pause shows as silence, not as a backlog's catch-up). Processor p1
starts (it registers first, so it leads throughout); then ``--cycles`` times: p2 joins, p3 joins, p3 leaves
(SIGTERM), p2 leaves (SIGTERM), with ``--steady`` seconds of undisturbed running after each change. Per
rebalance:

- t0: a join's moment is the "registered as" line of the joining processor's log (its ephemeral node
  exists); a leave's is the SIGTERM (its tasks stop there: finish in-flight work, commit, close).
- published: the leader's "published job model version V" line. t0 -> published holds the debounce
  (200 ms) and, for a leave, the leaver's own shutdown, plus the leader's computation.
- resumed: the last "job model version V applied by processor ..." line among the processors of V: every
  processor runs exactly its tasks of V again. published -> resumed is the barrier: each processor stops
  the tasks it gives up (final commit) before it joins, and starts its new ones when all joined.
- processors' pause: the largest "paused N ms" of those lines (samzamp/coordinator/zk/job_coordinator.py: from the
  version's arrival at the processor, its release, to its tasks started; ZkJobCoordinatorMetrics
  last-rebalance-pause-ms measures the same span). A processor that keeps all its tasks (on a leave, the
  ones that stay) reports its barrier wait there, but its kept tasks never stopped.
- output silence: each output partition's longest time without new output (sampled every 20 ms, one
  ListOffsets request for the 8 partitions) from t0 to 2 s after resumed; the largest over the partitions,
  and which partitions were silent over 300 ms. The task writes each output keyed as its input, and both
  topics have 8 partitions with the same partitioner (murmur2), so output partition p holds exactly input
  partition p's (task p's) outputs. "quiet" is the same measure over the 2 s before t0: the noise floor
  (producer linger 100 ms, the broker's offsets lag by up to one batch).

Printed: the rounds of turns (turns.report_round), a table of rates against 1 processor and against the
machine's own ceiling, a line per rebalance, and median and max of each span over the joins, the leaves and
all. Every output must be written, and each processor must exit 0 on SIGTERM. With BENCH_LOG_DIR, the
processors' logs are kept there (<job>-<processor>-<n>.log).

    .venv/bin/python bench/standalone.py [--messages N] [--repeat R] [--processors 1,2,3] [--slice S]
                                         [--cycles C] [--flow-rate R] [--only throughput|rebalance]
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import NoReturn

import noop
from confluent_kafka import KafkaException, Producer
from cpu_scaling import COMMIT_MS, job_toml, per_message_us
from cpu_task import ITERATIONS
from turns import (
    SAMPLE_S,
    Contender,
    Runner,
    bench_env,
    by_round,
    container_args,
    median_of,
    report_round,
    turns_round,
)
from turns import ratios as round_ratios

from samzamp.coordinator.zk import job_models
from samzamp.coordinator.zk.client import connect
from samzamp.coordinator.zk.keys import ZkKeys
from samzamp.coordinator.zk.server import EmbeddedZooKeeper
from samzamp.model.job_model import JobModel
from samzamp.systems.kafka import EmbeddedBroker

PARTITIONS = 8
INPUT_TOPIC = "bench-zk-in"
FLOW_TOPIC = "bench-zk-flow"
REBALANCE_JOB = "bench-zk-rebalance"
DEBOUNCE_MS = 200
CONSENSUS_MS = 20000
TURNS_SESSION_MS = 60000  # longer than a job stays stopped while the others start and take their turns
REBALANCE_SESSION_MS = 6000
STABLE_TIMEOUT_S = 120.0
SILENT_MS = 300  # an output partition silent this long in a rebalance's window counts as paused
TAIL_S = 2.0  # the window of a rebalance's output silence runs this long past its "resumed"
QUIET_S = 2.0  # the noise floor: the same measure over this long before t0
FETCH_QUEUE_BACKOFF_MS = 10  # for every consumer, as bench/cpu_scaling.py (bench/noop.py says why)

_LINE = r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) \S+ \S+: "
APPLIED = re.compile(_LINE + r"job model version (\d+) applied by processor (\S+): \d+ tasks;.*paused (\d+) ms$", re.M)
REGISTERED = re.compile(_LINE + r"processor (\S+) at location \S+ registered as ", re.M)
PUBLISHED = re.compile(_LINE + r"published job model version (\d+):", re.M)


def log_time(stamp: str) -> float:
    """The epoch seconds of a log line's asctime (local time, as time.time() counts)."""
    return datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp()


def zk_job_toml(out_topic: str, rep: int, commit_ms: int, zk_connect: str, session_ms: int, input_topic: str) -> str:
    """bench/cpu_scaling.py's cpu job with pool size 1, reading ``input_topic``, as a standalone (zk) job."""
    return job_toml(out_topic, 1, rep, commit_ms, input_topic=input_topic) + (
        f"""
[job.coordinator]
factory = "zk"
zk.connect = "{zk_connect}"
zk.session.timeout.ms = {session_ms}
zk.connection.timeout.ms = 20000
zk.consensus.timeout.ms = {CONSENSUS_MS}

[job.debounce]
time.ms = {DEBOUNCE_MS}
"""
    )


class Processor:
    """One ``bin/samzamp-container`` of a zk job as processor ``pid``, in its own process group."""

    def __init__(self, pid: str, log_path: Path) -> None:
        self.pid = pid
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, args: Sequence[str], env: dict[str, str]) -> None:
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [*args, "--set", f"processor.id={self.pid}"],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )

    @property
    def os_pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def applied(self) -> dict[int, tuple[float, int]]:
        """The versions this processor applied: version -> (when, its "paused N ms")."""
        return {
            int(m.group(2)): (log_time(m.group(1)), int(m.group(4)))
            for m in APPLIED.finditer(self.text())
            if m.group(3) == self.pid
        }

    def registered_at(self) -> float:
        found = [log_time(m.group(1)) for m in REGISTERED.finditer(self.text()) if m.group(2) == self.pid]
        if not found:
            raise SystemExit(f"processor {self.pid}: no 'registered as' line in {self.log_path}")
        return found[-1]

    def published(self) -> dict[int, float]:
        """The versions this processor published as leader: version -> when."""
        return {int(m.group(2)): log_time(m.group(1)) for m in PUBLISHED.finditer(self.text())}

    def check_alive(self, what: str) -> None:
        assert self.proc is not None
        if self.proc.poll() is not None:
            self.fail(f"{what}: processor {self.pid} exited with {self.proc.returncode}")

    def fail(self, why: str) -> NoReturn:
        tail = self.text().splitlines()[-30:]
        print("\n".join([f"--- processor {self.pid} log (last lines) ---", *tail, "---"]), file=sys.stderr)
        raise SystemExit(why)

    def terminate(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)

    def wait_exit_0(self, what: str, timeout_s: float = 120.0) -> None:
        assert self.proc is not None
        try:
            self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.fail(f"{what}: processor {self.pid} did not exit within {timeout_s:.0f} s of SIGTERM")
        if self.proc.returncode != 0:
            self.fail(f"{what}: processor {self.pid} exited with {self.proc.returncode}")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


class JobView:
    """What ZooKeeper says of one job: its newest published job model."""

    def __init__(self, zk_connect: str, job_name: str, job_id: str) -> None:
        self.client = connect(zk_connect, 10000, 10000)
        self.keys = ZkKeys(job_name, job_id)

    def latest(self) -> tuple[int, JobModel] | None:
        version = job_models.read_version(self.client, self.keys)
        if version is None:
            return None
        return version, job_models.read_job_model(self.client, self.keys, version)

    def wait_stable(self, processors: list[Processor], what: str) -> tuple[int, JobModel]:
        """Until the newest version gives tasks to exactly ``processors`` and each applied it."""
        deadline = time.monotonic() + STABLE_TIMEOUT_S
        while True:
            for p in processors:
                p.check_alive(what)
            latest = self.latest()
            if latest is not None:
                version, model = latest
                if set(model.containers) == {p.pid for p in processors} and all(
                    version in p.applied() for p in processors
                ):
                    return version, model
            if time.monotonic() > deadline:
                pids = [p.pid for p in processors]
                shown = f"version {latest[0]}: {sorted(latest[1].containers)}" if latest else "none"
                processors[0].fail(f"{what}: {pids} applied no common job model in {STABLE_TIMEOUT_S:.0f} s ({shown})")
            time.sleep(0.05)

    def close(self) -> None:
        self.client.stop()
        self.client.close()


class ZkJob(Runner):
    """A job of ``n`` processors under test: one contender, its processors stopped and continued together."""

    def __init__(self, n: int, rep: int, bs: str, log_dir: Path) -> None:
        super().__init__(label(n), f"bench-zk-out-{n}-{rep}", bs, log_dir, PARTITIONS)
        self.name = f"bench-zk-{n}"
        self.job_id = str(rep)
        self.processors = [Processor(f"p{i + 1}", log_dir / f"{self.name}-{rep}-p{i + 1}-0.log") for i in range(n)]

    def launch(self, config: str, bs: str, workdir: Path, zk_connect: str) -> None:
        """Start every processor (the other jobs are stopped), wait until all applied one job model
        and an output is written, then stop them all."""
        toml_path = workdir / f"job-{self.out_topic}.toml"
        toml_path.write_text(config)
        sets = [f"job.name={self.name}", f"streams.{self.out_topic}.partitions={PARTITIONS}"]
        args = container_args(toml_path, bs, sets)
        t0 = time.perf_counter()
        for p in self.processors:
            p.start(args, bench_env(self.out_topic))
        self.contender.pgids = [p.os_pid for p in self.processors]
        view = JobView(zk_connect, self.name, self.job_id)
        try:
            view.wait_stable(self.processors, self.label)
        finally:
            view.close()
        deadline = time.monotonic() + STABLE_TIMEOUT_S
        while self.contender.count() == 0:
            self.check_alive()
            if time.monotonic() > deadline:
                raise SystemExit(f"{self.label}: no output within {STABLE_TIMEOUT_S:.0f} s of a stable job model")
            time.sleep(SAMPLE_S)
        self.contender.startup_s = time.perf_counter() - t0
        self.contender.signal(signal.SIGSTOP)

    def check_alive(self) -> None:
        for p in self.processors:
            p.check_alive(self.label)

    def finish(self, bs: str, n: int) -> None:
        """Every output written, then SIGTERM to every processor at once: each exits 0. Its rate is
        counted from its outputs' CreateTimes, as a container's (``Runner.count_measured``)."""
        times = noop.output_times(bs, self.out_topic, n, timeout_s=600, partitions=PARTITIONS)
        written = len(times)
        self.count_measured(times)
        if written < n:
            self.check_alive()
            raise SystemExit(f"{self.label}: only {written}/{n} outputs")
        for p in self.processors:
            p.terminate()
        for p in self.processors:
            p.wait_exit_0(self.label)

    def close(self) -> None:
        for p in self.processors:
            p.kill()
        self.watch.close()


def label(n: int) -> str:
    return f"{n} processor" + ("s" if n > 1 else "")


def run_round(
    bs: str, broker_pid: int | None, zk_connect: str, counts: list[int], n: int, rep: int, args: argparse.Namespace
) -> list[Contender]:
    """Start a job per processor count and the burn references, let them take turns until one job wrote
    90% of its outputs, then let the jobs finish."""
    workdir = Path(args.workdir)
    log_dir = Path(os.environ.get("BENCH_LOG_DIR") or workdir)
    jobs = [ZkJob(k, rep, bs, log_dir) for k in counts]
    commit_ms = COMMIT_MS * 2 * len(counts)  # a job and a burn reference per count take turns

    def launch() -> None:
        for j in jobs:
            config = zk_job_toml(j.out_topic, rep, commit_ms, zk_connect, TURNS_SESSION_MS, INPUT_TOPIC)
            j.launch(config, bs, workdir, zk_connect)

    return turns_round(jobs, launch, counts, n, args, broker_pid, bs, workdir)


# -- the rebalance pause ------------------------------------------------------------------------------------


class Flow:
    """Writes the input of the rebalance job: ``rate`` messages a second (noop.make_value, keys
    ``str(i % 10000)``) to ``topic`` from a thread, until ``stop``."""

    def __init__(self, bs: str, topic: str, rate: float) -> None:
        self.sent = 0
        self._stop = threading.Event()
        self._producer = Producer({"bootstrap.servers": bs, **noop.PRODUCER_CONF})
        self._thread = threading.Thread(target=self._run, args=(topic, rate), daemon=True)
        self._thread.start()

    def _run(self, topic: str, rate: float) -> None:
        p = self._producer
        t0 = time.monotonic()
        while not self._stop.wait(0.01):
            due = int((time.monotonic() - t0) * rate)
            for i in range(self.sent, due):
                p.produce(topic, noop.make_value(i), str(i % 10000).encode())
            self.sent = max(self.sent, due)
            p.poll(0)

    def stop(self) -> int:
        """Stop writing; how many messages were written (all delivered)."""
        self._stop.set()
        self._thread.join(timeout=30)
        if self._producer.flush(60) != 0:
            raise SystemExit("rebalance input: flush timed out")
        return self.sent


class Sampler:
    """Each output partition's latest offset every noop.OutputWatch.PERIOD_S, from a thread: (time.time(), offsets)."""

    def __init__(self, bs: str, topic: str) -> None:
        self.samples: list[tuple[float, list[int]]] = []
        self._watch = noop.OutputWatch(bs, topic, PARTITIONS)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(noop.OutputWatch.PERIOD_S):
            try:
                offsets = self._watch.offsets()
            except KafkaException as e:  # a sample the broker did not answer is left out, not the rest
                print(f"rebalance output: a sample failed: {e}", file=sys.stderr)
                continue
            self.samples.append((time.time(), offsets))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        self._watch.close()

    def silences(self, start: float, end: float) -> list[float]:
        """Each partition's longest time (s) in [start, end] without its offset growing."""
        window = [(t, o) for t, o in self.samples if start <= t <= end]
        before = [o for t, o in self.samples if t < start]
        out = []
        for p in range(PARTITIONS):
            last_t, last_o = start, before[-1][p] if before else 0
            longest = 0.0
            for t, o in window:
                if o[p] > last_o:
                    longest = max(longest, t - last_t)
                    last_t, last_o = t, o[p]
            out.append(max(longest, end - last_t))
        return out


@dataclass
class Rebalance:
    """One change of the rebalance job's processors and what it took (times in epoch seconds)."""

    what: str
    t0: float
    version: int
    moved: list[int]  # the partitions (tasks) whose owner changed
    published: float
    applied: dict[str, tuple[float, int]]  # processor -> (applied at, its "paused N ms")
    silences: list[float] = field(default_factory=list)  # each output partition's, from t0 to resumed + TAIL_S
    quiet: list[float] = field(default_factory=list)  # the same over the QUIET_S before t0

    @property
    def resumed(self) -> float:
        return max(t for t, _ in self.applied.values())

    @property
    def paused_ms(self) -> int:
        return max(ms for _, ms in self.applied.values())

    def silent(self) -> list[int]:
        return [p for p, s in enumerate(self.silences) if s * 1000 > SILENT_MS]


def partition_of(task: str) -> int:
    return int(task.rsplit(" ", 1)[-1])


def moved_partitions(before: JobModel | None, after: JobModel) -> list[int]:
    old = before.owners() if before is not None else {}
    return sorted(partition_of(t) for t, owner in after.owners().items() if old.get(t) != owner)


def run_rebalances(bs: str, zk_connect: str, args: argparse.Namespace) -> list[Rebalance]:
    """p1 alone, then ``args.cycles`` times: p2 joins, p3 joins, p3 leaves, p2 leaves; each change measured."""
    workdir = Path(args.workdir)
    log_dir = Path(os.environ.get("BENCH_LOG_DIR") or workdir)
    out_topic = f"{REBALANCE_JOB}-out"
    config = zk_job_toml(out_topic, 0, COMMIT_MS, zk_connect, REBALANCE_SESSION_MS, FLOW_TOPIC)
    toml_path = workdir / f"job-{out_topic}.toml"
    toml_path.write_text(config)
    sets = [f"job.name={REBALANCE_JOB}", f"streams.{out_topic}.partitions={PARTITIONS}"]
    cmd = container_args(toml_path, bs, sets)
    env = bench_env(out_topic)
    starts = {"p1": 0, "p2": 0, "p3": 0}

    def new(pid: str) -> Processor:
        p = Processor(pid, log_dir / f"{REBALANCE_JOB}-{pid}-{starts[pid]}.log")
        starts[pid] += 1
        p.start(cmd, env)
        return p

    flow = Flow(bs, FLOW_TOPIC, args.flow_rate)
    sampler = Sampler(bs, out_topic)
    view = JobView(zk_connect, REBALANCE_JOB, "0")
    running: list[Processor] = []
    done: list[Rebalance] = []
    try:
        running.append(new("p1"))
        _, model = view.wait_stable(running, "p1 alone")
        leader = running[0]
        time.sleep(args.steady)
        for _cycle in range(args.cycles):
            for step in ("+p2", "+p3", "-p3", "-p2"):
                pid = step[1:]
                before = len(running)
                if step[0] == "+":
                    joiner = new(pid)
                    running.append(joiner)
                    version, after = view.wait_stable(running, f"{pid} joins")
                    t0 = joiner.registered_at()
                    what = f"{pid} joins ({before} -> {len(running)})"
                else:
                    leaver = next(p for p in running if p.pid == pid)
                    running.remove(leaver)
                    t0 = time.time()
                    leaver.terminate()
                    version, after = view.wait_stable(running, f"{pid} leaves")
                    leaver.wait_exit_0(f"{pid} leaves")
                    what = f"{pid} leaves ({before} -> {len(running)})"
                published = leader.published().get(version)
                if published is None:
                    leader.fail(f"{what}: version {version} is not in the leader's log")
                applied = {p.pid: p.applied()[version] for p in running}
                done.append(Rebalance(what, t0, version, moved_partitions(model, after), published, applied))
                model = after
                time.sleep(args.steady)
        written = flow.stop()
        outputs = noop.count_topic(bs, out_topic, written, timeout_s=120, partitions=PARTITIONS)
        if outputs < written:
            raise SystemExit(f"rebalance job: only {outputs}/{written} outputs")
        print(
            f"rebalance job: {written} inputs at {args.flow_rate:g}/s, {outputs} outputs ({outputs - written} repeated)"
        )
        for p in running:
            p.terminate()
        for p in running:
            p.wait_exit_0("rebalance job, end")
    finally:
        flow.stop()
        sampler.stop()
        view.close()
        for p in running:
            p.kill()
    for r in done:
        r.silences = sampler.silences(r.t0, r.resumed + TAIL_S)
        r.quiet = sampler.silences(r.t0 - QUIET_S, r.t0)
    return done


def ms(seconds: float) -> str:
    return f"{seconds * 1000:,.0f}"


def report_rebalances(done: list[Rebalance]) -> None:
    print(
        f"\nrebalance pause (job.debounce.time.ms = {DEBOUNCE_MS}: the leader waits that long after a change before "
        f"it computes; it is inside t0 -> published). Times in ms."
    )
    head = ("rebalance", "ver", "moved", "t0->publ", "publ->resumed", "t0->resumed", "proc paused", "out silence")
    print(
        f"{head[0]:<22}{head[1]:>4}{head[2]:>7}{head[3]:>10}{head[4]:>15}{head[5]:>13}{head[6]:>13}{head[7]:>13}  "
        "partitions silent > 300 ms (moved); quiet before"
    )
    for r in done:
        print(
            f"{r.what:<22}{r.version:>4}{len(r.moved):>7}{ms(r.published - r.t0):>10}{ms(r.resumed - r.published):>15}"
            f"{ms(r.resumed - r.t0):>13}{r.paused_ms:>13,}{ms(max(r.silences)):>13}  "
            f"{r.silent()} ({r.moved}); {ms(max(r.quiet))}"
        )
    spans: dict[str, Callable[[Rebalance], float]] = {
        "t0 -> published": lambda r: (r.published - r.t0) * 1000,
        "published -> resumed": lambda r: (r.resumed - r.published) * 1000,
        "t0 -> resumed": lambda r: (r.resumed - r.t0) * 1000,
        "processors' paused (largest)": lambda r: float(r.paused_ms),
        "output silence (longest)": lambda r: max(r.silences) * 1000,
        "quiet floor (before t0)": lambda r: max(r.quiet) * 1000,
    }
    groups = {
        "joins": [r for r in done if "joins" in r.what],
        "leaves": [r for r in done if "leaves" in r.what],
        "all": done,
    }
    print(f"\n{'ms, median / max':<30}" + "".join(f"{f'{g} ({len(rs)})':>18}" for g, rs in groups.items()))
    for name, f in spans.items():
        cells = []
        for rs in groups.values():
            xs = [f(r) for r in rs]
            cells.append(f"{statistics.median(xs):,.0f} / {max(xs):,.0f}" if xs else "-")
        print(f"{name:<30}" + "".join(f"{c:>18}" for c in cells))


def report_throughput(rounds: list[dict[str, Contender]], counts: list[int]) -> None:
    def median(key: str, attr: str) -> float:
        return median_of(rounds, key, attr)

    def ratios(a: str, b: str) -> list[float]:
        return round_ratios(rounds, a, b)

    base = label(1)
    reps = len(rounds)
    print()
    title = f"cpu job, zk, {PARTITIONS} partitions, pool 1, " + (f"median of {reps}" if reps > 1 else "1 round")
    print(f"{title:<48}{'msg/s':>10}{'x 1 proc':>10}{'machine':>9}{'effic.':>8}{'start -> stable':>17}")
    for k in counts:
        key = label(k)
        scaling = ratios(key, base)
        ceiling = ratios(f"burn x{k}", "burn x1")
        efficiency = [s / c for s, c in zip(scaling, ceiling, strict=True)]
        print(
            f"{key:<48}{median(key, 'rate'):>10,.0f}{statistics.median(scaling):>10.2f}"
            f"{statistics.median(ceiling):>9.2f}{statistics.median(efficiency):>8.2f}{median(key, 'startup_s'):>16.2f}s"
        )
    for k in counts:
        print(f"{f'burn x{k} (the loop alone, loops/s)':<48}{median(f'burn x{k}', 'rate'):>10,.0f}")
    print("(machine: burn xK / burn x1, the same slices; effic.: x 1 proc over machine)")
    if reps > 1:
        for k in counts[1:]:
            print(f"{label(k)} / {base} by round: {by_round(ratios(label(k), base))}")
            print(f"burn x{k} / burn x1 by round: {by_round(ratios(f'burn x{k}', 'burn x1'))}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=400000, help="input messages (default 400000)")
    ap.add_argument("--repeat", type=int, default=1, help="rounds of turns, each with fresh jobs; medians reported")
    ap.add_argument("--processors", default="1,2,3", help="processor counts, one job each (default 1,2,3)")
    ap.add_argument("--slice", type=float, default=1.0, help="seconds each runs in its turn (default 1)")
    ap.add_argument("--settle", type=float, default=0.2, help="seconds of a slice not measured (default 0.2)")
    ap.add_argument("--cycles", type=int, default=2, help="rebalance cycles: 2 joins and 2 leaves each (default 2)")
    ap.add_argument("--flow-rate", type=float, default=4000, help="rebalance input, messages/s (default 4000)")
    ap.add_argument("--steady", type=float, default=3.0, help="seconds between rebalances (default 3)")
    ap.add_argument("--only", choices=["throughput", "rebalance"], help="run only one part")
    ap.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="a config override for every processor"
    )
    args = ap.parse_args(argv)
    if not 0 <= args.settle < args.slice - 3 * SAMPLE_S:
        ap.error("--settle must leave at least 3 samples of each slice")
    if args.steady < max(QUIET_S, TAIL_S):
        ap.error(f"--steady must be at least {max(QUIET_S, TAIL_S):g} s (the windows around each rebalance)")
    noop.EXTRA_SETS.extend(args.set)
    counts = [int(k) for k in args.processors.split(",")]
    if 1 not in counts:
        ap.error("--processors must include 1 (the baseline)")
    n, reps = args.messages, args.repeat
    noop.set_fetch_queue_backoff(FETCH_QUEUE_BACKOFF_MS)
    cores = os.cpu_count() or 1

    t_start = time.monotonic()
    broker = EmbeddedBroker(die_with_parent=True).start()
    zk = EmbeddedZooKeeper(die_with_parent=True).start()
    rounds: list[dict[str, Contender]] = []
    done: list[Rebalance] = []
    try:
        bs = broker.bootstrap_servers
        broker_pid = broker.process.pid if broker.process is not None else None
        print(
            f"broker {bs} (tansu), ZooKeeper {zk.connect_string}; cpus: {cores}; task: {ITERATIONS} loop iterations "
            f"= {per_message_us():.1f} µs a message here; load average {os.getloadavg()[0]:.2f} at start"
        )
        with tempfile.TemporaryDirectory(prefix="samzamp-bench-zk-") as tmp:
            args.workdir = tmp
            if args.only != "rebalance":
                outs = [f"bench-zk-out-{k}-{r}" for k in counts for r in range(reps)]
                noop.create_topics(bs, [INPUT_TOPIC, *outs], partitions=PARTITIONS)
                avg = noop.produce_input(bs, n, INPUT_TOPIC)
                print(
                    f"throughput: {n} messages, {PARTITIONS} partitions, {avg:.0f} B values; jobs of "
                    f"{', '.join(map(str, counts))} processors (pool 1 each); slices of {args.slice:g} s, "
                    f"the first {args.settle:g} s not measured"
                )
                if cores < max(counts):
                    print(f"this machine has {cores} cores: {max(counts)} processors oversubscribe them")
                for r in range(reps):
                    res = {c.label: c for c in run_round(bs, broker_pid, zk.connect_string, counts, n, r, args)}
                    rounds.append(res)
                    report_round(res, f"round {r + 1}/{reps}", label(1))
            if args.only != "throughput" and args.cycles > 0:
                noop.create_topics(bs, [FLOW_TOPIC, f"{REBALANCE_JOB}-out"], partitions=PARTITIONS)
                done = run_rebalances(bs, zk.connect_string, args)
    finally:
        zk.stop()
        broker.stop()
    if rounds:
        report_throughput(rounds, counts)
    if done:
        report_rebalances(done)
    print(
        f"\nbench/standalone.py took {time.monotonic() - t_start:.0f} s; load average {os.getloadavg()[0]:.2f} at the end"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
