"""Offline jobs on a store's changelog, run with PySpark: compaction and bulk restore.

The only package that imports pyspark (lazily, inside the functions that start or use Spark, so
that the command-line tools can check their arguments without starting a JVM).

    job.py         the store's changelog, the job's tasks and their cuts; the Spark session
    changelog.py   reading / writing one changelog partition with confluent-kafka, inside a Spark task
    compaction.py  latest value per live key -> Parquet snapshot (and optionally a compacted topic)
    restore.py     every task's store directory rebuilt at its checkpointed cut

Command-line tools: ``samzamp.cli.compact_changelog`` and ``samzamp.cli.restore_stores``.
"""
