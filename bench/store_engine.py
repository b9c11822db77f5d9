"""The store engine alone (no broker, no container): what bench/scale_state.py's three store figures
cost in LmdbEngine itself, in seconds instead of minutes, for iterating on samzamp/storage/.

- **restore**: the records of a compacted changelog of N distinct keys (``u<k>``, scattered as
  scale_state writes them: ``k = i * 2654435761 mod N``) applied the way TaskStorage restores them
  (``start_restore``, transactions of ``RESTORE_BATCH`` records, ``finish_restore``), and, with
  ``--old``, the way it did before (10,000-record transactions, each synced), at 1M and at each
  ``--sizes``, alternating; records/s and each size against 1M per record.
- **verify**: at the largest size, ``LmdbEngine.verify`` (the page walk) against the scan through an
  LMDB cursor it replaces.
- **commit**: ``--commits`` commits of ``--writes`` random keys each (a store's write buffer
  applied, synced, its OFFSET file written) on a 10,000-key store and on the largest store, taking
  turns; median ms and big / small.

Stores go to a temporary directory (``--dir``), removed at the end. Hold the bench lock while it runs.

    .venv/bin/python bench/store_engine.py [--sizes 10000000] [--old] [--commits 30] [--writes 2000]
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from samzamp.storage.checksum import unseal
from samzamp.storage.lmdb import LmdbEngine
from samzamp.storage.manager import RESTORE_BATCH
from samzamp.storage.offset_file import write_offset_file

SCATTER = 2_654_435_761
VALUE = b'{"count":1,"ts":1700000000000}'
OLD_BATCH = 10_000


def restore(path: Path, n: int, old: bool) -> float:
    """Apply n scattered records as a restore does; records/s."""
    shutil.rmtree(path, ignore_errors=True)
    engine = LmdbEngine(path)
    started = time.perf_counter()
    batch: list[tuple[bytes, bytes | None]] = []
    size = OLD_BATCH if old else RESTORE_BATCH
    if not old:
        engine.start_restore()
    for i in range(n):
        batch.append((f"u{i * SCATTER % n}".encode(), VALUE))
        if len(batch) >= size:
            engine.apply(batch, None)
            batch.clear()
    engine.apply(batch, n)
    engine.finish_restore()
    engine.sync()
    seconds = time.perf_counter() - started
    engine.close()
    return n / seconds


def cursor_scan(engine: LmdbEngine) -> None:
    """What verify did before the page walk: every value through an LMDB cursor and unseal."""
    with engine._env.begin(db=engine._data, buffers=True) as txn:
        for key, value in txn.cursor().iternext(keys=True, values=True):
            if unseal(key, value) is None:
                return


def commits(small: LmdbEngine, big: LmdbEngine, keys: int, rounds: int, writes: int) -> dict[str, list[float]]:
    rng = random.Random(3)
    out: dict[str, list[float]] = {"small": [], "big": []}
    for r in range(rounds + 3):  # the first three warm the page cache
        for name, engine, n in (("small", small, 10_000), ("big", big, keys)):
            batch: list[tuple[bytes, bytes | None]] = [(f"u{rng.randrange(n)}".encode(), VALUE) for _ in range(writes)]
            started = time.perf_counter()
            engine.apply(batch, 100 + r)
            engine.sync()
            write_offset_file(engine.path, "kafka.changelog.0", 100 + r)
            if r >= 3:
                out[name].append(time.perf_counter() - started)
            time.sleep(0.05)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="10000000", help="store sizes besides 1M, comma-separated")
    ap.add_argument("--old", action="store_true", help="also restore the way it was before (10,000-record syncs)")
    ap.add_argument("--commits", type=int, default=30)
    ap.add_argument("--writes", type=int, default=2000, help="random writes per commit")
    ap.add_argument("--dir", default=None, help="where the stores go (default: a temporary directory)")
    args = ap.parse_args()
    sizes = [1_000_000, *(int(s) for s in args.sizes.split(",") if s)]
    root = Path(tempfile.mkdtemp(prefix="store-engine-", dir=args.dir))
    try:
        ways = [False, True] if args.old else [False]
        rates: dict[tuple[bool, int], float] = {}
        for old in ways:
            for n in sizes:
                rates[old, n] = restore(root / f"r{n}", n, old)
                label = "old (10k, synced)" if old else f"restore ({RESTORE_BATCH:,}, one sync)"
                print(f"{label:>24} {n:>11,}: {rates[old, n]:>9,.0f} records/s", flush=True)
        for old in ways:
            for n in sizes[1:]:
                print(f"{'old' if old else 'new'}: {n:,} / 1M per record {rates[old, n] / rates[old, 1_000_000]:.2f}")
        largest = sizes[-1]
        big = LmdbEngine(root / f"r{largest}")
        started = time.perf_counter()
        problem = big.verify()
        walked = time.perf_counter() - started
        started = time.perf_counter()
        cursor_scan(big)
        scanned = time.perf_counter() - started
        print(f"verify {largest:,} keys: page walk {walked:.2f} s, LMDB cursor scan {scanned:.2f} s ({problem})")
        small = LmdbEngine(root / "small")
        small.apply([(f"u{i}".encode(), VALUE) for i in range(10_000)], 1)
        times = commits(small, big, largest, args.commits, args.writes)
        mid = {k: statistics.median(v) * 1e3 for k, v in times.items()}
        print(
            f"commit of {args.writes} random writes: 10k keys {mid['small']:.1f} ms, {largest:,} keys "
            f"{mid['big']:.1f} ms, big / small {mid['big'] / mid['small']:.2f}"
        )
        small.close()
        big.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
