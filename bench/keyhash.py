"""What splitting a fetched batch by key bucket costs the fetch thread: ns per message of
``split_by_key_bucket`` (native, samzamp._keyhash) against its pure-Python reference
(``split_by_key_bucket_reference``), in one run.

Batches of ``--batch`` (500) messages as the fetch thread holds them, (offset, key, value, timestamp),
with distinct 16-byte keys and 100-byte values; F = 2, 4 and 8. Each figure is the best of ``--repeat``
passes (the best: the least disturbed by the machine's other load). Native is timed twice: ``hot``
splits one batch over and over, in cache as a batch is right after the poll that built it; ``cold``
splits ``--rounds`` distinct batches, far more than the caches hold. Prints a table: ns/message for
each and reference/native (hot). Exits 0 whatever the figures.

    .venv/bin/python bench/keyhash.py [--batch N] [--rounds R] [--repeat K]
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable, Sequence

from samzamp.consume.key_bucket import split_by_key_bucket, split_by_key_bucket_reference
from samzamp.systems.base import RawMessage

KEY_BYTES = 16
VALUE_BYTES = 100
FACTORS = (2, 4, 8)

Split = Callable[[Sequence[RawMessage], int], list[list[RawMessage]]]


def batches(count: int, size: int) -> list[list[RawMessage]]:
    """``count`` batches of ``size`` messages with random 16-byte keys and 100-byte values, offsets in order."""
    value = b"v" * VALUE_BYTES
    out: list[list[RawMessage]] = []
    offset = 0
    for _ in range(count):
        batch: list[RawMessage] = []
        for _ in range(size):
            batch.append((offset, os.urandom(KEY_BYTES), value, 1_700_000_000_000 + offset))
            offset += 1
        out.append(batch)
    return out


def ns_per_message(split: Split, data: list[list[RawMessage]], factor: int, repeat: int) -> float:
    """Best of ``repeat`` passes over ``data``, in ns per message."""
    n = sum(len(b) for b in data)
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter_ns()
        for batch in data:
            split(batch, factor)
        best = min(best, (time.perf_counter_ns() - t0) / n)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--batch", type=int, default=500, help="messages per batch (500)")
    ap.add_argument("--rounds", type=int, default=200, help="batches per native pass (200); the reference gets 1/20")
    ap.add_argument("--repeat", type=int, default=7, help="passes; the best counts (7)")
    args = ap.parse_args()
    cold = batches(args.rounds, args.batch)
    hot = cold[:1] * args.rounds
    # The reference is ~60x slower: fewer batches keep the run short; the rate is per message either way.
    reference_data = cold[: max(1, args.rounds // 20)]
    print(f"split_by_key_bucket: batches of {args.batch} messages, {KEY_BYTES}-byte keys, {VALUE_BYTES}-byte values")
    print(
        f"{'F':>3}  {'native hot ns/msg':>18}  {'native cold ns/msg':>19}  {'reference ns/msg':>17}  {'ref/native':>10}"
    )
    for factor in FACTORS:
        native_hot = ns_per_message(split_by_key_bucket, hot, factor, args.repeat)
        native_cold = ns_per_message(split_by_key_bucket, cold, factor, args.repeat)
        reference = ns_per_message(split_by_key_bucket_reference, reference_data, factor, args.repeat)
        print(
            f"{factor:>3}  {native_hot:>18.1f}  {native_cold:>19.1f}  {reference:>17.1f}  {reference / native_hot:>9.0f}x"
        )


if __name__ == "__main__":
    main()
