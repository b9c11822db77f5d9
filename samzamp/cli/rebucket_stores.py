"""``samzamp rebucket-stores`` (alias ``samzamp-rebucket-stores``): move a stopped job's changelogged
state to another job.elasticity.factor, with Spark.

Usage::

    samzamp rebucket-stores job.toml --from-factor F1 [--build-local-stores] [--master local[*]] [--set key=value]...

``job.toml`` carries the new factor (``job.elasticity.factor`` = F2); F1 is the factor the job's
state was written with (its latest checkpoints). For every store with a changelog, the state of
every task of F1 (its changelog partition up to its last checkpoint's cut) is split or merged into
the tasks of F2 by the key bucket of each store key (``key_hash(key) % F2``, the hash messages are
bucketed by), written to the new tasks' changelog partitions, and each new task gets a checkpoint:
input offsets by Samza's split and merge rules, state markers at its changelog's new end. Then the
job starts at F2 with every key's state in the task its messages go to. See
``samzamp.offline.rebucket`` for the steps.

Requirements: the job is stopped (a container that its coordinator stream says is running on this
host, or on another host, is refused); each store is keyed by the serialized key bytes of the input
messages it is about (a key in the wrong bucket is refused before anything is written); the
changelog topics have a partition per new task (grown when the broker allows it, else refused).

``--build-local-stores`` also restores the new tasks' store directories at their new markers, as
``samzamp restore-stores`` does, so the restart replays nothing (the directories must be where the
container runs; with a non-local master, on a shared file system).

Prints a line per old task read, per new task written, a summary per store and one in all::

    read store=counts task='Partition 0_0_2' partition=0 cut=41 records_read=42 keys=17
    wrote store=counts task='Partition 0_0_4' partition=4 keys=9 tombstones=0 marker=8
    rebucketed store=counts changelog=kafka.counts-log old_tasks=2 new_tasks=4 records_read=80 keys=33 tombstones=0
    rebucketed from_factor=2 to_factor=4 stores=1 history_entries=6

The exit codes are in ``EXIT_CODES`` (``samzamp rebucket-stores --help`` shows them).
"""

from __future__ import annotations

import argparse
import sys

from samzamp.cli.common import EXIT_CONFIG, EXIT_FAILED, add_job_config, add_log_level, new_parser, setup
from samzamp.cli.offline_common import EXIT_LOCKED, EXIT_OK, exit_code
from samzamp.config import load_config, parse_overrides
from samzamp.extras import OFFLINE, require

__all__ = ["EXIT_CODES", "PROG", "build_parser", "main"]

# The alias samzamp-rebucket-stores runs as this too, so that its every line is the subcommand's.
PROG = "samzamp rebucket-stores"

EXIT_CODES = {
    EXIT_OK: "done",
    EXIT_FAILED: "failed (Kafka unreachable, a changelog ends before a cut, a write failed, Spark failed)",
    EXIT_CONFIG: "refused or bad config or arguments, the line says which: the same factor twice, checkpoints "
    "of another factor than --from-factor, factors neither of which divides the other, a store not keyed by "
    "its messages' keys, a changelog with too few partitions the broker would not grow, or PySpark missing "
    "(pip install 'samzamp[offline]')",
    EXIT_LOCKED: "a container of the job is running, or a target store directory is held by a live process; "
    "nothing was written",
}


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    """The arguments of ``samzamp rebucket-stores``: the job (with the new factor), the old factor, Spark's master."""
    p = new_parser(
        prog,
        "Re-bucket a stopped job's changelogged stores to job.elasticity.factor (Spark).",
        examples=[
            f"{prog} job.toml --from-factor 2  # job.toml sets job.elasticity.factor = 4",
            f"{prog} job.toml --from-factor 4 --set job.elasticity.factor=2 --build-local-stores",
        ],
        exit_codes=EXIT_CODES,
    )
    add_job_config(p)
    p.add_argument(
        "--from-factor", type=int, required=True, metavar="F1", help="the factor the job's state was written with"
    )
    p.add_argument("--build-local-stores", action="store_true", help="also restore the new tasks' store directories")
    p.add_argument("--master", default="local[*]", help="Spark master (default local[*])")
    add_log_level(p, "WARNING")
    return p


def main(argv: list[str] | None = None, prog: str = PROG) -> int:
    """``samzamp rebucket-stores`` with ``argv`` (default: ``sys.argv[1:]``); returns its exit code. Every line
    it writes starts with ``prog``, the name it runs as (its alias passes none: the same name)."""
    args = setup(build_parser(prog), argv)
    from samzamp.offline.rebucket import rebucket_stores
    from samzamp.offline.rebucket_job import JobRunningError, plan_rebucket, prepare
    from samzamp.offline.spark_session import offline_spark

    try:
        require(OFFLINE)
        plan = plan_rebucket(load_config(args.config, parse_overrides(args.overrides)), args.from_factor)
        grown = prepare(plan, args.build_local_stores)  # refuse before Spark starts
    except JobRunningError as e:
        print(f"{prog}: refused: {e}", file=sys.stderr, flush=True)
        return EXIT_LOCKED
    except Exception as e:
        return exit_code(prog, e)

    try:
        with offline_spark(args.master, f"{prog} {plan.settings.name}") as spark:
            result = rebucket_stores(spark, plan, args.build_local_stores, grown)
    except Exception as e:
        return exit_code(prog, e)
    for line in result.lines():
        print(line)
    sys.stdout.flush()
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
