"""Typed, frozen views of the config, one per area, each handed only to the component that needs it.

``JobSettings.from_config`` reads and checks every key the container uses; with ``check_keys`` it is
the whole validation that runs before anything connects (see ``samzamp.config.validate``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from samzamp.api.envelope import SystemStream, SystemStreamPartition
from samzamp.api.errors import ConfigError
from samzamp.config.application import ApplicationPlan, plan_application
from samzamp.config.config import Config
from samzamp.config.keys import ConfigWarning
from samzamp.config.samza_keys import GLOBAL_STORE_KEYS
from samzamp.config.standalone import ZkSettings, coordinator_factory, standalone_warnings, zk_settings
from samzamp.config.system_kinds import SystemKind, system_kind, system_kind_names
from samzamp.extras import PROMETHEUS

__all__ = [
    "JobSettings",
    "PrometheusSettings",
    "StreamSettings",
    "SystemSettings",
    "TaskSettings",
    "ZkSettings",
    "checkpoint_topic_name",
    "coordinator_stream_name",
]

_GROUPERS = {
    "GroupByPartition": "GroupByPartition",
    "GroupByPartitionFactory": "GroupByPartition",
    "org.apache.samza.container.grouper.stream.GroupByPartitionFactory": "GroupByPartition",
    "GroupBySystemStreamPartition": "GroupBySystemStreamPartition",
    "GroupBySystemStreamPartitionFactory": "GroupBySystemStreamPartition",
    "org.apache.samza.container.grouper.stream.GroupBySystemStreamPartitionFactory": "GroupBySystemStreamPartition",
}


@dataclass(frozen=True)
class TaskSettings:
    """The run loop's view: task.* keys."""

    task_class: str
    inputs: tuple[SystemStream, ...]
    window_ms: int
    commit_ms: int
    max_concurrency: int
    callback_timeout_ms: int
    drain_callback_timeout_ms: int
    shutdown_ms: int
    max_idle_ms: int
    poll_interval_ms: int
    drop_deserialization_errors: bool
    drop_serialization_errors: bool
    drop_producer_errors: bool
    ignored_exceptions: tuple[str, ...]
    fetch_threshold: int
    consumer_batch_size: int
    window_on_end_of_stream: bool = False
    # task.broadcast.inputs: partitions every task reads whole, each task checkpointing them on its own.
    broadcast_inputs: frozenset[SystemStreamPartition] = frozenset()
    # Streams read only for their broadcast partitions (named in task.broadcast.inputs, not in task.inputs).
    broadcast_only: frozenset[SystemStream] = frozenset()
    # The application's intermediate streams (partition_by): inputs that no end of stream of their
    # system ends; a task reading one ends when its operators say so.
    intermediate: frozenset[SystemStream] = frozenset()
    # task.checkpoint.commit.group.offsets: after each checkpoint, its input offsets go to the
    # consumer group too, for lag tools (samzamp.commit.group_offsets); samzamp never reads them.
    commit_group_offsets: bool = True
    # task.commit.stores.async: a commit's stores are written in its asynchronous phase, the task at work.
    commit_stores_async: bool = True


@dataclass(frozen=True)
class SystemSettings:
    """One system: its kind (systems.<s>.samza.factory), serde defaults and client configs."""

    name: str
    kind: SystemKind
    key_serde: str | None
    msg_serde: str | None
    offset_default: str
    reset_offset: bool
    replication_factor: int
    default_partitions: int
    # librdkafka settings, left out of the repr because they may hold secrets (sasl.password).
    consumer: dict[str, Any] = field(repr=False)
    producer: dict[str, Any] = field(repr=False)
    bootstrap_servers: str | None  # resolved from any of _BOOTSTRAP_KEYS; None: the embedded broker
    kafka: dict[str, Any] = field(default_factory=dict, repr=False)  # systems.<s>.kafka.*: every client's

    @property
    def factory(self) -> str:
        """The kind's samzamp name (a Samza class name in the config is read as the kind it means)."""
        return self.kind.name


@dataclass(frozen=True)
class StreamSettings:
    """One stream: its system, physical name, serdes, starting offset rules and topic configs."""

    stream_id: str
    system: str
    physical_name: str
    key_serde: str | None
    msg_serde: str | None
    offset_default: str
    reset_offset: bool
    partitions: int | None
    topic_configs: dict[str, str] = field(default_factory=dict)
    intermediate: bool = False  # an application's partition_by stream (streams.<id>.samza.intermediate)
    bounded: bool = False  # each partition ends where it ended when its reading began (streams.<id>.samza.bounded)

    @property
    def system_stream(self) -> SystemStream:
        return SystemStream(self.system, self.physical_name)


@dataclass(frozen=True)
class PrometheusSettings:
    """The Prometheus and health endpoint: metrics.prometheus.host and metrics.prometheus.port (0:
    any free port)."""

    host: str
    port: int


def checkpoint_topic_name(job_name: str, job_id: str) -> str:
    """Samza's checkpoint topic name (underscores in name and id become dashes)."""
    return f"__samza_checkpoint_ver_1_for_{job_name.replace('_', '-')}_{job_id.replace('_', '-')}"


def coordinator_stream_name(job_name: str, job_id: str) -> str:
    """Samza's coordinator stream name (underscores in name and id become dashes)."""
    return f"__samza_coordinator_{job_name.replace('_', '-')}_{job_id.replace('_', '-')}"


@dataclass(frozen=True)
class JobSettings:
    """Everything the container reads from the config, validated."""

    config: Config
    name: str
    id: str
    default_system: str | None
    pool_size: int
    worker_ring_bytes: int
    worker_batch_size: int
    grouper: str
    checkpoint_system: str
    checkpoint_topic: str
    checkpoint_replication_factor: int
    checkpoint_segment_bytes: int
    checkpoint_validation: bool
    metrics_log_interval_ms: int
    task: TaskSettings
    systems: dict[str, SystemSettings]
    serializers: dict[str, str]
    stores: dict[str, StoreSettings] = field(default_factory=dict)
    logged_store_base_dir: str = "state"
    non_logged_store_base_dir: str = "state"
    transactional_restore: bool = True
    retain_existing_state: bool = True  # a store without a checkpointed marker keeps its changelog's state
    input_expansion: bool = True  # new input partitions join old tasks (newPartition % oldCount)
    elasticity_factor: int = 1  # key buckets per partition: each a virtual task (1: a task per partition)
    coordinator_system: str = ""
    coordinator_topic: str = ""
    coordinator_replication_factor: int = 1
    run_id: str | None = None  # app.run.id: None means generated (or continued) at start
    drain_monitor_enabled: bool = True
    drain_monitor_poll_ms: int = 10000
    coordinator_factory: str = "passthrough"  # job.coordinator.factory: passthrough or zk (samzamp.coordinator.factory)
    zk: ZkSettings | None = None  # standalone mode (job.coordinator.factory = zk); None: passthrough
    warnings: tuple[ConfigWarning, ...] = ()  # accepted keys worth a word, logged once at start
    application: ApplicationPlan | None = None  # app.class's graph and what it derives; None: task.class
    prometheus: PrometheusSettings | None = None  # metrics.prometheus.*; None: no endpoint (port -1)

    @property
    def logged_stores(self) -> frozenset[str]:
        """The stores with a changelog: every task's checkpoint carries a marker for each of them."""
        return frozenset(n for n, s in self.stores.items() if s.changelog is not None)

    @classmethod
    def from_config(cls, config: Config) -> JobSettings:
        name = _job_name_or_id(config, "name") or config.require_str(
            "job.name", 'name the job, e.g. job.name = "word-count"'
        )
        job_id = _job_name_or_id(config, "id") or "1"
        default_system = config.get_str("job.default.system")
        systems = {s: _system(config, s) for s in _system_names(config)}
        if default_system is not None and default_system not in systems:
            raise ConfigError(
                "job.default.system",
                f"names system {default_system!r}, but there is no systems.{default_system}.samza.factory",
            )
        if default_system is None and len(systems) == 1:
            # The only system is the one every stream, changelog and checkpoint that names none is on.
            default_system = next(iter(systems))
        application: ApplicationPlan | None = None
        if config.get_str("app.class"):
            # The graph derives task.inputs, intermediate streams and operator stores: the rest of
            # the settings read the derived config, as they would a low-level job's.
            config, application = plan_application(config, name, job_id, default_system)

        grouper_raw = config.get_str("job.systemstreampartition.grouper.factory", "GroupByPartition") or ""
        grouper = _GROUPERS.get(grouper_raw)
        if grouper is None:
            raise ConfigError(
                "job.systemstreampartition.grouper.factory",
                f"unknown grouper {grouper_raw!r}; use GroupByPartition or GroupBySystemStreamPartition",
            )
        pool_size = config.get_int("job.container.thread.pool.size", 0)
        ring_bytes = config.get_int("job.container.worker.ring.bytes", 8 << 20)
        if ring_bytes & (ring_bytes - 1) or not 4096 <= ring_bytes <= 1 << 30:
            raise ConfigError(
                "job.container.worker.ring.bytes", f"must be a power of two from 4096 to 1073741824; got {ring_bytes}"
            )
        if pool_size >= 2:
            for s_name, s_settings in systems.items():
                if not s_settings.kind.shared:
                    raise ConfigError(
                        "job.container.thread.pool.size",
                        f"worker processes (>= 2) need systems they can reach themselves; system {s_name!r} is "
                        f"{s_settings.kind}, in this process only (use 0 or 1, or a "
                        f"{system_kind_names(lambda k: k.shared)} system)",
                    )
        zk = zk_settings(config)
        if zk is None and config.get_int("job.container.count", 1) != 1:
            raise ConfigError(
                "job.container.count",
                'a passthrough job is one container; use 1, or job.coordinator.factory = "zk" for several processors',
            )
        if config.get_bool("task.async.commit", False):
            raise ConfigError("task.async.commit", "asynchronous commit is not supported; set it to false")

        checkpoint_system = config.get_str("task.checkpoint.system") or default_system
        if checkpoint_system is None:
            raise ConfigError(
                "task.checkpoint.system", "is required when there is no job.default.system and more than one system"
            )
        if checkpoint_system not in systems:
            raise ConfigError(
                "task.checkpoint.system",
                f"names system {checkpoint_system!r}, which has no systems.{checkpoint_system}.samza.factory",
            )
        if not systems[checkpoint_system].kind.checkpoints:
            raise ConfigError(
                "task.checkpoint.system",
                f"names system {checkpoint_system!r}, which is {systems[checkpoint_system].kind} and cannot hold "
                f"checkpoints; name a {system_kind_names(lambda k: k.checkpoints)} system",
            )

        coordinator_system = config.get_str("job.coordinator.system") or checkpoint_system
        if coordinator_system not in systems:
            raise ConfigError(
                "job.coordinator.system",
                f"names system {coordinator_system!r}, which has no systems.{coordinator_system}.samza.factory",
            )
        if not systems[coordinator_system].kind.coordinator_stream:
            raise ConfigError(
                "job.coordinator.system",
                f"names system {coordinator_system!r}, which is {systems[coordinator_system].kind} and cannot hold "
                f"the coordinator stream; name a {system_kind_names(lambda k: k.coordinator_stream)} system",
            )
        for key in sorted(k for k in config if k.startswith("streams.") and k.endswith(".samza.system")):
            # A stream of an unknown system would never be created nor found: refuse the name.
            named = config.get_str(key)
            if named not in systems:
                raise ConfigError(key, f"names system {named!r}, which has no systems.{named}.samza.factory")
        if default_system is None:
            for sid in sorted({k.split(".")[1] for k in config if k.startswith("streams.") and k.count(".") >= 2}):
                # Its settings would apply to no topic: samzamp would neither create it nor find it.
                if config.get_str(f"streams.{sid}.samza.system") is None:
                    raise ConfigError(
                        f"streams.{sid}.samza.system",
                        "is required: the job has several systems and no job.default.system",
                    )

        serializers = {
            key[len("serializers.registry.") : -len(".class")]: _serde_path(key, str(config[key]))
            for key in config
            if key.startswith("serializers.registry.") and key.endswith(".class")
        }
        task = _task(config, systems, default_system, application is not None)
        return cls(
            config=config,
            name=name,
            id=job_id,
            default_system=default_system,
            pool_size=pool_size,
            worker_ring_bytes=ring_bytes,
            worker_batch_size=config.get_int("job.container.worker.batch.size", 256),
            grouper=grouper,
            checkpoint_system=checkpoint_system,
            checkpoint_topic=checkpoint_topic_name(name, job_id),
            checkpoint_replication_factor=config.get_int("task.checkpoint.replication.factor", 1),
            checkpoint_segment_bytes=config.get_int("task.checkpoint.segment.bytes", 26214400),
            checkpoint_validation=config.get_bool("job.checkpoint.validation.enabled", True),
            metrics_log_interval_ms=config.get_int("metrics.log.interval.ms", 60000),
            task=task,
            stores=_stores(config, systems, default_system),
            logged_store_base_dir=config.get_str("job.logged.store.base.dir") or "state",
            non_logged_store_base_dir=config.get_str("job.non-logged.store.base.dir") or "state",
            transactional_restore=config.get_bool("task.transactional.state.restore.enabled", True),
            retain_existing_state=config.get_bool("task.transactional.state.retain.existing.state", True),
            input_expansion=config.get_bool("job.systemstreampartition.input.expansion.enabled", True),
            elasticity_factor=config.get_int("job.elasticity.factor", 1),
            systems=systems,
            serializers=serializers,
            coordinator_system=coordinator_system,
            coordinator_topic=coordinator_stream_name(name, job_id),
            coordinator_replication_factor=config.get_int("job.coordinator.replication.factor", 1),
            run_id=config.get_str("app.run.id") or None,
            drain_monitor_enabled=config.get_bool("job.drain-monitor.enabled", True),
            drain_monitor_poll_ms=config.get_int("job.drain-monitor.poll.interval.ms", 10000),
            coordinator_factory=coordinator_factory(config),
            zk=zk,
            warnings=tuple(standalone_warnings(config)),
            application=application,
            prometheus=_prometheus(config),
        )

    def stream(self, system_stream: SystemStream) -> StreamSettings:
        """Settings of the stream at ``system_stream`` (system + physical name)."""
        return _stream(self.config, self.systems, system_stream)

    def reset_inputs(self) -> list[SystemStream]:
        """The inputs whose checkpointed offsets are ignored (streams.<id>.samza.reset.offset)."""
        return [ss for ss in self.task.inputs if self.stream(ss).reset_offset]


def _prometheus(config: Config) -> PrometheusSettings | None:
    """The endpoint's settings, None when metrics.prometheus.port is -1 (off, the default). A port
    set without prometheus_client installed is refused here, before anything starts."""
    port = config.get_int("metrics.prometheus.port", -1)
    if port == -1:
        return None
    if not PROMETHEUS.installed():
        raise ConfigError(
            "metrics.prometheus.port",
            f"the endpoint needs prometheus_client: pip install 'samzamp[{PROMETHEUS.name}]', or remove the key "
            "(-1: off)",
        )
    host = config.get_str("metrics.prometheus.host", "127.0.0.1") or ""
    if not host.strip():
        raise ConfigError("metrics.prometheus.host", "is empty: name an address, e.g. 127.0.0.1 or 0.0.0.0")
    return PrometheusSettings(host, port)


def _job_name_or_id(config: Config, what: str) -> str | None:
    """job.<what>, else app.<what> (Samza's planner sets the job's from the app's); the two must agree."""
    job = config.get_str(f"job.{what}")
    app = config.get_str(f"app.{what}")
    if job and app and job != app:
        raise ConfigError(
            f"app.{what}",
            f"is {app!r} but job.{what} is {job!r}; Samza names the job after app.{what}, so set only one of them",
        )
    return job or app or None


# Samza's built-in serde factories and the samzamp serdes that read and write the same bytes.
_SAMZA_SERDES = {
    "org.apache.samza.serializers.JsonSerdeFactory": "samzamp.serde.registry:JsonSerde",
    "org.apache.samza.serializers.JsonSerdeV2Factory": "samzamp.serde.registry:JsonSerde",
    "org.apache.samza.serializers.StringSerdeFactory": "samzamp.serde.registry:StringSerde",
    "org.apache.samza.serializers.LongSerdeFactory": "samzamp.serde.registry:LongSerde",
    "org.apache.samza.serializers.IntegerSerdeFactory": "samzamp.serde.registry:IntegerSerde",
    "org.apache.samza.serializers.ByteSerdeFactory": "samzamp.serde.registry:BytesSerde",
    "org.apache.samza.serializers.ByteBufferSerdeFactory": "samzamp.serde.registry:BytesSerde",
}


def _serde_path(key: str, value: str) -> str:
    path = _SAMZA_SERDES.get(value.strip())
    if path is not None:
        return path
    if value.startswith(("org.apache.samza.", "com.linkedin.")):
        raise ConfigError(
            key,
            f"{value!r} is a Java serde factory; samzamp cannot run Java: use a built-in serde (bytes, string, "
            "json, msgpack, integer, long) or a Python one as module:Class",
        )
    return value


def _system_names(config: Config) -> list[str]:
    names = sorted({k.split(".")[1] for k in config if k.startswith("systems.") and k.count(".") >= 2})
    for s in names:
        if f"systems.{s}.samza.factory" not in config:
            raise ConfigError(
                f"systems.{s}.samza.factory",
                f"system {s!r} is configured but has no factory; set it to {system_kind_names()}",
            )
    return names


@dataclass(frozen=True)
class StoreSettings:
    """One store: stores.<name>.*."""

    name: str
    factory: str
    changelog: SystemStream | None
    key_serde: str
    msg_serde: str
    map_size: int
    sync: bool
    checksums: bool = True
    write_batch_size: int = 10_000  # keys whose newest write waits before it is sent to the changelog


def _stores(config: Config, systems: dict[str, SystemSettings], default_system: str | None) -> dict[str, StoreSettings]:
    # Every stores.<name>.* key makes a store: one without a factory is an error, never ignored.
    names = sorted(
        {
            k.split(".")[1]
            for k in config
            if k.startswith("stores.") and k.count(".") >= 2 and k not in GLOBAL_STORE_KEYS
        }
    )
    out: dict[str, StoreSettings] = {}
    for name in names:
        p = f"stores.{name}."
        factory = config.require_str(
            p + "factory", f'store {name!r} is configured but has no engine; set stores.{name}.factory = "lmdb"'
        )
        if factory != "lmdb":
            if "RocksDb" in factory or "rocksdb" in factory.lower():
                raise ConfigError(
                    p + "factory",
                    f"{factory!r} is Samza's RocksDB engine; samzamp's engine is LMDB: set it to lmdb (size it with "
                    f"stores.{name}.lmdb.map.size; its changelog and serdes stay as they are)",
                )
            raise ConfigError(p + "factory", f"unknown store engine {factory!r}; use lmdb")
        key_serde = config.require_str(p + "key.serde", "a serde name, e.g. string")
        msg_serde = config.require_str(p + "msg.serde", "a serde name, e.g. json")
        changelog: SystemStream | None = None
        raw = config.get_str(p + "changelog")
        if raw:
            system, dot, stream = raw.partition(".")
            if not dot:
                cl_system = config.get_str("job.changelog.system") or default_system
                if cl_system is None:
                    raise ConfigError(
                        p + "changelog", f"{raw!r} names no system: write system.stream, or set job.changelog.system"
                    )
                system, stream = cl_system, raw
            if not stream:
                raise ConfigError(p + "changelog", f"{raw!r} is not system.stream")
            if system not in systems:
                raise ConfigError(
                    p + "changelog", f"names system {system!r}, which has no systems.{system}.samza.factory"
                )
            if not systems[system].kind.changelogs:
                raise ConfigError(
                    p + "changelog",
                    f"system {system!r} is {systems[system].kind}; changelogs need "
                    f"{system_kind_names(lambda k: k.changelogs)}",
                )
            changelog = SystemStream(system, stream)
        out[name] = StoreSettings(
            name,
            factory,
            changelog,
            key_serde,
            msg_serde,
            config.get_int(p + "lmdb.map.size", 64 << 20),
            config.get_bool(p + "lmdb.sync", True),
            config.get_bool(p + "lmdb.checksums", True),
            config.get_int(p + "write.batch.size", 10_000),
        )
    owner: dict[SystemStream, str] = {}
    for name, s in out.items():
        if s.changelog is None:
            continue
        first = owner.setdefault(s.changelog, name)
        if first != name:
            raise ConfigError(
                f"stores.{name}.changelog",
                f"{s.changelog.system}.{s.changelog.stream} is the changelog of store {first!r} too: give each store "
                "a changelog of its own (a restore of either would read the other's records into it)",
            )
    return out


def _system(config: Config, s: str) -> SystemSettings:
    raw = config.require_str(f"systems.{s}.samza.factory", system_kind_names())
    kind = system_kind(raw)
    if kind is None:
        raise ConfigError(f"systems.{s}.samza.factory", f"unknown system factory {raw!r}; use {system_kind_names()}")
    p = f"systems.{s}."
    offset_default = (
        config.get_str(p + "default.stream.samza.offset.default")
        or config.get_str(p + "samza.offset.default")
        or "upcoming"
    )
    return SystemSettings(
        name=s,
        kind=kind,
        key_serde=config.get_str(p + "default.stream.samza.key.serde") or config.get_str(p + "samza.key.serde"),
        msg_serde=config.get_str(p + "default.stream.samza.msg.serde") or config.get_str(p + "samza.msg.serde"),
        offset_default=offset_default,
        reset_offset=config.get_bool(p + "default.stream.samza.reset.offset", False),
        replication_factor=config.get_int(p + "default.stream.replication.factor", 1),
        default_partitions=config.get_int(p + "default.stream.partitions", 1),
        consumer=_client_block(config, p + "consumer."),
        producer=_client_block(config, p + "producer."),
        bootstrap_servers=_bootstrap_servers(config, p),
        kafka=_client_block(config, p + "kafka."),
    )


def _client_block(config: Config, prefix: str) -> dict[str, Any]:
    """librdkafka settings under ``prefix``: each a string, number or boolean."""
    block = config.subset(prefix)
    for k, v in block.items():
        if isinstance(v, (list, dict)):
            raise ConfigError(prefix + k, "must be a string, number or boolean (it is a librdkafka setting)")
    return block


# Where a system's brokers may be named: Samza's shorthand, the common client block, Samza's
# per-client keys. Every client of a system reaches the one cluster they name.
_BOOTSTRAP_KEYS = (
    "bootstrap.servers",
    "kafka.bootstrap.servers",
    "consumer.bootstrap.servers",
    "producer.bootstrap.servers",
)


def _bootstrap_servers(config: Config, p: str) -> str | None:
    """The system's bootstrap.servers from whichever keys name it; keys that name other brokers are an error."""
    for block in ("kafka.", "consumer.", "producer."):
        if p + block + "metadata.broker.list" in config:
            raise ConfigError(p + block + "metadata.broker.list", f"name the brokers with {p}bootstrap.servers instead")
    found = [(p + k, v) for k in _BOOTSTRAP_KEYS if (v := config.get_str(p + k))]
    if not found:
        return None
    first_key, first = found[0]
    for key, value in found[1:]:
        if sorted(s.strip() for s in value.split(",")) != sorted(s.strip() for s in first.split(",")):
            raise ConfigError(
                key, f"names other brokers than {first_key}; every client of a system reaches one cluster: keep one"
            )
    return first


def _stream_id_for(config: Config, system_stream: SystemStream) -> str:
    for key in config:
        if key.startswith("streams.") and key.endswith(".samza.physical.name") and config[key] == system_stream.stream:
            sid = key[len("streams.") : -len(".samza.physical.name")]
            if (config.get_str(f"streams.{sid}.samza.system") or system_stream.system) == system_stream.system:
                return sid
    # The stream's own name is its id only if that id is not mapped to another topic.
    own = config.get_str(f"streams.{system_stream.stream}.samza.physical.name")
    return system_stream.stream if own in (None, system_stream.stream) else f"{system_stream.stream}\0unconfigured"


def _stream(config: Config, systems: dict[str, SystemSettings], ss: SystemStream) -> StreamSettings:
    sid = _stream_id_for(config, ss)
    p = f"streams.{sid}."
    system = systems[ss.system]
    # Samza's precedence: the stream's own topic configs over its system's default.stream.* ones.
    defaults = config.subset(f"systems.{ss.system}.default.stream.")
    topic_configs = {
        k: str(v)
        for k, v in (defaults | config.subset(p)).items()
        if not k.startswith("samza.") and k not in ("partitions", "replication.factor")
    }
    partitions = config.get_int(p + "partitions", 0) or None
    intermediate = config.get_bool(p + "samza.intermediate", False)
    for flag in ("bootstrap", "broadcast"):
        if config.get_bool(f"{p}samza.{flag}", False):
            raise ConfigError(
                f"{p}samza.{flag}", f"{flag} streams are not supported yet; remove the key or set it to false"
            )
    return StreamSettings(
        stream_id=sid,
        system=ss.system,
        physical_name=ss.stream,
        key_serde=config.get_str(p + "samza.key.serde") or system.key_serde,
        msg_serde=config.get_str(p + "samza.msg.serde") or system.msg_serde,
        # An intermediate stream is the job's own: a task that starts without a checkpoint reads
        # what other processors' tasks wrote before it, whatever the user's default is.
        offset_default="oldest"
        if intermediate
        else (config.get_str(p + "samza.offset.default") or system.offset_default),
        reset_offset=config.get_bool(p + "samza.reset.offset", False) or system.reset_offset,
        partitions=partitions,
        topic_configs=topic_configs,
        intermediate=intermediate,
        bounded=config.get_bool(p + "samza.bounded", False) and not intermediate,
    )


def parse_system_stream(
    key: str, text: str, default_system: str | None, systems: dict[str, SystemSettings]
) -> SystemStream:
    """``system.stream`` (or a bare stream with job.default.system) checked against the configured systems."""
    system, dot, stream = text.partition(".")
    if not dot:
        if default_system is None:
            raise ConfigError(key, f"{text!r} names no system; write it as system.stream or set job.default.system")
        system, stream = default_system, text
    if not stream:
        raise ConfigError(key, f"{text!r} has an empty stream name; write it as system.stream")
    if system not in systems:
        raise ConfigError(key, f"{text!r} names system {system!r}, which has no systems.{system}.samza.factory")
    return SystemStream(system, stream)


def _task(
    config: Config, systems: dict[str, SystemSettings], default_system: str | None, application: bool
) -> TaskSettings:
    task_class = (
        "" if application else config.require_str("task.class", "the task class as module:Class (or app.class)")
    )
    raw_inputs = config.get_list("task.inputs")
    if not raw_inputs:
        raise ConfigError("task.inputs", "is required: list the input streams as system.stream")
    inputs = tuple(parse_system_stream("task.inputs", i, default_system, systems) for i in raw_inputs)
    if len(set(inputs)) != len(inputs):
        raise ConfigError("task.inputs", "lists a stream twice")
    broadcast = _broadcast_inputs(config, systems, default_system)
    broadcast_only = frozenset(SystemStream(s.system, s.stream) for s in broadcast) - set(inputs)
    inputs += tuple(sorted(broadcast_only))
    intermediate = frozenset(ss for ss in inputs if _stream(config, systems, ss).intermediate)
    return TaskSettings(
        task_class=task_class,
        inputs=inputs,
        window_ms=config.get_int("task.window.ms", -1),
        commit_ms=config.get_int("task.commit.ms", 60000),
        max_concurrency=config.get_int("task.max.concurrency", 1),
        callback_timeout_ms=config.get_int("task.callback.timeout.ms", -1),
        drain_callback_timeout_ms=config.get_int("task.callback.drain.timeout.ms", -1),
        shutdown_ms=config.get_int("task.shutdown.ms", 30000),
        max_idle_ms=config.get_int("task.max.idle.ms", 10),
        poll_interval_ms=config.get_int("task.poll.interval.ms", 50),
        drop_deserialization_errors=config.get_bool("task.drop.deserialization.errors", False),
        drop_serialization_errors=config.get_bool("task.drop.serialization.errors", False),
        drop_producer_errors=config.get_bool("task.drop.producer.errors", False),
        ignored_exceptions=tuple(config.get_list("task.ignored.exceptions")),
        fetch_threshold=config.get_int("task.fetch.threshold", 50000),
        consumer_batch_size=config.get_int("task.consumer.batch.size", 64),
        window_on_end_of_stream=config.get_bool("task.window.on.end.of.stream", False),
        commit_group_offsets=config.get_bool("task.checkpoint.commit.group.offsets", True),
        commit_stores_async=config.get_bool("task.commit.stores.async", True),
        broadcast_inputs=broadcast,
        broadcast_only=broadcast_only,
        intermediate=intermediate,
    )


def _broadcast_inputs(
    config: Config, systems: dict[str, SystemSettings], default_system: str | None
) -> frozenset[SystemStreamPartition]:
    """task.broadcast.inputs in Samza's forms: ``system.stream#3`` and ``system.stream#[0-2]``."""
    key = "task.broadcast.inputs"
    out: set[SystemStreamPartition] = set()
    for entry in config.get_list(key):
        text = str(entry).strip()
        stream_text, hash_sign, partitions = text.partition("#")
        match = re.fullmatch(r"(\d+)|\[(\d+)-(\d+)\]", partitions.strip())
        if not hash_sign or match is None:
            raise ConfigError(key, f"{text!r}: write system.stream#N or system.stream#[first-last]")
        ss = parse_system_stream(key, stream_text.strip(), default_system, systems)
        if match.group(1) is not None:
            first = last = int(match.group(1))
        else:
            first, last = int(match.group(2)), int(match.group(3))
            if first > last:
                raise ConfigError(key, f"{text!r}: the range [{first}-{last}] is empty; write [low-high]")
        out.update(SystemStreamPartition(ss.system, ss.stream, p) for p in range(first, last + 1))
    return frozenset(out)
