"""The coordinator seam: the factory job.coordinator.factory names, the passthrough coordinator's one
model, and the JobModelCalculator's four steps in their order."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from typing import Any

import pytest

from samzamp.api.errors import ConfigError
from samzamp.config import Config, validate
from samzamp.config.settings import JobSettings
from samzamp.coordinator.factory import PassthroughJobCoordinatorFactory, job_coordinator_factory
from samzamp.coordinator.job_model_calculator import JobModelCalculator
from samzamp.coordinator.passthrough import PassthroughJobCoordinator
from samzamp.coordinator.run_id import StreamRuns
from samzamp.coordinator.task_history import CHANGELOG_NAMESPACE, TaskHistory
from samzamp.coordinator.zk.factory import ZkJobCoordinatorFactory
from samzamp.model.job_model import JobModel, TaskModel
from samzamp.systems.inmemory.system import InMemoryStreams, InMemorySystemAdmin

BASE: dict[str, Any] = {
    "job.name": "job",
    "job.default.system": "mem",
    "task.class": "samzamp.examples.word_count:WordCountTask",
    "task.inputs": ["mem.in"],
    "systems.mem.samza.factory": "inmemory",
}
ZK: dict[str, Any] = {"job.coordinator.factory": "zk", "job.coordinator.zk.connect": "127.0.0.1:2181"}


class DictStore:
    """A MetadataStore in a dict."""

    def __init__(self) -> None:
        self.values: dict[str, bytes] = {}

    def get(self, key: str) -> bytes | None:
        return self.values.get(key)

    def put(self, key: str, value: bytes) -> None:
        self.values[key] = value

    def put_all(self, values: dict[str, bytes]) -> None:
        self.values.update(values)

    def delete(self, key: str) -> None:
        self.values.pop(key, None)

    def all(self) -> dict[str, bytes]:
        return dict(self.values)


class Metadata:
    """The coordinator stream's namespaces, in dicts."""

    def __init__(self) -> None:
        self.namespaces: dict[str, DictStore] = {}
        self.topic = "__samza_coordinator_job_1"

    def namespace(self, namespace: str) -> DictStore:
        return self.namespaces.setdefault(namespace, DictStore())


class Listener:
    """Records what it hears."""

    def __init__(self) -> None:
        self.heard: list[tuple[str, Any]] = []

    async def on_job_model_expired(self, model: JobModel) -> list[str] | None:
        self.heard.append(("expired", model))
        return []

    async def on_new_job_model(self, model: JobModel) -> list[str] | None:
        self.heard.append(("new", model))
        return sorted(model.tasks)

    def on_coordinator_failure(self, error: BaseException) -> None:
        self.heard.append(("failure", error))

    def fence(self, lease_valid: Callable[[], bool]) -> None:
        self.heard.append(("fence", lease_valid))

    def on_lease(self, until: float) -> None:
        self.heard.append(("lease", until))


def _settings(**more: Any) -> JobSettings:
    return validate(Config({**BASE, **more}))


def test_job_coordinator_factory_is_the_one_the_config_names() -> None:
    assert _settings().coordinator_factory == "passthrough"
    assert isinstance(job_coordinator_factory(_settings()), PassthroughJobCoordinatorFactory)
    settings = _settings(**ZK)
    assert settings.coordinator_factory == "zk"
    assert isinstance(job_coordinator_factory(settings), ZkJobCoordinatorFactory)
    # Samza's class names pick the same factories.
    samza = _settings(**{"job.coordinator.factory": "org.apache.samza.standalone.PassthroughJobCoordinatorFactory"})
    assert isinstance(job_coordinator_factory(samza), PassthroughJobCoordinatorFactory)


def test_a_factory_samzamp_does_not_have_is_a_config_error_naming_the_key() -> None:
    settings = dataclasses.replace(_settings(), coordinator_factory="yarn")
    with pytest.raises(ConfigError) as exc:
        job_coordinator_factory(settings)
    assert exc.value.key == "job.coordinator.factory"
    assert "'yarn'" in exc.value.problem


def test_the_passthrough_factory_keeps_the_run_in_the_coordinator_stream() -> None:
    factory = job_coordinator_factory(_settings())
    assert isinstance(factory.runs(Metadata()), StreamRuns)  # type: ignore[arg-type]
    opened: list[str] = []

    def stream() -> str:
        opened.append("stream")
        return "the stream's view"

    assert factory.run_view(stream) == "the stream's view"
    assert opened == ["stream"]


def test_the_passthrough_coordinator_publishes_the_calculated_model_once_at_start() -> None:
    model = JobModel(1, {"Partition 0": TaskModel("Partition 0", ())})

    class Calculator:
        calls = 0

        def calculate(self) -> JobModel:
            Calculator.calls += 1
            return model

    coordinator = job_coordinator_factory(_settings()).coordinator(Calculator(), None)  # type: ignore[arg-type]
    assert isinstance(coordinator, PassthroughJobCoordinator)
    assert coordinator.models_while_running is False
    listener = Listener()

    async def main() -> None:
        await coordinator.start(listener)
        await coordinator.stop()

    asyncio.run(main())
    assert Calculator.calls == 1
    assert listener.heard == [("new", model)]


def _calculator(
    streams: InMemoryStreams, metadata: Metadata, steps: list[str], check: Callable[[JobModel], None]
) -> JobModelCalculator:
    def checked(model: JobModel) -> None:
        steps.append("check")
        check(model)

    def changelogs(model: JobModel, history: TaskHistory) -> None:
        steps.append("changelogs")
        assert not metadata.namespace(CHANGELOG_NAMESPACE).values, "the history is recorded after the changelogs"

    settings = _settings()
    return JobModelCalculator(settings, {"mem": InMemorySystemAdmin(streams)}, metadata, checked, changelogs)  # type: ignore[arg-type]


def test_the_calculator_checks_then_creates_changelogs_then_records_the_history() -> None:
    streams = InMemoryStreams()
    streams.create("in", 2)
    metadata = Metadata()
    steps: list[str] = []
    model = _calculator(streams, metadata, steps, lambda m: None).calculate()
    assert sorted(model.tasks) == ["Partition 0", "Partition 1"]
    assert steps == ["check", "changelogs"]
    assert sorted(metadata.namespace(CHANGELOG_NAMESPACE).values) == ["Partition 0", "Partition 1"]


def test_a_model_the_checkpoints_cannot_follow_stops_the_calculator_before_anything_is_created() -> None:
    streams = InMemoryStreams()
    streams.create("in", 2)
    metadata = Metadata()
    steps: list[str] = []

    def refuse(model: JobModel) -> None:
        raise ConfigError("job.elasticity.factor", "the checkpoints cannot follow")

    with pytest.raises(ConfigError):
        _calculator(streams, metadata, steps, refuse).calculate()
    assert steps == ["check"]
    assert not metadata.namespace(CHANGELOG_NAMESPACE).values
