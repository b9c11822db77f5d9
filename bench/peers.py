"""The peers' table's pool-2 rows again: samzamp's no-op and stateful jobs at pool 2 against Bytewax 0.21
with 2 processes running the same no-op job, interleaved on one broker.

The harness of ../shared/design/PERFORMANCE.md: one embedded broker (Tansu, memory only, 127.0.0.1);
the input topic (4 partitions, ``--messages`` JSON values of ~100 bytes, keys ``str(i % 10000)``:
bench/noop.py's input) written once before measuring; then ``--repeat`` rounds, each running every
contender once, one at a time, on its own output topic, the order rotating by round:

samzamp noop      ``bin/samzamp-container`` with bench/noop_task.py:NoopTask (decode, forward one output
                  per input, same key) at job.container.thread.pool.size = 2 (bench/noop.py's run_samzamp)
samzamp stateful  the same at pool 2 with bench/stateful_task.py's job (bench/stateful.py's job_toml):
                  a count per key in an LMDB store with a Kafka changelog (checksums on, the default),
                  one output per input; ``--keys`` 10,000 (default), the harness's keys; a commit
                  every 5 s, as the harness had (so at 200,000 messages the timed window holds no
                  commit: the figure is the per-message cost of store read, write and changelog)
bytewax x2        Bytewax 0.21 in 2 processes (``python -m bytewax.run FLOW -i 0|1 -a ADDR0;ADDR1``, one
                  worker each, Bytewax's own multi-process mode) running the no-op job: Bytewax's
                  Kafka connectors (bytewax.connectors.kafka: KafkaSource over the input topic, one
                  consumer per partition, 2 partitions a worker; op.map decoding the JSON value and
                  encoding it again; KafkaSink writing each result with the input's key), which is
                  what a Bytewax user writes for a Kafka job, so its cost is Bytewax's own; the flow
                  is FLOW_SOURCE below, written to a scratch directory each run. Its JSON codec is
                  the standard library's json, what a Bytewax job written plainly uses
bytewax x2 msgspec
                  with ``--bytewax-codec both`` (or ``msgspec``): the same with msgspec's codec, the
                  one samzamp's json serde uses, so that the ratio compares engines and not JSON
                  libraries (the interpreter must have msgspec)

Every contender's consumers and producers get the same librdkafka settings: samzamp's consumer and
producer defaults (bench/noop.py's CONSUMER_CONF and PRODUCER_CONF, given to Bytewax's KafkaSource and
KafkaSink as add_config), plus fetch.queue.backoff.ms = 10, as bench/noop.py gives both its sides
(with librdkafka's 1000 a fast consumer idles whenever its prefetch queue fills).

Each is measured the same way, from outside (bench/noop.py's OutputWatch and steady_rate): the output
topic's count sampled every 20 ms, its steady rate the slope from 10% to 90% of the outputs; start-up
(process start -> first output) apart. Then every output must be on the topic (counted by reading
it); the samzamp container must exit 0 on SIGTERM; the Bytewax processes are stopped with SIGINT
(Bytewax's Ctrl-C) and killed if they linger, as a source that tails its topic never ends by itself.

Printed: each run (rate, CPU of the processes under test and of the broker over the timed window,
start -> first output), the medians, and the ratios samzamp aims for, the targets beside them: noop
pool 2 / Bytewax x2 (>= 3; one line per codec) and stateful pool 2 / noop pool 2 (>= 0.8). Exits 0
whatever the ratios. With BENCH_LOG_DIR=/some/dir the logs are kept there.

Bytewax is not a dependency of samzamp and this bench installs nothing: ``--bytewax-python PATH``
names an interpreter that has bytewax 0.21.1 and confluent-kafka, made for instance with

    python3 -m venv /tmp/bytewax-venv && /tmp/bytewax-venv/bin/pip install bytewax==0.21.1 confluent-kafka

(add msgspec for ``--bytewax-codec msgspec|both``). Without it the Bytewax contenders are skipped,
with a line saying so, and so is the first ratio.

    .venv/bin/python bench/peers.py --bytewax-python /tmp/bytewax-venv/bin/python [--bytewax-codec json|msgspec|both]
        [--messages N] [--repeat R] [--keys K] [--only noop,stateful,bytewax]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import noop
import stateful

from samzamp.systems.kafka import EmbeddedBroker

POOL = 2
PROCESSES = 2  # Bytewax's
COMMIT_MS = 5000  # the harness's commit interval for samzamp
TARGET_VS_BYTEWAX = 3.0  # noop pool 2 / Bytewax x2
TARGET_STATEFUL = 0.8  # stateful pool 2 / noop pool 2
NOOP, STATEFUL = "samzamp noop pool 2", "samzamp stateful pool 2"
BYTEWAX = {"json": f"bytewax x{PROCESSES}", "msgspec": f"bytewax x{PROCESSES} msgspec"}  # by its job's JSON codec
SLUGS = {NOOP: "noop", STATEFUL: "stateful", BYTEWAX["json"]: "bytewax", BYTEWAX["msgspec"]: "bytewax-msgspec"}

# The Bytewax job, run by --bytewax-python (which has bytewax; this interpreter need not). Written to
# a scratch directory as peers_bytewax_flow.py; BENCH_PEERS_BYTEWAX (JSON) says where to read and write.
FLOW_SOURCE = '''\
"""bench/peers.py's Bytewax no-op job: decode each input's JSON value, forward it with its key."""

import json
import os

from bytewax import operators as op
from bytewax.connectors.kafka import KafkaSink, KafkaSinkMessage, KafkaSource
from bytewax.dataflow import Dataflow

conf = json.loads(os.environ["BENCH_PEERS_BYTEWAX"])
brokers = [conf["bootstrap"]]
if conf["codec"] == "msgspec":
    import msgspec

    decode, encode = msgspec.json.decode, msgspec.json.encode
else:
    decode = json.loads

    def encode(value):
        return json.dumps(value, separators=(",", ":")).encode()


def forward(msg):
    return KafkaSinkMessage(msg.key, encode(decode(msg.value)))


flow = Dataflow("bench-peers-noop")
inputs = op.input("in", flow, KafkaSource(brokers, [conf["input"]], add_config=conf["consumer"]))
op.output("out", op.map("forward", inputs, forward), KafkaSink(brokers, conf["output"], add_config=conf["producer"]))
'''


@dataclass
class Result:
    """One contender's run: its steady rate and what it cost."""

    rate: float  # steady_rate of the outputs seen written
    startup_s: float  # process start -> first output seen
    cpu: float  # CPU seconds of the processes under test (all threads, children too) over the timed window
    broker_cpu: float  # likewise for the broker
    note: str = ""


def bytewax_version(python: str) -> tuple[str, bool]:
    """(bytewax's version, whether it has msgspec) under ``python``; exits if it cannot import
    bytewax's Kafka connectors."""
    code = (
        "import importlib.metadata as m, importlib.util as u, bytewax.connectors.kafka; "
        "print(m.version('bytewax'), bool(u.find_spec('msgspec')), sep=',')"
    )
    try:
        r = subprocess.run([python, "-c", code], capture_output=True, text=True, check=False, timeout=60)
    except OSError as e:
        raise SystemExit(f"--bytewax-python {python}: {e}") from None
    if r.returncode != 0:
        why = (r.stderr.strip().splitlines() or [f"exit {r.returncode}"])[-1]
        raise SystemExit(f"--bytewax-python {python} cannot run the Bytewax job ({why}); see this bench's docstring")
    version, msgspec = r.stdout.strip().split(",")
    return version, msgspec == "True"


def free_ports(k: int) -> list[int]:
    """``k`` TCP ports on 127.0.0.1 free a moment ago, for Bytewax's processes to talk over."""
    socks = [socket.socket() for _ in range(k)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def run_bytewax(
    python: str, codec: str, bs: str, out_topic: str, n: int, workdir: Path, log_dir: Path, broker_pid: int | None
) -> Result:
    """Run the Bytewax job (its JSON ``codec``: json or msgspec) in PROCESSES processes until ``n``
    outputs are on ``out_topic``, measured as run_samzamp measures a container; then stop them."""
    (workdir / "peers_bytewax_flow.py").write_text(FLOW_SOURCE)
    env = dict(os.environ)
    env["PYTHONPATH"] = str(workdir)
    env["BENCH_PEERS_BYTEWAX"] = json.dumps(
        {
            "bootstrap": bs,
            "input": noop.INPUT_TOPIC,
            "output": out_topic,
            "consumer": noop.CONSUMER_CONF,
            "producer": noop.PRODUCER_CONF,
            "codec": codec,
        }
    )
    addresses = ";".join(f"127.0.0.1:{p}" for p in free_ports(PROCESSES))
    watch = noop.OutputWatch(bs, out_topic)
    procs: list[subprocess.Popen[bytes]] = []
    logs = [open(log_dir / f"bytewax-{out_topic}-{i}.log", "wb") for i in range(PROCESSES)]  # noqa: SIM115
    samples: list[tuple[float, int]] = []
    count = 0
    t_first: float | None = None
    t_last: float | None = None

    def cpu() -> float:
        return sum(noop.tree_cpu_seconds(p.pid) for p in procs)

    try:
        t0 = time.perf_counter()
        for i, log in enumerate(logs):
            cmd = [python, "-m", "bytewax.run", "peers_bytewax_flow:flow", "-i", str(i), "-a", addresses]
            procs.append(
                subprocess.Popen(
                    cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=workdir
                )
            )
        deadline = time.monotonic() + 600
        # As run_samzamp: until 90% is written, or the count stops moving for a second.
        while count < 0.9 * n and (t_last is None or time.perf_counter() - t_last < 1.0):
            for i, p in enumerate(procs):
                if p.poll() is not None:
                    raise RuntimeError(f"process {i} exited with {p.returncode} after {count}/{n} outputs")
            if time.monotonic() > deadline:
                raise RuntimeError(f"only {count}/{n} outputs within 600 s")
            seen = watch.poll()
            now = time.perf_counter()
            if seen <= count:
                continue
            count = seen
            if t_first is None:
                t_first = now
                cpu0, bcpu0 = cpu(), noop.cpu_seconds(broker_pid)
            t_last = now
            samples.append((now, seen))
        cpu1, bcpu1 = cpu(), noop.cpu_seconds(broker_pid)
        assert t_first is not None  # the loop ran until outputs came
        assert t_last is not None
        written = noop.count_topic(bs, out_topic, n, timeout_s=max(60.0, deadline - time.monotonic()))
        if written != n:
            raise RuntimeError(f"{written}/{n} outputs")
    except BaseException as e:
        for log in logs:
            log.flush()
            tail = Path(log.name).read_text(errors="replace").splitlines()[-30:]
            print("\n".join([f"--- {log.name} (last lines) ---", *tail, "---"]), file=sys.stderr)
        if isinstance(e, RuntimeError):
            raise SystemExit(f"{BYTEWAX[codec]}: {e}") from None
        raise
    finally:
        stop(procs)
        watch.close()
        for log in logs:
            log.close()
    wall = t_last - t_first
    return Result(noop.steady_rate(samples), t_first - t0, (cpu1 - cpu0) / wall, (bcpu1 - bcpu0) / wall)


def stop(procs: list[subprocess.Popen[bytes]]) -> None:
    """SIGINT (Bytewax's Ctrl-C) to each, then SIGKILL to any still running 10 s later."""
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGINT)
    deadline = time.monotonic() + 10
    for p in procs:
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def run_samzamp(
    bs: str, out_topic: str, n: int, rep: int, workdir: Path, broker_pid: int | None, config: str | None
) -> Result:
    """One container at pool 2 (``config``: a job TOML, or None for bench/noop.py's no-op job)."""
    r = noop.run_samzamp(
        bs, out_topic, n, rep, workdir, broker_pid, config, overrides=(f"job.container.thread.pool.size={POOL}",)
    )
    extra = f"{r.outputs - n} extra outputs; " if r.outputs != n else ""
    note = f"{extra}SIGTERM -> exit 0 in {r.shutdown_s:.2f} s"
    return Result(r.rate, r.startup_s, r.cpu, r.broker_cpu, note)


def ratio_line(what: str, num: list[Result], den: list[Result], target: float) -> str:
    """The ratio of the medians (as the peers' table divides its cells), the target beside it, and
    the ratio round by round with its median (each round's contenders ran back to back, so a round's
    ratio shares more of the machine's phases than the medians do)."""
    med = statistics.median(r.rate for r in num) / statistics.median(r.rate for r in den)
    by_round = [a.rate / b.rate for a, b in zip(num, den, strict=True)]
    verdict = "met" if med >= target else "NOT met"
    rounds = ", ".join(f"{x:.2f}" for x in by_round)
    return (
        f"{what}: {med:.2f} (target >= {target:g}: {verdict}; "
        f"by round {rounds}, median {statistics.median(by_round):.2f})"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=200_000, help="input messages (default 200000)")
    ap.add_argument("--repeat", type=int, default=3, help="interleaved rounds (default 3); medians reported")
    ap.add_argument("--keys", type=int, default=10_000, help="the stateful job's distinct keys (default 10000)")
    ap.add_argument(
        "--bytewax-python",
        metavar="PATH",
        help="an interpreter with bytewax==0.21.1 and confluent-kafka (without it, Bytewax is skipped)",
    )
    ap.add_argument(
        "--bytewax-codec",
        choices=("json", "msgspec", "both"),
        default="json",
        help="the Bytewax job's JSON codec: the standard library's (default), msgspec's, or both side by side",
    )
    ap.add_argument(
        "--only",
        metavar="NAMES",
        help="run only these contenders, comma-separated, of noop, stateful, bytewax (a ratio needs both of its)",
    )
    args = ap.parse_args(argv)
    n, reps = args.messages, args.repeat
    if n < 2 or reps < 1 or args.keys < 1:
        ap.error("--messages must be >= 2, --repeat and --keys >= 1")
    only = set(args.only.split(",")) if args.only else {"noop", "stateful", "bytewax"}
    if not only <= {"noop", "stateful", "bytewax"}:
        ap.error(f"--only: {args.only}: names are noop, stateful, bytewax")
    noop.set_fetch_queue_backoff(10)
    noop.print_checkouts([noop.THIS])
    contenders = [c for c, name in ((NOOP, "noop"), (STATEFUL, "stateful")) if name in only]
    codecs = ["json", "msgspec"] if args.bytewax_codec == "both" else [args.bytewax_codec]
    if "bytewax" in only and args.bytewax_python:
        version, has_msgspec = bytewax_version(args.bytewax_python)
        if "msgspec" in codecs and not has_msgspec:
            ap.error(f"--bytewax-codec {args.bytewax_codec}: {args.bytewax_python} has no msgspec")
        contenders.extend(BYTEWAX[c] for c in codecs)
        note = "" if version == "0.21.1" else " (not the 0.21.1 of the peers' table)"
        print(f"bytewax {version}{note} under {args.bytewax_python}; its job's JSON codec: {' and '.join(codecs)}")
    elif "bytewax" in only:
        print("bytewax: skipped (no --bytewax-python; see this bench's docstring for how to make one)")

    results: dict[str, list[Result]] = {c: [] for c in contenders}
    broker = EmbeddedBroker(die_with_parent=True).start()
    try:
        bs = broker.bootstrap_servers
        broker_pid = broker.process.pid if broker.process is not None else None

        def out(c: str, r: int) -> str:
            return stateful.out_topic("checksums", POOL, r) if c == STATEFUL else f"bench-peers-{SLUGS[c]}-out-{r}"

        noop.create_topics(bs, [noop.INPUT_TOPIC, *(out(c, r) for c in contenders for r in range(reps))])
        t = time.perf_counter()
        avg = noop.produce_input(bs, n)
        print(
            f"broker {bs} (tansu); input: {n} messages, {noop.PARTITIONS} partitions, {avg:.0f} B values, "
            f"keys str(i % 10000), written in {time.perf_counter() - t:.1f} s; stateful keys {args.keys}; "
            f"{reps} rounds; cpus: {os.cpu_count()}"
        )
        with tempfile.TemporaryDirectory(prefix="bench-peers-") as tmp:
            workdir = Path(tmp)
            log_dir = Path(os.environ.get("BENCH_LOG_DIR") or workdir)

            def run(c: str, r: int) -> Result:
                if c == NOOP:
                    return run_samzamp(bs, out(c, r), n, r, workdir, broker_pid, None)
                if c == STATEFUL:
                    job = stateful.job_toml("checksums", POOL, r, args.keys, workdir / "state", COMMIT_MS)
                    return run_samzamp(bs, out(c, r), n, r, workdir, broker_pid, job)
                codec = next(k for k, v in BYTEWAX.items() if v == c)
                return run_bytewax(args.bytewax_python, codec, bs, out(c, r), n, workdir, log_dir, broker_pid)

            width = max(map(len, contenders))
            for r in range(reps):
                k = r % len(contenders)  # each round starts with the next contender
                for c in contenders[k:] + contenders[:k]:
                    res = run(c, r)
                    results[c].append(res)
                    print(
                        f"round {r + 1}/{reps}  {c:<{width}} {res.rate:>9,.0f} msg/s  (cpu: under test "
                        f"{res.cpu:.0%}, broker {res.broker_cpu:.0%}; start -> first output {res.startup_s:.2f} s"
                        + (f"; {res.note})" if res.note else ")")
                    )
    finally:
        broker.stop()

    print()
    print(f"median of {reps} rounds:")
    for c in contenders:
        rs = results[c]
        print(
            f"  {c:<{width}} {statistics.median(x.rate for x in rs):>9,.0f} msg/s  "
            f"start -> first output {statistics.median(x.startup_s for x in rs):.2f} s"
        )
    print()
    for codec in codecs:
        vs_bytewax = f"noop pool {POOL} / {BYTEWAX[codec]}"
        if NOOP in results and BYTEWAX[codec] in results:
            print(ratio_line(vs_bytewax, results[NOOP], results[BYTEWAX[codec]], TARGET_VS_BYTEWAX))
        elif NOOP in results and "bytewax" in only:
            print(f"{vs_bytewax}: skipped (no --bytewax-python)")
    if NOOP in results and STATEFUL in results:
        print(ratio_line(f"stateful pool {POOL} / noop pool {POOL}", results[STATEFUL], results[NOOP], TARGET_STATEFUL))
    return 0


if __name__ == "__main__":
    sys.exit(main())
