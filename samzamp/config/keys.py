"""Every config key samzamp reads: its type, default, bounds and one line of documentation.

Keys use Samza's names. ``<s>`` stands for a system name, ``<id>`` for a stream id, ``<name>`` for a
store or serde name. A key listed here is read by samzamp and has an effect; Samza keys samzamp does
not use are in ``samzamp.config.samza_keys``, never here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

__all__ = ["KEYS", "ConfigWarning", "KeySpec", "known_keys_like", "spec_for"]

MAX_MS = 2**31 - 1  # about 24.8 days: any longer interval is a mistake (and Samza's int ms keys end there)
MAX_REPLICATION = 32767  # Kafka's replication factor is a 16-bit count
MAX_PARTITIONS = 100_000  # one task per partition in one container: far beyond what one process runs


@dataclass(frozen=True)
class KeySpec:
    """One key: ``kind`` is str, int, bool, list or an enum written ``a|b|c``.

    An int must lie in [minimum, maximum]; when ``off`` is set that value is allowed too (it switches
    the feature off), so that 0 cannot silently mean "off" where only -1 does.
    """

    pattern: str
    kind: str
    default: Any
    doc: str
    minimum: int | None = None
    maximum: int | None = None
    off: int | None = None


@dataclass(frozen=True)
class ConfigWarning:
    """A key that is accepted but worth telling the user about: it is logged once at start."""

    key: str
    problem: str

    def __str__(self) -> str:
        return f"config warning: {self.key}: {self.problem}"


KEYS: tuple[KeySpec, ...] = (
    # job
    KeySpec("job.name", "str", None, "The job's name (required unless app.name is set); names the checkpoint topic."),
    KeySpec("job.id", "str", "1", "The job's instance id (default app.id, else 1); names the checkpoint topic."),
    KeySpec(
        "job.default.system",
        "str",
        None,
        "System for streams, changelogs and checkpoints that name none (default: the only system, if one).",
    ),
    KeySpec(
        "job.container.thread.pool.size",
        "int",
        0,
        "Sync tasks: 0/1 inline on the loop; N >= 2 worker processes (at most 256).",
        0,
        256,
    ),
    KeySpec(
        "job.container.worker.ring.bytes",
        "int",
        8 << 20,
        "Each worker's two shared-memory rings, in bytes (a power of two); one batch must fit in half.",
        4096,
        1 << 30,
    ),
    KeySpec(
        "job.container.worker.batch.size",
        "int",
        256,
        "Messages per batch sent to a worker; up to 16 batches of a task are in flight, and the worker reports completions every 4.",
        1,
        65536,
    ),
    KeySpec(
        "job.container.count",
        "int",
        1,
        "Containers of this job: 1 with passthrough; ignored (a warning) with zk, where each process is one.",
        1,
    ),
    KeySpec("job.elasticity.factor", "int", 1, "Key buckets per partition (virtual tasks); 1 = off.", 1),
    KeySpec(
        "job.systemstreampartition.grouper.factory",
        "str",
        "GroupByPartition",
        "How SSPs become tasks: GroupByPartition or GroupBySystemStreamPartition.",
    ),
    KeySpec(
        "job.systemstreampartition.input.expansion.enabled",
        "bool",
        True,
        "A new partition of an input joins the task of partition (new % old count): the job keeps its tasks.",
    ),
    KeySpec(
        "job.coordinator.factory",
        "passthrough|zk|org.apache.samza.standalone.PassthroughJobCoordinatorFactory"
        "|org.apache.samza.zk.ZkJobCoordinatorFactory",
        "passthrough",
        "passthrough (one process owns every task) or zk (standalone mode: processors coordinated by ZooKeeper).",
    ),
    # standalone mode (job.coordinator.factory = zk); Samza's names and defaults
    KeySpec(
        "job.coordinator.zk.connect",
        "str",
        None,
        "The ZooKeeper ensemble, host:port[,host:port...][/chroot] (required with zk; a chroot must exist).",
    ),
    KeySpec(
        "job.coordinator.zk.session.timeout.ms",
        "int",
        30000,
        "A processor silent this long loses its session: its tasks move to the others (ms).",
        1,
        MAX_MS,
    ),
    KeySpec(
        "job.coordinator.zk.connection.timeout.ms",
        "int",
        60000,
        "How long a processor may take to connect to ZooKeeper before it fails (ms).",
        1,
        MAX_MS,
    ),
    KeySpec(
        "job.coordinator.zk.consensus.timeout.ms",
        "int",
        40000,
        "How long the processors have to agree on a new job model before the leader makes another (ms).",
        1,
        MAX_MS,
    ),
    KeySpec(
        "job.debounce.time.ms",
        "int",
        20000,
        "The leader waits this long after a processor joins or leaves before it makes a new job model (ms).",
        1,
        MAX_MS,
    ),
    KeySpec(
        "job.host-affinity.enabled",
        "bool",
        False,
        "Standalone: a task goes back to the location where it last ran, to reuse its local state.",
    ),
    KeySpec("yarn.samza.host-affinity.enabled", "bool", False, "Samza's legacy name of job.host-affinity.enabled."),
    KeySpec(
        "locationid.provider.factory",
        "str",
        "hostname",
        "Where a processor is: hostname (Samza's DefaultLocationIdProviderFactory): the host name.",
    ),
    KeySpec(
        "processor.id",
        "str",
        None,
        "This processor's id, unique in the job (no spaces or '/'); generated when unset: `<host>-<pid>-<random>`.",
    ),
    KeySpec(
        "processor.location.id",
        "str",
        None,
        "This processor's location id, instead of locationid.provider.factory's: processes on one host can "
        "stand for several hosts.",
    ),
    KeySpec("job.logged.store.base.dir", "str", None, "Base directory of changelogged stores."),
    KeySpec("job.non-logged.store.base.dir", "str", None, "Base directory of stores without a changelog."),
    KeySpec("job.changelog.system", "str", None, "System of changelogs given as a bare stream name."),
    KeySpec("job.coordinator.system", "str", None, "System of the coordinator stream (default job.default.system)."),
    KeySpec(
        "job.coordinator.replication.factor",
        "int",
        1,
        "Replication factor of the coordinator stream.",
        1,
        MAX_REPLICATION,
    ),
    KeySpec(
        "job.drain-monitor.enabled",
        "bool",
        True,
        "Watch the coordinator stream for drain notifications (samzamp drain); Samza's default is false.",
    ),
    KeySpec(
        "job.drain-monitor.poll.interval.ms",
        "int",
        10000,
        "How often the drain monitor reads the coordinator stream (ms); Samza's default is 60000.",
        1,
        MAX_MS,
    ),
    KeySpec("job.checkpoint.validation.enabled", "bool", True, "Fail if a checkpoint was written by another grouper."),
    # task
    KeySpec("task.class", "str", None, "The task class, as module:Class or module.Class (or app.class)."),
    KeySpec("task.inputs", "list", None, "Input streams as system.stream (required)."),
    KeySpec(
        "task.broadcast.inputs",
        "list",
        None,
        "Partitions every task reads whole (system.stream#N or system.stream#[a-b]), each task checkpointing them.",
    ),
    KeySpec("task.window.ms", "int", -1, "Call window() this often (ms); -1 disables (0 is refused).", 1, MAX_MS, -1),
    KeySpec("task.window.on.end.of.stream", "bool", False, "At end of input: a last window() before on_end_of_stream."),
    KeySpec(
        "task.commit.ms",
        "int",
        60000,
        "Commit (checkpoint) this often (ms); <= 0 disables timer commits.",
        None,
        MAX_MS,
    ),
    KeySpec(
        "task.commit.stores.async",
        "bool",
        True,
        "A commit pauses the task only until its stores' writes are set aside (and its outputs and changelog"
        " acknowledged); the writes go to disk while the task processes on, and the checkpoint is written once"
        " they are durable (Samza's synchronous and asynchronous commit phases: `commit-sync-ns`,"
        " `commit-async-ns`). Stores without a changelog are always written in the pause. false: the task waits"
        " for the whole commit. Not Samza's task.async.commit (processing while messages are in flight).",
    ),
    KeySpec(
        "task.max.concurrency", "int", 1, "Messages of one task in flight at once; 1 keeps strict order.", 1, 65536
    ),
    KeySpec(
        "task.callback.timeout.ms",
        "int",
        -1,
        "Fail the container if a callback takes longer (ms); <= 0 = never. In a worker process: a process() call,"
        " timed from its own start (the worker is killed).",
        None,
        MAX_MS,
    ),
    KeySpec(
        "task.callback.drain.timeout.ms",
        "int",
        -1,
        "While draining: a callback's timeout, and the bound on a task's last window, on_drain and commit (ms).",
        None,
        MAX_MS,
    ),
    KeySpec("task.shutdown.ms", "int", 30000, "How long shutdown waits for in-flight work (ms).", 0, MAX_MS),
    KeySpec("task.async.commit", "bool", False, "Commit while messages are in flight (not supported: must be false)."),
    KeySpec(
        "task.max.idle.ms", "int", 10, "How long the idle loop waits for new work before re-checking (ms).", 0, 60000
    ),
    KeySpec("task.poll.interval.ms", "int", 50, "Longest a consumer poll blocks (ms).", 1, 60000),
    KeySpec("task.drop.deserialization.errors", "bool", False, "Skip (and count) messages that fail to deserialize."),
    KeySpec("task.drop.serialization.errors", "bool", False, "Skip (and count) outputs that fail to serialize."),
    KeySpec(
        "task.drop.producer.errors",
        "bool",
        False,
        "Log, count (`SystemProducersMetrics` `producer-send-failed`) and drop an output its system refuses, at send"
        " time (e.g. larger than `systems.<s>.producer.message.max.bytes`) or in a failed delivery, instead of"
        " stopping; the task goes on. Without it such an output fails the task (exit 1 naming the task, SSP and"
        " offset; no checkpoint past that message). Outputs only: a changelog write that failed, or any send still"
        " unacknowledged at a commit, always stops the container.",
    ),
    KeySpec("task.ignored.exceptions", "list", None, "Exception class names (or *) that window/process may raise."),
    KeySpec("task.checkpoint.system", "str", None, "System of the checkpoint topic (default job.default.system)."),
    KeySpec(
        "task.checkpoint.replication.factor",
        "int",
        1,
        "Replication factor of the checkpoint topic.",
        1,
        MAX_REPLICATION,
    ),
    KeySpec(
        "task.checkpoint.commit.group.offsets",
        "bool",
        True,
        "After each checkpoint is acknowledged, commit each input partition's next offset (checkpointed + 1) to the"
        " input consumers' group (`samzamp-<job.name>-<job.id>`, or `systems.<s>.consumer.group.id`), so that"
        " `kafka-consumer-groups`, Burrow or kafka-lag-exporter show the job's lag. samzamp never reads them back"
        " (the checkpoint topic is the only truth), and they are never ahead of a checkpoint: with key buckets a"
        " partition gets the minimum over its buckets, committed by the processor that runs bucket 0; a broadcast"
        " partition the minimum over its tasks (not at all in standalone mode). Asynchronous; a failure is counted"
        " (`OffsetManagerMetrics` `group-commit-failures`), logged at most once a minute and never stops the job.",
    ),
    KeySpec(
        "task.checkpoint.segment.bytes",
        "int",
        26214400,
        "segment.bytes of the checkpoint topic.",
        14,  # Kafka's own lower bound for segment.bytes
        2**31 - 1,
    ),
    KeySpec(
        "task.consumer.batch.size",
        "int",
        64,
        "Take up to this many messages of one SSP per choice (a run; also ends after 5 ms); 0/1 = one.",
        0,
        65536,
    ),
    KeySpec(
        "task.fetch.threshold",
        "int",
        50000,
        "Messages buffered in the container before polling stops (up to twice that while a lane is dry).",
        1,
        10_000_000,
    ),
    KeySpec(
        "task.transactional.state.restore.enabled",
        "bool",
        True,
        "Restore stores to the last checkpoint and revert changelog writes no checkpoint covers.",
    ),
    KeySpec(
        "task.transactional.state.retain.existing.state",
        "bool",
        True,
        "A store whose task has no checkpoint keeps its state (false: erase it, writing tombstones).",
    ),
    # app
    KeySpec("app.class", "str", None, "The application class (StreamApplication) as module:Class; or task.class."),
    KeySpec(
        "job.intermediate.stream.partitions",
        "int",
        None,
        "Partitions of the intermediate (partition_by) streams samzamp creates (default: the largest input's).",
        1,
        MAX_PARTITIONS,
    ),
    KeySpec("app.name", "str", None, "Samza's application name: job.name defaults to it; if both are set they agree."),
    KeySpec("app.id", "str", None, "Samza's application id: job.id defaults to it; if both are set they agree."),
    KeySpec("app.run.id", "str", None, "This deployment's run id (generated when unset)."),
    # metrics
    KeySpec(
        "metrics.log.interval.ms",
        "int",
        60000,
        "Log a metrics snapshot this often (ms); <= 0 disables.",
        -1,
        MAX_MS,
    ),
    KeySpec(
        "metrics.prometheus.port",
        "int",
        -1,
        "Serve /metrics (Prometheus) and /healthz on this port (0: any free one, logged); -1: off. Needs samzamp[prometheus].",
        0,
        65535,
        off=-1,
    ),
    KeySpec(
        "metrics.prometheus.host",
        "str",
        "127.0.0.1",
        "The address the Prometheus endpoint listens on (0.0.0.0: every interface, as in a pod).",
    ),
    KeySpec(
        "metrics.reporters",
        "list",
        None,
        "Reporters to start, by name (Samza's key); each must be Samza's snapshot reporter (see `metrics.reporter.<name>.class`)."
        " A TOML array or a comma-separated string. None by default.",
    ),
    KeySpec(
        "metrics.reporter.<name>.class",
        "str",
        None,
        "`snapshot` or Samza's `org.apache.samza.metrics.reporter.MetricsSnapshotReporterFactory`; any other class is"
        " an error. Default: `snapshot` for the reporter named `snapshot`.",
    ),
    KeySpec(
        "metrics.reporter.<name>.stream",
        "str",
        None,
        "Where the reporter sends its snapshots, as `system.stream` (required); created when missing (with"
        " `streams.<id>.partitions`, else the system's default).",
    ),
    KeySpec(
        "metrics.reporter.<name>.interval",
        "int",
        60,
        "Seconds between reports (and one more at stop).",
        1,
        MAX_MS // 1000,
    ),
    KeySpec(
        "metrics.reporter.<name>.blacklist",
        "str",
        None,
        "A regex over `group.metric` (the group as the message names it, e.g."
        " `org.apache.samza.container.TaskInstanceMetrics.pending-messages`): a metric it matches whole is left out.",
    ),
    # systems
    KeySpec("systems.<s>.samza.factory", "str", None, "The system's factory: kafka or inmemory (or Samza's class)."),
    KeySpec("systems.<s>.samza.key.serde", "str", None, "Default key serde of the system's streams."),
    KeySpec("systems.<s>.samza.msg.serde", "str", None, "Default message serde of the system's streams."),
    KeySpec(
        "systems.<s>.samza.offset.default",
        "oldest|upcoming",
        None,
        "Deprecated form of default.stream.samza.offset.default.",
    ),
    KeySpec("systems.<s>.default.stream.samza.key.serde", "str", None, "Default key serde of the system's streams."),
    KeySpec(
        "systems.<s>.default.stream.samza.msg.serde", "str", None, "Default message serde of the system's streams."
    ),
    KeySpec(
        "systems.<s>.default.stream.samza.offset.default",
        "oldest|upcoming",
        None,
        "Where to start without a checkpoint.",
    ),
    KeySpec("systems.<s>.default.stream.samza.reset.offset", "bool", False, "Ignore checkpoints of every stream."),
    KeySpec(
        "systems.<s>.default.stream.replication.factor",
        "int",
        1,
        "Replication factor of created topics.",
        1,
        MAX_REPLICATION,
    ),
    KeySpec(
        "systems.<s>.default.stream.partitions",
        "int",
        1,
        "Partitions of output topics samzamp creates.",
        1,
        MAX_PARTITIONS,
    ),
    KeySpec(
        "systems.<s>.bootstrap.servers",
        "str",
        None,
        "Kafka brokers of every client of the system (or kafka.bootstrap.servers); none = embedded broker.",
    ),
    # streams
    KeySpec("streams.<id>.samza.system", "str", None, "The stream's system (default job.default.system)."),
    KeySpec(
        "streams.<id>.samza.intermediate",
        "bool",
        False,
        "An application's partition_by stream (set by the graph): read from the oldest offset without a checkpoint.",
    ),
    KeySpec("streams.<id>.samza.physical.name", "str", None, "The topic name (default: the stream id)."),
    KeySpec("streams.<id>.samza.key.serde", "str", None, "The stream's key serde."),
    KeySpec("streams.<id>.samza.msg.serde", "str", None, "The stream's message serde."),
    KeySpec("streams.<id>.samza.offset.default", "oldest|upcoming", None, "Where to start without a checkpoint."),
    KeySpec("streams.<id>.samza.reset.offset", "bool", False, "Ignore this stream's checkpoint on every start."),
    KeySpec(
        "streams.<id>.samza.bounded",
        "bool",
        False,
        "A bounded input: each partition ends where it ended when its task started reading it (end of stream).",
    ),
    KeySpec("streams.<id>.samza.bootstrap", "bool", False, "Bootstrap stream (not yet supported: must be false)."),
    KeySpec("streams.<id>.samza.broadcast", "bool", False, "Broadcast stream (not yet supported: must be false)."),
    KeySpec("streams.<id>.partitions", "int", None, "Partitions when samzamp creates the topic.", 1, MAX_PARTITIONS),
    # serializers
    KeySpec(
        "serializers.registry.<name>.class",
        "str",
        None,
        "A serde by import path (module:Class); Samza's built-in serde factories map to samzamp's.",
    ),
    # stores
    KeySpec("stores.<name>.factory", "str", None, "The store's engine: lmdb (required for every store)."),
    KeySpec(
        "stores.<name>.changelog",
        "str",
        None,
        "The store's changelog as system.stream (or stream + job.changelog.system).",
    ),
    KeySpec("stores.<name>.key.serde", "str", None, "The store's key serde (required)."),
    KeySpec("stores.<name>.msg.serde", "str", None, "The store's value serde (required)."),
    KeySpec(
        "stores.<name>.lmdb.map.size",
        "int",
        64 << 20,
        "Initial LMDB map size in bytes (at most 1 TiB); it doubles when full.",
        4096,
        1 << 40,
    ),
    KeySpec(
        "stores.<name>.lmdb.sync", "bool", True, "fsync LMDB at each commit (false: faster, unsafe on power loss)."
    ),
    KeySpec(
        "stores.<name>.write.batch.size",
        "int",
        10_000,
        "Keys whose newest write waits before it goes to the changelog (a key written again meanwhile "
        "sends once); all go at each commit. 1: every write at once.",
        1,
        1_000_000,
    ),
    KeySpec(
        "stores.<name>.lmdb.checksums",
        "bool",
        True,
        "Keep a CRC32C with each value on disk and check it on every read (false: store format 1, no check).",
    ),
)


def _compile(pattern: str) -> re.Pattern[str]:
    parts = re.split(r"(<[a-z]+>)", pattern)
    return re.compile("^" + "".join("[^.]+" if p.startswith("<") else re.escape(p) for p in parts) + "$")


_COMPILED = [(_compile(spec.pattern), spec) for spec in KEYS]


def spec_for(key: str) -> KeySpec | None:
    """The spec ``key`` matches, or None."""
    for rx, spec in _COMPILED:
        if rx.match(key):
            return spec
    return None


def known_keys_like(key: str) -> list[str]:
    """Known keys of ``key``'s namespace, written with ``key``'s own system, stream or store name.

    A placeholder is filled from ``key`` only when every part before it matches (``systems.kafka.x``
    fills ``<s>`` with ``kafka``); otherwise the pattern is left out, so that a did-you-mean never
    offers a key of another namespace nor one with a placeholder in it.
    """
    parts = key.split(".")
    out = []
    for spec in KEYS:
        pattern = spec.pattern.split(".")
        filled: list[str] = []
        for i, p in enumerate(pattern):
            if p.startswith("<"):
                if i >= len(parts) or filled != parts[:i]:
                    break
                filled.append(parts[i])
            else:
                filled.append(p)
        else:
            if filled[0] == parts[0]:
                out.append(".".join(filled))
    return out
