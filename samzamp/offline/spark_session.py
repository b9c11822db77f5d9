"""The Spark session of an offline job, and how the job shows its progress while it runs.

A job of hours must not be silent until it ends:
- on a terminal, Spark's own console progress bar (``spark.ui.showConsoleProgress``);
- otherwise (a log file, a pipe, CI) a log line per finished stage, from a thread that follows
  Spark's status tracker (``StageLog``);
- on a cluster master the Spark UI stays on (``spark.ui.enabled``), where operators look first;
  a local master, run on one machine by the offline CLIs and tests, starts none: no port opened
  for a job that ends in minutes.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["StageLog", "offline_spark", "progress_log", "session_config", "spark_session"]

log = logging.getLogger(__name__)
# The stage lines: shown at the offline tools' default level (WARNING), as progress is what an
# operator of a long job waits for; --log-level error silences them.
progress_log = logging.getLogger("samzamp.offline.progress")

STAGE_POLL_S = 0.5


def _java_home() -> None:
    if os.environ.get("JAVA_HOME"):
        return
    java = shutil.which("java")
    if java is not None:
        os.environ["JAVA_HOME"] = str(Path(os.path.realpath(java)).parent.parent)


def is_local(master: str) -> bool:
    return master.startswith("local")


def on_terminal() -> bool:
    return sys.stderr.isatty() and os.environ.get("CI") != "true"


def session_config(master: str, terminal: bool) -> dict[str, str]:
    """The Spark settings of an offline job on ``master``; ``terminal``: stderr is a terminal."""
    conf = {
        "spark.ui.enabled": "false" if is_local(master) else "true",
        "spark.ui.showConsoleProgress": "true" if terminal else "false",
        "spark.sql.shuffle.partitions": "4",
    }
    if is_local(master):
        # On the loopback interface, with this Python in the tasks, so they see the same samzamp.
        conf |= {
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
            "spark.pyspark.python": sys.executable,
        }
    return conf


def spark_session(master: str, app_name: str) -> SparkSession:
    """A Spark session for an offline job, configured by ``session_config``."""
    from pyspark.sql import SparkSession

    _java_home()
    if is_local(master):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in session_config(master, on_terminal()).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


class StageLog:
    """Logs each Spark stage of the session's jobs started after it, once the stage finished: its
    name, tasks and time. Follows the status tracker from a daemon thread every ``STAGE_POLL_S``; a
    stage is timed from the first poll that saw it to the one that found it done (the tracker
    gives no times), so a stage shorter than a poll logs 0.0 s."""

    def __init__(self, spark: SparkSession, poll_s: float = STAGE_POLL_S) -> None:
        self._tracker = spark.sparkContext.statusTracker()
        self._poll_s = poll_s
        self._logged: set[int] = set()
        self._seen: dict[int, float] = {}  # stage -> when a poll first saw it
        self._before: set[int] = set()  # the jobs that ran before it started
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="samzamp-spark-stages", daemon=True)

    def start(self) -> StageLog:
        self._before = set(self._tracker.getJobIdsForGroup(None))
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop following, after one last look (a stage that ended since the last poll is logged)."""
        self._stop.set()
        self._thread.join(timeout=10)
        with contextlib.suppress(Exception):
            self.poll()

    def _run(self) -> None:
        while not self._stop.wait(self._poll_s):
            try:
                self.poll()
            except Exception as e:  # the session stopping under us: the job's own error says more
                log.debug("spark stage log: %s", e)
                return

    def poll(self) -> None:
        """Log every stage of the session's jobs that finished and was not logged yet."""
        for job_id in sorted(set(self._tracker.getJobIdsForGroup(None)) - self._before):
            job = self._tracker.getJobInfo(job_id)
            if job is None:
                continue
            for stage_id in sorted(job.stageIds):
                if stage_id not in self._logged:
                    self._log_if_done(stage_id)

    def _log_if_done(self, stage_id: int) -> None:
        stage: Any = self._tracker.getStageInfo(stage_id)
        if stage is None:
            return  # not submitted (yet, or skipped)
        now = time.monotonic()
        seen = self._seen.setdefault(stage_id, now)
        if stage.numActiveTasks or stage.numCompletedTasks < stage.numTasks:
            return
        self._logged.add(stage_id)
        took = now - seen
        progress_log.info(
            "spark stage %d done: %s; %d tasks (%d failed attempts) in %.1f s",
            stage_id,
            stage.name,
            stage.numTasks,
            stage.numFailedTasks,
            took,
        )


@contextlib.contextmanager
def offline_spark(master: str, app_name: str) -> Iterator[SparkSession]:
    """A session for one offline job, with its progress shown (see the module), stopped at the end."""
    spark = spark_session(master, app_name)
    if logging.getLogger().getEffectiveLevel() <= logging.WARNING:
        progress_log.setLevel(logging.INFO)
    stages = None if on_terminal() else StageLog(spark).start()
    try:
        yield spark
    finally:
        if stages is not None:
            stages.stop()
        spark.stop()
