"""Kafka's topic-level configs (``org.apache.kafka.common.config.TopicConfig``), by name.

samzamp passes these through when it creates a topic (``streams.<id>.<config>``,
``systems.<s>.default.stream.<config>``, ``stores.<n>.changelog.kafka.<config>``); any other name in
those places is a mistake, most often a samzamp key written without its ``samza.`` prefix.
"""

from __future__ import annotations

__all__ = ["TOPIC_CONFIGS", "is_topic_config"]

TOPIC_CONFIGS: frozenset[str] = frozenset(
    {
        "cleanup.policy",
        "compression.type",
        "compression.gzip.level",
        "compression.lz4.level",
        "compression.zstd.level",
        "delete.retention.ms",
        "file.delete.delay.ms",
        "flush.messages",
        "flush.ms",
        "follower.replication.throttled.replicas",
        "index.interval.bytes",
        "leader.replication.throttled.replicas",
        "local.retention.bytes",
        "local.retention.ms",
        "max.compaction.lag.ms",
        "max.message.bytes",
        "message.downconversion.enable",
        "message.format.version",
        "message.timestamp.after.max.ms",
        "message.timestamp.before.max.ms",
        "message.timestamp.difference.max.ms",
        "message.timestamp.type",
        "min.cleanable.dirty.ratio",
        "min.compaction.lag.ms",
        "min.insync.replicas",
        "preallocate",
        "remote.log.copy.disable",
        "remote.log.delete.on.disable",
        "remote.storage.enable",
        "retention.bytes",
        "retention.ms",
        "segment.bytes",
        "segment.index.bytes",
        "segment.jitter.ms",
        "segment.ms",
        "unclean.leader.election.enable",
    }
)

# Vendor brokers add their own topic configs under a prefix (Confluent Server: confluent.*).
_VENDOR_PREFIXES = ("confluent.",)


def is_topic_config(name: str) -> bool:
    """True for a Kafka topic config (or a vendor broker's prefixed one)."""
    return name in TOPIC_CONFIGS or name.startswith(_VENDOR_PREFIXES)
