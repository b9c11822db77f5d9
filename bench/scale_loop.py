"""The loop process's CPU per message: what one processor's main process spends on each message it hands
to its workers, and the ceiling that sets, however many workers it has.

One embedded broker (Tansu, memory only, 127.0.0.1). Two input topics, written once before measuring,
each ``--messages`` JSON values of ~100 bytes with keys ``str(i % 10000)`` (bench/noop.py's input): one
of 4 partitions, one of 1 partition. Four contenders, each ``bin/samzamp-container`` with
job.container.thread.pool.size = 2:

no-op, 4 partitions        bench/noop_task.py (forward every input), 4 tasks
no-op, 1 partition x F=2   the same on the 1-partition topic with job.elasticity.factor = 2 (2 key buckets)
cpu, 4 partitions          bench/cpu_task.py (a pure-Python loop of ~20 µs a message, then forward)
cpu, 1 partition x F=2     likewise on the 1-partition topic, factor 2

A round runs each contender once, one at a time (the order reverses every other round), each with a
fresh output topic and its own job.id (no checkpoint to start from). While it runs, this process samples
every 20 ms how many outputs the topic holds (bench/noop.py's OutputWatch: one ListOffsets request), and
with each sample the CPU time (user + system, all threads, /proc/<pid>/stat) of the container's main
process and, apart, of its workers (its child processes). Measured over the *window* from the first
sample at 10% of the outputs to the first at 90%:

- loop µs/msg: the main process's CPU in the window over the outputs written in it. Start-up is outside
  the window, and so is the end (the last linger and flush). The main process is the run loop, the
  fetch thread (consumer, lane fan-out, key buckets, packing runs for the workers) and librdkafka's
  threads; the workers run the task and produce its outputs. "from 1st out" is the same from the first
  output seen to 90% ("CPU at the first output subtracted").
- ceiling: 1e6 / loop µs/msg, the messages per second one processor's loop can hand out at most, at
  any pool size, if the loop's cost per message stays the same.
- workers µs/msg: the workers' CPU in the window over its outputs (one worker's cost of a message:
  decode, task, encode, produce). For the cpu task, workers fed = workers µs/msg / loop µs/msg: how many
  workers one loop process can keep busy, which is the most pool N / pool 1 can reach however many
  cores (pool 1 runs the task inline, paying the task and the loop on one core).
- msg/s: the steady rate (bench/noop.py's steady_rate, 10% to 90%), for reference: on a 2-core machine
  shared with the broker it says little about the ceiling.

CPU times tick at 10 ms (CLK_TCK 100): with 1,000,000 messages the no-op window holds ~150 ticks of
the loop's CPU, so each figure is good to ~1%. Once the window closes the container is stopped
(SIGTERM) and must exit 0. Printed: each run, then per contender the medians over ``--repeat`` rounds.

Also printed, per contender: the loop's µs/msg by thread of the main process over the same window
(/proc/<pid>/task/*/schedstat, by thread name: "python" is every Python thread, the run loop's and the
fetch thread's alike, since Python 3.11 names no OS thread; "rdk:*" are librdkafka's own).

With ``--profile FILE``, after the rounds, ``--profile-runs`` more runs of the first contender ("no-op, 4
partitions", or the first that ``--only`` picks) are recorded with py-spy (its main process only, workers apart, from 10% to 90% of the outputs: ``py-spy
record --pid <main> --rate 200 --nonblocking --threads --format raw``, stopped with SIGINT at 90%);
with ``--profile-native`` as many again with native frames (``--native``, which pauses the process at
each sample: it runs at a fraction of its speed, so read its shares, not its rates; and it has no idle
filter, so samples with a waiting frame, WAITS, are left out). FILE gets a summary of each
(``profile_summary``): samples by thread, the top functions by own and by cumulative samples, own
samples by file; the raw stacks go beside it. py-spy sees only threads that run Python: librdkafka's
own threads are in the by-thread table above, not in the profile. The profile runs count in no figure.

Kafka batches are read from librdkafka in C (samzamp._kafkafetch) unless ``--fetch consume`` reads them
through confluent-kafka's consume() (SAMZAMP_KAFKA_NATIVE_FETCH=0 in the containers' environment);
``--fetch both`` runs every contender both ways in each round, side by side.

    .venv/bin/python bench/scale_loop.py [--messages N] [--repeat R] [--quick] [--fetch both] [--profile FILE]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import noop
import psutil
from confluent_kafka.admin import AdminClient

from samzamp.systems.kafka import EmbeddedBroker
from samzamp.systems.kafka.consumer import NATIVE_FETCH_ENV

POOL = 2
PYSPY_MODE = ["--nonblocking"]  # py-spy's sampling mode (profile_runs sets it); --native needs the process paused
BEFORE_US = {"noop": 2.2, "cpu": 1.4}  # the figures before the scale work (loop µs per message)
TARGET_US = 1.0  # the target: the loop process at most 1.0 µs per message (no-op, pool 2)
INPUT_4 = "bench-scale-loop-in-4"
INPUT_1 = "bench-scale-loop-in-1"
TASKS = {"noop": "noop_task:NoopTask", "cpu": "cpu_task:CpuTask"}


def job_toml(
    task: str,
    input_topic: str,
    out_topic: str,
    job_id: str,
    pool: int = POOL,
    factor: int = 1,
    name: str = "bench-scale-loop",
) -> str:
    """A job of ``task`` (a key of TASKS) reading ``input_topic`` with ``pool`` workers and elasticity ``factor``."""
    return f"""\
[job]
name = "{name}"
id = "{job_id}"
default.system = "kafka"
container.thread.pool.size = {pool}
elasticity.factor = {factor}

[task]
class = "{TASKS[task]}"
inputs = ["kafka.{input_topic}"]
commit.ms = 5000

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


@dataclass
class Sample:
    t: float  # perf_counter
    count: int  # outputs seen (ListOffsets)
    main_cpu: float  # the main process's CPU seconds, all its threads
    workers_cpu: float  # its child processes' CPU seconds
    rss: int  # the main process's resident set, bytes


def threads_cpu(pid: int) -> dict[str, float]:
    """CPU seconds of each thread of process ``pid`` by thread name (threads of one name summed), from
    /proc/<pid>/task/*/schedstat (nanoseconds; threads that ended are missing)."""
    out: dict[str, float] = {}
    for t in Path(f"/proc/{pid}/task").glob("*"):
        try:
            comm = (t / "comm").read_text().strip()
            run_ns = int((t / "schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            continue
        name = re.sub(r"\d+$", "N", comm)  # rdk:broker7 -> rdk:brokerN
        out[name] = out.get(name, 0.0) + run_ns / 1e9
    return out


@dataclass
class RunFigures:
    """One container run, sampled from its start to 90% of its outputs."""

    startup_s: float  # spawn -> first output seen
    samples: list[Sample] = field(default_factory=list)
    workers: int = 0
    shutdown_s: float = 0.0  # SIGTERM -> exit
    # The main process's threads' CPU (threads_cpu) at the first samples at 10% and at 90% of the outputs.
    threads_at: list[tuple[int, dict[str, float]]] = field(default_factory=list)

    def threads_us(self) -> dict[str, float]:
        """µs per message of each of the main process's threads, over the window (10% to 90%)."""
        if len(self.threads_at) < 2:
            return {}
        (c0, a), (c1, b) = self.threads_at[0], self.threads_at[-1]
        return {k: (v - a.get(k, 0.0)) / (c1 - c0) * 1e6 for k, v in b.items()} if c1 > c0 else {}

    def window(self, lo: float, hi: float, n: int) -> tuple[Sample, Sample]:
        """The first samples at ``lo`` and at ``hi`` of ``n`` outputs (the last sample if none reaches it)."""
        a = next((s for s in self.samples if s.count >= lo * n), self.samples[0])
        b = next((s for s in self.samples if s.count >= hi * n), self.samples[-1])
        return a, b

    def loop_us(self, n: int, lo: float = 0.1) -> float:
        a, b = self.window(lo, 0.9, n)
        return (b.main_cpu - a.main_cpu) / (b.count - a.count) * 1e6 if b.count > a.count else float("nan")

    def workers_us(self, n: int) -> float:
        a, b = self.window(0.1, 0.9, n)
        return (b.workers_cpu - a.workers_cpu) / (b.count - a.count) * 1e6 if b.count > a.count else float("nan")

    def rate(self) -> float:
        return noop.steady_rate([(s.t, s.count) for s in self.samples])

    def rss(self, n: int) -> int:
        """The main process's largest RSS between 10% and 90% of the outputs (its steady state)."""
        a, b = self.window(0.1, 0.9, n)
        return max(s.rss for s in self.samples if a.t <= s.t <= b.t)


def cpu_of(pids: list[int]) -> float:
    return sum(noop.cpu_seconds(p) for p in pids)


def pyspy() -> str:
    exe = shutil.which("py-spy", path=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))
    if exe is None:
        raise SystemExit("--profile needs py-spy: .venv/bin/pip install py-spy (and ptrace: run as root)")
    return exe


def run_container(
    config: str,
    out_topic: str,
    n: int,
    bs: str,
    workdir: Path,
    profile_to: Path | None = None,
    label: str = "",
    env_extra: dict[str, str] | None = None,
) -> RunFigures:
    """Run one container of ``config`` (TOML) until 90% of ``n`` outputs are seen, sampling it; then
    SIGTERM, and it must exit 0. With ``profile_to``, py-spy records its main process (raw stacks) from
    10% to 90% of the outputs."""
    toml_path = workdir / f"job-{out_topic}.toml"
    toml_path.write_text(config)
    log_dir = Path(os.environ.get("BENCH_LOG_DIR") or workdir)
    log_path = log_dir / f"container-{out_topic}.log"
    args = [str(noop.CONTAINER_BIN), str(toml_path), "--set", f"systems.kafka.bootstrap.servers={bs}"]
    args += noop.extra_sets() + [a for kv in noop.EXTRA_SETS for a in ("--set", kv)]
    watch = noop.OutputWatch(bs, out_topic)
    spy: subprocess.Popen[bytes] | None = None
    with open(log_path, "wb") as log:
        t0 = time.perf_counter()
        proc = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**noop.THIS.env(out_topic), **(env_extra or {})},
            cwd=workdir,
        )
        try:
            main = psutil.Process(proc.pid)
            kids: list[int] = []
            figures: RunFigures | None = None
            last_move = time.perf_counter()
            count = 0
            deadline = time.monotonic() + 600
            # Until 90% is seen, or until the count stops moving for a second: on Tansu, ListOffsets lags by
            # each partition's last producer batch, which with few messages can hide more than a tenth.
            while count < 0.9 * n and not (count and time.perf_counter() - last_move > 1.0):
                if proc.poll() is not None:
                    raise RuntimeError(f"container exited with {proc.returncode} after {count}/{n} outputs")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"only {count}/{n} outputs within 600 s")
                seen = watch.poll()
                now = time.perf_counter()
                if seen <= count:
                    continue
                count, last_move = seen, now
                if figures is None:
                    figures = RunFigures(now - t0)
                    kids = [k.pid for k in main.children()]
                    figures.workers = len(kids)
                figures.samples.append(
                    Sample(now, seen, noop.cpu_seconds(proc.pid), cpu_of(kids), main.memory_info().rss)
                )
                if (not figures.threads_at and count >= 0.1 * n) or count >= 0.9 * n:
                    figures.threads_at.append((count, threads_cpu(proc.pid)))
                if profile_to is not None and spy is None and count >= 0.1 * n:
                    spy = subprocess.Popen(
                        [pyspy(), "record", "--pid", str(proc.pid), "--rate", "200", *PYSPY_MODE, "--threads"]
                        + ["--format", "raw", "-o", str(profile_to)],
                        stdin=subprocess.DEVNULL,
                        stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL,
                    )
            if spy is not None:
                spy.send_signal(signal.SIGINT)  # py-spy writes its file and exits
                spy.wait(timeout=60)
            t_term = time.perf_counter()
            proc.send_signal(signal.SIGTERM)
            try:
                rc = proc.wait(timeout=120)
                assert figures is not None
                figures.shutdown_s = time.perf_counter() - t_term
            except subprocess.TimeoutExpired:
                raise RuntimeError("container did not exit within 120 s of SIGTERM") from None
            if rc != 0:
                raise RuntimeError(f"container exited with {rc} after SIGTERM")
        except BaseException as e:
            for p in (proc, spy):
                if p is not None and p.poll() is None:
                    p.kill()
                    p.wait()
            log.flush()
            tail = log_path.read_text(errors="replace").splitlines()[-30:]
            print("\n".join([f"--- {label} container log (last lines) ---", *tail, "---"]), file=sys.stderr)
            if isinstance(e, RuntimeError):
                raise SystemExit(f"{label}: {e}") from None
            raise
        finally:
            watch.close()
    assert figures is not None
    if len(figures.samples) < 3:
        raise SystemExit(f"{label}: only {len(figures.samples)} samples; use more --messages")
    return figures


def delete_topics(bs: str, names: list[str]) -> None:
    """Free the broker's memory of outputs no longer needed (Tansu keeps every message in memory);
    best effort."""
    admin = AdminClient({"bootstrap.servers": bs, "log_level": 3})
    for fut in admin.delete_topics(names, operation_timeout=30).values():
        try:
            fut.result(timeout=30)
        except Exception as e:  # only memory is at stake
            print(f"  (could not delete an output topic: {e})")
            return


@dataclass(frozen=True)
class Shape:
    label: str
    task: str  # a key of TASKS
    input_topic: str
    factor: int
    native: bool = True  # Kafka batches read from librdkafka in C (else through consume())


SHAPES = [
    Shape("no-op, 4 partitions", "noop", INPUT_4, 1),
    Shape("no-op, 1 partition x F=2", "noop", INPUT_1, 2),
    Shape("cpu, 4 partitions", "cpu", INPUT_4, 1),
    Shape("cpu, 1 partition x F=2", "cpu", INPUT_1, 2),
]


def run_shape(shape: Shape, tag: str, n: int, bs: str, workdir: Path, profile_to: Path | None = None) -> RunFigures:
    out = f"bench-scale-loop-out-{tag}"
    config = job_toml(shape.task, shape.input_topic, out, f"{tag}-{os.getpid()}", factor=shape.factor)
    noop.create_topics(bs, [out])
    try:
        env = {} if shape.native else {NATIVE_FETCH_ENV: "0"}
        return run_container(config, out, n, bs, workdir, profile_to, shape.label, env)
    finally:
        delete_topics(bs, [out])


# ---- the profile summary -------------------------------------------------------------------------

FRAME = re.compile(r"^(?P<func>.*?) \((?P<file>[^()]*?)(?::(?P<line>\d+))?\)$")


def frame_key(frame: str) -> tuple[str, str]:
    """(function, file) of one raw frame ``func (file:line)``, line numbers dropped."""
    m = FRAME.match(frame.strip())
    return (m.group("func"), m.group("file")) if m else (frame.strip(), "")


# Where a thread waits, in native stacks: py-spy --native has no idle filter of its own, so a thread
# blocked on a condition, a lock, epoll or the GIL (take_gil waits in pthread_cond_wait) would count.
WAITS = {
    "pthread_cond_wait",
    "pthread_cond_timedwait",
    "PyThread_acquire_lock_timed",
    "take_gil",
    "epoll_wait",
    "sem_wait",
    "sem_timedwait",
    "sem_clockwait",
    "poll",
    "__poll",
    "select",
    "nanosleep",
    "clock_nanosleep",
}


# The loop's stages, for the profile's "by stage" table: a sample goes to the first stage whose test
# its innermost samzamp frame (function, file) passes; a sample whose innermost frame is the event loop's
# or threading's (selectors, asyncio, threading) goes to "event loop and hand-off", and one with a
# commit frame anywhere in its stack (samzamp/commit/, container/commits.py) to the commit stage.
STAGES: list[tuple[str, Callable[[str, str], bool]]] = [
    ("fetch: consume(), a Message and a tuple per message", lambda f, file: file.endswith("systems/kafka/consumer.py")),
    (
        "per-poll accounting: back-pressure counts of the buffers",
        lambda f, file: (
            f in ("messages_held", "_held_packed")
            or "_held_per_partition" in f
            or file.endswith("consume/backpressure.py")
        ),
    ),
    ("packing runs for the workers (msgspec, offsets array)", lambda f, file: file.endswith("consume/packed.py")),
    (
        "lane fan-out and key buckets",
        lambda f, file: file.endswith(("consume/partition_lanes.py", "consume/key_bucket.py", "consume/lane.py")),
    ),
    (
        "the poll loop itself (_poll_all, refill, fetch thread)",
        lambda f, file: file.endswith(("consume/system_consumers.py", "consume/poll_handoff.py")),
    ),
    (
        "dispatch to workers, rings, completions, run loop",
        lambda f, file: any(
            x in file
            for x in ("worker_task_proxy", "ipc/", "dispatch/", "task_state", "run_loop", "task_set", "choose/")
        ),
    ),
    ("commit and checkpoints", lambda f, file: any(x in file for x in ("commit", "checkpoint"))),
]
HANDOFF = "event loop and hand-off (epoll, Condition wait/notify, call_soon_threadsafe)"
COMMIT = STAGES[-1][0]


def stage_of(keys: list[tuple[str, str]]) -> str:
    """The STAGES label of a sample's stack (its frames' (function, file), outermost first)."""
    if keys[-1][1].startswith(("selectors", "asyncio/", "threading")):
        return HANDOFF
    if any(file.startswith("samzamp/commit/") or file.endswith("container/commits.py") for _, file in keys):
        return COMMIT  # whatever it calls (GroupOffsets.offsets calls lane.partition_of)
    inner = next((k for k in reversed(keys) if is_engine(k[1])), None)
    if inner is None:
        return f"outside samzamp: {keys[-1][1]}"
    return next((label for label, test in STAGES if test(*inner)), f"other: {inner[1]}")


def is_engine(file: str) -> bool:
    """A frame of samzamp's loop code: samzamp/, but not its command-line entry (samzamp/cli/), whose
    frames sit at the root of every stack of the main thread."""
    return file.startswith("samzamp/") and not file.startswith("samzamp/cli/")


def profile_summary(raw: str, top: int = 25, drop_waits: bool = False) -> str:
    """A text summary of py-spy's raw (collapsed) stacks: samples by thread and by stage; the top functions by own
    samples (the innermost frame); by *own + callees outside samzamp* (each sample charged to its
    innermost samzamp frame: what a samzamp function costs with the library and C code it calls); by
    cumulative samples (anywhere in the stack, once per sample; samzamp's loop code and native
    libraries only, the wrappers every stack shares left out); the top lines by own samples; own
    samples by file. With
    ``drop_waits``, samples of a thread waiting (a frame in WAITS) are left out."""
    own: Counter[tuple[str, str]] = Counter()
    charged: Counter[tuple[str, str]] = Counter()
    cum: Counter[tuple[str, str]] = Counter()
    by_file: Counter[str] = Counter()
    by_thread: Counter[str] = Counter()
    own_lines: Counter[str] = Counter()
    stages: Counter[str] = Counter()
    total = waiting = 0
    for line in raw.splitlines():
        stack, _, count_s = line.rpartition(" ")
        if not stack or not count_s.isdigit():
            continue
        count = int(count_s)
        frames = stack.split(";")
        thread = frames[0] if frames[0].startswith(("thread", "process")) else ""
        if thread:
            frames = frames[1:]
            if frames and frames[0].startswith("thread"):
                thread, frames = frames[0], frames[1:]
        keys = [frame_key(f) for f in frames]
        if not keys:
            continue
        if drop_waits and any(f in WAITS for f, _ in keys):
            waiting += count
            continue
        total += count
        by_thread[thread_root(thread, keys)] += count
        own[keys[-1]] += count
        own_lines[frames[-1].strip()] += count
        stages[stage_of(keys)] += count
        charged[next((k for k in reversed(keys) if is_engine(k[1])), keys[-1])] += count
        by_file[keys[-1][1]] += count
        for k in set(keys):
            if is_engine(k[1]) or ".so" in k[1]:
                cum[k] += count

    def pct(c: int) -> str:
        return f"{c:>7} {c / total:6.1%}"

    def table(title: str, counter: Counter[tuple[str, str]]) -> list[str]:
        out = [f"{title} (samples, share of all)", f"{'samples':>7} {'share':>6}  function (file)"]
        out += [f"{pct(c)}  {f} ({file})" for (f, file), c in counter.most_common(top)]
        return out

    lines = [f"{total} samples of the main process (not idle), all threads"]
    if drop_waits:
        lines[0] += f"; {waiting} more left out as waiting (a frame in WAITS: a lock, a condition, epoll, the GIL)"
    lines += ["", "by thread (its outermost frame)"] + [f"{pct(c)}  {t}" for t, c in by_thread.most_common(10)]
    lines += ["", "by stage of the loop (STAGES: each sample by its innermost samzamp frame)"]
    lines += [f"{pct(c)}  {t}" for t, c in stages.most_common(12)]
    lines += [""] + table(f"top {top} by own time", own)
    lines += [""] + table(
        f"top {top} by own time + callees outside samzamp (charged to the innermost samzamp frame)", charged
    )
    lines += [""] + table(f"top {top} by cumulative time (samzamp loop code and native libraries)", cum)
    lines += ["", f"top {top} lines by own time (function (file:line))"]
    lines += [f"{pct(c)}  {f}" for f, c in own_lines.most_common(top)]
    lines += ["", "own time by file"] + [f"{pct(c)}  {f}" for f, c in by_file.most_common(20)]
    return "\n".join(lines) + "\n"


def thread_root(thread: str, keys: list[tuple[str, str]]) -> str:
    """A thread's label for the summary: its name (py-spy's ``thread (<tid>): <name>``) and its
    outermost samzamp frame (a librdkafka thread has none: its outermost frame)."""
    first = next((f"{f} ({file})" for f, file in keys if "samzamp" in file), f"{keys[0][0]} ({keys[0][1]})")
    name = thread.partition(": ")[2] or thread
    return f"{name}: {first}" if name else first


def profile_runs(
    run: Callable[[str, Path], RunFigures], what: str, runs: int, n: int, workdir: Path, out: Path, native: bool
) -> None:
    """``runs`` runs of ``run(tag, profile_to)`` (a container of ``what``, recorded by py-spy into
    ``profile_to``) with Python frames (nonblocking), and with ``native`` as many again with native
    frames; the summaries of both go to ``out``, the raw stacks beside it."""
    out.parent.mkdir(parents=True, exist_ok=True)
    modes = [("python", ["--nonblocking"])] + ([("native", ["--native"])] if native else [])
    parts = [
        f"# Profile of the loop process (the container's main process, workers apart): {what},",
        f"# {n:,} messages per run, embedded broker, {os.cpu_count()} cpus.",
        f"# Made by: {' '.join(['.venv/bin/python', *sys.argv])}",
        "# Own = the innermost frame; cumulative = anywhere in the stack (once per sample).",
        "",
    ]
    for mode, flags in modes:
        PYSPY_MODE[:] = flags
        merged: list[str] = []
        figures = []
        for i in range(runs):
            part = workdir / f"profile-{mode}-{i}.txt"
            fig = run(f"profile-{mode}-{i}", part)
            if not part.exists():
                raise SystemExit(f"py-spy wrote no {part}")
            merged += part.read_text().splitlines()
            figures.append(f"{fig.rate():,.0f} msg/s, loop {fig.loop_us(n):.2f} µs/msg")
            print(f"profile run ({mode} frames) {i + 1}/{runs}: {figures[-1]} (under py-spy)", flush=True)
        raw_path = out.with_name(f"{out.stem}.{mode}.raw.txt")
        raw_path.write_text("\n".join(merged) + "\n")
        parts += [
            f"## {mode} frames: py-spy record --pid <main pid> --rate 200 {' '.join(flags)} --threads --format raw,",
            f"## from 10% to 90% of the outputs; {runs} runs merged ({'; '.join(figures)}, under py-spy)",
            f"## raw stacks: {raw_path.name}",
            "",
            profile_summary("\n".join(merged), drop_waits=mode == "native"),
        ]
    out.write_text("\n".join(parts))
    print(f"profile written to {out}")


# ---- the rounds ----------------------------------------------------------------------------------


def median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=1_000_000, help="input messages per topic (default 1,000,000)")
    ap.add_argument("--repeat", type=int, default=5, help="rounds, order alternating; medians reported (default 5)")
    ap.add_argument("--quick", action="store_true", help="a smoke check: 200,000 messages, 1 round")
    ap.add_argument("--only", default="", help="run only the contenders whose label contains this (e.g. no-op)")
    ap.add_argument(
        "--profile",
        metavar="FILE",
        help="after the rounds, profile the first contender's loop (no-op, 4 partitions) into FILE",
    )
    ap.add_argument("--profile-runs", type=int, default=3, help="runs recorded for --profile (default 3)")
    ap.add_argument(
        "--profile-native",
        action="store_true",
        help="also record as many runs with native frames (py-spy --native, which pauses the process at each sample)",
    )
    ap.add_argument(
        "--fetch",
        choices=["native", "consume", "both"],
        default="native",
        help="how the containers read Kafka batches: from librdkafka in C (samzamp._kafkafetch, the default), "
        "through confluent-kafka's consume(), or each contender both ways in every round",
    )
    ap.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="a config override for every container"
    )
    args = ap.parse_args(argv)
    if args.quick:
        args.messages, args.repeat = 200_000, 1
    n, reps = args.messages, args.repeat
    if n < 1000 or reps < 0:
        ap.error("--messages must be >= 1000 and --repeat >= 0")
    noop.EXTRA_SETS.extend(args.set)
    noop.set_fetch_queue_backoff(10)
    shapes = [s for s in SHAPES if args.only in s.label]
    if args.fetch != "native":
        consume = [replace(s, label=f"{s.label}, consume()", native=False) for s in shapes]
        shapes = consume if args.fetch == "consume" else [x for pair in zip(shapes, consume, strict=True) for x in pair]
    print(f"command: {' '.join(['.venv/bin/python', *sys.argv])}")

    broker = EmbeddedBroker(die_with_parent=True).start()
    results: dict[str, list[RunFigures]] = {s.label: [] for s in shapes}
    try:
        bs = broker.bootstrap_servers
        noop.create_topics(bs, [INPUT_4])
        noop.create_topics(bs, [INPUT_1], partitions=1)
        t = time.perf_counter()
        avg = noop.produce_input(bs, n, INPUT_4)
        noop.produce_input(bs, n, INPUT_1)
        print(
            f"broker {bs} (tansu); input: {n:,} messages of {avg:.0f} B in a 4-partition and in a 1-partition topic "
            f"(written in {time.perf_counter() - t:.1f} s); cpus: {os.cpu_count()}; pool {POOL}; {reps} rounds"
        )
        with tempfile.TemporaryDirectory(prefix="bench-scale-loop-") as tmp:
            for r in range(reps):
                for i, shape in enumerate(shapes if r % 2 == 0 else shapes[::-1]):
                    fig = run_shape(shape, f"{r}-{i}", n, bs, Path(tmp))
                    results[shape.label].append(fig)
                    print(
                        f"round {r + 1}/{reps}  {shape.label:<26} loop {fig.loop_us(n):5.2f} µs/msg "
                        f"(from 1st out {fig.loop_us(n, 0.0):5.2f}), workers {fig.workers_us(n):6.2f} µs/msg, "
                        f"{fig.rate():>9,.0f} msg/s, start -> first output {fig.startup_s:.2f} s, "
                        f"main RSS {fig.rss(n) / 2**20:.0f} MiB",
                        flush=True,
                    )
            if args.profile:
                workdir = Path(tmp)
                first = shapes[0]
                profile_runs(
                    lambda tag, to: run_shape(first, tag, n, bs, workdir, profile_to=to),
                    f"pool {POOL}, {first.label}",
                    args.profile_runs,
                    n,
                    workdir,
                    Path(args.profile).resolve(),
                    args.profile_native,
                )
    finally:
        broker.stop()
    if reps:
        report(results, shapes, n, reps)
    return 0


def report(results: dict[str, list[RunFigures]], shapes: list[Shape], n: int, reps: int) -> None:
    print()
    title = f"pool {POOL}, {n:,} msgs, " + (f"median of {reps}" if reps > 1 else "1 round")
    head = f"{'loop µs/msg':>12}{'from 1st':>10}{'ceiling msg/s':>15}{'workers µs':>12}{'workers fed':>13}{'msg/s':>10}"
    print(f"{title:<30}{head}")
    for s in shapes:
        rs = results[s.label]
        loop = median([r.loop_us(n) for r in rs])
        first = median([r.loop_us(n, 0.0) for r in rs])
        workers = median([r.workers_us(n) for r in rs])
        fed = median([r.workers_us(n) / r.loop_us(n) for r in rs])
        rate = median([r.rate() for r in rs])
        fed_s = f"{fed:>13.1f}" if s.task == "cpu" else f"{'':>13}"
        print(f"{s.label:<30}{loop:>12.2f}{first:>10.2f}{1e6 / loop:>15,.0f}{workers:>12.2f}{fed_s}{rate:>10,.0f}")
    print()
    split = {s.label: [r.threads_us() for r in results[s.label]] for s in shapes}
    names = sorted({k for runs in split.values() for d in runs for k in d})
    cells = {(lbl, k): median([d.get(k, 0.0) for d in runs]) for lbl, runs in split.items() for k in names}
    shown = [k for k in names if max(cells[(s.label, k)] for s in shapes) >= 0.02]
    shown.sort(key=lambda k: -max(cells[(s.label, k)] for s in shapes))
    print("the loop's µs/msg by thread of the main process (window, /proc schedstat; median):")
    print(f"{'thread':<26}" + "".join(f"{s.label:>27}" for s in shapes))
    for k in shown:
        print(f"{k:<26}" + "".join(f"{cells[(s.label, k)]:>27.2f}" for s in shapes))
    totals = [median([sum(d.values()) for d in split[s.label]]) for s in shapes]
    print(f"{'all threads':<26}" + "".join(f"{t:>27.2f}" for t in totals))
    print()
    for s in shapes:
        rs = results[s.label]
        loop = median([r.loop_us(n) for r in rs])
        spread = ", ".join(f"{r.loop_us(n):.2f}" for r in rs)
        line = f"{s.label}: loop {loop:.2f} µs/msg (rounds {spread}); before the scale work ~{BEFORE_US[s.task]} µs"
        if s.task == "noop":
            line += f"; target <= {TARGET_US} µs: {loop / TARGET_US:.2f}x the target"
        else:
            fed = median([r.workers_us(n) / r.loop_us(n) for r in rs])
            line += f"; projected speed-up over pool 1: up to ~{fed:.0f}x (workers one loop can feed; target 32)"
        print(line)


if __name__ == "__main__":
    sys.exit(main())
