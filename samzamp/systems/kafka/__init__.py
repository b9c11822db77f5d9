"""The Kafka system: the only package that imports confluent_kafka."""

from samzamp.systems.kafka.admin import KafkaSystemAdmin
from samzamp.systems.kafka.client_config import KafkaClientSettings
from samzamp.systems.kafka.consumer import KafkaSystemConsumer
from samzamp.systems.kafka.embedded import EmbeddedBroker
from samzamp.systems.kafka.producer import KafkaSystemProducer

__all__ = ["EmbeddedBroker", "KafkaClientSettings", "KafkaSystemAdmin", "KafkaSystemConsumer", "KafkaSystemProducer"]
