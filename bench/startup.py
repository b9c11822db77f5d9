"""Start-up: process start to first output, samzamp's container (pool 2 and pool 1) against a plain
confluent-kafka consume->produce loop started as a fresh Python process, side by side in one run.

One embedded broker (Tansu, memory only, 127.0.0.1) serves every contender. The input topic (4
partitions, ``--messages`` JSON values of ~100 bytes: bench/noop.py's input) is written once before
measuring, so every contender finds its input waiting. Each round runs every contender once, one at
a time, in an order that alternates from round to round; each gets its own output topic (4
partitions, created beforehand, as a job's output usually exists).

plain    ``python -c <a loop>``: imports confluent_kafka and msgspec, one Consumer that *assigns* all 4
         partitions from the oldest offset (no group subscribe: a subscribe waits for the group's
         join, on Tansu about session.timeout.ms / 2, which measures the broker, not the client),
         one Producer; each value is JSON-decoded, re-encoded and produced with its key. The same
         librdkafka settings as samzamp's clients (bench/noop.py's PRODUCER_CONF and CONSUMER_CONF,
         linger.ms included). Written as one usually writes it, so its first fetch waits for
         librdkafka's 500 ms offset-query timer (samzamp/systems/kafka/assign.py explains it).
plain, metadata first
         the same loop, which asks for the input topic's metadata before assigning: the floor a
         Python consumer->producer process reaches here (interpreter, imports, two round trips,
         one fetch, the producer's linger.ms).
pool N   ``bin/samzamp-container job.toml`` with job.container.thread.pool.size = N running
         bench/noop_task.py:NoopTask (forward every input to the output). A fresh job.id each
         round: a job's first start, which creates its checkpoint topic and coordinator stream.
         Pool 1 runs the task inline on the loop (pool 0 is the same); pool 2 in two worker
         processes.

Measured: from just before ``Popen`` to the first output visible on the broker (OutputWatch: one
ListOffsets request every 20 ms, so each figure is up to ~20 ms late, alike for everyone). Then the
contender is stopped: SIGTERM, and samzamp's container must exit 0.

``--base DIR`` also runs each pool size from another checkout of samzamp (e.g. a git worktree of
main; its ``samzamp/_ring*.so`` must be built or copied there) in the same rounds, labelled
"(base)": before and after, measured side by side. ``--variant KEY=VALUE[,KEY=VALUE]`` adds a
container of the first pool size with those overrides (an A/B of settings).

Prints, per contender, the median and the minimum over ``--repeat`` rounds, and for each container
the median time from spawn to each step its log records (MILESTONES): where its start-up goes. With
BENCH_LOG_DIR=/some/dir the logs are kept there; with BENCH_PYSPY=/tmp/prefix py-spy records each
container (bench/noop.py's attach_profiler).

Target: pool 2 at most 1.5 s on a 2-core machine shared with the broker.

    .venv/bin/python bench/startup.py [--messages N] [--repeat R] [--pools 2,1] [--base DIR]
                                      [--variant KEY=VALUE[,KEY=VALUE]]
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
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import msgspec
import noop

from samzamp.systems.kafka import EmbeddedBroker

TARGET_S = 1.5  # pool 2, on a 2-core machine shared with the broker
TIMEOUT_S = 60.0

PLAIN_LOOP = """\
import sys
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
import msgspec

bootstrap, in_topic, out_topic, partitions = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
consumer_conf, producer_conf = msgspec.json.decode(sys.argv[5]), msgspec.json.decode(sys.argv[6])
c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-startup-plain", **consumer_conf})
if sys.argv[7] == "metadata-first":
    c.list_topics(in_topic, timeout=10)
c.assign([TopicPartition(in_topic, p, OFFSET_BEGINNING) for p in range(partitions)])
p = Producer({"bootstrap.servers": bootstrap, **producer_conf})
decode, encode = msgspec.json.Decoder().decode, msgspec.json.Encoder().encode
while True:
    for m in c.consume(1000, 0.1):
        if m.error() is None:
            p.produce(out_topic, encode(decode(m.value())), m.key())
    p.poll(0)
"""


@dataclass
class Contender:
    """One way of starting, and its start-up times so far."""

    label: str
    pool: int | None  # None: the plain loop
    plain_mode: str = "assign"  # the plain loop's: "assign", or "metadata-first"
    pythonpath: str | None = None  # a checkout of samzamp to run instead of this one (--base)
    sets: tuple[str, ...] = ()  # config overrides (--variant)
    times: list[float] = field(default_factory=list)
    # Per milestone of the container's log (MILESTONES), its seconds after spawn, one per round.
    phases: dict[str, list[float]] = field(default_factory=dict)


# What a container logs on its way to the first output, in order: (label, pattern of its log line).
MILESTONES = [
    ("imports, config loaded", re.compile(r" INFO samzamp: samzamp \S+ \(")),
    ("coordinator stream made", re.compile(r"created stream \S+\.__samza_coordinator_")),
    ("run id published", re.compile(r": run id \S+ \(")),
    ("checkpoints read", re.compile(r": \d+ tasks over \d+ partitions; starting offsets")),
    ("workers ready", re.compile(r"samzamp\.dispatch\.process\.pool: worker pool: ")),
]
LOG_TIME = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ")


def milestones(log_path: Path, spawned_at: float) -> dict[str, float]:
    """Seconds from spawn (``spawned_at``, time.time()) to each milestone the container's log shows."""
    out: dict[str, float] = {}
    for line in log_path.read_text(errors="replace").splitlines():
        stamp = LOG_TIME.match(line)
        if stamp is None:
            continue
        for label, pattern in MILESTONES:
            if label not in out and pattern.search(line):
                at = datetime.strptime(stamp.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
                out[label] = at - spawned_at
    return out


def job_toml(out_topic: str, pool: int, job_id: str) -> str:
    return f"""\
[job]
name = "bench-startup"
id = "{job_id}"
default.system = "kafka"
container.thread.pool.size = {pool}

[task]
class = "noop_task:NoopTask"
inputs = ["kafka.{noop.INPUT_TOPIC}"]

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


def command(c: Contender, bs: str, out_topic: str, job_id: str, workdir: Path) -> list[str]:
    if c.pool is None:
        confs = [msgspec.json.encode(x).decode() for x in (noop.CONSUMER_CONF, noop.PRODUCER_CONF)]
        return [
            sys.executable,
            "-c",
            PLAIN_LOOP,
            *(bs, noop.INPUT_TOPIC, out_topic, str(noop.PARTITIONS), *confs, c.plain_mode),
        ]
    toml_path = workdir / f"job-{out_topic}.toml"
    toml_path.write_text(job_toml(out_topic, c.pool, job_id))
    return [
        str(noop.CONTAINER_BIN),
        str(toml_path),
        "--set",
        f"systems.kafka.bootstrap.servers={bs}",
        *noop.extra_sets(),
        *[a for kv in c.sets for a in ("--set", kv)],
    ]


def start_once(c: Contender, bs: str, out_topic: str, job_id: str, workdir: Path, log_dir: Path, rep: int) -> float:
    """Start ``c``, return seconds from spawn to its first output on the broker (and note its
    milestones), then stop it."""
    env = dict(os.environ)
    paths = [c.pythonpath, str(noop.BENCH_DIR), env.get("PYTHONPATH")]
    env["PYTHONPATH"] = os.pathsep.join(x for x in paths if x)
    env["BENCH_NOOP_OUTPUT"] = out_topic
    args = command(c, bs, out_topic, job_id, workdir)
    log_path = log_dir / f"{out_topic}.log"
    watch = noop.OutputWatch(bs, out_topic)
    try:
        with open(log_path, "wb") as log:
            spawned_at = time.time()
            t0 = time.perf_counter()
            # Not started in this checkout: ``python -m`` puts the working directory first on sys.path,
            # which would run this checkout's samzamp for --base too.
            proc = subprocess.Popen(
                args, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=workdir
            )
            profiler = noop.attach_profiler(proc.pid, rep) if c.pool is not None else None
            try:
                while watch.poll() == 0:
                    if proc.poll() is not None:
                        raise RuntimeError(f"exited with {proc.returncode} before its first output")
                    if time.perf_counter() - t0 > TIMEOUT_S:
                        raise RuntimeError(f"no output within {TIMEOUT_S:.0f} s")
                elapsed = time.perf_counter() - t0
                proc.send_signal(signal.SIGTERM)
                rc = proc.wait(timeout=60)
                if c.pool is not None and rc != 0:
                    raise RuntimeError(f"exited with {rc} after SIGTERM")
            except BaseException as e:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
                log.flush()
                tail = log_path.read_text(errors="replace").splitlines()[-30:]
                print("\n".join([f"--- {c.label} log (last lines) ---", *tail, "---"]), file=sys.stderr)
                if isinstance(e, RuntimeError | subprocess.TimeoutExpired):
                    raise SystemExit(f"{c.label}: {e}") from None
                raise
            finally:
                if profiler is not None:
                    profiler.wait(timeout=60)
    finally:
        watch.close()
    if c.pool is not None:
        for label, at in milestones(log_path, spawned_at).items():
            c.phases.setdefault(label, []).append(at)
    return elapsed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=1000, help="input messages waiting (default 1000)")
    ap.add_argument("--repeat", type=int, default=5, help="rounds, order alternating; median and min reported")
    ap.add_argument("--pools", default="2,1", help="samzamp pool sizes (default 2,1)")
    ap.add_argument("--base", metavar="DIR", help="also run each pool size from the samzamp checkout in DIR")
    ap.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="KEY=VALUE[,KEY=VALUE]",
        help="also run the first pool size with these overrides, in the same rounds (an A/B of settings)",
    )
    args = ap.parse_args(argv)
    if args.messages < 1 or args.repeat < 1:
        ap.error("--messages and --repeat must be >= 1")
    pools = [int(p) for p in args.pools.split(",")]
    contenders = [Contender("plain", None), Contender("plain, metadata first", None, plain_mode="metadata-first")]
    for pool in pools:
        contenders.append(Contender(f"pool {pool}", pool))
        if args.base:
            base = str(Path(args.base).resolve())
            if not (Path(base) / "samzamp" / "__init__.py").is_file():
                ap.error(f"--base {args.base}: no samzamp package there")
            contenders.append(Contender(f"pool {pool} (base)", pool, pythonpath=base))
    for variant in args.variant:
        contenders.append(Contender(f"pool {pools[0]} {variant}", pools[0], sets=tuple(variant.split(","))))
    noop.set_fetch_queue_backoff(10)

    broker = EmbeddedBroker(die_with_parent=True).start()
    try:
        bs = broker.bootstrap_servers
        outs = {(i, r): f"bench-startup-out-{i}-{r}" for i in range(len(contenders)) for r in range(args.repeat)}
        noop.create_topics(bs, [noop.INPUT_TOPIC, *outs.values()])
        noop.produce_input(bs, args.messages)
        print(
            f"broker {bs} (tansu); input: {args.messages} messages waiting in {noop.PARTITIONS} partitions; "
            f"cpus: {os.cpu_count()}; {args.repeat} rounds"
        )
        with tempfile.TemporaryDirectory(prefix="bench-startup-") as tmp:
            log_dir = Path(os.environ.get("BENCH_LOG_DIR") or tmp)
            log_dir.mkdir(parents=True, exist_ok=True)
            for r in range(args.repeat):
                order = list(enumerate(contenders))
                figures = []
                for i, c in order if r % 2 == 0 else reversed(order):
                    s = start_once(c, bs, outs[(i, r)], f"{i}-{r}-{os.getpid()}", Path(tmp), log_dir, r)
                    c.times.append(s)
                    figures.append(f"{c.label} {s:.2f} s")
                print(f"round {r + 1}/{args.repeat}: {', '.join(figures)}", flush=True)
    finally:
        broker.stop()

    width = max(24, *(len(c.label) + 2 for c in contenders))
    print()
    print(f"{'start -> first output':<{width}}{'median':>9}{'min':>9}{'x plain':>9}")
    plain = statistics.median(contenders[0].times)
    for c in contenders:
        med = statistics.median(c.times)
        print(f"{c.label:<{width}}{med:>8.2f}s{min(c.times):>8.2f}s{med / plain:>9.2f}")
    samzamps = [c for c in contenders if c.pool is not None]
    cols = [max(16, len(c.label) + 2) for c in samzamps]
    print(f"\n{'median s from spawn':<24}" + "".join(f"{c.label:>{w}}" for c, w in zip(samzamps, cols, strict=True)))
    for label, _ in MILESTONES:
        cells = [
            f"{statistics.median(c.phases[label]):>{w - 1}.2f}s" if c.phases.get(label) else f"{'-':>{w}}"
            for c, w in zip(samzamps, cols, strict=True)
        ]
        print(f"{label:<24}" + "".join(cells))
    cells = [f"{statistics.median(c.times):>{w - 1}.2f}s" for c, w in zip(samzamps, cols, strict=True)]
    print(f"{'first output seen':<24}" + "".join(cells))
    if 2 in pools:
        pool2 = statistics.median(next(c for c in contenders if c.label == "pool 2").times)
        print(f"\nstart -> first output, pool 2: {pool2:.2f} s (target <= {TARGET_S} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
