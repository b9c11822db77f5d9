"""Standalone mode at 4,096 tasks: 4 processors of one job on an input of 1,024 partitions x
job.elasticity.factor 4; the time until all four run one job model, and the pause of a join and of a
leave, as bench/standalone.py measures them.

The job: bench/noop_task.py:NoopTask (every input to the output, keyed as its input) with
job.coordinator.factory = "zk" on an embedded ZooKeeper (samzamp.coordinator.zk.server) and the
embedded broker (Tansu, memory only), job.container.thread.pool.size ``--pool`` (default 1: each
processor runs its tasks inline on its loop, one process), job.elasticity.factor ``--factor``
(default 4) over an input topic of ``--partitions`` (default 1,024): 4,096 tasks. A thread of this
process writes ``--flow-rate`` inputs a second (bench/noop.py's clicks, keys ``str(i % 10000)``, so
spread over every partition), well under the job's capacity, so the outputs follow the input.
job.debounce.time.ms 200 (the leader waits that long after the last change of the processors before
it computes: waiting, not work), zk.session.timeout.ms 10 s, zk.consensus.timeout.ms 60 s. On a
2-core machine the four processors (and the broker, ZooKeeper and this process) oversubscribe the
cores: absolute times here are those of a machine with half a core per processor.

**Start.** p1 starts first and registers (so it leads throughout); then p2, p3 and p4 start together.
"start -> stable" runs from p1's start until every one of the 4 applied one job model that gives
tasks to all 4 (all 4,096 tasks running); "-> first output" until the output topic has an output.
Each processor's RSS is read then.

**Rebalances.** Then ``--cycles`` times: p4 leaves (SIGTERM: its tasks finish in-flight work, commit
and close; it must exit 0), ``--steady`` s, p4 joins again (a fresh process), ``--steady`` s. Per
rebalance, from the processors' log lines (bench/standalone.py's measure):

- t0: a leave's SIGTERM; a join's "registered as" line of the joiner (its ephemeral node exists, its
  own start-up before that is not the pause of the others);
- published: the leader's "published job model version V" line (t0 -> published holds the 200 ms
  debounce, the leaver's own shutdown, and the leader's computation of the model);
- resumed: the last "job model version V applied by processor ..." line among the processors of V;
- processors' paused: the largest "paused N ms" of those lines (a processor's pause from the version's
  arrival to its tasks started; ZkJobCoordinatorMetrics last-rebalance-pause-ms).

With ``--timeline``, each rebalance is followed by the steps of every processor in it, in ms from
t0, from their log lines: the leaver's shutdown (SIGTERM, its final commit), the leader's publish,
each processor's stop of the tasks it gives up, the barrier's completion, each start of tasks (the
checkpoints read, the "starting offsets" line, the tasks started) and each apply.

bench/standalone.py's output silence per partition is not measured here: sampling 1,024 partitions'
offsets every 20 ms would load the 2-core machine more than the job does.

Before the scale work, on this 2-core machine: at 1,024 x 4 the four processors never reached a
common model. p1 published version 1 (all 4,096 tasks to itself) 0.6 s after it started, and p2-p4
registered a second later. After that no version was published for the 4 minutes the run had: p1's
4,096 task commits were all in flight at once, averaging 29 s (longest 66 s). ``--quick`` (64 x 4 =
256 tasks): stable in 7.3 s, a leave 1.45 s t0 -> resumed (paused 465 ms), a join 0.99 s (421 ms).

After the second round of standalone work, against the first round's code in the same lock hold
(``--cycles 2``, medians of 2 joins and 2 leaves, two pairs at load averages 4 to 6.5): a join
1.93 s and 2.29 s t0 -> resumed before, 1.38 s and 1.52 s after (paused 0.98 s and 1.26 s before,
0.88 s and 1.08 s after); a leave 1.70 s and 1.97 s before, 1.34 s and 1.46 s after (paused 0.71 s
and 0.92 s before, 0.72 s and 0.73 s after); t0 -> published 0.87 to 1.02 s before, 0.42 to 0.68 s
after. What the leader did in that span and no longer does: it read the coordinator stream twice
from its oldest record (the task history, two records per task), checked every task against every
checkpoint written since the last rebalance, computed the tasks again and read its own last model
back. What is left of a leave's t0 -> published: the leaver's shutdown (its final commit, about
0.25 s), the 200 ms debounce (this bench's own: job.debounce.time.ms defaults to 20,000) and the
leader's reading of the coordinator stream and grouping (0.15 to 0.3 s). Of published -> resumed
(0.7 to 1.0 s, ``--timeline``): the new owners' starting offsets (the end offsets of their
partitions, 0.3 to 0.9 s), the stop of the tasks given up (their final commits, 0.3 to 0.5 s, in a
join) and each empty read of the checkpoint topic (0.05 to 0.2 s, a consumer of its own). At a load
average of 8.7 one run gave 2.8 s (leave) and 3.2 s (join).

Printed: the start, a line per rebalance, and the median and largest of each span over the joins and
over the leaves. Target: joins and leaves under 2 s (t0 -> resumed and processors' paused). Every
output must be written, and each processor must exit 0 on SIGTERM. Exits 0 whatever the figures.
With BENCH_LOG_DIR the processors' logs are kept there.

    .venv/bin/python bench/scale_standalone.py [--quick] [--partitions 1024] [--factor 4] [--pool 1]
                                               [--cycles C] [--flow-rate R] [--steady S] [--timeline]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import noop
import psutil
from standalone import DEBOUNCE_MS, Flow, JobView, Processor, log_time
from turns import bench_env, container_args

from samzamp.coordinator.zk.server import EmbeddedZooKeeper
from samzamp.model.job_model import JobModel
from samzamp.systems.kafka import EmbeddedBroker

TARGET_MS = 2000
JOB = "bench-zk-scale"
INPUT_TOPIC = "bench-zk-scale-in"
OUTPUT_TOPIC = "bench-zk-scale-out"
OUTPUT_PARTITIONS = 8
SESSION_MS = 10000
CONSENSUS_MS = 60000
STABLE_TIMEOUT_S = 300.0
POLL_S = 0.2  # the processors' logs are long (a line lists the tasks gained): read them less often
# The log lines of a rebalance's steps (--timeline), each shown up to its first colon or 90 characters.
STEP = re.compile(
    r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) \w+ \S+: ("
    r"SIGTERM: stopping|final commit done|processor \S+ at location \S+ registered|published job model version"
    r"|job model version \d+: stopping \d+ tasks|barrier of version|job \S+: \d+ tasks over \d+ partitions"
    r"|\d+ tasks started|job model version \d+ applied by|left run).*$",
    re.M,
)


def timeline(processors: list[Processor], t0: float, until: float) -> list[str]:
    """The steps of a rebalance from ``t0`` to ``until`` (epoch seconds) in the logs of ``processors``,
    in time order: "+ms processor step"."""
    steps = []
    for p in processors:
        for m in STEP.finditer(p.text()):
            t = log_time(m.group(1))
            if t0 - 0.001 <= t <= until + 0.001:
                line = m.group(0)[len(m.group(1)) :].split(": ", 1)[1]
                steps.append((t, p.pid, line[:90]))
    return [f"  {(t - t0) * 1000:+7,.0f} ms {pid:<3} {line}" for t, pid, line in sorted(steps)]


def job_toml(zk_connect: str, pool: int, factor: int) -> str:
    return f"""\
[job]
name = "{JOB}"
id = "0"
default.system = "kafka"
container.thread.pool.size = {pool}
elasticity.factor = {factor}

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

[streams.{OUTPUT_TOPIC}]
samza.key.serde = "string"
samza.msg.serde = "json"
partitions = {OUTPUT_PARTITIONS}

[job.coordinator]
factory = "zk"
zk.connect = "{zk_connect}"
zk.session.timeout.ms = {SESSION_MS}
zk.connection.timeout.ms = 20000
zk.consensus.timeout.ms = {CONSENSUS_MS}

[job.debounce]
time.ms = {DEBOUNCE_MS}
"""


def wait_stable(
    view: JobView, processors: list[Processor], what: str, each: Callable[[], None] = lambda: None
) -> tuple[int, JobModel]:
    """Until the newest version gives tasks to exactly ``processors`` and each applied it; ``each``
    is called at every look."""
    deadline = time.monotonic() + STABLE_TIMEOUT_S
    while True:
        each()
        for p in processors:
            p.check_alive(what)
        latest = view.latest()
        if latest is not None:
            version, model = latest
            if set(model.containers) == {p.pid for p in processors} and all(version in p.applied() for p in processors):
                return version, model
        if time.monotonic() > deadline:
            shown = f"version {latest[0]}: {sorted(latest[1].containers)}" if latest else "none"
            processors[0].fail(f"{what}: no common job model in {STABLE_TIMEOUT_S:.0f} s ({shown})")
        time.sleep(POLL_S)


@dataclass
class Change:
    what: str
    t0: float
    version: int
    moved: int  # tasks whose owner changed
    published: float
    applied: dict[str, tuple[float, int]]  # processor -> (applied at, its "paused N ms")

    @property
    def resumed(self) -> float:
        return max(t for t, _ in self.applied.values())

    @property
    def paused_ms(self) -> int:
        return max(ms for _, ms in self.applied.values())


def moved_tasks(before: JobModel, after: JobModel) -> int:
    old = before.owners()
    return sum(1 for t, owner in after.owners().items() if old.get(t) != owner)


@dataclass
class Start:
    stable_s: float
    first_output_s: float
    version: int
    tasks: dict[str, int]
    rss_mib: dict[str, float]


def run(bs: str, zk_connect: str, args: argparse.Namespace, workdir: Path) -> tuple[Start, list[Change]]:
    log_dir = Path(os.environ.get("BENCH_LOG_DIR") or workdir)
    toml_path = workdir / "job.toml"
    toml_path.write_text(job_toml(zk_connect, args.pool, args.factor))
    cmd = container_args(toml_path, bs)
    env = bench_env(OUTPUT_TOPIC)
    starts: dict[str, int] = {}

    def new(pid: str) -> Processor:
        p = Processor(pid, log_dir / f"{JOB}-{pid}-{starts.get(pid, 0)}.log")
        starts[pid] = starts.get(pid, 0) + 1
        p.start(cmd, env)
        return p

    flow = Flow(bs, INPUT_TOPIC, args.flow_rate)
    watch = noop.OutputWatch(bs, OUTPUT_TOPIC, OUTPUT_PARTITIONS)
    view = JobView(zk_connect, JOB, "0")
    running: list[Processor] = []
    done: list[Change] = []
    try:
        t0 = time.perf_counter()
        running.append(new("p1"))
        deadline = time.monotonic() + STABLE_TIMEOUT_S
        while "registered as" not in running[0].text():
            running[0].check_alive("p1 start")
            if time.monotonic() > deadline:
                running[0].fail("p1: not registered")
            time.sleep(0.05)
        running += [new(f"p{i}") for i in (2, 3, 4)]
        first_output: list[float] = []

        def look_for_output() -> None:
            if not first_output and watch.count() > 0:
                first_output.append(time.perf_counter() - t0)

        version, model = wait_stable(view, running, "start", look_for_output)
        stable_s = time.perf_counter() - t0
        while not first_output:
            running[0].check_alive("first output")
            if time.monotonic() > deadline:
                running[0].fail("no output")
            time.sleep(noop.OutputWatch.PERIOD_S)
            look_for_output()
        start = Start(
            stable_s,
            first_output[0],
            version,
            {pid: len(c.tasks) for pid, c in sorted(model.containers.items())},
            {p.pid: psutil.Process(p.os_pid).memory_info().rss / 2**20 for p in running},
        )
        print(
            f"start: 4 processors stable (version {version}, tasks {start.tasks}) {stable_s:.2f} s after p1's start; "
            f"first output at {start.first_output_s:.2f} s; RSS MiB "
            + ", ".join(f"{k} {v:.0f}" for k, v in start.rss_mib.items())
        )
        leader = running[0]
        time.sleep(args.steady)
        for _cycle in range(args.cycles):
            for step in ("-p4", "+p4"):
                before = len(running)
                if step[0] == "+":
                    joiner = new("p4")
                    running.append(joiner)
                    version, after = wait_stable(view, running, "p4 joins")
                    t_change = joiner.registered_at()
                    what = f"p4 joins ({before} -> {len(running)})"
                    involved = running
                else:
                    leaver = running.pop()
                    involved = [*running, leaver]
                    t_change = time.time()
                    leaver.terminate()
                    version, after = wait_stable(view, running, "p4 leaves")
                    leaver.wait_exit_0("p4 leaves")
                    what = f"p4 leaves ({before} -> {len(running)})"
                published = leader.published().get(version)
                if published is None:
                    leader.fail(f"{what}: version {version} is not in the leader's log")
                applied = {p.pid: p.applied()[version] for p in running}
                c = Change(what, t_change, version, moved_tasks(model, after), published, applied)
                done.append(c)
                print(
                    f"{what:<20} version {version}: {c.moved} tasks moved; t0 -> published "
                    f"{(published - t_change) * 1000:,.0f} ms, -> resumed {(c.resumed - t_change) * 1000:,.0f} ms; "
                    f"processors' paused {c.paused_ms:,} ms"
                )
                if args.timeline:
                    print("\n".join(timeline(involved, t_change, c.resumed)))
                model = after
                time.sleep(args.steady)
        written = flow.stop()
        outputs = noop.count_topic(bs, OUTPUT_TOPIC, written, timeout_s=120, partitions=OUTPUT_PARTITIONS)
        if outputs < written:
            raise SystemExit(f"only {outputs}/{written} outputs")
        print(f"{written} inputs at {args.flow_rate:g}/s, {outputs} outputs ({outputs - written} repeated)")
        for p in running:
            p.terminate()
        for p in running:
            p.wait_exit_0("end")
    finally:  # the processors first: a cleanup step that fails must not leave them running
        for p in running:
            p.kill()
        with contextlib.suppress(SystemExit):  # a flush that timed out
            flow.stop()
        watch.close()
        view.close()
    return start, done


def report(start: Start, done: list[Change]) -> None:
    spans: dict[str, Callable[[Change], float]] = {
        "t0 -> published": lambda c: (c.published - c.t0) * 1000,
        "published -> resumed": lambda c: (c.resumed - c.published) * 1000,
        "t0 -> resumed": lambda c: (c.resumed - c.t0) * 1000,
        "processors' paused (largest)": lambda c: float(c.paused_ms),
    }
    groups = {"joins": [c for c in done if "joins" in c.what], "leaves": [c for c in done if "leaves" in c.what]}
    print(
        f"\nstart -> 4 processors stable with {sum(start.tasks.values())} tasks: {start.stable_s:.2f} s; "
        f"-> first output {start.first_output_s:.2f} s"
    )
    print(f"{'ms, median / max':<30}" + "".join(f"{f'{g} ({len(cs)})':>18}" for g, cs in groups.items()))
    for name, f in spans.items():
        cells = []
        for cs in groups.values():
            xs = [f(c) for c in cs]
            cells.append(f"{statistics.median(xs):,.0f} / {max(xs):,.0f}" if xs else "-")
        print(f"{name:<30}" + "".join(f"{c:>18}" for c in cells))
    for g, cs in groups.items():
        if cs:
            resumed = statistics.median((c.resumed - c.t0) * 1000 for c in cs)
            paused = statistics.median(float(c.paused_ms) for c in cs)
            print(f"{g}: t0 -> resumed {resumed:,.0f} ms, paused {paused:,.0f} ms (medians; target < {TARGET_MS:,} ms)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--partitions", type=int, default=1024, help="input partitions (default 1024)")
    ap.add_argument("--factor", type=int, default=4, help="job.elasticity.factor (default 4)")
    ap.add_argument("--pool", type=int, default=1, help="job.container.thread.pool.size (default 1)")
    ap.add_argument("--cycles", type=int, default=3, help="leave + join cycles of p4 (default 3)")
    ap.add_argument("--flow-rate", type=float, default=2000, help="inputs a second (default 2000)")
    ap.add_argument("--steady", type=float, default=5.0, help="seconds between changes (default 5)")
    ap.add_argument("--quick", action="store_true", help="64 partitions x 4, 1 cycle, 2 s steady")
    ap.add_argument("--timeline", action="store_true", help="each rebalance's steps from the processors' logs")
    args = ap.parse_args(argv)
    if args.quick:
        args.partitions, args.cycles, args.steady = 64, 1, 2.0
    cmd = " ".join([".venv/bin/python", "bench/scale_standalone.py", *(argv if argv is not None else sys.argv[1:])])
    noop.set_fetch_queue_backoff(10)
    t_start = time.monotonic()
    cores = os.cpu_count() or 1
    broker = EmbeddedBroker(die_with_parent=True).start()
    zk = EmbeddedZooKeeper(die_with_parent=True).start()
    try:
        bs = broker.bootstrap_servers
        noop.create_topics(bs, [INPUT_TOPIC], partitions=args.partitions)
        noop.create_topics(bs, [OUTPUT_TOPIC], partitions=OUTPUT_PARTITIONS)
        print(
            f"broker {bs} (tansu), ZooKeeper {zk.connect_string}; cpus: {cores}; input {args.partitions} partitions x "
            f"factor {args.factor} = {args.partitions * args.factor} tasks; 4 processors of pool {args.pool}; "
            f"{args.flow_rate:g} inputs/s; load average {os.getloadavg()[0]:.2f}"
        )
        if cores < 4:
            print(f"this machine has {cores} cores: 4 processors oversubscribe them")
        with tempfile.TemporaryDirectory(prefix="samzamp-bench-zk-scale-") as tmp:
            start, done = run(bs, zk.connect_string, args, Path(tmp))
    finally:
        zk.stop()
        broker.stop()
    report(start, done)
    print(f"\nbench/scale_standalone.py took {time.monotonic() - t_start:.0f} s; load average {os.getloadavg()[0]:.2f}")
    print(f"reproduce: {cmd}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
