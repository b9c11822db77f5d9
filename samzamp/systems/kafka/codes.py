"""librdkafka error codes samzamp reacts to."""

from confluent_kafka import KafkaError

__all__ = ["AUTO_OFFSET_RESET", "PARTITION_EOF"]

# librdkafka names its internal (client-side) codes with a leading underscore; this one is the
# documented end-of-partition event of enable.partition.eof.
PARTITION_EOF: int = KafkaError._PARTITION_EOF  # noqa: SLF001
# What a consumer with auto.offset.reset = error gets when the offset it was assigned is not in the
# partition (before its oldest record or past its end).
AUTO_OFFSET_RESET: int = KafkaError._AUTO_OFFSET_RESET  # noqa: SLF001
