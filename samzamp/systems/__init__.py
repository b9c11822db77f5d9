"""Adapters to the outside world behind small protocols: Kafka (confluent-kafka) and in-memory."""
