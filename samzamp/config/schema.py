"""Every config key samzamp knows: its type, default and one line of documentation.

Keys use Samza's names. ``<s>`` stands for a system name, ``<id>`` for a stream id, ``<name>`` for a
store or serde name. ``check_keys`` reports a key in one of samzamp's own namespaces that matches no
spec (a likely typo, with the closest known key), and a value of the wrong type.

Passthrough namespaces are not checked key by key: ``systems.<s>.kafka.*`` (every client),
``systems.<s>.consumer.*`` and ``systems.<s>.producer.*`` go to librdkafka (see
``samzamp.systems.kafka.client_config``), ``streams.<id>.<prop>`` without ``samza.`` and
``stores.<name>.changelog.kafka.*`` are topic configs.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from typing import Any

from samzamp.api.errors import ConfigError
from samzamp.config.config import Config

__all__ = ["KEYS", "KeySpec", "check_keys"]


@dataclass(frozen=True)
class KeySpec:
    pattern: str
    kind: str  # "str" | "int" | "bool" | "list" | one of "a|b|c" (an enum)
    default: Any
    doc: str
    minimum: int | None = None


KEYS: tuple[KeySpec, ...] = (
    # job
    KeySpec("job.name", "str", None, "The job's name (required); names the checkpoint topic."),
    KeySpec("job.id", "str", "1", "The job's instance id; names the checkpoint topic."),
    KeySpec("job.default.system", "str", None, "System for streams and checkpoints that name none."),
    KeySpec(
        "job.container.thread.pool.size", "int", 0, "Sync tasks: 0/1 inline on the loop; N >= 2 worker processes.", 0
    ),
    KeySpec(
        "job.container.worker.ring.bytes",
        "int",
        8 << 20,
        "Each worker's two shared-memory rings, in bytes (a power of two); one batch must fit in half.",
        4096,
    ),
    KeySpec(
        "job.container.worker.batch.size",
        "int",
        256,
        "Messages per batch sent to a worker; up to 4 batches of a task are in flight.",
        1,
    ),
    KeySpec("job.container.count", "int", 1, "Containers of this job (1 until standalone mode).", 1),
    KeySpec("job.elasticity.factor", "int", 1, "Key buckets per partition (virtual tasks); 1 = off.", 1),
    KeySpec(
        "job.systemstreampartition.grouper.factory",
        "str",
        "GroupByPartition",
        "How SSPs become tasks: GroupByPartition or GroupBySystemStreamPartition.",
    ),
    KeySpec("job.coordinator.factory", "passthrough|zk", "passthrough", "passthrough (one container) or zk."),
    KeySpec("job.coordinator.zk.connect", "str", None, "ZooKeeper connect string for job.coordinator.factory=zk."),
    KeySpec("job.logged.store.base.dir", "str", None, "Base directory of changelogged stores."),
    KeySpec("job.non-logged.store.base.dir", "str", None, "Base directory of stores without a changelog."),
    KeySpec("job.changelog.system", "str", None, "System of changelogs given as a bare stream name."),
    KeySpec("job.coordinator.system", "str", None, "System of the coordinator stream (default job.default.system)."),
    KeySpec("job.coordinator.replication.factor", "int", 1, "Replication factor of the coordinator stream.", 1),
    KeySpec(
        "job.drain-monitor.enabled",
        "bool",
        True,
        "Watch the coordinator stream for drain notifications (samzamp-drain); Samza's default is false.",
    ),
    KeySpec(
        "job.drain-monitor.poll.interval.ms",
        "int",
        10000,
        "How often the drain monitor reads the coordinator stream (ms); Samza's default is 60000.",
        1,
    ),
    KeySpec("job.checkpoint.validation.enabled", "bool", True, "Fail if a checkpoint was written by another grouper."),
    # task
    KeySpec("task.class", "str", None, "The task class, as module:Class or module.Class (required)."),
    KeySpec("task.inputs", "list", None, "Input streams as system.stream (required)."),
    KeySpec("task.window.ms", "int", -1, "Call window() this often (ms); -1 disables."),
    KeySpec("task.window.on.end.of.stream", "bool", False, "At end of input: a last window() before on_end_of_stream."),
    KeySpec("task.commit.ms", "int", 60000, "Commit (checkpoint) this often (ms); <= 0 disables timer commits."),
    KeySpec("task.max.concurrency", "int", 1, "Messages of one task in flight at once; 1 keeps strict order.", 1),
    KeySpec("task.callback.timeout.ms", "int", -1, "Fail the container if a callback takes longer (ms); -1 = never."),
    KeySpec(
        "task.callback.drain.timeout.ms",
        "int",
        -1,
        "While draining: a callback's timeout, and the bound on a task's last window, on_drain and commit (ms).",
    ),
    KeySpec("task.shutdown.ms", "int", 30000, "How long shutdown waits for in-flight work (ms).", 0),
    KeySpec("task.async.commit", "bool", False, "Commit while messages are in flight (not supported: must be false)."),
    KeySpec("task.max.idle.ms", "int", 10, "How long the idle loop waits for new work before re-checking (ms).", 0),
    KeySpec("task.poll.interval.ms", "int", 50, "Longest a consumer poll blocks (ms).", 1),
    KeySpec("task.drop.deserialization.errors", "bool", False, "Skip (and count) messages that fail to deserialize."),
    KeySpec("task.drop.serialization.errors", "bool", False, "Skip (and count) outputs that fail to serialize."),
    KeySpec("task.drop.producer.errors", "bool", False, "Log and ignore failed sends instead of stopping."),
    KeySpec("task.ignored.exceptions", "list", None, "Exception class names (or *) that window/process may raise."),
    KeySpec("task.checkpoint.system", "str", None, "System of the checkpoint topic (default job.default.system)."),
    KeySpec("task.checkpoint.replication.factor", "int", 1, "Replication factor of the checkpoint topic.", 1),
    KeySpec("task.checkpoint.segment.bytes", "int", 26214400, "segment.bytes of the checkpoint topic.", 1),
    KeySpec(
        "task.consumer.batch.size",
        "int",
        64,
        "Take up to this many messages of one SSP per choice (a run; also ends after 5 ms); 0/1 = one.",
        0,
    ),
    KeySpec("task.fetch.threshold", "int", 50000, "Messages buffered in the container before polling stops.", 1),
    # app
    KeySpec("app.name", "str", None, "Application name (defaults to job.name)."),
    KeySpec("app.id", "str", None, "Application id (defaults to job.id)."),
    KeySpec("app.run.id", "str", None, "This deployment's run id (generated when unset)."),
    # metrics
    KeySpec("metrics.log.interval.ms", "int", 60000, "Log a metrics snapshot this often (ms); <= 0 disables.", -1),
    KeySpec("metrics.reporters", "list", None, "Metrics reporter names (none built in yet besides the log)."),
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
    KeySpec("systems.<s>.default.stream.replication.factor", "int", 1, "Replication factor of created topics.", 1),
    KeySpec("systems.<s>.default.stream.partitions", "int", 1, "Partitions of output topics samzamp creates.", 1),
    KeySpec(
        "systems.<s>.bootstrap.servers",
        "str",
        None,
        "Kafka brokers of every client of the system (or kafka.bootstrap.servers); none = embedded broker.",
    ),
    # streams
    KeySpec("streams.<id>.samza.system", "str", None, "The stream's system (default job.default.system)."),
    KeySpec("streams.<id>.samza.physical.name", "str", None, "The topic name (default: the stream id)."),
    KeySpec("streams.<id>.samza.key.serde", "str", None, "The stream's key serde."),
    KeySpec("streams.<id>.samza.msg.serde", "str", None, "The stream's message serde."),
    KeySpec("streams.<id>.samza.offset.default", "oldest|upcoming", None, "Where to start without a checkpoint."),
    KeySpec("streams.<id>.samza.reset.offset", "bool", False, "Ignore this stream's checkpoint on every start."),
    KeySpec("streams.<id>.samza.priority", "int", -1, "Chooser priority (not yet used: round robin)."),
    KeySpec("streams.<id>.samza.bootstrap", "bool", False, "Bootstrap stream (not yet supported: must be false)."),
    KeySpec("streams.<id>.samza.broadcast", "bool", False, "Broadcast stream (not yet supported: must be false)."),
    KeySpec("streams.<id>.partitions", "int", None, "Partitions when samzamp creates the topic.", 1),
    # serializers
    KeySpec("serializers.registry.<name>.class", "str", None, "A serde by import path (module:Class)."),
    # stores
    KeySpec("stores.<name>.factory", "str", None, "The store's engine: lmdb."),
    KeySpec(
        "stores.<name>.changelog",
        "str",
        None,
        "The store's changelog as system.stream (or stream + job.changelog.system).",
    ),
    KeySpec("stores.<name>.key.serde", "str", None, "The store's key serde (required)."),
    KeySpec("stores.<name>.msg.serde", "str", None, "The store's value serde (required)."),
    KeySpec(
        "stores.<name>.lmdb.map.size", "int", 64 << 20, "Initial LMDB map size in bytes; it doubles when full.", 4096
    ),
    KeySpec(
        "stores.<name>.lmdb.sync", "bool", True, "fsync LMDB at each commit (false: faster, unsafe on power loss)."
    ),
    KeySpec(
        "task.transactional.state.restore.enabled",
        "bool",
        True,
        "Restore stores to the last checkpoint and revert changelog writes no checkpoint covers.",
    ),
)

# Namespaces samzamp owns: a key here that matches no spec is almost surely a typo.
_OWNED = re.compile(
    r"^(job|task|app|metrics|serializers)\."
    r"|^systems\.[^.]+\.(samza|default\.stream\.samza)\."
    r"|^streams\.[^.]+\.samza\."
    r"|^stores\.[^.]+\."
)
_PASSTHROUGH = re.compile(
    r"^systems\.[^.]+\.(kafka|consumer|producer)\.|^streams\.[^.]+\.(?!samza\.)|^stores\.[^.]+\.changelog\.kafka\."
    r"|^systems\.[^.]+\.default\.stream\.(?!samza\.)"
)


def _compile(pattern: str) -> re.Pattern[str]:
    parts = re.split(r"(<[a-z]+>)", pattern)
    return re.compile("^" + "".join("[^.]+" if p.startswith("<") else re.escape(p) for p in parts) + "$")


_COMPILED = [(_compile(spec.pattern), spec) for spec in KEYS]


def spec_for(key: str) -> KeySpec | None:
    for rx, spec in _COMPILED:
        if rx.match(key):
            return spec
    return None


def _concrete_candidates(key: str) -> list[str]:
    """Known keys written with the placeholders of ``key`` filled in, for did-you-mean."""
    parts = key.split(".")
    out = []
    for spec in KEYS:
        sp = spec.pattern.split(".")
        filled = [parts[i] if p.startswith("<") and i < len(parts) else p for i, p in enumerate(sp)]
        out.append(".".join(filled))
    return out


def check_keys(config: Config) -> None:
    """Raise ConfigError for the first unknown key in an owned namespace or the first ill-typed value."""
    for key in sorted(config):
        spec = spec_for(key)
        if spec is None:
            if _OWNED.search(key) and not _PASSTHROUGH.search(key):
                close = difflib.get_close_matches(key, _concrete_candidates(key), n=1, cutoff=0.75)
                hint = f"; did you mean {close[0]!r}?" if close else "; see the config reference in README.md"
                raise ConfigError(key, f"unknown key (a likely typo){hint}")
            continue
        _check_value(config, key, spec)


def _check_value(config: Config, key: str, spec: KeySpec) -> None:
    if spec.kind == "int":
        value = config.get_int(key, 0)
        if spec.minimum is not None and value < spec.minimum:
            raise ConfigError(key, f"must be >= {spec.minimum}, got {value}")
    elif spec.kind == "bool":
        config.get_bool(key, False)
    elif spec.kind == "list":
        config.get_list(key)
    elif spec.kind == "str":
        config.get_str(key)
    else:
        allowed = spec.kind.split("|")
        text = config.get_str(key)
        if text is not None and text not in allowed:
            raise ConfigError(key, f"must be one of {', '.join(allowed)}, got {text!r}")
