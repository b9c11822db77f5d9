"""``${NAME}`` in config values comes from the environment at load; ``$${`` is a literal ``${``."""

from __future__ import annotations

from pathlib import Path

import pytest

from samzamp.api.errors import ConfigError
from samzamp.config import load_config
from samzamp.config.interpolate import interpolate, interpolate_value

ENV = {"SAMZAMP_KAFKA_PASSWORD": "s3cr3t", "USER_": "alice", "EMPTY": ""}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("${SAMZAMP_KAFKA_PASSWORD}", "s3cr3t"),
        ("user=${USER_};pw=${SAMZAMP_KAFKA_PASSWORD}!", "user=alice;pw=s3cr3t!"),
        ("${EMPTY}", ""),
        ("$${SAMZAMP_KAFKA_PASSWORD}", "${SAMZAMP_KAFKA_PASSWORD}"),  # the escape: a literal ${
        ("$$${USER_}", "$alice"),  # before a {, $$ is one literal $: so a $ can precede a value
        ("$$$${USER_}", "$${USER_}"),
        ("x$${A}y${USER_}z$${", "x${A}yalicez${"),
        ("a$b $5 $$ $}", "a$b $5 $$ $}"),  # a $ not followed by { is just a dollar sign
        ("no references", "no references"),
    ],
)
def test_interpolate_value(text: str, expected: str) -> None:
    assert interpolate_value("some.key", text, ENV) == expected


def test_a_resolved_value_is_not_interpolated_again() -> None:
    # A secret that itself contains ${ is taken as it is.
    assert interpolate_value("k", "${X}", {"X": "${SAMZAMP_KAFKA_PASSWORD}"}) == "${SAMZAMP_KAFKA_PASSWORD}"


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("${NOT_SET_ANYWHERE}", "environment variable NOT_SET_ANYWHERE, which is not set"),
        ("pw=${SAMZAMP_KAFKA_PASSWORD", "without its closing }"),
        ("${}", "is not an environment variable name"),
        ("${A-B}", "is not an environment variable name"),
        ("${1ABC}", "is not an environment variable name"),
    ],
)
def test_bad_references_name_the_key_and_never_a_value(text: str, problem: str) -> None:
    values = {"systems.kafka.kafka.sasl.username": "${USER_}", "systems.kafka.kafka.sasl.password": text}
    with pytest.raises(ConfigError) as e:
        interpolate(values, ENV)
    assert e.value.key == "systems.kafka.kafka.sasl.password"
    assert problem in e.value.problem
    assert "alice" not in str(e.value)
    assert "s3cr3t" not in str(e.value)


def test_interpolate_reaches_list_items_and_leaves_other_types() -> None:
    values = {"a": ["x", "${USER_}"], "b": 5, "c": True, "d": "${USER_}"}
    assert interpolate(values, ENV) == {"a": ["x", "alice"], "b": 5, "c": True, "d": "alice"}


def test_load_config_interpolates_the_file_and_the_overrides(tmp_path: Path) -> None:
    path = tmp_path / "job.toml"
    path.write_text(
        '[systems.kafka.kafka]\nsasl.password = "${SAMZAMP_KAFKA_PASSWORD}"\nliteral = "$${USER_}"\n'
        '[task]\ninputs = ["kafka.${USER_}"]\n'
    )
    config = load_config(path, {"systems.kafka.kafka.sasl.username": "${USER_}"}, env=ENV)
    assert config["systems.kafka.kafka.sasl.password"] == "s3cr3t"
    assert config["systems.kafka.kafka.sasl.username"] == "alice"
    assert config["systems.kafka.kafka.literal"] == "${USER_}"
    assert config["task.inputs"] == ["kafka.alice"]


def test_load_config_reads_the_process_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SAMZAMP_TEST_WINDOW_MS", "250")
    assert load_config(None, {"task.window.ms": "${SAMZAMP_TEST_WINDOW_MS}"}).get_int("task.window.ms", 0) == 250
    monkeypatch.delenv("SAMZAMP_TEST_WINDOW_MS")
    with pytest.raises(ConfigError, match=r"^config error: task.window.ms: refers to environment variable"):
        load_config(None, {"task.window.ms": "${SAMZAMP_TEST_WINDOW_MS}"})
