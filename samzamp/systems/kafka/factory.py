"""The Kafka system's factory: clients of the brokers in systems.<s>.bootstrap.servers, or of the
embedded broker (memory only), started on first use, where the ``Place`` allows it."""

from __future__ import annotations

import logging
from typing import Any

from samzamp.api.errors import ConfigError
from samzamp.config.settings import JobSettings
from samzamp.config.system_kinds import KAFKA
from samzamp.extras import EMBEDDED, require
from samzamp.logs import announce
from samzamp.systems.base import GroupOffsetCommitter, SystemAdmin, SystemConsumer, SystemProducer
from samzamp.systems.factory import Place, System, SystemFactory
from samzamp.systems.kafka.admin import KafkaSystemAdmin
from samzamp.systems.kafka.client_config import KafkaClientSettings
from samzamp.systems.kafka.consumer import KafkaSystemConsumer
from samzamp.systems.kafka.embedded import EmbeddedBroker
from samzamp.systems.kafka.group_offsets import KafkaGroupOffsets
from samzamp.systems.kafka.producer import KafkaSystemProducer
from samzamp.systems.registry import register

__all__ = ["KafkaSystem", "KafkaSystemFactory"]

log = logging.getLogger(__name__)


class KafkaSystem(System):
    def __init__(self, name: str, clients: KafkaClientSettings) -> None:
        super().__init__(name)
        self.clients = clients  # every client of the system starts from these

    def admin(self) -> SystemAdmin:
        return KafkaSystemAdmin(self.clients)

    def producer(self) -> SystemProducer:
        return KafkaSystemProducer(self.clients)

    def checkpoint_producer(self, outputs: SystemProducer) -> SystemProducer:
        # Its own producer, so waiting for a checkpoint never waits for task outputs.
        return KafkaSystemProducer(self.clients, "checkpoint-producer")

    def metrics_producer(self, outputs: SystemProducer) -> SystemProducer:
        return KafkaSystemProducer(self.clients, "metrics-producer")

    def consumer(self, group_id: str) -> SystemConsumer:
        return KafkaSystemConsumer(self.clients, group_id)

    def group_offsets(self, group_id: str) -> GroupOffsetCommitter:
        return KafkaGroupOffsets(self.clients, group_id)

    def changelog_clients(self) -> KafkaClientSettings:
        return self.clients

    def address_config(self) -> dict[str, Any]:
        return {f"systems.{self.name}.bootstrap.servers": self.clients.bootstrap}


class KafkaSystemFactory(SystemFactory):
    kind = KAFKA

    def open(self, settings: JobSettings, system: str, place: Place) -> System:
        servers = settings.systems[system].bootstrap_servers or _embedded_broker(system, place)
        clients = KafkaClientSettings.of(settings.name, settings.id, settings.systems[system], servers, place.process)
        return KafkaSystem(system, clients)


def _embedded_broker(system: str, place: Place) -> str:
    """The address of ``place``'s embedded broker, started for the first system that needs it."""
    if not place.embedded:
        raise ConfigError(
            f"systems.{system}.bootstrap.servers",
            "is not set: only a processor starts the embedded broker; name the brokers of the job's Kafka cluster",
        )
    broker = place.shared.get(KAFKA.name)
    if broker is None:
        require(EMBEDDED, f", or set systems.{system}.bootstrap.servers to a Kafka cluster's brokers")
        broker = EmbeddedBroker(die_with_parent=True).start()
        place.shared[KAFKA.name] = broker
        place.stoppers.append(broker.stop)
        log.info(
            "no bootstrap.servers for system %r: started the embedded broker at %s (memory only)",
            system,
            broker.bootstrap_servers,
        )
        announce(f"samzamp: embedded broker at {broker.bootstrap_servers}")
    return str(broker.bootstrap_servers)


register(KafkaSystemFactory())
