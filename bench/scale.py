"""Scale, in one run: the four parts one after another, each printing its own table.

- bench/scale_loop.py: the loop process's CPU per message at pool 2 (no-op and CPU-bound task, on 4
  partitions and on 1 partition with factor 2), and the ceiling and speed-up it implies;
- bench/scale_tasks.py: processors of 4, 1,024 and 4,096 tasks (start to first output, RSS, throughput
  against 4 tasks);
- bench/scale_state.py: a store of 10 million keys (restore rate against 1 million and a plain consumer,
  host-affinity restart, commit time against 10,000 keys);
- bench/scale_standalone.py: 4,096 tasks over 4 processors (time to one model, join and leave pauses).

Each part starts its own embedded broker (and ZooKeeper), so they never share a machine's cores with
one another. ``--quick`` passes ``--quick`` to each (a smoke check of a few minutes in all); the full
run takes about 40 minutes on a 2-core machine. Run one part alone for its own options (``--help``).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
PARTS = ("scale_loop.py", "scale_tasks.py", "scale_state.py", "scale_standalone.py")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="pass --quick to every part")
    ap.add_argument("--only", choices=[p.removesuffix(".py") for p in PARTS], action="append", help="run these parts")
    args = ap.parse_args()
    failed = []
    for part in PARTS:
        if args.only and part.removesuffix(".py") not in args.only:
            continue
        command = [sys.executable, str(HERE / part), *(["--quick"] if args.quick else [])]
        print(f"\n=== {' '.join(command)}", flush=True)
        if subprocess.run(command, check=False).returncode != 0:
            failed.append(part)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
