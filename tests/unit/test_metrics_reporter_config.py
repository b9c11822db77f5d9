"""``metrics.reporters`` and ``metrics.reporter.<name>.*``: Samza's snapshot reporter is accepted
under Samza's keys; any other reporter, a missing stream or a bad regex stops the container at
start naming the key; keys of a reporter not started are a warning."""

from __future__ import annotations

import re
from typing import Any

import pytest

from samzamp.api.envelope import SystemStream
from samzamp.api.errors import ConfigError
from samzamp.config import Config, validate
from samzamp.config.metrics_reporters import SNAPSHOT_FACTORY, snapshot_reporters

BASE: dict[str, Any] = {
    "job.name": "wc",
    "task.class": "samzamp.examples.word_count:WordCountTask",
    "task.inputs": ["kafka.lines"],
    "systems.kafka.samza.factory": "kafka",
}


def _settings(**values: Any) -> Any:
    return validate(Config({**BASE, **{k.replace("__", "."): v for k, v in values.items()}}))


def _reporters(values: dict[str, Any]) -> Any:
    return snapshot_reporters(validate(Config({**BASE, **values})))


@pytest.mark.parametrize("cls", [SNAPSHOT_FACTORY, "snapshot", None])
def test_samzas_snapshot_reporter_keys_are_read(cls: str | None) -> None:
    values: dict[str, Any] = {
        "metrics.reporters": "snapshot",
        "metrics.reporter.snapshot.stream": "kafka.metrics",
        "metrics.reporter.snapshot.interval": 5,
        "metrics.reporter.snapshot.blacklist": r".*TaskInstanceMetrics\.pending-messages",
    }
    if cls is not None:
        values["metrics.reporter.snapshot.class"] = cls
    (r,) = _reporters(values)
    assert r.name == "snapshot"
    assert r.stream == SystemStream("kafka", "metrics")
    assert r.interval_s == 5
    assert r.blacklist is not None
    assert r.blacklist.pattern == r".*TaskInstanceMetrics\.pending-messages"


def test_any_name_with_the_snapshot_class_is_a_snapshot_reporter_and_the_interval_defaults_to_60() -> None:
    (r,) = _reporters(
        {
            "metrics.reporters": ["metricsreporter"],
            "metrics.reporter.metricsreporter.class": SNAPSHOT_FACTORY,
            "metrics.reporter.metricsreporter.stream": "kafka.samza-metrics",
        }
    )
    assert (r.name, r.stream.stream, r.interval_s, r.blacklist) == ("metricsreporter", "samza-metrics", 60, None)


def test_no_reporters_by_default() -> None:
    assert _reporters({}) == ()
    assert _reporters({"metrics.reporters": []}) == ()


@pytest.mark.parametrize(
    ("values", "key", "fragment"),
    [
        (
            {"metrics.reporters": "snapshot,jmx", "metrics.reporter.snapshot.stream": "kafka.m"},
            "metrics.reporter.jmx.class",
            "is required for reporter 'jmx'",
        ),
        (
            {
                "metrics.reporters": ["jmx"],
                "metrics.reporter.jmx.class": "org.apache.samza.metrics.reporter.JmxReporterFactory",
            },
            "metrics.reporter.jmx.class",
            "a reporter samzamp does not have",
        ),
        ({"metrics.reporters": ["snapshot"]}, "metrics.reporter.snapshot.stream", "is required"),
        (
            {"metrics.reporters": ["snapshot"], "metrics.reporter.snapshot.stream": "other.metrics"},
            "metrics.reporter.snapshot.stream",
            "names system 'other'",
        ),
        (
            {
                "metrics.reporters": ["snapshot"],
                "metrics.reporter.snapshot.stream": "kafka.m",
                "metrics.reporter.snapshot.blacklist": "(",
            },
            "metrics.reporter.snapshot.blacklist",
            "not a regular expression",
        ),
        (
            {
                "metrics.reporters": ["snapshot"],
                "metrics.reporter.snapshot.stream": "kafka.m",
                "metrics.reporter.snapshot.interval": 0,
            },
            "metrics.reporter.snapshot.interval",
            ">= 1",
        ),
    ],
)
def test_a_reporter_samzamp_cannot_start_as_configured_is_an_error_naming_the_key(
    values: dict[str, Any], key: str, fragment: str
) -> None:
    with pytest.raises(ConfigError) as exc:
        _reporters(values)
    assert exc.value.key == key
    assert str(exc.value).startswith(f"config error: {key}: ")
    assert fragment in exc.value.problem


def test_keys_of_a_reporter_not_started_are_a_warning() -> None:
    settings = validate(Config({**BASE, "metrics.reporter.snapshot.stream": "kafka.metrics"}))
    (w,) = [w for w in settings.warnings if w.key.startswith("metrics.")]
    assert w.key == "metrics.reporter.snapshot.stream"
    assert re.search(r"reporter 'snapshot' is not in metrics.reporters", w.problem)
