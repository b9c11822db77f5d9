"""``samzamp restore-stores`` (alias ``samzamp-restore-stores``): rebuild every task's store
directory at its last checkpoint, with Spark.

Usage::

    samzamp restore-stores job.toml --store NAME [--snapshot DIR] [--master local[*]] [--set key=value]...

For every task of the job (as the container groups the job's inputs), in parallel (one Spark task
per job task), rebuilds ``<job.logged.store.base.dir or ./state>/NAME/<task>/`` from the store's
changelog: exactly the changelog records up to the offset C that the task's last checkpoint covers
(``state_markers[NAME]``; no checkpoint or marker: C = -1, an empty store). The LMDB data and the
OFFSET file both record C, so the container's next start replays nothing that was restored. An
existing directory is wiped first; each directory's lock is held while it is written.

``--snapshot DIR`` starts each task from a snapshot that ``samzamp compact-changelog`` wrote and
reads the changelog only after it. A snapshot that reaches past a task's cut is refused (exit 2):
it keeps only the newest value of each key, so it cannot give back the values at the cut.

The job's Kafka systems need ``systems.<s>.bootstrap.servers``. With ``--master`` other than local,
every executor must see the store base directory where the container will run (a shared file system).

Prints one line per task and a summary line, ``key=value`` words (values shell-quoted)::

    restored task='Partition 0' partition=0 cut=41 keys=17 snapshot_records=0 changelog_records=42 tombstones=3 dir=state/counts/Partition_0
    restored store=counts changelog=kafka.counts-changelog tasks=4 keys=60 snapshot_records=0 changelog_records=160 tombstones=9

The exit codes are in ``EXIT_CODES`` (``samzamp restore-stores --help`` shows them).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from samzamp.cli.common import EXIT_CONFIG, EXIT_FAILED, new_parser, setup
from samzamp.cli.offline_common import EXIT_LOCKED, EXIT_OK, add_job_arguments, exit_code
from samzamp.config import load_config, parse_overrides
from samzamp.extras import OFFLINE, require

__all__ = ["EXIT_CODES", "PROG", "build_parser", "main"]

# The alias samzamp-restore-stores runs as this too, so that its every line is the subcommand's.
PROG = "samzamp restore-stores"

EXIT_CODES = {
    EXIT_OK: "done; the counts are printed",
    EXIT_FAILED: "failed (Kafka unreachable, the changelog ends before a cut, a write failed, Spark failed)",
    EXIT_CONFIG: "bad config or arguments, or a snapshot that does not fit the cuts (the line says which), "
    "or PySpark is missing (the line says: pip install 'samzamp[offline]')",
    EXIT_LOCKED: "a target store directory is held by a live process (a running container?); nothing was "
    "written (if a process takes a directory while the restore runs, the other tasks' stores are restored)",
}


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    """The arguments of ``samzamp restore-stores``: the job, the store, a snapshot, Spark's master."""
    p = new_parser(
        prog,
        "Restore every task's store at its last checkpoint (Spark).",
        examples=[
            f"{prog} job.toml --store counts",
            f"{prog} job.toml --store counts --snapshot snapshots/counts",
        ],
        exit_codes=EXIT_CODES,
    )
    add_job_arguments(p, "the store to restore (it needs stores.NAME.changelog)")
    p.add_argument("--snapshot", type=Path, help="a snapshot from samzamp compact-changelog to start from")
    return p


def main(argv: list[str] | None = None, prog: str = PROG) -> int:
    """``samzamp restore-stores`` with ``argv`` (default: ``sys.argv[1:]``); returns its exit code. Every line
    it writes starts with ``prog``, the name it runs as (its alias passes none: the same name)."""
    args = setup(build_parser(prog), argv)
    from samzamp.offline.compaction import read_snapshot_meta
    from samzamp.offline.job import read_cuts, resolve_store
    from samzamp.offline.restore import check_unlocked, plan_restore, restore_stores
    from samzamp.offline.spark_session import offline_spark

    try:
        require(OFFLINE)
        job = resolve_store(load_config(args.config, parse_overrides(args.overrides)), args.store)
        cuts = read_cuts(job)
        meta = read_snapshot_meta(args.snapshot) if args.snapshot is not None else None
        check_unlocked(plan_restore(job, cuts, meta))  # refuse before Spark starts
    except Exception as e:
        return exit_code(prog, e)

    try:
        with offline_spark(args.master, f"{prog} {job.store}") as spark:
            result = restore_stores(spark, job, cuts, args.snapshot)
    except Exception as e:
        return exit_code(prog, e)
    for task in result.tasks:
        print(task.line())
    print(result.summary_line(), flush=True)
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
