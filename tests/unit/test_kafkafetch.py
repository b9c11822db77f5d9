"""samzamp._kafkafetch's checks before it reads a Consumer's batches from librdkafka in C: it attaches
only to confluent-kafka's own Consumer of the layout it was written against, with samzamp's logger and
no callback served only under confluent-kafka's calls; anything else is read through consume(). What
it reads is compared with consume()'s on the real broker (tests/integration/test_kafka_native_fetch.py)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import confluent_kafka
import pytest
from confluent_kafka import Consumer

from samzamp import _kafkafetch
from samzamp.consume.packed import PackedRun
from samzamp.systems.kafka import KafkaClientSettings, KafkaSystemConsumer
from samzamp.systems.kafka import consumer as consumer_module
from samzamp.systems.kafka.client_config import LIBRDKAFKA_LOG
from samzamp.systems.kafka.consumer import NATIVE_FETCH_ENV

CIMPL = confluent_kafka.cimpl.__file__
NOWHERE = "127.0.0.1:1"


def plain(**extra: Any) -> Consumer:
    return Consumer({"group.id": "g", "bootstrap.servers": NOWHERE, "logger": LIBRDKAFKA_LOG, **extra})


def test_the_stub_names_exactly_what_the_module_has() -> None:
    stub = (Path(_kafkafetch.__file__).parent / "_kafkafetch.pyi").read_text()
    names = {n for n in dir(_kafkafetch) if not n.startswith("_")}
    assert names == {"attach"}
    for name in names:
        assert f"def {name}(" in stub
    assert "def read_batch(" in stub


def test_attaches_to_a_plain_consumer_and_refuses_a_closed_one() -> None:
    c = plain()
    reader = _kafkafetch.attach(c, Consumer, CIMPL, LIBRDKAFKA_LOG)
    out = reader.read_batch(10, 0.0, {}, True, {}, 7, PackedRun, list)
    assert out == ({}, [], 0)
    c.close()
    with pytest.raises(RuntimeError, match="closed"):
        reader.read_batch(10, 0.0, {}, True, {}, 7, PackedRun, list)


@pytest.mark.parametrize(
    "extra",
    [
        {"error_cb": lambda e: None},
        {"stats_cb": lambda s: None, "statistics.interval.ms": 1000},
        {"throttle_cb": lambda t: None},
        {"on_commit": lambda e, p: None},
    ],
    ids=["error_cb", "stats_cb", "throttle_cb", "on_commit"],
)
def test_refuses_a_consumer_with_a_callback_it_does_not_serve(extra: dict[str, Any]) -> None:
    c = plain(**extra)
    try:
        with pytest.raises(RuntimeError, match="callback"):
            _kafkafetch.attach(c, Consumer, CIMPL, LIBRDKAFKA_LOG)
    finally:
        c.close()


def test_refuses_another_logger_another_type_and_a_subclass() -> None:
    c = plain()
    try:
        with pytest.raises(RuntimeError, match="layout"):
            _kafkafetch.attach(c, Consumer, CIMPL, logging.getLogger("another"))
        with pytest.raises(RuntimeError, match="not exactly"):
            _kafkafetch.attach(object(), Consumer, CIMPL, LIBRDKAFKA_LOG)

        class Sub(Consumer):  # type: ignore[misc]
            pass

        sub = Sub({"group.id": "g", "bootstrap.servers": NOWHERE, "logger": LIBRDKAFKA_LOG})
        try:
            with pytest.raises(RuntimeError, match="not exactly"):
                _kafkafetch.attach(sub, Consumer, CIMPL, LIBRDKAFKA_LOG)
        finally:
            sub.close()
    finally:
        c.close()


def settings() -> KafkaClientSettings:
    return KafkaClientSettings("kafka", NOWHERE, "test-kafkafetch")


def test_the_kafka_consumer_reads_natively_unless_switched_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(NATIVE_FETCH_ENV, raising=False)
    c = KafkaSystemConsumer(settings(), "test-kafkafetch")
    assert c.reads_natively
    assert c.poll_packed(0.0, 7, {}, PackedRun) == {}
    c.stop()
    monkeypatch.setenv(NATIVE_FETCH_ENV, "0")
    c = KafkaSystemConsumer(settings(), "test-kafkafetch")
    assert not c.reads_natively
    c.stop()


def test_another_confluent_kafka_version_is_read_through_consume(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(NATIVE_FETCH_ENV, raising=False)
    monkeypatch.setattr(consumer_module, "_NATIVE_FETCH_VERSIONS", frozenset({"0.0.0"}))
    c = KafkaSystemConsumer(settings(), "test-kafkafetch")
    assert not c.reads_natively
    c.stop()
