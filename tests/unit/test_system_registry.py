"""The system registry: each kind of system (``samzamp.config.system_kinds``) is served by the factory
its module registers, and what a system can do is asked of its kind, never read off its name.

No network: the Kafka factory only builds client settings here, it connects nothing.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path
from typing import Any

import pytest

from samzamp.api.errors import ConfigError
from samzamp.config import Config, JobSettings
from samzamp.config.system_kinds import INMEMORY, KAFKA, SystemKind, system_kind, system_kind_names, system_kinds
from samzamp.systems.factory import Place
from samzamp.systems.inmemory.factory import InMemorySystem, InMemorySystemFactory
from samzamp.systems.inmemory.system import InMemoryStreams
from samzamp.systems.kafka.factory import KafkaSystem
from samzamp.systems.registry import open_system, register, system_factory

PACKAGE = Path(__file__).resolve().parents[2] / "samzamp"

BASE: dict[str, Any] = {
    "job.name": "wc",
    "task.class": "samzamp.examples.word_count:WordCountTask",
    "task.inputs": ["kafka.lines"],
    "systems.kafka.samza.factory": "kafka",
}


def _settings(**values: Any) -> JobSettings:
    return JobSettings.from_config(Config({**BASE, **values}))


def test_every_kind_is_served_by_the_factory_its_module_registers() -> None:
    for kind in system_kinds():
        assert system_factory(kind).kind is kind


def test_samza_class_names_mean_the_kind() -> None:
    assert system_kind("org.apache.samza.system.kafka.KafkaSystemFactory") is KAFKA
    assert system_kind("org.apache.samza.system.inmemory.InMemorySystemFactory") is INMEMORY
    assert system_kind("rabbitmq") is None
    assert system_kind_names() == "kafka or inmemory"
    assert system_kind_names(lambda k: k.changelogs) == "kafka"


def test_a_new_kind_is_one_module_that_registers_its_factory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "third_system.py").write_text(
        textwrap.dedent(
            """
            from samzamp.systems.inmemory.factory import InMemorySystemFactory
            from samzamp.systems.registry import register
            from samzamp.config.system_kinds import SystemKind

            THIRD = SystemKind("third", (), __name__, False, False, True, True, False)

            class ThirdFactory(InMemorySystemFactory):
                kind = THIRD

            register(ThirdFactory())
            """
        ),
        encoding="utf-8",
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    kind = SystemKind("third", (), "third_system", False, False, True, True, False)
    factory = system_factory(kind)  # imports third_system, which registers its factory
    assert type(factory).__name__ == "ThirdFactory"
    assert system_factory(kind) is factory


def test_a_module_that_registers_nothing_is_named() -> None:
    kind = SystemKind("nothing", (), "samzamp.systems.base", False, False, False, False, False)
    with pytest.raises(LookupError, match=r"samzamp\.systems\.base registers no factory for system kind 'nothing'"):
        system_factory(kind)


def test_one_factory_per_kind() -> None:
    with pytest.raises(ValueError, match="system kind 'inmemory' already has a factory"):
        register(InMemorySystemFactory())


def test_inmemory_systems_keep_their_streams_in_the_place() -> None:
    settings = _settings(**{"systems.kafka.samza.factory": "inmemory"})
    streams = {"kafka": InMemoryStreams()}
    place = Place(shared={INMEMORY.name: streams})
    system = open_system(settings, "kafka", place)
    assert isinstance(system, InMemorySystem)
    assert system.streams is streams["kafka"]
    outputs = system.producer()
    assert system.checkpoint_producer(outputs) is outputs
    assert system.address_config() == {}
    with pytest.raises(NotImplementedError, match="cannot hold changelogs"):
        system.changelog_clients()


def test_kafka_system_clients_are_named_after_the_process() -> None:
    settings = _settings(**{"systems.kafka.bootstrap.servers": "b1:9092"})
    system = open_system(settings, "kafka", Place(process="worker-2"))
    assert isinstance(system, KafkaSystem)
    assert system.changelog_clients().client_id_prefix == "samzamp-wc-1-worker-2"
    assert system.address_config() == {"systems.kafka.bootstrap.servers": "b1:9092"}


def test_kafka_system_without_brokers_outside_a_processor_names_the_key() -> None:
    with pytest.raises(ConfigError) as exc:
        open_system(_settings(), "kafka", Place(process="drain"))
    assert exc.value.key == "systems.kafka.bootstrap.servers"


def test_a_changelog_on_a_system_that_cannot_hold_one_names_the_key() -> None:
    with pytest.raises(ConfigError) as exc:
        _settings(
            **{
                "systems.mem.samza.factory": "inmemory",
                "task.checkpoint.system": "kafka",
                "stores.counts.factory": "lmdb",
                "stores.counts.key.serde": "string",
                "stores.counts.msg.serde": "json",
                "stores.counts.changelog": "mem.counts-changelog",
            }
        )
    assert exc.value.key == "stores.counts.changelog"
    assert "system 'mem' is inmemory; changelogs need kafka" in str(exc.value)


def test_no_module_tests_a_system_kind_by_its_name() -> None:
    # Which code serves a system, and what it can do, is asked of its kind (samzamp.systems.registry,
    # SystemKind's capabilities): a string test would miss the next kind.
    names = "|".join(re.escape(name) for kind in system_kinds() for name in (kind.name, *kind.samza_classes))
    test = re.compile(rf"""(==|!=)\s*["']({names})["']|["']({names})["']\s*(==|!=)""")
    found = [
        f"{path.relative_to(PACKAGE.parent)}:{n}: {line.strip()}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if test.search(line)
    ]
    assert found == []
