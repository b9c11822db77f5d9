"""What the Prometheus endpoint costs: the no-op job at pool 2 with the endpoint on and scraped every
second, against the endpoint off, side by side in one run, taking turns.

One embedded broker (Tansu, memory only, 127.0.0.1) serves every run. The input topic (4 partitions,
``--messages`` of noop's ~100-byte JSON clicks) is written once; then, ``--repeat`` rounds, two
containers of bench/noop.py's job (bench/noop_task.py:NoopTask, one output per input) run at once at
``job.container.thread.pool.size`` ``--pool`` (default 2), each with its own job.id and output topic,
reading the input from its oldest offset: "endpoint" with ``metrics.prometheus.port = 0``, and "off"
without (the default: no port bound).

While the rounds go on, a thread of this process GETs the endpoint container's /metrics every
second (``--scrape-every``): it reads the body and parses nothing, as a Prometheus server on another
machine would cost this one nothing. While its container is stopped between turns a scrape waits
for it, and completes at once when it runs again: the container answers at least one scrape per
second of its own running time.

They take turns (bench/turns.py, as bench/stateful.py): both run, but only one at a time is let run,
for slices of 3 s (SIGSTOP and SIGCONT of its process group), cycles alternating their order, so both
see the same phases of the shared machine's speed. A slice's rate counts the outputs whose CreateTime
falls in its measured part; each container's rate is its outputs over its measured time, and the
ratio per round is endpoint / off. Every output must be written and each container exit 0 on
SIGTERM.

First, apart from the rounds, what one scrape costs: the endpoint container of the same job, idle
(reading only messages that arrive after its start), scraped ``--cost-scrapes`` times back to back;
its process's CPU over them, less its idle CPU, per scrape. On a shared machine this is the figure
the rounds' ratios cannot resolve: their spread is far wider than 2%.

Prints each round (rates, and CPU per message: the container's and workers' CPU share over its
rate; endpoint / off, slice by slice: its spread is the noise left; the scrapes answered and their
size), then the medians and the median of the rounds' ratios, of rates and of CPU per message. Target: >= 0.98
(at most 2% slower). Exits 0 whatever the ratio. With BENCH_LOG_DIR, the container logs are kept there.

    .venv/bin/python bench/prometheus.py [--messages N] [--repeat R] [--pool P] [--scrape-every S]
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
import urllib.request
from collections.abc import Callable
from pathlib import Path

import noop
from turns import SAMPLE_S, Contender, Runner, by_cycle, by_round, container_args, start_container, turns_round

from samzamp.systems.kafka import EmbeddedBroker

TARGET = 0.98
MODES = ("endpoint", "off")
ENDPOINT = re.compile(r"prometheus: (http://\S+/metrics)")


class Scraper:
    """GETs ``url`` every ``every_s`` on a thread of its own until ``stop``: how many answered, the
    bytes of the last, and what failed while the container (``alive()``) still ran."""

    def __init__(self, url: str, every_s: float, alive: Callable[[], bool]) -> None:
        self.url = url
        self.every_s = every_s
        self._alive = alive
        self.scrapes = 0
        self.last_bytes = 0
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                with urllib.request.urlopen(self.url, timeout=120) as r:
                    self.last_bytes = len(r.read())
                self.scrapes += 1
            except Exception as e:
                # At the end of the round the container stops: a scrape then is refused or reset.
                self._stop.wait(2)
                if self._alive():
                    self.errors.append(f"{type(e).__name__}: {e}")
            self._stop.wait(self.every_s)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def cpu_per_message_us(c: Contender) -> float:
    """CPU of the container and its workers per message in its measured slices (its share of the
    cores over its rate): less swayed than the rate by what else the shared machine runs."""
    return 1e6 * (c.cpu_s / c.running_s) / c.rate if c.running_s and c.rate else float("nan")


def job_toml(mode: str, pool: int, rep: int) -> str:
    config = noop.job_toml(out_topic(mode, rep), f"prom-{mode}-r{rep}")
    config = config.replace("[job]\n", f"[job]\ncontainer.thread.pool.size = {pool}\n", 1)
    if mode == "endpoint":
        config += "\n[metrics]\nprometheus.port = 0\n"
    return config


def out_topic(mode: str, rep: int) -> str:
    return f"bench-prom-{mode}-r{rep}"


def label(mode: str, pool: int) -> str:
    return f"pool {pool} {mode}"


def run_round(
    bs: str, broker_pid: int | None, pool: int, n: int, rep: int, args: argparse.Namespace, workdir: Path
) -> tuple[dict[str, Contender], Scraper]:
    """Both containers started (each alone, stopped at its first output, the order alternating by
    round), the endpoint's scraper started, then taking turns until one is near its end, then both
    finishing."""
    log_dir = Path(os.environ.get("BENCH_LOG_DIR") or workdir)
    modes = list(MODES) if rep % 2 == 0 else list(MODES)[::-1]
    runners = {m: Runner(label(m, pool), out_topic(m, rep), bs, log_dir) for m in modes}
    scrapers: list[Scraper] = []

    def launch() -> None:
        for mode in modes:
            start_container(runners[mode], job_toml(mode, pool, rep), bs, workdir)
        logged = ENDPOINT.search(runners["endpoint"].log_path.read_text(errors="replace"))
        if logged is None:
            raise SystemExit("the endpoint container logged no 'prometheus: URL' line")
        proc = runners["endpoint"].proc
        assert proc is not None
        scrapers.append(Scraper(logged.group(1), args.scrape_every, lambda: proc.poll() is None))

    try:
        order = turns_round([runners[m] for m in modes], launch, [], n, args, broker_pid, bs, workdir)
    finally:
        for s in scrapers:
            s.stop()
    return {c.label: c for c in order}, scrapers[0]


def scrape_cost(bs: str, pool: int, scrapes: int, workdir: Path) -> tuple[float, int]:
    """CPU seconds one scrape costs the container, measured apart from any throughput: the endpoint
    container of the rounds' job, reading only messages that arrive after its start (none), idle;
    its process's CPU over ``scrapes`` scrapes back to back, less what it spends idle in as long
    (measured just before). Also the bytes of a scrape."""
    topic = out_topic("cost", 0)
    toml_path = workdir / "job-cost.toml"
    toml_path.write_text(job_toml("endpoint", pool, 0).replace(out_topic("endpoint", 0), topic))
    log_path = workdir / "container-cost.log"
    sets = ["systems.kafka.default.stream.samza.offset.default=upcoming", "job.id=prom-cost"]
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            container_args(toml_path, bs, sets),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=noop.THIS.env(topic),
            cwd=workdir,
        )
    try:
        deadline = time.monotonic() + 120
        while "starting offsets" not in (text := log_path.read_text(errors="replace")):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"the scrape-cost container did not start:\n{text[-3000:]}")
            time.sleep(0.1)
        logged = ENDPOINT.search(text)
        assert logged is not None
        url = logged.group(1)
        time.sleep(3)  # settled: tasks started, workers idle
        size = 0
        with urllib.request.urlopen(url, timeout=30) as r:
            size = len(r.read())
        cpu0, t0 = noop.cpu_seconds(proc.pid), time.perf_counter()
        time.sleep(3)
        idle = (noop.cpu_seconds(proc.pid) - cpu0) / (time.perf_counter() - t0)
        cpu0, t0 = noop.cpu_seconds(proc.pid), time.perf_counter()
        for _ in range(scrapes):
            with urllib.request.urlopen(url, timeout=30) as r:
                r.read()
        spent = noop.cpu_seconds(proc.pid) - cpu0 - idle * (time.perf_counter() - t0)
        return spent / scrapes, size
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=1_000_000, help="input messages (default 1000000)")
    ap.add_argument("--repeat", type=int, default=3, help="rounds (default 3); medians reported")
    ap.add_argument("--pool", type=int, default=2, help="job.container.thread.pool.size (default 2)")
    ap.add_argument("--scrape-every", type=float, default=1.0, help="seconds between scrapes (default 1)")
    ap.add_argument("--cost-scrapes", type=int, default=300, help="scrapes timed for the cost of one (default 300)")
    ap.add_argument("--slice", type=float, default=3.0, help="seconds each runs in its turn (default 3)")
    ap.add_argument("--settle", type=float, default=0.5, help="seconds of a slice not measured (default 0.5)")
    args = ap.parse_args(argv)
    if not 0 <= args.settle < args.slice - 3 * SAMPLE_S:
        ap.error("--settle must leave at least 3 samples of each slice")
    n, reps, pool = args.messages, args.repeat, args.pool
    noop.set_fetch_queue_backoff(10)

    broker = EmbeddedBroker(die_with_parent=True).start()
    rounds: list[dict[str, Contender]] = []
    on, off = label("endpoint", pool), label("off", pool)
    try:
        bs = broker.bootstrap_servers
        broker_pid = broker.process.pid if broker.process is not None else None
        noop.create_topics(
            bs, [noop.INPUT_TOPIC, out_topic("cost", 0), *(out_topic(m, r) for r in range(reps) for m in MODES)]
        )
        t = time.perf_counter()
        avg = noop.produce_input(bs, n)
        print(
            f"broker {bs} (tansu); input: {n} messages, {noop.PARTITIONS} partitions, {avg:.0f} B values, "
            f"written in {time.perf_counter() - t:.1f} s; pool {pool}; {reps} rounds; a scrape every "
            f"{args.scrape_every:g} s; slices of {args.slice:g} s, the first {args.settle:g} s not measured; "
            f"cpus: {os.cpu_count()}"
        )
        with tempfile.TemporaryDirectory(prefix="samzamp-bench-prometheus-") as tmp:
            cost_s, size = scrape_cost(bs, pool, args.cost_scrapes, Path(tmp))
            print(
                f"one scrape ({size:,} bytes) costs the container {cost_s * 1e3:.2f} ms of CPU "
                f"(over {args.cost_scrapes} scrapes of an idle container, its idle CPU taken off)"
            )
            for rep in range(reps):
                res, scraper = run_round(bs, broker_pid, pool, n, rep, args, Path(tmp))
                rounds.append(res)
                for c in res.values():
                    print(
                        f"round {rep + 1}/{reps} {c.label:<16} {c.rate:>9,.0f} msg/s  "
                        f"{cpu_per_message_us(c):.2f} us cpu/msg  (cpu: container and workers "
                        f"{c.cpu_s / c.running_s:.0%}, broker {c.broker_cpu_s / c.running_s:.0%}; "
                        f"start -> first output {c.startup_s:.2f} s)"
                    )
                scraped = res[on].running_s
                print(
                    f"round {rep + 1}/{reps} scrapes answered: {scraper.scrapes} ({scraper.last_bytes:,} bytes each; "
                    f"the endpoint container ran {scraped:.0f} s in measured slices); failed: "
                    f"{len(scraper.errors)}{' ' + scraper.errors[0] if scraper.errors else ''}"
                )
                print(f"round {rep + 1}/{reps} endpoint / off {by_cycle(res, off, on)}")
                cpu_ratio = cpu_per_message_us(res[on]) / cpu_per_message_us(res[off])
                print(f"round {rep + 1}/{reps} cpu per message endpoint / off {cpu_ratio:.3f}")
    finally:
        broker.stop()

    print()
    print(f"median of {reps} rounds:")
    ratios = [res[on].rate / res[off].rate for res in rounds]
    cpu = [cpu_per_message_us(res[on]) / cpu_per_message_us(res[off]) for res in rounds]
    rate_on = statistics.median(res[on].rate for res in rounds)
    rate_off = statistics.median(res[off].rate for res in rounds)
    print(f"  endpoint {rate_on:>9,.0f} msg/s, off {rate_off:>9,.0f} msg/s; by round {by_round(ratios)}")
    print(f"  cpu per message endpoint / off by round {by_round(cpu)}: median {statistics.median(cpu):.3f}")
    used = statistics.median(res[on].cpu_s / res[on].running_s for res in rounds)
    share = cost_s / args.scrape_every / used
    print(
        f"  scrapes every {args.scrape_every:g} s cost {cost_s / args.scrape_every:.2%} of a core, "
        f"{share:.2%} of the {used:.2f} cores the endpoint container and its workers used running"
    )
    print(f"prometheus endpoint / off pool {pool}: {statistics.median(ratios):.3f} (target >= {TARGET})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
