"""Process-to-process record throughput: samzamp's shared-memory ring vs multiprocessing.Queue, one run.

Each contest has one producer process and one consumer process (children of this one), moving 100-byte
``bytes`` records. Both children start, report ready, and wait; this process then says go and times
from go until the consumer reports it has received every record. The consumer builds one ``bytes``
object per record in every contest (the ring's pop_many creates them; Queue.get unpickles them): that
is the real cost of receiving.

ring     SendEnd.send_many / ReceiveEnd.receive_many in batches of ``--batch`` (256) records, a
         ``--capacity`` (1 MiB) ring; blocking calls, so both sides sleep when they must.
queue    multiprocessing.Queue, put/get of one record at a time (the per-record baseline: the ratio).
queue-batched  multiprocessing.Queue carrying lists of ``--batch`` records (a batched baseline, for
         reference: it amortises the pickling and the pipe, as the ring's batches do).

Prints records/s for each (median of ``--repeat`` rounds, contests alternating) and
``ring/queue`` and ``ring/queue-batched`` ratios. Targets: ring >= 1M records/s (goal 2M) and >= 10x
queue. The per-record queue moves ``--records // 10`` records by default (it is ~10x slower and would
dominate the run time); rates are per second either way. Exits 0 whatever the figures.

    .venv/bin/python bench/ipc.py [--records N] [--batch B] [--capacity BYTES] [--repeat R]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import subprocess
import sys
import time
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Barrier, Event
from pathlib import Path

from samzamp.ipc import EndOfQueue, attach_ring, create_ring

RECORD_SIZE = 100


def payloads(batch: int) -> list[bytes]:
    """``batch`` distinct 100-byte records."""
    return [(b"%08d" % i).ljust(RECORD_SIZE, b"x") for i in range(batch)]


# ---- ring children: run as `python bench/ipc.py --child producer|consumer --spec ...` ----


def ring_producer(spec: str, records: int, batch: int) -> None:
    ring = attach_ring(spec)
    tx = ring.sender()
    block = payloads(batch)
    full, rest = divmod(records, batch)
    print("ready", flush=True)
    sys.stdin.readline()
    for _ in range(full):
        tx.send_many(block)
    if rest:
        tx.send_many(block[:rest])
    tx.close()
    ring.close()


def ring_consumer(spec: str, batch: int) -> None:
    ring = attach_ring(spec)
    rx = ring.receiver()
    print("ready", flush=True)
    sys.stdin.readline()
    count = 0
    while True:
        try:
            got = rx.receive_many(max_count=batch)
        except EndOfQueue:
            break
        count += len(got)
        if len(got[-1]) != RECORD_SIZE:
            raise SystemExit(f"bad record of {len(got[-1])} bytes")
    print(f"done {count} {rx.statistics().times_blocked}", flush=True)
    ring.close()


def run_ring(records: int, batch: int, capacity: int) -> tuple[float, str]:
    ring = create_ring(capacity)
    spec = ring.spec().encode()
    me = str(Path(__file__).resolve())
    common = ["--spec", spec, "--records", str(records), "--batch", str(batch)]
    kids = [
        subprocess.Popen(
            [sys.executable, me, "--child", role, *common],
            pass_fds=ring.fds(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for role in ("consumer", "producer")
    ]
    ring.close()  # the children hold their own mappings and fds
    for kid in kids:
        assert kid.stdout is not None
        assert kid.stdout.readline().strip() == "ready"
    start = time.perf_counter()
    for kid in kids:
        assert kid.stdin is not None
        kid.stdin.write("go\n")
        kid.stdin.flush()
    consumer = kids[0]
    assert consumer.stdout is not None
    line = consumer.stdout.readline().split()
    elapsed = time.perf_counter() - start
    for kid in kids:
        if kid.wait(timeout=60) != 0:
            raise SystemExit(f"ring child exited {kid.returncode}")
    if line[:2] != ["done", str(records)]:
        raise SystemExit(f"ring consumer reported {line}")
    return records / elapsed, f"consumer slept {line[2]} times"


# ---- multiprocessing.Queue children (spawn) ----


def queue_producer(q: Queue[object], go: Barrier, records: int, batch: int, batched: bool) -> None:
    block = payloads(batch)
    go.wait()
    if batched:
        full, rest = divmod(records, batch)
        for _ in range(full):
            q.put(block)
        if rest:
            q.put(block[:rest])
    else:
        for i in range(records):
            q.put(block[i % batch])
    q.put(None)


def queue_consumer(q: Queue[object], go: Barrier, done: Event, batched: bool) -> None:
    go.wait()
    count = 0
    while True:
        item = q.get()
        if item is None:
            break
        count += len(item) if isinstance(item, list) else 1
    done.set()


def run_queue(records: int, batch: int, batched: bool) -> float:
    ctx = mp.get_context("spawn")
    q: Queue[object] = ctx.Queue()
    go, done = ctx.Barrier(3), ctx.Event()  # go: both children and this process are there
    procs = [
        ctx.Process(target=queue_consumer, args=(q, go, done, batched)),
        ctx.Process(target=queue_producer, args=(q, go, records, batch, batched)),
    ]
    for p in procs:
        p.start()
    go.wait()
    start = time.perf_counter()
    done.wait()
    elapsed = time.perf_counter() - start
    for p in procs:
        p.join(60)
    return records / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=10_000_000)
    parser.add_argument("--queue-records", type=int, default=0, help="per-record queue count (records // 10)")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--capacity", type=int, default=1 << 20)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--ring-only", action="store_true", help="skip the multiprocessing.Queue baselines")
    parser.add_argument("--child", choices=["producer", "consumer"])
    parser.add_argument("--spec")
    args = parser.parse_args()
    if args.child == "producer":
        ring_producer(args.spec, args.records, args.batch)
        return
    if args.child == "consumer":
        ring_consumer(args.spec, args.batch)
        return

    queue_records = args.queue_records or max(1, args.records // 10)
    ring_rates, queue_rates, batched_rates = [], [], []
    notes = ""
    for _ in range(args.repeat):
        rate, notes = run_ring(args.records, args.batch, args.capacity)
        ring_rates.append(rate)
        if args.ring_only:
            continue
        queue_rates.append(run_queue(queue_records, args.batch, batched=False))
        batched_rates.append(run_queue(args.records, args.batch, batched=True))
    ring = statistics.median(ring_rates)
    if args.ring_only:
        rounds = ", ".join(f"{r:,.0f}" for r in ring_rates)
        print(f"ring           {ring:>12,.0f} records/s  (rounds: {rounds}; last round: {notes})")
        return
    queue = statistics.median(queue_rates)
    batched = statistics.median(batched_rates)
    print(f"100-byte records, batch {args.batch}, ring capacity {args.capacity} bytes, median of {args.repeat}")
    print(f"ring           {ring:>12,.0f} records/s  ({args.records:,} records; last round: {notes})")
    print(f"queue          {queue:>12,.0f} records/s  ({queue_records:,} records, put/get one at a time)")
    print(f"queue-batched  {batched:>12,.0f} records/s  ({args.records:,} records in lists of {args.batch})")
    print(f"ring/queue ratio          {ring / queue:.1f}x  (target >= 10x)")
    print(f"ring/queue-batched ratio  {ring / batched:.1f}x")


if __name__ == "__main__":
    main()
