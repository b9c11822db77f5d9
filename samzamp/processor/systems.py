"""The system clients of one processor: admins, producers and consumers, built from the config.

They live as long as the process (the ``StreamProcessor`` starts and stops them) and outlast any one
job model: a container that applies a new model reuses them. Each system's clients come from the
factory of its kind (``samzamp.systems.registry``); this process may start what a system with no
address needs (the Kafka system's embedded broker, memory only), on first use.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from samzamp.api.envelope import SystemStream
from samzamp.api.errors import ConfigError, SystemFailureError
from samzamp.config.application import ApplicationPlan
from samzamp.config.settings import JobSettings
from samzamp.config.system_kinds import INMEMORY, KAFKA
from samzamp.metrics.registry import MetricsRegistry
from samzamp.systems.base import GroupOffsetCommitter, SystemAdmin, SystemConsumer, SystemProducer
from samzamp.systems.factory import Place, System
from samzamp.systems.registry import open_system

if TYPE_CHECKING:
    from samzamp.coordinator.task_history import TaskHistory
    from samzamp.model.job_model import JobModel
    from samzamp.systems.inmemory.system import InMemoryStreams
    from samzamp.systems.kafka.changelog import ChangelogProducer
    from samzamp.systems.kafka.client_config import KafkaClientSettings

__all__ = ["Systems"]

log = logging.getLogger(__name__)

# How long a stop waits for the last input offsets committed to a consumer group (lag tools).
GROUP_COMMIT_STOP_S = 10.0


class Systems:
    """Every system's admin and producer, the checkpoint producer, the changelog producers (made
    when a store first needs them) and a consumer factory. ``start`` connects, ``stop`` flushes
    and closes (and stops the embedded broker)."""

    def __init__(
        self,
        settings: JobSettings,
        inmemory: dict[str, InMemoryStreams] | None = None,
        metrics: MetricsRegistry | None = None,
    ) -> None:
        """``inmemory``: the in-memory systems' streams, by system (``samzamp.testing`` hands its own in).
        ``metrics``: where the producers' waits for room are timed (``samzamp.systems.kafka.buffer_waits``)."""
        self.settings = settings
        self.metrics = metrics
        self.inmemory: dict[str, InMemoryStreams] = inmemory if inmemory is not None else {}
        self._place = Place(embedded=True, shared={INMEMORY.name: self.inmemory})
        self._opened: dict[str, System] = {}  # by name: each system's clients, made by its kind's factory
        self.admins: dict[str, SystemAdmin] = {}
        self.producers: dict[str, SystemProducer] = {}
        self.checkpoint_producer: SystemProducer | None = None
        # The clients of each system that can hold changelogs: the stores read their changelogs with them.
        self.kafka: dict[str, KafkaClientSettings] = {}
        self._changelog_producers: dict[str, ChangelogProducer] | None = None
        self._group_offsets: dict[str, GroupOffsetCommitter | None] = {}
        self._metrics_producers: dict[str, SystemProducer] = {}

    def start(self) -> None:
        st = self.settings
        for name, s in st.systems.items():
            system = open_system(st, name, self._place)
            self._opened[name] = system
            if s.kind.changelogs:
                self.kafka[name] = system.changelog_clients()
            self.admins[name] = system.admin()
            self.producers[name] = system.producer()
            if self.metrics is not None and s.kind is KAFKA:
                from samzamp.systems.kafka.buffer_waits import time_buffer_waits

                time_buffer_waits(self.metrics, [self.producers[name]])
            if name == st.checkpoint_system:
                self.checkpoint_producer = system.checkpoint_producer(self.producers[name])

    def producer_for_metadata(self, system: str) -> SystemProducer:
        """The producer for writes of the job's own records (checkpoints, coordinator stream)."""
        if system == self.settings.checkpoint_system and self.checkpoint_producer is not None:
            return self.checkpoint_producer
        return self.producers[system]

    @property
    def consumer_group(self) -> str:
        """The consumer group of the input consumers (Samza's ``<job.name>-<job.id>``, prefixed), where
        a system's config does not name another (``systems.<s>.consumer.group.id``)."""
        return f"samzamp-{self.settings.name}-{self.settings.id}"

    def metrics_producer(self, system: str) -> SystemProducer:
        """The producer of the metrics snapshots sent to ``system`` (made on first use)."""
        producer = self._metrics_producers.get(system)
        if producer is None:
            producer = self._metrics_producers[system] = self._opened[system].metrics_producer(self.producers[system])
        return producer

    def consumer(self, system: str) -> SystemConsumer:
        return self._opened[system].consumer(self.consumer_group)

    def group_offsets(self, system: str) -> GroupOffsetCommitter | None:
        """The committer of input offsets to the group of ``system``'s input consumers (made on
        first use, stopped by ``stop``); None for a system without consumer groups."""
        if system not in self._group_offsets:
            self._group_offsets[system] = self._opened[system].group_offsets(self.consumer_group)
        return self._group_offsets[system]

    def changelog_producers(self) -> dict[str, ChangelogProducer]:
        """The stores' changelog producers, one per changelog system (made on first use)."""
        if self._changelog_producers is None:
            from samzamp.systems.kafka.changelog import changelog_producers

            self._changelog_producers = changelog_producers(self.settings, self.kafka)
            if self.metrics is not None:
                from samzamp.systems.kafka.buffer_waits import time_buffer_waits

                time_buffer_waits(self.metrics, changelogs=self._changelog_producers.values())
        return self._changelog_producers

    def worker_config(self) -> dict[str, Any]:
        """The job's config for worker processes: each system's address as this process resolved it
        (a Kafka system's brokers, maybe the embedded broker's) in place of what the config said.
        An application's config goes as the user wrote it: each worker plans it itself, from its own
        ``describe``, and compares the graph it gets with this process's."""
        app = self.settings.application
        derived = app.derived if app is not None else frozenset()
        config = {k: v for k, v in self.settings.config.items() if k not in derived}
        for system in self._opened.values():
            config.update(system.address_config())
        return config

    # -- streams --------------------------------------------------------------------------------
    def create_streams(self) -> None:
        """Create configured streams (streams.<id>.samza.system or .partitions) that do not exist yet."""
        st = self.settings
        config = st.config
        ids = {k.split(".")[1] for k in config if k.startswith("streams.") and k.count(".") >= 2}
        wanted: list[SystemStream] = []
        for sid in sorted(ids):
            system = config.get_str(f"streams.{sid}.samza.system") or st.default_system
            physical = config.get_str(f"streams.{sid}.samza.physical.name") or sid
            if system is not None and system in st.systems:
                wanted.append(SystemStream(system, physical))
        for ss in wanted:
            stream = st.stream(ss)
            admin = self.admins[ss.system]
            if stream.intermediate or ss.stream in admin.partition_counts([ss.stream]):
                continue
            partitions = stream.partitions or st.systems[ss.system].default_partitions
            admin.create_stream(ss.stream, partitions, st.systems[ss.system].replication_factor, stream.topic_configs)
        sources = [ss for ss in st.task.inputs if ss not in st.task.intermediate]
        missing = [ss for ss in sources if ss.stream not in self.admins[ss.system].partition_counts([ss.stream])]
        if missing:
            names = ", ".join(str(ss) for ss in missing)
            raise SystemFailureError(
                f"input stream {names} does not exist; create it, or set streams.<id>.partitions so samzamp creates it"
            )
        if st.application is not None:
            self._create_intermediate_streams(st.application, sources)

    def _create_intermediate_streams(self, app: ApplicationPlan, sources: list[SystemStream]) -> None:
        """Each intermediate stream of the application, created when missing with
        job.intermediate.stream.partitions partitions (default: the largest input's count). One
        that exists with another count is a ConfigError: keys would land elsewhere and its
        end-of-stream counts would change. Then both sides of each stream-stream join must come
        from streams with one partition count."""
        st = self.settings
        counts: dict[SystemStream, int] = {}
        for ss in sources:
            counts[ss] = self.admins[ss.system].partition_counts([ss.stream])[ss.stream]
        default = max(counts.values(), default=1)
        for ss in sorted(app.intermediate):
            stream = st.stream(ss)
            want = stream.partitions or default
            admin = self.admins[ss.system]
            have = admin.partition_counts([ss.stream]).get(ss.stream)
            if have is None:
                admin.create_stream(ss.stream, want, st.systems[ss.system].replication_factor, stream.topic_configs)
                have = admin.partition_counts([ss.stream]).get(ss.stream, want)
            if have != want:
                how = (
                    "job.intermediate.stream.partitions"
                    if stream.partitions
                    else "the largest input partition count, as job.intermediate.stream.partitions is unset"
                )
                raise ConfigError(
                    "job.intermediate.stream.partitions",
                    f"intermediate stream {ss.stream!r} exists with {have} partitions, but the job wants {want} "
                    f"({how}); set job.intermediate.stream.partitions = {have}, or drain the job and delete the topic",
                )
            counts[ss] = have
        for join in app.joins:
            left = {counts[s] for s in join.left}
            right = {counts[s] for s in join.right}
            if len(left | right) > 1:
                raise ConfigError(
                    "app.class",
                    f"join {join.op_id!r} reads streams of different partition counts "
                    f"({', '.join(f'{s.stream}: {counts[s]}' for s in sorted(join.left | join.right))}); a key must be in "
                    "the same task on both sides: re-key one side with partition_by, or give the inputs one count",
                )

    def create_changelogs(self, model: JobModel, history: TaskHistory) -> None:
        """Each changelog topic: compacted, created when missing with a partition for every task
        the job has had (``history``). One that exists must have a partition for every task of
        ``model``: else ConfigError, before anything is restored or written."""
        st = self.settings
        partitions = max(history.changelog.values(), default=-1) + 1
        needs = max((t.changelog_partition for t in model.tasks.values()), default=-1) + 1
        for store in st.stores.values():
            if store.changelog is None:
                continue
            admin = self.admins[store.changelog.system]
            topic = store.changelog.stream
            have = admin.partition_counts([topic]).get(topic)
            if have is None:
                prefix = f"stores.{store.name}.changelog.kafka."
                configs = {"cleanup.policy": "compact"}
                configs.update({k[len(prefix) :]: str(v) for k, v in st.config.items() if k.startswith(prefix)})
                rf = st.systems[store.changelog.system].replication_factor
                admin.create_stream(topic, max(partitions, 1), rf, configs)
            elif have < needs:
                short = sorted(
                    (t for t in model.tasks.values() if t.changelog_partition >= have),
                    key=lambda t: t.changelog_partition,
                )
                raise ConfigError(
                    f"stores.{store.name}.changelog",
                    f"changelog topic {store.changelog} of store {store.name!r} has {have} partitions, but the job "
                    f"needs {needs}: task(s) {', '.join(repr(t.name) for t in short[:3])}"
                    f"{' ...' if len(short) > 3 else ''} keep their state in partition(s) "
                    f"{', '.join(str(t.changelog_partition) for t in short[:3])}. Add partitions to the topic "
                    f"(to {needs}), or, if the input has more partitions than before, set "
                    "job.systemstreampartition.input.expansion.enabled = true so they join the existing tasks",
                )

    def stop(self) -> None:
        # Every client goes before the embedded broker (``_place``), so none of them loses its
        # connection while it is still open (librdkafka says so, as a "Disconnected" line).
        for committer in self._group_offsets.values():
            if committer is not None:
                committer.stop(GROUP_COMMIT_STOP_S)
        producers: list[Any] = [*self.producers.values()]
        producers.extend((self._changelog_producers or {}).values())
        for extra in [self.checkpoint_producer, *self._metrics_producers.values()]:
            if extra is not None and extra not in producers:
                producers.append(extra)
        for p in producers:
            try:
                p.stop()
            except Exception as e:  # stopping must go on for the others
                log.warning("stopping a producer failed: %s", e)
        for a in self.admins.values():
            a.stop()
        self._place.stop()
