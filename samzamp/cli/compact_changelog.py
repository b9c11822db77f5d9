"""``samzamp compact-changelog`` (alias ``samzamp-compact-changelog``): compact a store's changelog
into a Parquet snapshot, with Spark.

Usage::

    samzamp compact-changelog job.toml --store NAME --output DIR [--to-topic TOPIC] [--overwrite]
                              [--master local[*]] [--set key=value]...

Reads every partition of ``stores.NAME.changelog`` (one Spark task per partition, oldest record to
the partition's end), keeps the latest value of each key and drops deleted keys, and writes a
Parquet snapshot to DIR: columns ``partition`` (int), ``key`` (binary), ``value`` (binary),
``offset`` (bigint), plus ``_samzamp_snapshot.json`` (the topic and each partition's end offset),
which ``samzamp restore-stores --snapshot DIR`` needs. DIR must not exist or be empty, unless
``--overwrite``. ``--to-topic TOPIC`` also writes the live records to a new topic (created with
cleanup.policy=compact, same partition count, each record in its source partition).

The job's Kafka systems need ``systems.<s>.bootstrap.servers`` (the embedded broker is memory-only,
so an offline job never starts one). ``--master`` is any Spark master (default ``local[*]``); a
cluster's executors need samzamp installed and must reach the brokers.

Prints one line on stdout, ``key=value`` words::

    compacted store=counts changelog=kafka.counts-changelog partitions=4 records_read=120 keys_kept=30
    tombstones_dropped=5 superseded=85 [to_topic=T records_written=30]

The exit codes are in ``EXIT_CODES`` (``samzamp compact-changelog --help`` shows them).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from samzamp.cli.common import EXIT_CONFIG, EXIT_FAILED, new_parser, setup
from samzamp.cli.offline_common import EXIT_OK, add_job_arguments, exit_code
from samzamp.config import load_config, parse_overrides
from samzamp.extras import OFFLINE, require

__all__ = ["EXIT_CODES", "PROG", "build_parser", "main"]

# The alias samzamp-compact-changelog runs as this too, so that its every line is the subcommand's.
PROG = "samzamp compact-changelog"

EXIT_CODES = {
    EXIT_OK: "done; the counts line is printed",
    EXIT_FAILED: "failed (Kafka unreachable, a read or write failed, Spark failed)",
    EXIT_CONFIG: "bad config or arguments (the line names the key or option), or PySpark is missing "
    "(the line says: pip install 'samzamp[offline]')",
}


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    """The arguments of ``samzamp compact-changelog``: the job, the store, where to write, Spark's master."""
    p = new_parser(
        prog,
        "Compact a store's changelog into a Parquet snapshot (Spark).",
        examples=[
            f"{prog} job.toml --store counts --output snapshots/counts",
            f"{prog} job.toml --store counts --output snapshots/counts --overwrite --to-topic counts-compacted",
        ],
        exit_codes=EXIT_CODES,
    )
    add_job_arguments(p, "the store whose changelog to compact (stores.NAME.changelog)")
    p.add_argument("--output", required=True, type=Path, help="directory for the Parquet snapshot")
    p.add_argument("--to-topic", help="also write the live records to this new, compacted topic")
    p.add_argument("--overwrite", action="store_true", help="replace what --output holds")
    return p


def main(argv: list[str] | None = None, prog: str = PROG) -> int:
    """``samzamp compact-changelog`` with ``argv`` (default: ``sys.argv[1:]``); returns its exit code. Every line
    it writes starts with ``prog``, the name it runs as (its alias passes none: the same name)."""
    args = setup(build_parser(prog), argv)
    from samzamp.offline.compaction import check_output, check_to_topic, compact_changelog
    from samzamp.offline.job import OfflineError, resolve_store
    from samzamp.offline.spark_session import offline_spark

    try:
        require(OFFLINE)
        job = resolve_store(load_config(args.config, parse_overrides(args.overrides)), args.store)
        if job.changelog_partitions is None:
            raise OfflineError(
                f"changelog {job.source.system}.{job.source.topic} of store {job.store!r} does not exist"
            )
        check_output(args.output, args.overwrite)
        if args.to_topic is not None:
            check_to_topic(job, args.to_topic)
    except Exception as e:
        return exit_code(prog, e)

    try:
        with offline_spark(args.master, f"{prog} {job.store}") as spark:
            result = compact_changelog(spark, job, args.output, args.to_topic, args.overwrite)
    except Exception as e:
        return exit_code(prog, e)
    print(result.summary_line(), flush=True)
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
