"""No-op throughput: a plain confluent-kafka consume->produce loop vs samzamp's no-op job, side by side.

One embedded broker (Tansu, memory only, 127.0.0.1) serves both. The input topic (4 partitions,
``--messages`` JSON values of ~100 bytes, keys ``str(i % 10000)``) is written once before measuring;
then, ``--repeat`` times, alternately:

plain    one Consumer (assign, all 4 partitions from offset 0) and one Producer in this process; each
         value is JSON-decoded and re-encoded (msgspec, as samzamp's json serde does) and produced to
         an output topic with the same key. Its count of messages produced is sampled after
         each consumed batch.
samzamp  ``bin/samzamp-container`` running bench/noop_task.py:NoopTask in a subprocess. This process
         samples how many outputs the topic holds every 20 ms (OutputWatch: one ListOffsets request,
         which loads the machine far less than reading the outputs would). Start-up is reported apart,
         as "start -> first output". Once every output is written, SIGTERM; the container must
         exit 0, and the output is counted (any extra outputs are reported).

Both rates are steady-state rates (steady_rate): the slope of count over time from 10% to 90% of
the run, so neither side's start-up or last linger and flush count.

Prints the median of each, and ``noop ratio samzamp/plain``. Exits 0 whatever the ratio.

Both sides use the same librdkafka settings (samzamp's producer and consumer defaults), plus
fetch.queue.backoff.ms = 10 (``--fetch-queue-backoff-ms``; -1 keeps librdkafka's 1000): with the
default, a consumer that drains its prefetch queue faster than it refills idles ~0.8 s each time the
queue fills, which is most of the plain loop's time at 200,000 messages and hides its real speed.
Also printed: CPU use (all threads) over the timed window, of the plain loop's process or of the
container and its workers, and of the broker. The machine's cores are shared by broker, container
and this process. With BENCH_THREADS=1, each thread's share of running and of waiting for a CPU.

With BENCH_PYSPY=/tmp/prefix set, py-spy records the container (/tmp/prefix-<round>.speedscope.json).
With BENCH_LOG_DIR=/some/dir set, the container logs are kept there (container-<output topic>.log);
add ``--set metrics.log.interval.ms=500`` to see its metrics while it runs.

Before and after, in one run: ``--base DIR`` names another checkout of samzamp (a commit to compare
with), whose extensions are built in place with this checkout's interpreter. From this checkout's root:

    git worktree add --detach /tmp/base main
    (py=$PWD/.venv/bin/python && cd /tmp/base && $py setup.py --quiet build_ext --inplace)
    .venv/bin/python bench/noop.py --repeat 5 --base /tmp/base

Each round then runs the plain loop, this tree's container and DIR's, the two containers in turns
that swap every round. DIR's is its bin/samzamp-container and its samzamp package, with this
interpreter, its libraries and bench/noop_task.py (``Checkout``: DIR first on PYTHONPATH, the
container started outside any checkout). Before the rounds, each checkout's environment must import
its own samzamp with both extensions; in each run, every samzamp extension the container and its
workers have mapped must be that checkout's (/proc/<pid>/maps); else the bench exits. Printed: both
containers' medians side by side, each one's samzamp/plain, and this tree / base round by round and
its median (within a round the plain loop divides out of it).

    .venv/bin/python bench/noop.py [--messages N] [--repeat R] [--fetch-queue-backoff-ms MS] [--base DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import msgspec
import psutil
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec  # type: ignore[attr-defined]

from samzamp.systems.kafka import EmbeddedBroker
from samzamp.systems.kafka.producer import PRODUCER_LINGER_MS

BENCH_DIR = Path(__file__).resolve().parent
CONTAINER_BIN = BENCH_DIR.parent / "bin" / "samzamp-container"
PARTITIONS = 4
INPUT_TOPIC = "bench-noop-in"
TARGET = 0.5
EXTRA_SETS: list[str] = []  # --set KEY=VALUE overrides for the container

# The producer settings samzamp's KafkaSystemProducer uses, so that both sides ask the broker the same.
PRODUCER_CONF = {
    "linger.ms": PRODUCER_LINGER_MS,
    "partitioner": "murmur2_random",
    "enable.idempotence": False,
    "acks": "all",
    "queue.buffering.max.messages": 200000,
}
# Likewise for the consumer (samzamp's consumer_config).
CONSUMER_CONF = {
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
    "auto.offset.reset": "earliest",
    "fetch.wait.max.ms": 50,
    "queued.max.messages.kbytes": 16384,
}


@dataclass(frozen=True)
class Checkout:
    """A checkout of samzamp whose container a bench runs: its ``bin/samzamp-container`` and its
    ``samzamp`` package, with this interpreter (``sys.executable``: this checkout's venv, whose
    dependencies both share) and this checkout's bench/ (the same task code for both).

    Its root goes first on PYTHONPATH, ahead of the venv's editable install (whose import hook comes
    after every sys.path entry), and the container runs in a scratch directory: ``python -m`` puts the
    working directory first on sys.path, so started from a checkout it would run that checkout's
    package. Workers inherit both, and get the container's sys.path besides."""

    root: Path
    suffix: str = ""  # appended to its contenders' labels: "" for this checkout, " (base)" for --base

    @property
    def tag(self) -> str:
        """In its file and topic names: "" for this checkout, "-base" for --base."""
        return "-base" if self.suffix else ""

    @property
    def package(self) -> Path:
        return self.root / "samzamp"

    @property
    def container_bin(self) -> Path:
        return self.root / "bin" / "samzamp-container"

    def env(self, out_topic: str) -> dict[str, str]:
        """The environment of its container: its root, then bench/, on PYTHONPATH; this interpreter
        (bin/samzamp-container's PYTHON); the output topic in BENCH_NOOP_OUTPUT."""
        env = dict(os.environ)
        paths = (str(self.root), str(BENCH_DIR), env.get("PYTHONPATH", ""))
        env["PYTHONPATH"] = os.pathsep.join(x for x in paths if x)
        env["PYTHON"] = sys.executable
        env["BENCH_NOOP_OUTPUT"] = out_topic
        return env

    def describe(self) -> str:
        """Its root and commit, and whether tracked files differ from the commit."""

        def git(*args: str) -> str:
            r = subprocess.run(["git", "-C", str(self.root), *args], capture_output=True, text=True, check=False)
            return r.stdout.strip() if r.returncode == 0 else ""

        commit = git("rev-parse", "--short", "HEAD")
        if not commit:
            return f"{self.root} (not a git checkout)"
        dirty = ", uncommitted changes" if git("status", "--porcelain", "--untracked-files=no") else ""
        return f"{self.root} (at {commit}{dirty})"

    def check_imports(self, scratch: Path) -> None:
        """Exit unless its container's environment (run in ``scratch``) imports its own samzamp, with
        both extensions built (``python setup.py build_ext --inplace`` in its root builds them)."""
        code = "import samzamp, samzamp._ring, samzamp._keyhash as k; print(samzamp.__file__); print(k.__file__)"
        r = subprocess.run(
            [sys.executable, "-c", code], env=self.env(""), cwd=scratch, capture_output=True, text=True, check=False
        )
        if r.returncode != 0:
            why = (r.stderr.strip().splitlines() or [f"exit {r.returncode}"])[-1]
        else:
            files = [Path(x).resolve() for x in r.stdout.split()]
            wrong = [f for f in files if self.package.resolve() not in f.parents]
            if not wrong:
                return
            why = f"it imports {', '.join(map(str, wrong))}"
        raise SystemExit(
            f"{self.root}: its container would not run its samzamp ({why}); if its extensions are not "
            f"built: cd {self.root} && {sys.executable} setup.py build_ext --inplace"
        )

    def check_running(self, pid: int) -> tuple[int, int]:
        """Exit if process ``pid`` (a container) or one of its descendants (its workers) has a samzamp
        extension mapped (/proc/<pid>/maps) from anywhere but this checkout: what shows, from outside,
        which package a process imported. Returns (processes with one mapped, which are all this
        checkout's; processes in all)."""
        own = self.package.resolve()
        try:
            pids = [pid, *(k.pid for k in psutil.Process(pid).children(recursive=True))]
        except psutil.Error:
            pids = [pid]
        checked = 0
        for p in pids:
            mapped = samzamp_extensions(p)
            for so in mapped:
                if so.parent != own:
                    raise SystemExit(f"process {p} (of container {pid}) runs {so}, not {self.root}'s samzamp")
            checked += bool(mapped)
        return checked, len(pids)


def samzamp_extensions(pid: int) -> set[Path]:
    """The samzamp extension modules (``samzamp/_*.so``) that process ``pid`` has mapped."""
    try:
        lines = Path(f"/proc/{pid}/maps").read_text().splitlines()
    except OSError:
        return set()
    paths = {Path(fields[5]) for fields in (line.split(maxsplit=5) for line in lines) if len(fields) == 6}
    return {p for p in paths if p.parent.name == "samzamp" and p.name.startswith("_") and p.suffix == ".so"}


THIS = Checkout(BENCH_DIR.parent)


def steady_rate(samples: list[tuple[float, int]]) -> float:
    """Messages/s in the steady state: the least-squares slope of (time, count) samples over the
    middle of the run (counts from 10% to 90% of the last one), leaving out start-up and the end
    (a producer's last linger, the final flush), which both sides do not share alike."""
    top = samples[-1][1]
    mid = [(t, c) for t, c in samples if 0.1 * top <= c <= 0.9 * top]
    if len(mid) < 3:
        mid = samples
    t0 = mid[0][0]
    xs = [t - t0 for t, _ in mid]
    ys = [float(c) for _, c in mid]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx == 0:
        return float("nan")
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx


@dataclass
class PlainResult:
    rate: float  # steady_rate of messages handed to produce()
    messages: int
    seconds: float  # first consumed batch -> every output delivered
    cpu: float  # CPU seconds of this process in the timed window, over its wall time
    broker_cpu: float  # likewise for the broker


@dataclass
class SamzampResult:
    rate: float  # steady_rate of the outputs seen written
    messages: int  # outputs written
    seconds: float  # first output seen -> 90% of them
    startup_s: float  # container started -> first output seen
    cpu: float  # the CPU seconds of the container and its workers in the timed window, over its wall time
    broker_cpu: float  # likewise for the broker
    sampler_cpu: float  # likewise for this process, which samples the output (OutputWatch)
    shutdown_s: float  # SIGTERM -> exit
    outputs: int  # every output seen, including any after the target count
    checked: tuple[int, int]  # processes whose samzamp is checked to be the checkout's, of all (check_running)


def cpu_seconds(pid: int | None = None) -> float:
    """CPU time (user + system, all threads) of a process; this one when pid is None; NaN if unknown."""
    if pid is None:
        return time.process_time()
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return float("nan")


def tree_cpu_seconds(pid: int) -> float:
    """CPU time of a process and of its live descendants (the container and its workers)."""
    try:
        kids = [k.pid for k in psutil.Process(pid).children(recursive=True)]
    except psutil.Error:
        kids = []
    return cpu_seconds(pid) + sum(cpu_seconds(k) for k in kids)


def thread_times(root: int) -> dict[tuple[int, int, str], tuple[float, float]]:
    """(seconds running, seconds waiting for a CPU) of every thread of ``root`` and its descendants,
    by (pid, tid, thread name), from /proc/<pid>/task/*/schedstat."""
    out: dict[tuple[int, int, str], tuple[float, float]] = {}
    try:
        pids = [root, *(k.pid for k in psutil.Process(root).children(recursive=True))]
    except psutil.Error:
        return out
    for pid in pids:
        for t in Path(f"/proc/{pid}/task").glob("*"):
            try:
                stat = (t / "stat").read_text()
                run_ns, wait_ns, _ = (int(x) for x in (t / "schedstat").read_text().split())
            except (OSError, ValueError):
                continue
            comm = stat[stat.index("(") + 1 : stat.rindex(")")]
            out[(pid, int(t.name), comm)] = (run_ns / 1e9, wait_ns / 1e9)
    return out


class ThreadStats:
    """With BENCH_THREADS=1: each thread's share of the timed window, for the container and its
    workers (running, and waiting for a CPU: the run queue), from /proc/<pid>/task/*/schedstat."""

    def __init__(self, pid: int) -> None:
        self.enabled = bool(os.environ.get("BENCH_THREADS"))
        self._pid = pid
        self._start = self._snapshot() if self.enabled else {}

    def _snapshot(self) -> dict[tuple[int, int, str], tuple[float, float]]:
        return thread_times(self._pid)

    def report(self, wall_s: float) -> None:
        if not self.enabled:
            return
        for (pid, tid, comm), (run, wait) in sorted(self._snapshot().items()):
            run0, wait0 = self._start.get((pid, tid, comm), (0.0, 0.0))
            if run - run0 > 0.01 * wall_s:
                kind = "container" if pid == self._pid else f"worker {pid}"
                print(
                    f"    {kind:<14} thread {tid} {comm:<16} running {(run - run0) / wall_s:4.0%}, "
                    f"waiting for a CPU {(wait - wait0) / wall_s:4.0%}"
                )


def create_topics(bootstrap: str, names: list[str], partitions: int = PARTITIONS) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(n, num_partitions=partitions, replication_factor=1) for n in names])
    for name, fut in futures.items():
        try:
            fut.result(timeout=30)
        except KafkaException as e:
            raise SystemExit(f"cannot create topic {name}: {e}") from e
    del admin  # only now: the futures above needed it alive


def make_value(i: int) -> bytes:
    # ~100 bytes of JSON
    return msgspec.json.encode(
        {"id": i, "user": f"user-{i % 10000:05d}", "event": "click", "ts": 1700000000000 + i, "pad": "x" * 24}
    )


def produce_input(bootstrap: str, n: int, topic: str = INPUT_TOPIC) -> float:
    """Write the input: ``n`` JSON values of ~100 bytes (make_value), keys ``str(i % 10000)``; returns
    the mean value size."""
    p = Producer({"bootstrap.servers": bootstrap, **PRODUCER_CONF})
    size = 0
    for i in range(n):
        value = make_value(i)
        size += len(value)
        while True:
            try:
                p.produce(topic, value, str(i % 10000).encode())
                break
            except BufferError:
                p.poll(0.01)
        if i % 1000 == 0:
            p.poll(0)
    if p.flush(60) != 0:
        raise SystemExit("input: flush timed out")
    return size / max(n, 1)


def _assign_all(consumer: Consumer, topic: str, partitions: int = PARTITIONS) -> None:
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])


def count_topic(
    bootstrap: str, topic: str, expected: int, timeout_s: float = 60.0, partitions: int = PARTITIONS
) -> int:
    """Messages in ``topic``: read until ``expected`` are seen, then until 1 s passes with none new."""
    return len(output_times(bootstrap, topic, expected, timeout_s, partitions))


def output_times(
    bootstrap: str, topic: str, expected: int, timeout_s: float = 60.0, partitions: int = PARTITIONS
) -> list[float]:
    """The CreateTime (seconds since the epoch) of every message in ``topic``, sorted: read until
    ``expected`` are seen, then until 1 s passes with none new. librdkafka stamps a message with the
    wall clock when produce() is called, so for a job that writes one output per input these are the
    times its inputs were processed, to the millisecond."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-count-{topic}", **CONSUMER_CONF})
    _assign_all(c, topic, partitions)
    times: list[float] = []
    deadline = time.monotonic() + timeout_s
    quiet_until = None
    try:
        while time.monotonic() < deadline:
            msgs = c.consume(10000, 0.2)
            times.extend(m.timestamp()[1] / 1000 for m in msgs if m.error() is None)
            if len(times) >= expected:
                if msgs:
                    quiet_until = time.monotonic() + 1.0
                elif quiet_until is not None and time.monotonic() > quiet_until:
                    break
    finally:
        c.close()
    times.sort()
    return times


def run_plain(bootstrap: str, out_topic: str, n: int, rep: int, broker_pid: int | None) -> PlainResult:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-noop-plain-{rep}", **CONSUMER_CONF})
    _assign_all(c, INPUT_TOPIC)
    p = Producer({"bootstrap.servers": bootstrap, **PRODUCER_CONF})
    decode = msgspec.json.Decoder().decode
    encode = msgspec.json.Encoder().encode
    produce = p.produce
    count = 0
    t_first = None
    samples: list[tuple[float, int]] = []
    deadline = time.monotonic() + 300
    try:
        while count < n:
            msgs = c.consume(1000, 1.0)
            if not msgs:
                if time.monotonic() > deadline:
                    raise SystemExit(f"plain: only {count}/{n} messages consumed")
                continue
            if t_first is None:
                t_first = time.perf_counter()
                cpu0, bcpu0 = cpu_seconds(), cpu_seconds(broker_pid)
            for m in msgs:
                if m.error() is not None:
                    continue
                value = encode(decode(m.value() or b""))
                while True:
                    try:
                        produce(out_topic, value, m.key())
                        break
                    except BufferError:
                        p.poll(0.01)
                count += 1
            p.poll(0)
            samples.append((time.perf_counter(), count))
        left = p.flush(60)
        t_end = time.perf_counter()
        cpu1, bcpu1 = cpu_seconds(), cpu_seconds(broker_pid)
    finally:
        c.close()
    if left:
        raise SystemExit(f"plain: {left} messages not delivered")
    assert t_first is not None
    wall = t_end - t_first
    return PlainResult(steady_rate(samples), count, wall, (cpu1 - cpu0) / wall, (bcpu1 - bcpu0) / wall)


def set_fetch_queue_backoff(ms: int) -> None:
    """librdkafka's fetch.queue.backoff.ms, for every consumer of both sides (< 0: librdkafka's default)."""
    if ms >= 0:
        CONSUMER_CONF["fetch.queue.backoff.ms"] = ms


def extra_sets() -> list[str]:
    """The container gets the same librdkafka consumer settings beyond samzamp's defaults as plain does."""
    ms = CONSUMER_CONF.get("fetch.queue.backoff.ms")
    return [] if ms is None else ["--set", f"systems.kafka.consumer.fetch.queue.backoff.ms={ms}"]


def job_toml(out_topic: str, job_id: int | str) -> str:
    return f"""\
[job]
name = "bench-noop"
id = "{job_id}"
default.system = "kafka"

[task]
class = "noop_task:NoopTask"
inputs = ["kafka.{INPUT_TOPIC}"]
commit.ms = 5000

[systems.kafka]
samza.factory = "kafka"
default.stream.samza.offset.default = "oldest"

[streams.{INPUT_TOPIC}]
samza.key.serde = "string"
samza.msg.serde = "json"

[streams.{out_topic}]
samza.key.serde = "string"
samza.msg.serde = "json"
partitions = {PARTITIONS}
"""


class OutputWatch:
    """How many messages a topic holds, sampled with as little load on the machine as possible:
    one ListOffsets(latest) request for all partitions (AdminClient.list_offsets) every 20 ms.

    Whatever samples the output shares the 2 cores with the container under test, where the plain
    loop, timed from inside, has nobody beside it. Reading every output as it lands (this bench's
    first way) took a fifth of a core; a consumer's get_watermark_offsets every 5 ms (its second)
    sends one request per partition, which on Tansu cost the broker ~19% of a core and this process
    ~12%. One request for all partitions every 20 ms costs ~2% and ~4%, and still gives ~50 samples
    a second for steady_rate. On Tansu, ListOffsets answers the last batch's base offset + 1
    (ARCHITECTURE.md): low by up to one producer batch per partition, all along the run. So the
    count is used only for its slope in the steady state (steady_rate), where that offset cancels
    out, and to tell when the job stops writing; the exact total is counted afterwards.
    """

    PERIOD_S = 0.02

    def __init__(self, bootstrap: str, topic: str, partitions: int = PARTITIONS) -> None:
        self._admin = AdminClient({"bootstrap.servers": bootstrap})
        self._request = {TopicPartition(topic, p): OffsetSpec.latest() for p in range(partitions)}  # type: ignore[no-untyped-call]

    def poll(self) -> int:
        """Messages written so far, as ListOffsets tells (waits one sampling period first)."""
        time.sleep(self.PERIOD_S)
        return self.count()

    def count(self) -> int:
        """Messages written so far, as ListOffsets tells (at once)."""
        return sum(self.offsets())

    def offsets(self) -> list[int]:
        """Each partition's latest offset, as ListOffsets tells (at once), in partition order."""
        futures = self._admin.list_offsets(self._request, request_timeout=10)
        return [futures[tp].result().offset for tp in self._request]

    def close(self) -> None:
        del self._admin


def attach_profiler(pid: int, rep: int, tag: str = "") -> subprocess.Popen[bytes] | None:
    """With BENCH_PYSPY=<file prefix>, record the container and its workers with py-spy (speedscope JSON, one
    file a round, ``<prefix>-<round><tag>``)."""
    prefix = os.environ.get("BENCH_PYSPY")
    if not prefix:
        return None
    exe = shutil.which("py-spy", path=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))
    if exe is None:
        raise SystemExit("BENCH_PYSPY is set but py-spy is not installed (pip install py-spy)")
    out = f"{prefix}-{rep}{tag}.speedscope.json"
    print(f"  py-spy recording the container (pid {pid}) to {out}")
    cmd = [
        exe,
        "record",
        "--pid",
        str(pid),
        "--format",
        "speedscope",
        "-o",
        out,
        "--rate",
        "200",
        "--nonblocking",
        "--subprocesses",
    ]
    return subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def run_samzamp(
    bootstrap: str,
    out_topic: str,
    n: int,
    rep: int,
    workdir: Path,
    broker_pid: int | None,
    config: str | None = None,
    overrides: tuple[str, ...] = (),
    checkout: Checkout = THIS,
) -> SamzampResult:
    """Run one container of the job (``config``, default the no-op job) from ``checkout`` until ``n``
    outputs are seen."""
    toml_path = workdir / f"job-{out_topic}.toml"
    # Its own job.id: with the other checkout's, it would start from that one's checkpoint.
    toml_path.write_text(config if config is not None else job_toml(out_topic, f"{rep}{checkout.tag}"))
    log_path = Path(os.environ.get("BENCH_LOG_DIR") or workdir) / f"container-{out_topic}.log"

    watch = OutputWatch(bootstrap, out_topic)
    count = 0
    samples: list[tuple[float, int]] = []
    t_first: float | None = None
    t_last: float | None = None
    with open(log_path, "wb") as log:
        t0 = time.perf_counter()
        proc = subprocess.Popen(
            [
                str(checkout.container_bin),
                str(toml_path),
                "--set",
                f"systems.kafka.bootstrap.servers={bootstrap}",
                *extra_sets(),
                *[a for kv in (*EXTRA_SETS, *overrides) for a in ("--set", kv)],
            ],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=checkout.env(out_topic),
            cwd=workdir,  # not a checkout: see Checkout
        )
        profiler = attach_profiler(proc.pid, rep, checkout.tag)
        try:
            deadline = time.monotonic() + 600
            # Sample until 90% is written, or until the count stops moving for a second (on
            # Tansu, with few messages, the last batches can hide more than a tenth of them).
            while count < 0.9 * n and (t_last is None or time.perf_counter() - t_last < 1.0):
                if proc.poll() is not None:
                    raise RuntimeError(f"container exited with {proc.returncode} after {count}/{n} outputs")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"only {count}/{n} outputs within 600 s")
                seen = watch.poll()
                now = time.perf_counter()
                if seen <= count:
                    continue
                count = seen
                if t_first is None:
                    t_first = now
                    cpu0, bcpu0, scpu0 = tree_cpu_seconds(proc.pid), cpu_seconds(broker_pid), cpu_seconds()
                    threads = ThreadStats(proc.pid)
                t_last = now
                samples.append((now, seen))
            cpu1, bcpu1, scpu1 = tree_cpu_seconds(proc.pid), cpu_seconds(broker_pid), cpu_seconds()
            checked = checkout.check_running(proc.pid)  # its workers still run
            assert t_first is not None  # the loop ran until outputs came
            assert t_last is not None
            threads.report(t_last - t_first)
            # The measurement is over: wait for every output (reading them all), then stop.
            written = count_topic(bootstrap, out_topic, n, timeout_s=max(60.0, deadline - time.monotonic()))
            if written < n:
                raise RuntimeError(f"only {written}/{n} outputs")
            t_term = time.perf_counter()
            proc.send_signal(signal.SIGTERM)
            try:
                rc = proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                raise RuntimeError("container did not exit within 120 s of SIGTERM") from None
            shutdown_s = time.perf_counter() - t_term
            if rc != 0:
                raise RuntimeError(f"container exited with {rc} after SIGTERM")
            # Every output, including any after the target count (duplicates would show here).
            count = count_topic(bootstrap, out_topic, n)
        except BaseException as e:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            log.flush()
            tail_lines = log_path.read_text(errors="replace").splitlines()[-30:]
            print("\n".join(["--- container log (last lines) ---", *tail_lines, "---"]), file=sys.stderr)
            if isinstance(e, RuntimeError):
                raise SystemExit(f"samzamp: {e}") from None
            raise
        finally:
            watch.close()
            if profiler is not None:
                try:
                    profiler.wait(timeout=60)  # py-spy writes its file once the container has exited
                except subprocess.TimeoutExpired:
                    profiler.kill()
                    profiler.wait()
    assert t_first is not None
    assert t_last is not None
    wall = t_last - t_first
    return SamzampResult(
        steady_rate(samples),
        n,
        wall,
        t_first - t0,
        (cpu1 - cpu0) / wall,
        (bcpu1 - bcpu0) / wall,
        (scpu1 - scpu0) / wall,
        shutdown_s,
        count,
        checked,
    )


def base_checkout(ap: argparse.ArgumentParser, path: str) -> Checkout:
    """The checkout of ``--base``: a directory with bin/samzamp-container and a samzamp package."""
    base = Checkout(Path(path).resolve(), " (base)")
    if not base.container_bin.is_file() or not (base.package / "__init__.py").is_file():
        ap.error(f"--base {path}: no bin/samzamp-container and samzamp package there")
    return base


def print_checkouts(checkouts: list[Checkout]) -> None:
    """Check that each checkout's container would import its own samzamp, and say which commits run."""
    with tempfile.TemporaryDirectory(prefix="bench-checkout-") as scratch:
        for c in checkouts:
            c.check_imports(Path(scratch))
    if len(checkouts) > 1:
        print(
            "; ".join(f"{'base' if c.suffix else 'this tree'}: {c.describe()}" for c in checkouts)
            + " (each container's and workers' samzamp is checked by the extensions they map)"
        )


def report_base(plains: list[PlainResult], this: list[SamzampResult], base: list[SamzampResult], label: str) -> None:
    """With --base: the medians of both checkouts side by side, each one's samzamp/plain, and this
    tree's rate over the base's round by round (within a round the plain loop divides out of it)."""
    plain_rate = statistics.median(p.rate for p in plains)

    def med(rs: list[SamzampResult], attr: str) -> float:
        return float(statistics.median(getattr(r, attr) for r in rs))

    def row(what: str, f: Callable[[list[SamzampResult]], str]) -> None:
        print(f"{what:<28} {f(this):>10} {f(base):>10}")

    print()
    print(f"{'no-op, ' + label:<28} {'this tree':>10} {'base':>10}")
    print(f"{'plain confluent-kafka msg/s':<28} {plain_rate:>10,.0f}")
    row("samzamp container msg/s", lambda rs: f"{med(rs, 'rate'):,.0f}")
    row("samzamp/plain", lambda rs: f"{med(rs, 'rate') / plain_rate:.2f}")
    row("samzamp container CPU", lambda rs: f"{med(rs, 'cpu'):.0%}")
    row("samzamp start -> first out", lambda rs: f"{med(rs, 'startup_s'):.2f}s")
    row("samzamp SIGTERM -> exit", lambda rs: f"{med(rs, 'shutdown_s'):.2f}s")
    print(f"{'fetch.queue.backoff.ms':<28} {backoff_shown()}")
    print()
    for name, rs in (("this tree", this), ("base", base)):
        by_round = [r.rate / p.rate for r, p in zip(rs, plains, strict=True)]
        print(f"samzamp/plain by round, {name}: {', '.join(f'{x:.2f}' for x in by_round)}")
    this_base = [t.rate / b.rate for t, b in zip(this, base, strict=True)]
    print(f"this tree / base by round: {', '.join(f'{x:.2f}' for x in this_base)}")
    print()
    print(f"noop ratio samzamp/plain: {med(this, 'rate') / plain_rate:.2f} (target >= {TARGET})")
    print(f"noop ratio samzamp/plain, base: {med(base, 'rate') / plain_rate:.2f}")
    print(f"noop this tree / base: {statistics.median(this_base):.2f} (median of the rounds')")


def backoff_shown() -> str:
    backoff = CONSUMER_CONF.get("fetch.queue.backoff.ms")
    return "1000 ms (librdkafka default)" if backoff is None else f"{backoff} ms (both sides)"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=200000, help="input messages (default 200000)")
    ap.add_argument("--repeat", type=int, default=1, help="alternating plain/samzamp rounds; medians reported")
    ap.add_argument(
        "--fetch-queue-backoff-ms",
        type=int,
        default=10,
        metavar="MS",
        help="librdkafka fetch.queue.backoff.ms for both sides (default 10; -1 = librdkafka's 1000, "
        "which stalls a fast consumer ~0.8 s whenever its prefetch queue fills)",
    )
    ap.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a config override for the samzamp container (repeatable), e.g. task.consumer.batch.size=1",
    )
    ap.add_argument(
        "--base",
        metavar="DIR",
        help="also run the container of the samzamp checkout in DIR each round, after this tree's or before",
    )
    args = ap.parse_args(argv)
    EXTRA_SETS.extend(args.set)
    set_fetch_queue_backoff(args.fetch_queue_backoff_ms)
    n, reps = args.messages, args.repeat
    if n < 2 or reps < 1:
        ap.error("--messages must be >= 2 and --repeat >= 1")
    checkouts = [THIS] + ([base_checkout(ap, args.base)] if args.base else [])
    width = max(len(f"samzamp{c.suffix}") for c in checkouts)

    print_checkouts(checkouts)

    broker = EmbeddedBroker(die_with_parent=True).start()
    try:
        bs = broker.bootstrap_servers
        broker_pid = broker.process.pid if broker.process is not None else None
        plain_outs = [f"bench-noop-plain-out-{r}" for r in range(reps)]
        outs = {c: [f"bench-noop-samzamp{c.tag}-out-{r}" for r in range(reps)] for c in checkouts}
        create_topics(bs, [INPUT_TOPIC, *plain_outs, *(t for ts in outs.values() for t in ts)])
        t = time.perf_counter()
        avg = produce_input(bs, n)
        print(
            f"broker {bs} (tansu); input: {n} messages, {PARTITIONS} partitions, "
            f"{avg:.0f} B values, written in {time.perf_counter() - t:.1f} s; cpus: {os.cpu_count()}"
        )

        plains: list[PlainResult] = []
        sams: dict[Checkout, list[SamzampResult]] = {c: [] for c in checkouts}
        with tempfile.TemporaryDirectory(prefix="bench-noop-") as tmp:
            for r in range(reps):
                pr = run_plain(bs, plain_outs[r], n, r, broker_pid)
                delivered = count_topic(bs, plain_outs[r], n)
                if delivered != n:
                    print(f"  warning: plain output has {delivered} messages, expected {n}")
                plains.append(pr)
                print(
                    f"round {r + 1}/{reps}  {'plain':<{width}} {pr.rate:>9,.0f} msg/s  ({pr.messages} in {pr.seconds:.2f} s; "
                    f"cpu: loop {pr.cpu:.0%}, broker {pr.broker_cpu:.0%})"
                )

                # With --base, the two checkouts swap places each round, so that neither always runs
                # right after the plain loop.
                for c in checkouts if r % 2 == 0 else checkouts[::-1]:
                    sr = run_samzamp(bs, outs[c][r], n, r, Path(tmp), broker_pid, checkout=c)
                    sams[c].append(sr)
                    extra = f", {sr.outputs - n} extra outputs" if sr.outputs != n else ""
                    if len(checkouts) > 1:
                        extra += f"; samzamp checked in {sr.checked[0]}/{sr.checked[1]} processes"
                    print(
                        f"round {r + 1}/{reps}  {'samzamp' + c.suffix:<{width}} {sr.rate:>9,.0f} msg/s  (first output -> 90% written {sr.seconds:.2f} s; "
                        f"cpu: container {sr.cpu:.0%}, broker {sr.broker_cpu:.0%}, sampler {sr.sampler_cpu:.0%}; start -> first output {sr.startup_s:.2f} s, "
                        f"SIGTERM -> exit 0 in {sr.shutdown_s:.2f} s{extra})"
                    )
    finally:
        broker.stop()

    label = "median of " + str(reps) if reps > 1 else "1 run"
    if len(checkouts) > 1:
        report_base(plains, sams[THIS], sams[checkouts[1]], label)
        return 0
    plain_rate = statistics.median(p.rate for p in plains)
    sam_rate = statistics.median(s.rate for s in sams[THIS])
    startup = statistics.median(s.startup_s for s in sams[THIS])
    shutdown = statistics.median(s.shutdown_s for s in sams[THIS])
    plain_cpu = statistics.median(p.cpu for p in plains)
    sam_cpu = statistics.median(s.cpu for s in sams[THIS])
    ratio = sam_rate / plain_rate
    print()
    print(f"{'no-op, ' + label:<28} {'msg/s':>10}")
    print(f"{'plain confluent-kafka':<28} {plain_rate:>10,.0f}")
    print(f"{'samzamp container':<28} {sam_rate:>10,.0f}")
    print(f"{'plain loop CPU (all threads)':<28} {plain_cpu:>10.0%}")
    print(f"{'samzamp container CPU':<28} {sam_cpu:>10.0%}")
    print(f"{'samzamp start -> first out':<28} {startup:>9.2f}s")
    print(f"{'samzamp SIGTERM -> exit':<28} {shutdown:>9.2f}s")
    print(f"{'fetch.queue.backoff.ms':<28} {backoff_shown()}")
    print()
    print(f"noop ratio samzamp/plain: {ratio:.2f} (target >= {TARGET})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
