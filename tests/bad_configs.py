"""The broken configs of the test suite: each derived from one valid base (``BASE_TOML``), each with
the key its one-line error must name. tests/integration/test_bad_configs.py runs every one through
the real container; tests/unit/test_samzamp_command.py through every command and its alias.

Every one fails in validation, before anything connects: the base points at 127.0.0.1:9, which is
never contacted.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from samzamp.config import flatten

__all__ = ["BASE_TOML", "CASES", "Case", "base_values", "render"]

BASE_TOML = """\
[job]
name = "word-count"
id = "1"
default.system = "kafka"

[task]
class = "samzamp.examples.word_count:WordCountTask"
inputs = ["kafka.lines"]
window.ms = 1000
commit.ms = 5000
max.concurrency = 1

[systems.kafka]
samza.factory = "kafka"
bootstrap.servers = "127.0.0.1:9"
default.stream.samza.offset.default = "oldest"

[streams.lines]
samza.msg.serde = "string"
partitions = 4

[streams.word-counts]
samza.key.serde = "string"
samza.msg.serde = "long"
partitions = 4
"""


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(value)


def render(values: dict[str, Any]) -> str:
    """Flat dotted keys as TOML (each whole key quoted, so any key round-trips)."""
    return "".join(f'"{key}" = {_toml_value(value)}\n' for key, value in values.items())


def base_values() -> dict[str, Any]:
    return flatten(tomllib.loads(BASE_TOML))


@dataclass(frozen=True)
class Case:
    id: str
    key: str | None  # the key the one-line message must name; None: the config file's path
    set: dict[str, Any] = field(default_factory=dict)  # keys to add or change
    drop: tuple[str, ...] = ()  # keys to remove
    args: tuple[str, ...] = ()  # extra command-line arguments
    raw: str | None = None  # the whole file, instead of base + set - drop

    def write(self, tmp_path: Path) -> Path:
        if self.raw is not None:
            text = self.raw
        else:
            values = base_values()
            for key in self.drop:
                del values[key]
            values.update(self.set)
            text = render(values)
        path = tmp_path / "job.toml"
        path.write_text(text, encoding="utf-8")
        return path


STORE = {"stores.counts.factory": "lmdb", "stores.counts.key.serde": "string", "stores.counts.msg.serde": "long"}

CASES = [
    Case("missing-job-name", "job.name", drop=("job.name",)),
    Case("empty-job-name", "job.name", set={"job.name": ""}),
    Case("missing-task-class", "task.class", drop=("task.class",)),
    Case("missing-task-inputs", "task.inputs", drop=("task.inputs",)),
    Case("empty-task-inputs", "task.inputs", set={"task.inputs": []}),
    Case("task-class-not-importable", "task.class", set={"task.class": "no_such_package.tasks:WordCountTask"}),
    Case("task-class-missing-attr", "task.class", set={"task.class": "samzamp.examples.word_count:NoSuchTask"}),
    Case("task-class-not-a-task", "task.class", set={"task.class": "collections:OrderedDict"}),
    Case("task-class-abstract", "task.class", set={"task.class": "samzamp.api.task:StreamTask"}),
    Case("window-ms-not-an-int", "task.window.ms", set={"task.window.ms": "soon"}),
    Case("max-concurrency-zero", "task.max.concurrency", set={"task.max.concurrency": 0}),
    Case("typo-task-comit-ms", "task.comit.ms", set={"task.comit.ms": 5000}),
    Case("typo-systems-factory", "systems.kafka.samza.factroy", set={"systems.kafka.samza.factroy": "kafka"}),
    Case("unknown-serde-on-stream", "streams.lines.samza.msg.serde", set={"streams.lines.samza.msg.serde": "nope"}),
    Case(
        "unknown-serde-on-output-stream",
        "streams.word-counts.samza.key.serde",
        set={"streams.word-counts.samza.key.serde": "utf8"},
    ),
    Case("input-names-unconfigured-system", "task.inputs", set={"task.inputs": ["kafka.lines", "hdfs.lines"]}),
    Case("unknown-system-factory", "systems.kafka.samza.factory", set={"systems.kafka.samza.factory": "rabbitmq"}),
    Case(
        "system-without-factory",
        "systems.other.samza.factory",
        set={"systems.other.bootstrap.servers": "127.0.0.1:9"},
    ),
    Case(
        "unknown-grouper",
        "job.systemstreampartition.grouper.factory",
        set={"job.systemstreampartition.grouper.factory": "GroupByMagic"},
    ),
    Case("bad-set-override-value", "task.commit.ms", args=("--set", "task.commit.ms=abc")),
    Case("set-override-without-equals", "task.commit.ms", args=("--set", "task.commit.ms")),
    Case("not-valid-toml", None, raw='[job\nname = "word-count"\n'),
    Case(
        "offset-default-not-an-enum",
        "streams.lines.samza.offset.default",
        set={"streams.lines.samza.offset.default": "newest-ish"},
    ),
    Case("default-system-undefined", "job.default.system", set={"job.default.system": "kinesis"}),
    Case("bool-not-a-bool", "task.drop.producer.errors", set={"task.drop.producer.errors": "sometimes"}),
    Case("bootstrap-stream-unsupported", "streams.lines.samza.bootstrap", set={"streams.lines.samza.bootstrap": True}),
    # A table or key in the wrong place is never kept silently.
    Case(
        # Both keys of the table are wrong; the first in key order is named.
        "misspelled-table",
        "stream.lines.partitions",
        raw=BASE_TOML.replace("[streams.lines]", "[stream.lines]"),
    ),
    Case(
        "samza-key-under-stream-table-without-samza",
        "streams.lines.msg.serde",
        raw=BASE_TOML.replace("[streams.lines]\nsamza.msg.serde", "[streams.lines]\nmsg.serde"),
    ),
    Case(
        "samza-key-under-system-table-without-samza",
        "systems.kafka.msg.serde",
        set={"systems.kafka.msg.serde": "string"},
    ),
    Case("tasks-table", "tasks.window.ms", set={"tasks.window.ms": 1000}),
    Case("not-a-topic-config", "streams.lines.retention.msx", set={"streams.lines.retention.msx": 1000}),
    Case(
        "system-default-not-a-topic-config",
        "systems.kafka.default.stream.msg.serde",
        set={"systems.kafka.default.stream.msg.serde": "string"},
    ),
    Case(
        "legacy-per-stream-form",
        "systems.kafka.streams.lines.samza.msg.serde",
        set={"systems.kafka.streams.lines.samza.msg.serde": "string"},
    ),
    Case(
        "stream-of-unknown-system",
        "streams.word-counts.samza.system",
        set={"streams.word-counts.samza.system": "kafak"},
    ),
    # Keys accepted before with no effect.
    Case(
        "metrics-reporter-class",
        "metrics.reporter.jmx.class",
        set={
            "metrics.reporters": ["jmx"],
            "metrics.reporter.jmx.class": "org.apache.samza.metrics.reporter.JmxReporterFactory",
        },
    ),
    Case("snapshot-reporter-stream", "metrics.reporter.snapshot.stream", set={"metrics.reporters": ["snapshot"]}),
    Case("stream-priority", "streams.lines.samza.priority", set={"streams.lines.samza.priority": 2}),
    Case("custom-chooser", "task.chooser.class", set={"task.chooser.class": "com.example.PriorityChooserFactory"}),
    Case("config-rewriters", "job.config.rewriters", set={"job.config.rewriters": "regex"}),
    Case("app-name-disagrees", "app.name", set={"app.name": "other-job"}),
    # Values that used to mean something else, or end in a traceback at run time.
    Case("window-ms-zero", "task.window.ms", set={"task.window.ms": 0}),
    Case("pool-size-huge", "job.container.thread.pool.size", set={"job.container.thread.pool.size": 1_000_000}),
    Case("map-size-huge", "stores.counts.lmdb.map.size", set={**STORE, "stores.counts.lmdb.map.size": 2**62}),
    Case("fetch-threshold-huge", "task.fetch.threshold", set={"task.fetch.threshold": 10**9}),
    Case("commit-ms-huge", "task.commit.ms", set={"task.commit.ms": 2**40}),
    # Stores.
    Case("store-without-factory", "stores.counts.factory", set={"stores.counts.key.serde": "string"}),
    Case(
        "samza-rocksdb-store",
        "stores.counts.factory",
        set={**STORE, "stores.counts.factory": "org.apache.samza.storage.kv.RocksDbKeyValueStorageEngineFactory"},
    ),
    Case("store-side-inputs", "stores.counts.side.inputs", set={**STORE, "stores.counts.side.inputs": "kafka.lines"}),
    Case("store-rocksdb-ttl", "stores.counts.rocksdb.ttl.ms", set={**STORE, "stores.counts.rocksdb.ttl.ms": 60000}),
    Case(
        "java-serde-factory",
        "serializers.registry.obj.class",
        set={"serializers.registry.obj.class": "org.apache.samza.serializers.SerializableSerdeFactory"},
    ),
]
