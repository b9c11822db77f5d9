"""Standalone mode's config: job.coordinator.factory = zk, Samza's ZooKeeper keys and their defaults."""

from __future__ import annotations

from typing import Any

import pytest

from samzamp.api.errors import ConfigError
from samzamp.config import Config, JobSettings, validate
from samzamp.config.schema import check_keys
from samzamp.config.standalone import ZK_ONLY_KEYS, ZkSettings

MINIMAL: dict[str, Any] = {
    "job.name": "wc",
    "task.class": "samzamp.examples.word_count:WordCountTask",
    "task.inputs": ["kafka.lines"],
    "systems.kafka.samza.factory": "kafka",
}
ZK: dict[str, Any] = {"job.coordinator.factory": "zk", "job.coordinator.zk.connect": "127.0.0.1:2181"}


def _zk(**values: Any) -> Config:
    return Config({**MINIMAL, **ZK, **values})


def _error(config: Config) -> ConfigError:
    with pytest.raises(ConfigError) as exc:
        validate(config)
    return exc.value


def test_zk_is_accepted_with_samza_s_defaults() -> None:
    settings = validate(_zk())
    assert settings.zk == ZkSettings(
        connect="127.0.0.1:2181",
        session_timeout_ms=30000,
        connection_timeout_ms=60000,
        consensus_timeout_ms=40000,
        debounce_ms=20000,
        host_affinity=False,
        location_id_provider="hostname",
        processor_id=None,
        location_id=None,
    )
    assert settings.warnings == ()


def test_passthrough_has_no_zk_settings() -> None:
    assert validate(Config(MINIMAL)).zk is None
    assert validate(Config({**MINIMAL, "job.coordinator.factory": "passthrough"})).zk is None


@pytest.mark.parametrize(
    ("factory", "zk"),
    [
        ("org.apache.samza.zk.ZkJobCoordinatorFactory", True),
        ("org.apache.samza.standalone.PassthroughJobCoordinatorFactory", False),
    ],
)
def test_samza_s_coordinator_class_names_are_accepted(factory: str, zk: bool) -> None:
    settings = validate(Config({**MINIMAL, **ZK, "job.coordinator.factory": factory}))
    assert (settings.zk is not None) == zk


def test_an_unknown_coordinator_names_the_key_and_the_choices() -> None:
    err = _error(_zk(**{"job.coordinator.factory": "yarn"}))
    assert err.key == "job.coordinator.factory"
    assert "passthrough, zk" in err.problem


def test_every_key_is_read() -> None:
    settings = validate(
        _zk(
            **{
                "job.coordinator.zk.connect": "zk1:2181,zk2:2181/samza",
                "job.coordinator.zk.session.timeout.ms": 4000,
                "job.coordinator.zk.connection.timeout.ms": "5000",
                "job.coordinator.zk.consensus.timeout.ms": 6000,
                "job.debounce.time.ms": 700,
                "job.host-affinity.enabled": True,
                "locationid.provider.factory": "org.apache.samza.runtime.DefaultLocationIdProviderFactory",
                "processor.id": "p-1",
                "processor.location.id": "rack 7",
            }
        )
    )
    assert settings.zk == ZkSettings(
        "zk1:2181,zk2:2181/samza", 4000, 5000, 6000, 700, True, "hostname", "p-1", "rack 7"
    )


def test_connect_is_required_with_zk() -> None:
    err = _error(Config({**MINIMAL, "job.coordinator.factory": "zk"}))
    assert err.key == "job.coordinator.zk.connect"
    assert "is required" in err.problem


@pytest.mark.parametrize(
    "key",
    [
        "job.coordinator.zk.session.timeout.ms",
        "job.coordinator.zk.connection.timeout.ms",
        "job.coordinator.zk.consensus.timeout.ms",
        "job.debounce.time.ms",
    ],
)
@pytest.mark.parametrize("value", [0, -1, "soon", 2**31])
def test_timeouts_must_be_positive_integers(key: str, value: Any) -> None:
    err = _error(_zk(**{key: value}))
    assert err.key == key
    assert "integer" in err.problem or ">= 1" in err.problem


@pytest.mark.parametrize(
    ("key", "value", "fragment"),
    [
        ("job.host-affinity.enabled", "maybe", "true or false"),
        ("locationid.provider.factory", "com.example.RackLocationIdProviderFactory", "unknown location id provider"),
        ("processor.id", "a b", "no spaces"),
        ("processor.id", "a/b", "no '/'"),
        ("processor.id", "..", "no '/'"),
        ("processor.id", " ", "is empty"),
        ("processor.location.id", "", "is empty"),
    ],
)
def test_bad_values_name_the_key(key: str, value: Any, fragment: str) -> None:
    err = _error(_zk(**{key: value}))
    assert err.key == key
    assert fragment in err.problem


@pytest.mark.parametrize("value", [True, False])
def test_the_legacy_host_affinity_key_is_read(value: bool) -> None:
    settings = validate(_zk(**{"yarn.samza.host-affinity.enabled": value}))
    assert settings.zk is not None
    assert settings.zk.host_affinity is value
    assert settings.warnings == ()  # not one of the yarn.* keys samzamp ignores


def test_the_legacy_host_affinity_key_must_agree_with_the_new_one() -> None:
    assert validate(_zk(**{"yarn.samza.host-affinity.enabled": True, "job.host-affinity.enabled": True})).zk
    err = _error(_zk(**{"yarn.samza.host-affinity.enabled": True, "job.host-affinity.enabled": False}))
    assert err.key == "yarn.samza.host-affinity.enabled"
    assert "keep only job.host-affinity.enabled" in err.problem


def test_container_count_is_ignored_with_a_warning_in_standalone_mode() -> None:
    settings = validate(_zk(**{"job.container.count": 3}))
    assert [(w.key, "ignored in standalone mode" in w.problem) for w in settings.warnings] == [
        ("job.container.count", True)
    ]
    assert JobSettings.from_config(_zk(**{"job.container.count": 3})).warnings == settings.warnings


def test_container_count_must_still_be_1_with_passthrough() -> None:
    err = _error(Config({**MINIMAL, "job.container.count": 2}))
    assert err.key == "job.container.count"
    assert "job.coordinator.factory" in err.problem
    assert validate(Config({**MINIMAL, "job.container.count": 1})).warnings == ()


@pytest.mark.parametrize("key", ZK_ONLY_KEYS)
def test_a_standalone_key_in_a_passthrough_job_is_a_warning(key: str) -> None:
    value = {"job.coordinator.zk.connect": "zk:2181", "processor.id": "p", "processor.location.id": "a"}.get(key, 1)
    if key.endswith("enabled"):
        value = True
    if key == "locationid.provider.factory":
        value = "hostname"
    config = Config({**MINIMAL, key: value})
    assert check_keys(config) == []  # each is a key samzamp reads, well typed
    settings = validate(config)
    assert settings.zk is None
    assert [w.key for w in settings.warnings] == [key]
    assert "job.coordinator.factory" in settings.warnings[0].problem


@pytest.mark.parametrize("key", ["job.host-affinity.enabled", "yarn.samza.host-affinity.enabled"])
def test_host_affinity_off_in_a_passthrough_job_is_accepted_silently(key: str) -> None:
    assert validate(Config({**MINIMAL, key: False})).warnings == ()


@pytest.mark.parametrize(
    ("typo", "meant"),
    [("processor.locaton.id", "processor.location.id"), ("locationid.provider.factry", "locationid.provider.factory")],
)
def test_a_typo_in_standalone_mode_s_own_namespaces_is_an_error(typo: str, meant: str) -> None:
    """Not a task's own setting taken silently: the processor would run at the host's location."""
    error = _error(_zk(**{typo: "A"}))
    assert error.key == typo
    assert f"did you mean {meant!r}" in str(error)
