"""``samzamp job-model show``'s model of a job that does not run: computed with the container's code
from the inputs' partitions and the recorded task history, never recording anything; how virtual
tasks' key buckets are shown. (Against a real broker and ZooKeeper: tests/integration/test_ops_inspect.py.)"""

from __future__ import annotations

from samzamp.api.envelope import SystemStream
from samzamp.cli.job_model import _document, _text
from samzamp.config import Config, validate
from samzamp.config.settings import JobSettings
from samzamp.coordinator.job_model_calculator import preview_job_model
from samzamp.coordinator.job_model_view import JobModelView
from samzamp.coordinator.metadata_store import CoordinatorStreamStore
from samzamp.coordinator.task_history import CHANGELOG_NAMESPACE, SSP_NAMESPACE, TaskHistory, record_task_history
from samzamp.systems.base import SystemAdmin
from samzamp.systems.inmemory.system import InMemoryStreams, InMemorySystemAdmin, InMemorySystemProducer


def _settings(factor: int = 1) -> JobSettings:
    return validate(
        Config(
            {
                "job.name": "jm",
                "job.elasticity.factor": factor,
                "task.class": "samzamp.examples.word_count:WordCountTask",
                "task.inputs": ["kafka.lines"],
                "systems.kafka.samza.factory": "kafka",
            }
        )
    )


def test_a_job_that_never_ran_gets_the_first_starts_tasks_and_nothing_is_written() -> None:
    streams = InMemoryStreams()
    streams.create("lines", 3)
    admins: dict[str, SystemAdmin] = {"kafka": InMemorySystemAdmin(streams)}
    store = CoordinatorStreamStore(admins["kafka"], InMemorySystemProducer(streams), "coord")
    model, found = preview_job_model(_settings(), admins, store)
    assert not found
    assert {n: t.changelog_partition for n, t in model.tasks.items()} == {f"Partition {p}": p for p in range(3)}
    assert "coord" not in streams.partitions  # the coordinator stream is not created


def test_the_recorded_history_keeps_each_tasks_changelog_partition() -> None:
    streams = InMemoryStreams()
    streams.create("lines", 2)
    admins: dict[str, SystemAdmin] = {"kafka": InMemorySystemAdmin(streams)}
    store = CoordinatorStreamStore(admins["kafka"], InMemorySystemProducer(streams), "coord")
    store.create_topic()
    recorded = TaskHistory(changelog={"Partition 0": 1, "Partition 1": 0})  # as an earlier run recorded it
    record_task_history(store.namespace(CHANGELOG_NAMESPACE), store.namespace(SSP_NAMESPACE), TaskHistory(), recorded)
    written = [list(p) for p in streams.partitions["coord"]]
    model, found = preview_job_model(_settings(), admins, store)
    assert found
    assert {n: t.changelog_partition for n, t in model.tasks.items()} == {"Partition 0": 1, "Partition 1": 0}
    assert [list(p) for p in streams.partitions["coord"]] == written  # read, nothing recorded


def test_virtual_tasks_show_their_key_buckets() -> None:
    settings = _settings(factor=2)
    streams = InMemoryStreams()
    streams.create("lines", 1)
    admins: dict[str, SystemAdmin] = {"kafka": InMemorySystemAdmin(streams)}
    store = CoordinatorStreamStore(admins["kafka"], InMemorySystemProducer(streams), "coord")
    model, _ = preview_job_model(settings, admins, store)
    view = JobModelView("jm-1", "passthrough", "computed", model, {"counts": SystemStream("kafka", "counts-log")})
    doc = _document(view)
    assert [(t["name"], t["ssps"][0]["key_bucket"], t["changelog_partition"]) for t in doc["tasks"]] == [
        ("Partition 0_0_2", 0, 0),
        ("Partition 0_1_2", 1, 1),
    ]
    text = _text(view, settings.elasticity_factor)
    assert "Partition 0_1_2  1          kafka.lines.0 (key bucket 1 of 2)" in text
    assert "store counts: changelog kafka.counts-log" in text
