"""A standalone processor's location id and processor id."""

from __future__ import annotations

import os
import re
import socket
from typing import Any

import pytest

from samzamp.api.errors import ConfigError
from samzamp.config import Config, validate
from samzamp.config.standalone import LOCATION_ID_PROVIDERS as PROVIDER_NAMES
from samzamp.config.standalone import ZkSettings
from samzamp.coordinator.location import LOCATION_ID_PROVIDERS, location_id, processor_id

CONFIG: dict[str, Any] = {
    "job.name": "wc",
    "task.class": "samzamp.examples.word_count:WordCountTask",
    "task.inputs": ["kafka.lines"],
    "systems.kafka.samza.factory": "kafka",
    "job.coordinator.factory": "zk",
    "job.coordinator.zk.connect": "127.0.0.1:2181",
}


def _zk(**values: Any) -> ZkSettings:
    zk = validate(Config({**CONFIG, **values})).zk
    assert zk is not None
    return zk


def test_the_default_location_is_the_host_name() -> None:
    assert location_id(_zk()) == socket.gethostname()


@pytest.mark.parametrize(
    "factory",
    ["hostname", "DefaultLocationIdProviderFactory", "org.apache.samza.runtime.DefaultLocationIdProviderFactory"],
)
def test_samza_s_default_provider_is_the_host_name(factory: str) -> None:
    assert location_id(_zk(**{"locationid.provider.factory": factory})) == socket.gethostname()


def test_processor_location_id_overrides_the_provider() -> None:
    assert location_id(_zk(**{"processor.location.id": "host-b"})) == "host-b"


def test_every_provider_the_config_accepts_exists() -> None:
    assert set(PROVIDER_NAMES.values()) <= set(LOCATION_ID_PROVIDERS)


def test_an_unknown_provider_names_the_key() -> None:
    with pytest.raises(ConfigError) as exc:
        location_id(ZkSettings("127.0.0.1:2181", location_id_provider="rack"))
    assert exc.value.key == "locationid.provider.factory"
    assert "'rack'" in exc.value.problem


def test_processor_id_is_the_configured_one() -> None:
    assert processor_id(_zk(**{"processor.id": "p-7"})) == "p-7"


def test_a_generated_processor_id_names_host_and_pid_and_differs_on_each_start() -> None:
    zk = _zk()
    first, second = processor_id(zk), processor_id(zk)
    pattern = rf"{re.escape(socket.gethostname())}-{os.getpid()}-[0-9a-f]{{8}}"
    assert re.fullmatch(pattern, first), first
    assert re.fullmatch(pattern, second), second
    assert first != second
    # It is a valid processor.id itself: it names znodes and is split from the host at a space.
    assert _zk(**{"processor.id": first}).processor_id == first
