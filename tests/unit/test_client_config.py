"""``client_config``: the one place every Kafka client's settings are built, and the order of the blocks.

No network: the dicts are checked as they would be handed to librdkafka (the integration test
``test_kafka_client_config`` checks what librdkafka itself ends up with).
"""

from __future__ import annotations

import logging
import pickle
import typing
from typing import Any

import pytest

from samzamp.api.errors import ConfigError
from samzamp.config import Config, validate
from samzamp.config.schema import check_keys
from samzamp.systems.kafka.changelog import CHANGELOG_PRODUCER_DEFAULTS
from samzamp.systems.kafka.client_config import (
    LIBRDKAFKA_LOG,
    REPEATS_HELD_S,
    ClientKind,
    KafkaClientSettings,
    client_config,
)
from samzamp.systems.kafka.producer import OUTPUT_PRODUCER_DEFAULTS

BASE: dict[str, Any] = {
    "job.name": "wc",
    "job.id": "7",
    "task.class": "samzamp.examples.word_count:WordCountTask",
    "task.inputs": ["kafka.lines"],
    "systems.kafka.samza.factory": "kafka",
    "systems.kafka.bootstrap.servers": "b1:9092,b2:9092",
}


def _clients(process: str = "", **values: Any) -> KafkaClientSettings:
    settings = validate(Config({**BASE, **values}))
    s = settings.systems["kafka"]
    assert s.bootstrap_servers is not None
    return KafkaClientSettings.of(settings.name, settings.id, s, s.bootstrap_servers, process)


LAYERED = {
    "systems.kafka.kafka.client.rack": "rack-common",
    "systems.kafka.kafka.linger.ms": 1,  # a common value that the producer block replaces
    "systems.kafka.kafka.fetch.wait.max.ms": 7,  # and one the consumer block replaces
    "systems.kafka.kafka.security.protocol": "SASL_SSL",
    "systems.kafka.consumer.fetch.wait.max.ms": 8,
    "systems.kafka.consumer.check.crcs": True,
    "systems.kafka.producer.linger.ms": 2,
    "systems.kafka.producer.compression.type": "lz4",
}


def test_precedence_defaults_then_common_then_role_block_then_owned() -> None:
    clients = _clients(**LAYERED)
    conf = client_config(
        clients, "consumer", defaults={"fetch.wait.max.ms": 50, "queued.min.messages": 5}, owned={"check.crcs": False}
    )
    assert conf["queued.min.messages"] == 5  # samzamp's default, set by no block
    assert conf["client.rack"] == "rack-common"  # the common block
    assert conf["security.protocol"] == "SASL_SSL"
    assert conf["fetch.wait.max.ms"] == 8  # consumer.* over kafka.* over the default
    assert conf["check.crcs"] is False  # owned by samzamp over consumer.*
    assert "compression.type" not in conf  # producer.* never reaches a consumer
    assert conf["bootstrap.servers"] == "b1:9092,b2:9092"


def test_a_producer_gets_the_producer_block_and_an_admin_only_the_common_one() -> None:
    clients = _clients(**LAYERED)
    producer = client_config(clients, "changelog-producer", defaults={"linger.ms": 50})
    assert producer["linger.ms"] == 2
    assert producer["compression.type"] == "lz4"
    assert producer["client.rack"] == "rack-common"
    assert "check.crcs" not in producer
    admin = client_config(clients, "admin")
    assert admin == {
        "client.id": "samzamp-wc-7-admin",
        "client.rack": "rack-common",
        "linger.ms": 1,
        "fetch.wait.max.ms": 7,
        "security.protocol": "SASL_SSL",
        "bootstrap.servers": "b1:9092,b2:9092",
        "logger": LIBRDKAFKA_LOG,
    }


def test_each_kind_gets_a_descriptive_client_id_that_the_user_can_replace() -> None:
    assert client_config(_clients(), "end-offsets")["client.id"] == "samzamp-wc-7-end-offsets"
    assert client_config(_clients("worker-1"), "producer")["client.id"] == "samzamp-wc-7-worker-1-producer"
    common = _clients(**{"systems.kafka.kafka.client.id": "ops-name"})
    assert client_config(common, "admin")["client.id"] == "ops-name"
    per_role = _clients(**{"systems.kafka.producer.client.id": "ops-producer"})
    assert client_config(per_role, "producer")["client.id"] == "ops-producer"
    assert client_config(per_role, "consumer")["client.id"] == "samzamp-wc-7-consumer"


def test_bootstrap_servers_comes_from_the_system_never_from_a_block() -> None:
    clients = _clients(**{"systems.kafka.consumer.bootstrap.servers": "b2:9092, b1:9092"})  # the same brokers
    assert client_config(clients, "consumer")["bootstrap.servers"] == "b1:9092,b2:9092"


@pytest.mark.parametrize("block", ["kafka", "consumer", "producer"])
def test_bootstrap_servers_may_be_named_in_any_block(block: str) -> None:
    values = {k: v for k, v in BASE.items() if k != "systems.kafka.bootstrap.servers"}
    values[f"systems.kafka.{block}.bootstrap.servers"] = "b3:9092"
    assert validate(Config(values)).systems["kafka"].bootstrap_servers == "b3:9092"


def test_bootstrap_servers_naming_two_clusters_is_a_config_error() -> None:
    with pytest.raises(ConfigError) as e:
        validate(Config({**BASE, "systems.kafka.kafka.bootstrap.servers": "other:9092"}))
    assert e.value.key == "systems.kafka.kafka.bootstrap.servers"
    assert "systems.kafka.bootstrap.servers" in e.value.problem


def test_metadata_broker_list_is_refused() -> None:
    with pytest.raises(ConfigError) as e:
        validate(Config({**BASE, "systems.kafka.producer.metadata.broker.list": "x:1"}))
    assert e.value.key == "systems.kafka.producer.metadata.broker.list"


def test_the_common_block_is_a_passthrough_namespace() -> None:
    check_keys(Config({**BASE, "systems.kafka.kafka.sasl.mechanism": "PLAIN", "systems.kafka.kafka.whatever": 1}))


@pytest.mark.parametrize("block", ["kafka", "consumer", "producer"])
def test_a_list_value_is_a_config_error_naming_the_key(block: str) -> None:
    with pytest.raises(ConfigError) as e:
        validate(Config({**BASE, f"systems.kafka.{block}.ssl.ca.location": ["a", "b"]}))
    assert e.value.key == f"systems.kafka.{block}.ssl.ca.location"


def test_a_replaced_user_value_is_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    differs = _clients(**{"systems.kafka.consumer.enable.partition.eof": "false"})
    agrees = _clients(**{"systems.kafka.kafka.enable.partition.eof": "true"})
    with caplog.at_level(logging.WARNING, logger="samzamp.systems.kafka.client_config"):
        for _ in range(3):
            assert client_config(differs, "end-offsets", owned={"enable.partition.eof": True})["enable.partition.eof"]
        assert client_config(agrees, "metadata-reader", owned={"enable.partition.eof": True})["enable.partition.eof"]
    assert [r.getMessage() for r in caplog.records] == [
        "systems.kafka.consumer.enable.partition.eof is not used by the end-offsets client: "
        "samzamp needs enable.partition.eof = true there"
    ]


SECRETS = {
    "systems.kafka.kafka.sasl.password": "pw-1",
    "systems.kafka.kafka.ssl.key.password": "pw-2",
    "systems.kafka.kafka.ssl.keystore.password": "pw-3",
    "systems.kafka.kafka.sasl.oauthbearer.client.secret": "pw-4",
    "systems.kafka.kafka.sasl.jaas.config": "pw-5",
}


def test_secrets_never_reach_the_log_or_a_repr(caplog: pytest.LogCaptureFixture) -> None:
    clients = _clients(**SECRETS)
    with caplog.at_level(logging.DEBUG, logger="samzamp.systems.kafka.client_config"):
        conf = client_config(clients, "producer")
    assert conf["sasl.password"] == "pw-1"  # the client itself gets them
    logged = caplog.text
    assert "samzamp-wc-7-producer" in logged
    assert "[redacted]" in logged
    config = Config({**BASE, **SECRETS})
    for shown in (logged, repr(clients), repr(config), repr(validate(config))):
        for secret in SECRETS.values():
            assert secret not in shown


def test_client_settings_cross_to_other_processes() -> None:
    clients = _clients(**LAYERED)
    copy = pickle.loads(pickle.dumps(clients))
    assert client_config(copy, "changelog-reader") == client_config(clients, "changelog-reader")


@pytest.mark.parametrize(
    ("kind", "defaults"),
    [("producer", OUTPUT_PRODUCER_DEFAULTS), ("changelog-producer", CHANGELOG_PRODUCER_DEFAULTS)],
)
def test_output_and_changelog_producers_are_idempotent_unless_the_producer_block_says_no(
    kind: ClientKind, defaults: dict[str, Any]
) -> None:
    assert client_config(_clients(), kind, defaults)["enable.idempotence"] is True
    assert client_config(_clients(), kind, defaults)["acks"] == "all"  # what idempotence needs
    off = _clients(**{"systems.kafka.producer.enable.idempotence": False})
    assert client_config(off, kind, defaults)["enable.idempotence"] is False


@pytest.mark.parametrize("kind", typing.get_args(ClientKind))
def test_every_client_logs_through_python_logging(kind: ClientKind) -> None:
    # librdkafka's own lines go to the "librdkafka" logger (the process's level and format), never
    # raw to stderr; no block can take that away.
    conf = client_config(_clients(**{"systems.kafka.kafka.logger": "stderr"}), kind)
    assert conf["logger"] is LIBRDKAFKA_LOG
    assert LIBRDKAFKA_LOG.name == "librdkafka"


def _librdkafka_line(created: float, text: str) -> logging.LogRecord:
    record = logging.LogRecord("librdkafka", logging.ERROR, __file__, 0, "%s", (text,), None)
    record.created = created
    return record


def test_a_failing_connection_s_tries_are_logged_once_per_interval_with_how_many_were_held_back() -> None:
    # librdkafka logs each try of a refused connection, a few a second: an operator tool against a
    # broker that is down printed hundreds of identical lines before its one-line error.
    fail = "FAIL [c#producer-1] [thrd:b]: b: Connect to ipv4#127.0.0.1:1 failed: Connection refused (after {}ms in state CONNECT)"
    t0 = 1_000_000.0
    passed = [r for i in range(300) if LIBRDKAFKA_LOG.filter(r := _librdkafka_line(t0 + i * 0.1, fail.format(i % 3)))]
    assert [r.getMessage() for r in passed] == [fail.format(0)]
    other = _librdkafka_line(t0 + 1, "REQTMOUT [c#producer-1] [thrd:b]: b: Timed out 1 in-flight request")
    assert LIBRDKAFKA_LOG.filter(other), "a different line is not held back"
    later = _librdkafka_line(t0 + REPEATS_HELD_S + 0.5, fail.format(5))
    assert LIBRDKAFKA_LOG.filter(later)
    assert later.getMessage() == f"{fail.format(5)} (and 299 more like it in the last {REPEATS_HELD_S:g} s)"
