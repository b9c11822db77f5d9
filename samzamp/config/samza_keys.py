"""Apache Samza's keys that samzamp does not use, each with what it does in Samza and why not here.

A job config brought over from Samza keeps many of these. None of them is a typo, so none gets a
did-you-mean: the user is told what the key is for and why samzamp ignores it (a warning), or, where
ignoring it would change what the job does (a chooser, a matcher, side inputs, a TTL), that the job
cannot run as configured (an error). Values that mean "off" in Samza too are accepted silently.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from samzamp.api.errors import ConfigError
from samzamp.config.keys import ConfigWarning

__all__ = ["GLOBAL_STORE_KEYS", "SAMZA_KEYS", "SamzaKey", "samza_key"]

_LOG_ONLY = (
    "samzamp's metrics go to its log (metrics.log.interval.ms) and to Samza's snapshot reporter (metrics.reporters)"
)
_NO_CLUSTER = "samzamp runs as the process you start (one container holding every task), with no cluster manager"
_JVM = "samzamp is a Python process; set the interpreter's options where you start samzamp run"


def _off(*values: Any) -> Callable[[Any], bool]:
    allowed = {str(v).strip().lower() for v in values}

    def harmless(value: Any) -> bool:
        if isinstance(value, list):
            return not value
        if isinstance(value, bool):
            value = "true" if value else "false"
        return str(value).strip().lower() in allowed

    return harmless


@dataclass(frozen=True)
class SamzaKey:
    """``pattern`` uses ``<s>``, ``<id>``, ``<name>`` for one part and ``*`` for the rest of a key."""

    pattern: str
    what: str  # Samza's key for <what>
    why: str  # samzamp does not use it because <why> (and what to do)
    fatal: bool = False
    harmless: Callable[[Any], bool] | None = None  # values Samza treats as "off": no finding

    def verdict(self, key: str, value: Any) -> ConfigError | ConfigWarning | None:
        """The finding for ``key = value``: an error, a warning, or None for an "off" value."""
        if self.harmless is not None and self.harmless(value):
            return None
        problem = f"is Samza's key for {self.what}; samzamp does not use it: {self.why}"
        return ConfigError(key, problem) if self.fatal else ConfigWarning(key, problem)


SAMZA_KEYS: tuple[SamzaKey, ...] = (
    # job
    SamzaKey("job.factory.class", "how Samza deploys the job (YARN, a process, a thread)", _NO_CLUSTER),
    SamzaKey(
        "job.coordinator.zk.enable-startup-with-active-job-model",
        "starting a processor on the last agreed job model without waiting for a new one",
        "a samzamp processor always waits for the leader's new job model",
        harmless=_off(False),
    ),
    SamzaKey(
        "processor.list",
        "the processor ids Samza's JobModelCalculator hands the AllSspToSingleTaskGrouper",
        "samzamp's leader reads the live processors from ZooKeeper",
    ),
    SamzaKey(
        "job.coordinator.monitor-*",
        "watching the inputs for new partitions or streams",
        "samzamp reads partition counts at start; restart the container after adding partitions",
    ),
    SamzaKey(
        "job.container.single.thread.mode",
        "running every task on the run loop's thread",
        "samzamp's run loop is one thread already; job.container.thread.pool.size >= 2 runs sync tasks in "
        "worker processes",
    ),
    SamzaKey(
        "job.container.task.executor.factory",
        "the thread pool that runs tasks",
        "samzamp's pool is worker processes, sized by job.container.thread.pool.size",
    ),
    SamzaKey(
        "job.config.rewriters",
        "rewriting the config before the job starts",
        "samzamp applies no rewriters, so the job would run with the keys as written; write the final keys",
        fatal=True,
        harmless=_off(""),
    ),
    SamzaKey(
        "job.config.rewriter.*",
        "a config rewriter",
        "samzamp applies no rewriters; write the final keys",
    ),
    SamzaKey("job.config.loader.*", "where Samza loads the config from", "samzamp reads the TOML file it is given"),
    SamzaKey(
        "job.jmx.enabled",
        "a JMX server",
        f"there is no JVM; {_LOG_ONLY}",
    ),
    SamzaKey(
        "job.security.manager.factory",
        "YARN delegation tokens",
        "there is no YARN; Kafka security settings go in the system's Kafka client settings",
    ),
    SamzaKey(
        "job.standbytasks.replication.factor",
        "standby tasks",
        "samzamp runs no standby tasks; a restarted container restores its stores from the changelog",
        harmless=_off(1),
    ),
    SamzaKey(
        "job.systemstreampartition.matcher.*",
        "choosing which partitions of the inputs this job reads",
        "samzamp reads every partition of every input, so the job would read more than configured; remove it",
        fatal=True,
    ),
    SamzaKey("job.autosizing.*", "sizing containers on YARN", _NO_CLUSTER),
    SamzaKey("job.diagnostics.*", "the diagnostics stream", "samzamp writes none; see its metrics log"),
    # Except yarn.samza.host-affinity.enabled, the legacy name of job.host-affinity.enabled, which
    # samzamp reads (samzamp.config.keys: a key samzamp reads is checked before these).
    SamzaKey("yarn.*", "running the job on YARN", _NO_CLUSTER),
    SamzaKey("cluster-manager.*", "the cluster manager that places containers", _NO_CLUSTER),
    # task
    SamzaKey("task.opts", "the container JVM's options", _JVM),
    SamzaKey("task.java.home", "the container's JVM", _JVM),
    SamzaKey("task.execute", "the container's launch script", _JVM),
    SamzaKey("task.log4j.system", "sending logs to a stream", "samzamp logs to stderr through Python's logging"),
    SamzaKey(
        "task.checkpoint.factory",
        "where checkpoints are stored",
        "samzamp always checkpoints to the Kafka topic __samza_checkpoint_ver_1_for_<job.name>_<job.id> on "
        "task.checkpoint.system",
    ),
    SamzaKey(
        "task.checkpoint.read.versions",
        "which checkpoint versions Samza reads",
        "samzamp reads and writes its own checkpoint format (it cannot read Samza's)",
    ),
    SamzaKey(
        "task.checkpoint.write.versions",
        "which checkpoint versions Samza writes",
        "samzamp reads and writes its own checkpoint format (it cannot read Samza's)",
    ),
    SamzaKey(
        "task.checkpoint.skip.migration",
        "migrating old checkpoints",
        "samzamp reads and writes its own checkpoint format (it cannot read Samza's)",
    ),
    SamzaKey(
        "task.checkpoint.max.message.bytes",
        "max.message.bytes of the checkpoint topic",
        "samzamp creates the checkpoint topic with the broker's default",
    ),
    SamzaKey(
        "task.live.checkpoint.max.age",
        "choosing between checkpoint versions",
        "samzamp writes a single checkpoint version",
    ),
    SamzaKey(
        "task.chooser.class",
        "the message chooser",
        "samzamp's chooser is round robin over the partitions with messages and cannot be replaced; remove it",
        fatal=True,
        harmless=lambda v: str(v).strip().endswith("RoundRobinChooserFactory"),
    ),
    SamzaKey("task.name.grouper.factory", "assigning tasks to containers", _NO_CLUSTER),
    SamzaKey(
        "task.commit.max.delay.ms",
        "skipping a commit that comes due while the previous one's asynchronous phase runs",
        "samzamp never skips a commit: one that comes due then waits for it (task.commit.stores.async)",
    ),
    SamzaKey(
        "task.commit.timeout.ms",
        "bounding how long a commit waits for the previous one's asynchronous phase",
        "samzamp's commit waits for it, and a store write or checkpoint that fails fails the container",
    ),
    SamzaKey(
        "task.callback.watermark.timeout.ms",
        "timing out watermark callbacks",
        "samzamp's windows are in processing time and no watermark reaches a task yet",
    ),
    SamzaKey(
        "task.watermark.*", "watermarks", "samzamp's windows are in processing time and no watermark reaches a task yet"
    ),
    SamzaKey(
        "task.transactional.state.checkpoint.enabled",
        "checkpointing stores with the input offsets",
        "samzamp always does; task.transactional.state.restore.enabled decides how stores are restored",
    ),
    # app
    SamzaKey("app.runner.class", "the application runner", _NO_CLUSTER),
    SamzaKey(
        "app.main.class", "the application's main class", "samzamp runs the class named by app.class or task.class"
    ),
    SamzaKey(
        "app.main.args", "the application's main arguments", "samzamp runs the class named by app.class or task.class"
    ),
    SamzaKey(
        "app.mode",
        "batch or stream mode",
        "samzamp runs in stream mode (its checkpoint topic name carries no run id)",
        harmless=_off("STREAM"),
    ),
    # metrics
    SamzaKey(
        "metrics.reporter.*",
        "configuring a metrics reporter",
        "samzamp's snapshot reporter reads only class, stream, interval and blacklist",
    ),
    SamzaKey("metrics.timer.enabled", "turning timer metrics off", "samzamp's timers are always on"),
    SamzaKey("metrics.timer.debug.enabled", "debug timer metrics", "samzamp's timers are always on"),
    # systems
    SamzaKey(
        "systems.<s>.samza.fetch.threshold",
        "bounding the messages buffered per system",
        "samzamp bounds the container's buffered messages with task.fetch.threshold",
    ),
    SamzaKey(
        "systems.<s>.samza.fetch.threshold.bytes",
        "bounding the bytes buffered per system",
        "samzamp bounds the container's buffered messages with task.fetch.threshold",
    ),
    SamzaKey(
        "systems.<s>.samza.delete.committed.messages",
        "deleting committed messages of intermediate streams",
        "samzamp deletes no messages",
        harmless=_off(False),
    ),
    # streams
    SamzaKey(
        "streams.<id>.samza.priority",
        "a stream's chooser priority",
        "samzamp's chooser is round robin, with no priorities, so this stream would not be preferred; remove it",
        fatal=True,
        harmless=_off(-1),
    ),
    SamzaKey(
        "streams.<id>.samza.delete.committed.messages",
        "deleting committed messages of intermediate streams",
        "samzamp deletes no messages",
        harmless=_off(False),
    ),
    # serializers
    SamzaKey(
        "serializers.registry.<name>.samza.serialized.instance",
        "a serialized Java serde",
        "samzamp cannot load Java objects; set serializers.registry.<name>.class to a Python serde (module:Class)",
        fatal=True,
    ),
    # stores
    SamzaKey(
        "stores.<name>.rocksdb.ttl.ms",
        "expiring store entries after a time",
        "samzamp's LMDB stores keep entries until deleted, so nothing would expire; delete old entries in the "
        "task (e.g. in window()) and remove this key",
        fatal=True,
    ),
    SamzaKey("stores.<name>.rocksdb.*", "tuning RocksDB", "samzamp's engine is LMDB (see stores.<name>.lmdb.*)"),
    SamzaKey(
        "stores.<name>.object.cache.size",
        "the store's object cache",
        "samzamp's stores have no cache in front of LMDB, whose reads are memory-mapped",
    ),
    SamzaKey(
        "stores.<name>.changelog.replication.factor",
        "the changelog's replication factor",
        "samzamp creates changelogs with systems.<s>.default.stream.replication.factor",
    ),
    SamzaKey(
        "stores.<name>.changelog.max.message.size.bytes",
        "oversized changelog records",
        "samzamp sends every record; the topic's max.message.bytes limits it",
    ),
    SamzaKey(
        "stores.<name>.disallow.large.messages",
        "oversized changelog records",
        "samzamp sends every record; the topic's max.message.bytes limits it",
        harmless=_off(False),
    ),
    SamzaKey(
        "stores.<name>.drop.large.messages",
        "oversized changelog records",
        "samzamp sends every record; the topic's max.message.bytes limits it",
        harmless=_off(False),
    ),
    SamzaKey(
        "stores.<name>.side.inputs*",
        "side-input stores",
        "side inputs are not supported, so the store would stay empty; remove it",
        fatal=True,
    ),
    SamzaKey("stores.backup.factories", "store backup backends", "samzamp backs stores up to their Kafka changelog"),
    SamzaKey("stores.restore.factories", "store restore backends", "samzamp restores from the Kafka changelog"),
    SamzaKey(
        "stores.<name>.backup.factories", "store backup backends", "samzamp backs stores up to their Kafka changelog"
    ),
    SamzaKey("stores.<name>.restore.factories", "store restore backends", "samzamp restores from the Kafka changelog"),
)

# Keys of the stores namespace that name no store.
GLOBAL_STORE_KEYS = frozenset({"stores.backup.factories", "stores.restore.factories"})


def _compile(pattern: str) -> re.Pattern[str]:
    out = []
    for part in re.split(r"(<[a-z]+>|\*)", pattern):
        out.append("[^.]+" if part.startswith("<") else ".*" if part == "*" else re.escape(part))
    return re.compile("^" + "".join(out) + "$")


_COMPILED = [(_compile(k.pattern), k) for k in SAMZA_KEYS]


def samza_key(key: str) -> SamzaKey | None:
    """The entry of Samza's key ``key`` (the first that matches), or None for a key Samza does not have."""
    for rx, entry in _COMPILED:
        if rx.match(key):
            return entry
    return None
