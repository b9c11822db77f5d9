"""librdkafka error codes samzamp reacts to."""

from confluent_kafka import KafkaError

__all__ = ["PARTITION_EOF"]

# librdkafka names its internal (client-side) codes with a leading underscore; this one is the
# documented end-of-partition event of enable.partition.eof.
PARTITION_EOF: int = KafkaError._PARTITION_EOF  # noqa: SLF001
