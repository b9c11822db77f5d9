"""Unit tests of samzamp.config: loading, overrides, typed getters, key checks, settings and validate().

No network: nothing here builds a container or a system.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest

from samzamp.api.envelope import SystemStream
from samzamp.api.errors import ConfigError
from samzamp.config import Config, JobSettings, flatten, load_config, parse_overrides, validate
from samzamp.config.keys import KEYS, known_keys_like
from samzamp.config.samza_keys import samza_key
from samzamp.config.schema import check_keys
from samzamp.config.settings import checkpoint_topic_name
from samzamp.config.validate import load_task_class
from samzamp.examples.word_count import WordCountTask

WORD_COUNT_TASK = "samzamp.examples.word_count:WordCountTask"

# The smallest config validate() accepts: everything else takes its default.
MINIMAL: dict[str, Any] = {
    "job.name": "wc",
    "task.class": WORD_COUNT_TASK,
    "task.inputs": ["kafka.lines"],
    "systems.kafka.samza.factory": "kafka",
}


def _with(**values: Any) -> Config:
    return Config({**MINIMAL, **values})


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def _assert_names_key(exc: pytest.ExceptionInfo[ConfigError], key: str) -> None:
    assert exc.value.key == key
    assert key in str(exc.value)
    assert str(exc.value).startswith(f"config error: {key}: ")


# --------------------------------------------------------------------------- TOML flattening


NESTED_TOML = """
[job]
name = "word-count"
id = "7"
default.system = "kafka"

[task]
class = "samzamp.examples.word_count:WordCountTask"
inputs = ["kafka.lines", "kafka.more"]
window.ms = 1000

[systems.kafka]
samza.factory = "kafka"
consumer.fetch.min.bytes = 1

[systems.kafka.default.stream]
samza.offset.default = "oldest"

[streams.lines]
samza.msg.serde = "string"
partitions = 4
"""

DOTTED_TOML = """
job.name = "word-count"
job.id = "7"
job.default.system = "kafka"
task.class = "samzamp.examples.word_count:WordCountTask"
task.inputs = ["kafka.lines", "kafka.more"]
task.window.ms = 1000
systems.kafka.samza.factory = "kafka"
systems.kafka.consumer.fetch.min.bytes = 1
systems.kafka.default.stream.samza.offset.default = "oldest"
streams.lines.samza.msg.serde = "string"
streams.lines.partitions = 4
"""

# Samza's flat properties form: each whole key quoted.
QUOTED_TOML = """
"job.name" = "word-count"
"job.id" = "7"
"job.default.system" = "kafka"
"task.class" = "samzamp.examples.word_count:WordCountTask"
"task.inputs" = ["kafka.lines", "kafka.more"]
"task.window.ms" = 1000
"systems.kafka.samza.factory" = "kafka"
"systems.kafka.consumer.fetch.min.bytes" = 1
"systems.kafka.default.stream.samza.offset.default" = "oldest"
"streams.lines.samza.msg.serde" = "string"
"streams.lines.partitions" = 4
"""

EXPECTED_FLAT = {
    "job.name": "word-count",
    "job.id": "7",
    "job.default.system": "kafka",
    "task.class": WORD_COUNT_TASK,
    "task.inputs": ["kafka.lines", "kafka.more"],
    "task.window.ms": 1000,
    "systems.kafka.samza.factory": "kafka",
    "systems.kafka.consumer.fetch.min.bytes": 1,
    "systems.kafka.default.stream.samza.offset.default": "oldest",
    "streams.lines.samza.msg.serde": "string",
    "streams.lines.partitions": 4,
}


@pytest.mark.parametrize("text", [NESTED_TOML, DOTTED_TOML, QUOTED_TOML], ids=["nested", "dotted", "quoted"])
def test_nested_tables_and_dotted_keys_flatten_to_the_same_keys(tmp_path: Path, text: str) -> None:
    config = load_config(_write(tmp_path, "job.toml", text))
    assert dict(config) == EXPECTED_FLAT


def test_flatten_keeps_value_types_and_arrays() -> None:
    table = {"a": {"b": {"c": 1, "d": True}, "e": "x"}, "f": [1, 2], "g": [{"h": 1}]}
    assert flatten(table) == {"a.b.c": 1, "a.b.d": True, "a.e": "x", "f": [1, 2], "g": [{"h": 1}]}


def test_flatten_with_prefix() -> None:
    assert flatten({"window": {"ms": 5}}, "task") == {"task.window.ms": 5}


def test_flatten_empty() -> None:
    assert flatten({}) == {}


def test_load_config_of_the_shipped_word_count_config_validates() -> None:
    path = Path(__file__).resolve().parents[2] / "configs" / "word-count.toml"
    settings = validate(load_config(path))
    assert settings.name == "word-count"
    assert settings.task.inputs == (SystemStream("kafka", "lines"),)


SHIPPED = sorted((Path(__file__).resolve().parents[2] / "configs").glob("*.toml"))


@pytest.mark.parametrize("path", SHIPPED, ids=[p.stem for p in SHIPPED])
def test_every_shipped_config_validates_without_a_warning(path: Path) -> None:
    assert validate(load_config(path)).warnings == ()


def test_load_config_missing_file_names_the_path(tmp_path: Path) -> None:
    path = tmp_path / "nope.toml"
    with pytest.raises(ConfigError) as exc:
        load_config(path)
    _assert_names_key(exc, str(path))
    assert "cannot read" in exc.value.problem


def test_load_config_invalid_toml_names_the_path(tmp_path: Path) -> None:
    path = _write(tmp_path, "bad.toml", '[job\nname = "x"\n')
    with pytest.raises(ConfigError) as exc:
        load_config(path)
    _assert_names_key(exc, str(path))
    assert "not valid TOML" in exc.value.problem


def test_load_config_invalid_utf8_names_the_path(tmp_path: Path) -> None:
    path = tmp_path / "latin1.toml"
    path.write_bytes(b'job.name = "caf\xe9"\n')
    with pytest.raises(ConfigError) as exc:
        load_config(path)
    _assert_names_key(exc, str(path))


def test_load_config_without_a_file_uses_only_overrides() -> None:
    config = load_config(None, {"job.name": "x"})
    assert dict(config) == {"job.name": "x"}


# --------------------------------------------------------------------------- --set overrides


def test_parse_overrides_basic() -> None:
    assert parse_overrides(["task.window.ms=1000", "job.name=wc"]) == {"task.window.ms": "1000", "job.name": "wc"}


def test_parse_overrides_strips_and_keeps_later_equals_signs() -> None:
    assert parse_overrides(["  job.name = a=b  "]) == {"job.name": "a=b"}


def test_parse_overrides_empty_value_is_allowed() -> None:
    assert parse_overrides(["job.id="]) == {"job.id": ""}


def test_parse_overrides_last_one_wins() -> None:
    assert parse_overrides(["task.commit.ms=1", "task.commit.ms=2"]) == {"task.commit.ms": "2"}


def test_parse_overrides_nothing() -> None:
    assert parse_overrides([]) == {}


@pytest.mark.parametrize("pair", ["task.window.ms", "=1000", " = 5"])
def test_parse_overrides_rejects_a_pair_without_key_or_equals(pair: str) -> None:
    with pytest.raises(ConfigError) as exc:
        parse_overrides([pair])
    _assert_names_key(exc, pair)
    assert "key=value" in exc.value.problem


def test_parse_overrides_rejects_an_empty_pair() -> None:
    with pytest.raises(ConfigError) as exc:
        parse_overrides([""])
    assert exc.value.key == "--set"


def test_overrides_win_over_the_file(tmp_path: Path) -> None:
    path = _write(tmp_path, "job.toml", NESTED_TOML)
    config = load_config(path, parse_overrides(["task.window.ms=250", "job.name=other", "task.max.concurrency=4"]))
    assert config["task.window.ms"] == "250"
    assert config.get_int("task.window.ms", -1) == 250
    assert config.get_str("job.name") == "other"
    assert config.get_int("task.max.concurrency", 1) == 4
    # untouched keys keep their TOML values and types
    assert config["task.inputs"] == ["kafka.lines", "kafka.more"]
    settings = validate(config)
    assert settings.task.window_ms == 250
    assert settings.task.max_concurrency == 4
    assert settings.name == "other"


def test_override_of_a_list_key_with_a_comma_string(tmp_path: Path) -> None:
    path = _write(tmp_path, "job.toml", NESTED_TOML)
    config = load_config(path, parse_overrides(["task.inputs=kafka.a, kafka.b"]))
    assert config.get_list("task.inputs") == ["kafka.a", "kafka.b"]
    assert validate(config).task.inputs == (SystemStream("kafka", "a"), SystemStream("kafka", "b"))


# --------------------------------------------------------------------------- typed getters


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (True, True),
        (False, False),
        ("true", True),
        ("false", False),
        ("TRUE", True),
        (" False ", False),
        ("yes", True),
        ("no", False),
        ("on", True),
        ("off", False),
        ("1", True),
        ("0", False),
        (1, True),
        (0, False),
    ],
)
def test_get_bool_coerces(value: Any, expected: bool) -> None:
    assert Config({"k.b": value}).get_bool("k.b", not expected) is expected


@pytest.mark.parametrize("default", [True, False])
def test_get_bool_default_when_missing_or_empty(default: bool) -> None:
    assert Config({}).get_bool("k.b", default) is default
    assert Config({"k.b": ""}).get_bool("k.b", default) is default


@pytest.mark.parametrize("value", ["maybe", "2", 2, "tru", [True]])
def test_get_bool_rejects_and_names_the_key(value: Any) -> None:
    with pytest.raises(ConfigError) as exc:
        Config({"task.drop.producer.errors": value}).get_bool("task.drop.producer.errors", False)
    _assert_names_key(exc, "task.drop.producer.errors")
    assert "true or false" in exc.value.problem


@pytest.mark.parametrize(
    ("value", "expected"),
    [(42, 42), ("42", 42), (" 7 ", 7), ("-1", -1), (-1, -1), ("0", 0), ("+5", 5)],
)
def test_get_int_coerces(value: Any, expected: int) -> None:
    assert Config({"task.commit.ms": value}).get_int("task.commit.ms", 60000) == expected


def test_get_int_default_when_missing_or_empty() -> None:
    assert Config({}).get_int("task.commit.ms", 60000) == 60000
    assert Config({"task.commit.ms": ""}).get_int("task.commit.ms", 60000) == 60000


@pytest.mark.parametrize("value", ["abc", "1.5", 1.5, "1e3", True, False, [1], "ten"])
def test_get_int_rejects_and_names_the_key(value: Any) -> None:
    with pytest.raises(ConfigError) as exc:
        Config({"task.commit.ms": value}).get_int("task.commit.ms", 60000)
    _assert_names_key(exc, "task.commit.ms")
    assert "integer" in exc.value.problem


@pytest.mark.parametrize(
    ("value", "expected"),
    [("word-count", "word-count"), ("  padded  ", "padded"), (1, "1"), (True, "true"), (False, "false")],
)
def test_get_str_coerces(value: Any, expected: str) -> None:
    assert Config({"job.name": value}).get_str("job.name") == expected


def test_get_str_default_when_missing() -> None:
    assert Config({}).get_str("job.id") is None
    assert Config({}).get_str("job.id", "1") == "1"


@pytest.mark.parametrize("value", [["a"], {"a": 1}])
def test_get_str_rejects_lists_and_tables_naming_the_key(value: Any) -> None:
    with pytest.raises(ConfigError) as exc:
        Config({"job.name": value}).get_str("job.name")
    _assert_names_key(exc, "job.name")


@pytest.mark.parametrize("value", [None, "", "   "])
def test_require_str_names_the_key(value: Any) -> None:
    values = {} if value is None else {"job.name": value}
    with pytest.raises(ConfigError) as exc:
        Config(values).require_str("job.name", "name the job")
    _assert_names_key(exc, "job.name")
    assert "required" in exc.value.problem
    assert "name the job" in exc.value.problem


def test_get_list_with_a_toml_array() -> None:
    config = Config({"task.inputs": ["kafka.a", " kafka.b ", ""]})
    assert config.get_list("task.inputs") == ["kafka.a", "kafka.b"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("kafka.a,kafka.b", ["kafka.a", "kafka.b"]),
        (" kafka.a , kafka.b ,, ", ["kafka.a", "kafka.b"]),
        ("kafka.a", ["kafka.a"]),
        ("", []),
    ],
)
def test_get_list_with_a_comma_string(text: str, expected: list[str]) -> None:
    assert Config({"task.inputs": text}).get_list("task.inputs") == expected


def test_get_list_missing_is_empty() -> None:
    assert Config({}).get_list("task.inputs") == []


@pytest.mark.parametrize("value", [[1, 2], ["a", 1], 5, True, {"a": "b"}])
def test_get_list_rejects_non_strings_naming_the_key(value: Any) -> None:
    with pytest.raises(ConfigError) as exc:
        Config({"task.inputs": value}).get_list("task.inputs")
    _assert_names_key(exc, "task.inputs")


def test_config_is_a_read_only_mapping() -> None:
    config = Config({"a.b": 1})
    assert len(config) == 1
    assert list(config) == ["a.b"]
    assert "a.b" in config
    with pytest.raises(TypeError):
        config["a.b"] = 2  # type: ignore[index]


def test_config_subset() -> None:
    config = Config(
        {"systems.kafka.consumer.a": 1, "systems.kafka.consumer.b.c": "x", "systems.kafka.samza.factory": "k"}
    )
    assert config.subset("systems.kafka.consumer.") == {"a": 1, "b.c": "x"}


# --------------------------------------------------------------------------- unknown keys


@pytest.mark.parametrize(
    ("typo", "meant"),
    [
        ("task.windw.ms", "task.window.ms"),
        ("task.comit.ms", "task.commit.ms"),
        ("task.max.concurency", "task.max.concurrency"),
        ("job.nmae", "job.name"),
        ("systems.kafka.samza.factroy", "systems.kafka.samza.factory"),
        ("systems.kafka.default.stream.samza.msg.sered", "systems.kafka.default.stream.samza.msg.serde"),
        ("streams.lines.samza.msg.serd", "streams.lines.samza.msg.serde"),
        ("streams.lines.samza.ofset.default", "streams.lines.samza.offset.default"),
        ("serializers.registry.foo.klass", "serializers.registry.foo.class"),
        ("stores.s.facotry", "stores.s.factory"),
    ],
)
def test_typo_is_reported_with_a_did_you_mean_hint(typo: str, meant: str) -> None:
    with pytest.raises(ConfigError) as exc:
        check_keys(_with(**{typo: "1"}))
    _assert_names_key(exc, typo)
    assert "unknown key" in exc.value.problem
    assert f"did you mean {meant!r}" in exc.value.problem


def test_typo_is_reported_by_validate_too() -> None:
    with pytest.raises(ConfigError) as exc:
        validate(_with(**{"task.windw.ms": 1000}))
    _assert_names_key(exc, "task.windw.ms")
    assert "'task.window.ms'" in exc.value.problem


def test_unknown_key_without_a_close_match_still_fails() -> None:
    with pytest.raises(ConfigError) as exc:
        check_keys(_with(**{"task.zzzzzzzz": "1"}))
    _assert_names_key(exc, "task.zzzzzzzz")
    assert "did you mean" not in exc.value.problem


@pytest.mark.parametrize(
    "key",
    [
        "systems.kafka.consumer.fetch.min.bytes",
        "systems.kafka.producer.linger.ms",
        "systems.kafka.default.stream.segment.bytes",
        "streams.x.cleanup.policy",
        "streams.lines.retention.ms",
        "stores.counts.changelog.kafka.cleanup.policy",
        "word-count.output",  # a user's own namespace
    ],
)
def test_passthrough_keys_are_not_flagged(key: str) -> None:
    config = Config({**MINIMAL, **STORE, key: "1"})
    check_keys(config)
    validate(config)


def test_stream_passthrough_keys_become_topic_configs() -> None:
    settings = validate(_with(**{"streams.lines.cleanup.policy": "compact", "streams.lines.partitions": 3}))
    stream = settings.stream(SystemStream("kafka", "lines"))
    assert stream.topic_configs == {"cleanup.policy": "compact"}
    assert stream.partitions == 3


def test_system_client_passthrough_keys_reach_the_system_settings() -> None:
    settings = validate(_with(**{"systems.kafka.consumer.fetch.min.bytes": 1, "systems.kafka.producer.linger.ms": "5"}))
    assert settings.systems["kafka"].consumer == {"fetch.min.bytes": 1}
    assert settings.systems["kafka"].producer == {"linger.ms": "5"}


@pytest.mark.parametrize(
    ("key", "value", "fragment"),
    [
        ("task.window.ms", "soon", "integer"),
        ("task.max.concurrency", 0, ">= 1"),
        ("task.max.concurrency", "0", ">= 1"),
        ("task.shutdown.ms", -5, ">= 0"),
        ("task.async.commit", "maybe", "true or false"),
        ("streams.lines.samza.offset.default", "newest-ish", "oldest, upcoming"),
        ("systems.kafka.default.stream.samza.offset.default", "earliest", "oldest, upcoming"),
        ("job.coordinator.factory", "yarn", "passthrough, zk"),
        ("task.ignored.exceptions", 3, "list"),
    ],
)
def test_ill_typed_values_name_the_key(key: str, value: Any, fragment: str) -> None:
    with pytest.raises(ConfigError) as exc:
        check_keys(_with(**{key: value}))
    _assert_names_key(exc, key)
    assert fragment in exc.value.problem


# --------------------------------------------------------------------------- JobSettings


def test_job_settings_defaults() -> None:
    settings = JobSettings.from_config(Config(MINIMAL))
    assert settings.name == "wc"
    assert settings.id == "1"
    assert settings.default_system == "kafka"  # the only system
    assert settings.grouper == "GroupByPartition"
    assert settings.pool_size == 0
    assert settings.checkpoint_system == "kafka"  # the only system
    assert settings.checkpoint_topic == "__samza_checkpoint_ver_1_for_wc_1"
    assert settings.checkpoint_replication_factor == 1
    assert settings.checkpoint_segment_bytes == 26214400
    assert settings.checkpoint_validation is True
    assert settings.metrics_log_interval_ms == 60000
    assert settings.serializers == {}
    task = settings.task
    assert task.task_class == WORD_COUNT_TASK
    assert task.inputs == (SystemStream("kafka", "lines"),)
    assert task.commit_ms == 60000
    assert task.max_concurrency == 1
    assert task.window_ms == -1
    assert task.callback_timeout_ms == -1
    assert task.shutdown_ms == 30000
    assert task.drop_deserialization_errors is False
    assert task.drop_serialization_errors is False
    assert task.drop_producer_errors is False
    assert task.ignored_exceptions == ()
    system = settings.systems["kafka"]
    assert system.factory == "kafka"
    assert system.offset_default == "upcoming"
    assert system.reset_offset is False
    assert system.bootstrap_servers is None
    assert system.key_serde is None
    assert system.msg_serde is None


def test_job_settings_read_string_values_from_overrides() -> None:
    settings = JobSettings.from_config(
        _with(
            **{
                "task.commit.ms": "1000",
                "task.window.ms": "250",
                "task.max.concurrency": "8",
                "task.drop.producer.errors": "true",
                "job.id": "2",
            }
        )
    )
    assert settings.task.commit_ms == 1000
    assert settings.task.window_ms == 250
    assert settings.task.max_concurrency == 8
    assert settings.task.drop_producer_errors is True
    assert settings.id == "2"


def test_job_id_given_as_a_toml_integer() -> None:
    assert JobSettings.from_config(_with(**{"job.id": 3})).id == "3"


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("GroupByPartition", "GroupByPartition"),
        ("GroupByPartitionFactory", "GroupByPartition"),
        ("org.apache.samza.container.grouper.stream.GroupByPartitionFactory", "GroupByPartition"),
        ("GroupBySystemStreamPartition", "GroupBySystemStreamPartition"),
        (
            "org.apache.samza.container.grouper.stream.GroupBySystemStreamPartitionFactory",
            "GroupBySystemStreamPartition",
        ),
    ],
)
def test_grouper_names(raw: str, expected: str) -> None:
    settings = JobSettings.from_config(_with(**{"job.systemstreampartition.grouper.factory": raw}))
    assert settings.grouper == expected


def test_unknown_grouper_names_the_key() -> None:
    with pytest.raises(ConfigError) as exc:
        JobSettings.from_config(_with(**{"job.systemstreampartition.grouper.factory": "GroupByMagic"}))
    _assert_names_key(exc, "job.systemstreampartition.grouper.factory")


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("kafka", "kafka"), ("org.apache.samza.system.kafka.KafkaSystemFactory", "kafka"), ("inmemory", "inmemory")],
)
def test_system_factory_names(raw: str, expected: str) -> None:
    settings = JobSettings.from_config(_with(**{"systems.kafka.samza.factory": raw}))
    assert settings.systems["kafka"].factory == expected


@pytest.mark.parametrize(
    ("extra", "drop", "key"),
    [
        ({}, "job.name", "job.name"),
        ({}, "task.class", "task.class"),
        ({}, "task.inputs", "task.inputs"),
        ({"task.inputs": []}, None, "task.inputs"),
        ({"task.inputs": ["nosuch.lines"]}, None, "task.inputs"),
        # A bare stream name with several systems and no job.default.system names no system.
        (
            {"task.inputs": ["lines"], "systems.other.samza.factory": "kafka", "task.checkpoint.system": "kafka"},
            None,
            "task.inputs",
        ),
        ({"task.inputs": ["kafka."]}, None, "task.inputs"),
        ({"task.inputs": ["kafka.a", "kafka.a"]}, None, "task.inputs"),
        ({"systems.kafka.samza.factory": "rabbit"}, None, "systems.kafka.samza.factory"),
        ({"systems.other.bootstrap.servers": "h:1"}, None, "systems.other.samza.factory"),
        ({"job.default.system": "nope"}, None, "job.default.system"),
        ({"systems.other.samza.factory": "kafka"}, None, "task.checkpoint.system"),  # two systems, no default
        ({"task.checkpoint.system": "nope"}, None, "task.checkpoint.system"),
        (
            {"job.container.thread.pool.size": 2, "systems.kafka.samza.factory": "inmemory"},
            None,
            "job.container.thread.pool.size",
        ),
        ({"job.container.worker.ring.bytes": 5000}, None, "job.container.worker.ring.bytes"),
        ({"job.container.worker.ring.bytes": 2048}, None, "job.container.worker.ring.bytes"),
        ({"task.async.commit": True}, None, "task.async.commit"),
        ({"streams.lines.samza.bootstrap": True}, None, "streams.lines.samza.bootstrap"),
        ({"streams.lines.samza.broadcast": "true"}, None, "streams.lines.samza.broadcast"),
    ],
)
def test_job_settings_errors_name_the_key(extra: dict[str, Any], drop: str | None, key: str) -> None:
    values = {**MINIMAL, **extra}
    if drop is not None:
        del values[drop]
    with pytest.raises(ConfigError) as exc:
        JobSettings.from_config(Config(values))
    _assert_names_key(exc, key)


def test_bare_input_uses_job_default_system() -> None:
    settings = JobSettings.from_config(_with(**{"task.inputs": ["lines"], "job.default.system": "kafka"}))
    assert settings.task.inputs == (SystemStream("kafka", "lines"),)


def test_input_stream_names_may_contain_dots() -> None:
    settings = JobSettings.from_config(_with(**{"task.inputs": ["kafka.a.b.c"]}))
    assert settings.task.inputs == (SystemStream("kafka", "a.b.c"),)


# --------------------------------------------------------------------------- stream settings


def _stream(**values: Any) -> Any:
    settings = JobSettings.from_config(_with(**values))
    return settings.stream(SystemStream("kafka", "lines"))


def test_stream_serde_from_the_stream_wins_over_both_system_defaults() -> None:
    stream = _stream(
        **{
            "streams.lines.samza.msg.serde": "string",
            "streams.lines.samza.key.serde": "long",
            "systems.kafka.default.stream.samza.msg.serde": "json",
            "systems.kafka.default.stream.samza.key.serde": "integer",
            "systems.kafka.samza.msg.serde": "msgpack",
            "systems.kafka.samza.key.serde": "bytes",
        }
    )
    assert stream.msg_serde == "string"
    assert stream.key_serde == "long"


def test_stream_serde_default_stream_wins_over_system_samza() -> None:
    stream = _stream(
        **{
            "systems.kafka.default.stream.samza.msg.serde": "json",
            "systems.kafka.default.stream.samza.key.serde": "integer",
            "systems.kafka.samza.msg.serde": "msgpack",
            "systems.kafka.samza.key.serde": "bytes",
        }
    )
    assert stream.msg_serde == "json"
    assert stream.key_serde == "integer"


def test_stream_serde_falls_back_to_system_samza() -> None:
    stream = _stream(**{"systems.kafka.samza.msg.serde": "msgpack", "systems.kafka.samza.key.serde": "bytes"})
    assert stream.msg_serde == "msgpack"
    assert stream.key_serde == "bytes"


def test_stream_serde_none_when_nothing_is_set() -> None:
    stream = _stream()
    assert stream.msg_serde is None
    assert stream.key_serde is None


def test_stream_offset_default_precedence() -> None:
    assert _stream().offset_default == "upcoming"
    assert _stream(**{"systems.kafka.samza.offset.default": "oldest"}).offset_default == "oldest"
    both = {
        "systems.kafka.samza.offset.default": "upcoming",
        "systems.kafka.default.stream.samza.offset.default": "oldest",
    }
    assert _stream(**both).offset_default == "oldest"
    assert _stream(**both, **{"streams.lines.samza.offset.default": "upcoming"}).offset_default == "upcoming"


def test_stream_reset_offset_from_stream_or_system() -> None:
    assert _stream().reset_offset is False
    assert _stream(**{"streams.lines.samza.reset.offset": "true"}).reset_offset is True
    assert _stream(**{"systems.kafka.default.stream.samza.reset.offset": True}).reset_offset is True


def test_stream_settings_identity() -> None:
    stream = _stream()
    assert stream.stream_id == "lines"
    assert stream.system == "kafka"
    assert stream.physical_name == "lines"
    assert stream.system_stream == SystemStream("kafka", "lines")
    assert stream.partitions is None
    assert stream.topic_configs == {}


def test_stream_settings_found_by_physical_name() -> None:
    settings = JobSettings.from_config(
        _with(
            **{
                "task.inputs": ["kafka.lines-topic"],
                "streams.text.samza.physical.name": "lines-topic",
                "streams.text.samza.msg.serde": "json",
            }
        )
    )
    stream = settings.stream(SystemStream("kafka", "lines-topic"))
    assert stream.stream_id == "text"
    assert stream.physical_name == "lines-topic"
    assert stream.msg_serde == "json"


# --------------------------------------------------------------------------- checkpoint topic


@pytest.mark.parametrize(
    ("name", "job_id", "topic"),
    [
        ("word-count", "1", "__samza_checkpoint_ver_1_for_word-count_1"),
        ("word_count", "1", "__samza_checkpoint_ver_1_for_word-count_1"),
        ("my_big_job", "prod_2", "__samza_checkpoint_ver_1_for_my-big-job_prod-2"),
        ("job", "a_b", "__samza_checkpoint_ver_1_for_job_a-b"),
    ],
)
def test_checkpoint_topic_name(name: str, job_id: str, topic: str) -> None:
    assert checkpoint_topic_name(name, job_id) == topic
    settings = JobSettings.from_config(_with(**{"job.name": name, "job.id": job_id}))
    assert settings.checkpoint_topic == topic


# --------------------------------------------------------------------------- validate()


def test_validate_imports_the_task_class() -> None:
    settings = validate(Config(MINIMAL))
    assert isinstance(settings, JobSettings)
    assert settings.task.task_class == WORD_COUNT_TASK
    assert load_task_class(settings.task.task_class) is WordCountTask


def test_validate_accepts_the_dotted_import_form() -> None:
    validate(_with(**{"task.class": "samzamp.examples.word_count.WordCountTask"}))
    assert load_task_class("samzamp.examples.word_count.WordCountTask") is WordCountTask


@pytest.mark.parametrize(
    ("task_class", "fragment"),
    [
        ("nosuch_module_xyz:Task", "cannot import"),
        ("samzamp.examples.word_count:NoSuchTask", "no attribute"),
        ("collections:OrderedDict", "must subclass"),
        ("samzamp.examples.word_count:Counter", "must subclass"),
        ("os.path:join", "not a class"),
        ("WordCountTask", "import path"),
        ("samzamp.api.task:StreamTask", "does not implement"),
    ],
)
def test_validate_rejects_a_bad_task_class(task_class: str, fragment: str) -> None:
    with pytest.raises(ConfigError) as exc:
        validate(_with(**{"task.class": task_class}))
    _assert_names_key(exc, "task.class")
    assert fragment in exc.value.problem


def test_validate_checks_stream_serdes() -> None:
    with pytest.raises(ConfigError) as exc:
        validate(_with(**{"streams.lines.samza.msg.serde": "nope"}))
    _assert_names_key(exc, "streams.lines.samza.msg.serde")
    assert "unknown serde 'nope'" in exc.value.problem


def test_validate_checks_serdes_of_streams_that_are_not_inputs() -> None:
    with pytest.raises(ConfigError) as exc:
        validate(_with(**{"streams.word-counts.samza.key.serde": "nope"}))
    _assert_names_key(exc, "streams.word-counts.samza.key.serde")


def test_validate_checks_store_serdes() -> None:
    with pytest.raises(ConfigError) as exc:
        validate(
            _with(
                **{
                    "stores.counts.factory": "lmdb",
                    "stores.counts.key.serde": "string",
                    "stores.counts.msg.serde": "nope",
                }
            )
        )
    _assert_names_key(exc, "stores.counts.msg.serde")


STORE = {"stores.counts.factory": "lmdb", "stores.counts.key.serde": "string", "stores.counts.msg.serde": "long"}


@pytest.mark.parametrize(
    ("extra", "drop", "key"),
    [
        ({}, "stores.counts.key.serde", "stores.counts.key.serde"),
        ({}, "stores.counts.msg.serde", "stores.counts.msg.serde"),
        ({"stores.counts.factory": "rocksdb"}, None, "stores.counts.factory"),
        ({"stores.counts.changelog": "nosuch.counts-log"}, None, "stores.counts.changelog"),
        ({"stores.counts.changelog": "kafka."}, None, "stores.counts.changelog"),
        (
            {
                "stores.counts.changelog": "mem.log",
                "systems.mem.samza.factory": "inmemory",
                "job.default.system": "kafka",
            },
            None,
            "stores.counts.changelog",
        ),
        ({"stores.counts.lmdb.map.size": 10}, None, "stores.counts.lmdb.map.size"),
        ({"stores.counts.lmdb.mapsize": 10}, None, "stores.counts.lmdb.mapsize"),  # a typo
    ],
)
def test_store_config_errors_name_the_key(extra: dict[str, Any], drop: str | None, key: str) -> None:
    values = {**MINIMAL, **STORE, **extra}
    if drop is not None:
        del values[drop]
    with pytest.raises(ConfigError) as exc:
        validate(Config(values))
    _assert_names_key(exc, key)


def test_store_settings_and_changelog_forms() -> None:
    settings = validate(Config({**MINIMAL, **STORE, "stores.counts.changelog": "kafka.counts-log"}))
    st = settings.stores["counts"]
    assert (st.changelog, st.key_serde, st.msg_serde, st.map_size, st.sync) == (
        SystemStream("kafka", "counts-log"),
        "string",
        "long",
        64 << 20,
        True,
    )
    bare = validate(
        Config({**MINIMAL, **STORE, "stores.counts.changelog": "counts-log", "job.changelog.system": "kafka"})
    )
    assert bare.stores["counts"].changelog == SystemStream("kafka", "counts-log")
    assert validate(Config({**MINIMAL, **STORE})).stores["counts"].changelog is None


def test_two_stores_sharing_one_changelog_are_refused_naming_both() -> None:
    other = {k.replace("stores.counts.", "stores.totals."): v for k, v in STORE.items()}
    shared = {
        **MINIMAL,
        **STORE,
        **other,
        "stores.counts.changelog": "kafka.log",
        "stores.totals.changelog": "log",
        "job.changelog.system": "kafka",
    }
    with pytest.raises(ConfigError) as exc:
        validate(Config(shared))
    _assert_names_key(exc, "stores.totals.changelog")
    assert "kafka.log is the changelog of store 'counts' too" in str(exc.value)
    apart = validate(Config({**shared, "stores.totals.changelog": "kafka.totals-log"}))
    assert {s.changelog for s in apart.stores.values()} == {
        SystemStream("kafka", "log"),
        SystemStream("kafka", "totals-log"),
    }


def test_validate_runs_key_checks_before_settings() -> None:
    # Both a typo and a missing job.name: the typo (check_keys) is reported first.
    values = {**MINIMAL, "task.comit.ms": 1}
    del values["job.name"]
    with pytest.raises(ConfigError) as exc:
        validate(Config(values))
    _assert_names_key(exc, "task.comit.ms")


# --------------------------------------------------------------------------- namespaces, Samza's keys, warnings


def _warnings_of(**values: Any) -> dict[str, str]:
    """Key -> problem of every warning, both from check_keys and as validate hands them on."""
    config = _with(**values)
    found = {w.key: w.problem for w in check_keys(config)}
    assert {w.key: w.problem for w in validate(config).warnings} == found
    return found


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("job.factory.class", "org.apache.samza.job.yarn.YarnJobFactory"),
        ("job.coordinator.zk.enable-startup-with-active-job-model", True),
        ("metrics.reporter.jmx.port", 9999),
        ("task.checkpoint.factory", "org.apache.samza.checkpoint.kafka.KafkaCheckpointManagerFactory"),
        ("yarn.package.path", "hdfs:///job.tgz"),
        ("cluster-manager.container.memory.mb", 1024),
        ("task.opts", "-Xmx1g"),
        ("job.container.single.thread.mode", True),
        ("systems.kafka.samza.fetch.threshold", 10000),
        ("stores.counts.rocksdb.block.size.bytes", 4096),
        ("stores.counts.object.cache.size", 1000),
        ("app.main.class", "com.example.Main"),
    ],
)
def test_samza_keys_samzamp_does_not_use_are_warnings_that_say_why(key: str, value: Any) -> None:
    extra = STORE if key.startswith("stores.") else {}
    warnings = _warnings_of(**extra, **{key: value})
    assert list(warnings) == [key]
    assert warnings[key].startswith("is Samza's key for ")
    assert "samzamp does not use it: " in warnings[key]
    assert "typo" not in warnings[key]
    assert "did you mean" not in warnings[key]


@pytest.mark.parametrize(
    ("key", "value", "fragment"),
    [
        ("streams.lines.samza.priority", 2, "round robin"),
        ("task.chooser.class", "com.example.PriorityChooserFactory", "round robin"),
        ("job.config.rewriters", "regex", "rewriters"),
        ("job.systemstreampartition.matcher.class", "x.RangeMatcher", "every partition"),
        ("serializers.registry.avro.samza.serialized.instance", "rO0AB", "Java objects"),
        ("stores.counts.side.inputs", "kafka.profiles", "side inputs"),
        ("stores.counts.rocksdb.ttl.ms", 60000, "expire"),
    ],
)
def test_samza_keys_whose_absence_changes_the_job_are_errors(key: str, value: Any, fragment: str) -> None:
    with pytest.raises(ConfigError) as exc:
        validate(Config({**MINIMAL, **STORE, key: value}))
    _assert_names_key(exc, key)
    assert exc.value.problem.startswith("is Samza's key for ")
    assert fragment in exc.value.problem


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("streams.lines.samza.priority", -1),
        ("streams.lines.samza.priority", "-1"),
        ("task.chooser.class", "org.apache.samza.system.chooser.RoundRobinChooserFactory"),
        ("job.coordinator.zk.enable-startup-with-active-job-model", False),
        ("app.mode", "STREAM"),
    ],
)
def test_samza_keys_at_their_off_value_are_accepted_silently(key: str, value: Any) -> None:
    assert _warnings_of(**{key: value}) == {}


@pytest.mark.parametrize(
    ("key", "meant"),
    [
        ("stream.lines.samza.msg.serde", "streams.lines.samza.msg.serde"),
        ("system.kafka.samza.factory", "systems.kafka.samza.factory"),
        ("tasks.window.ms", "task.window.ms"),
        ("store.counts.factory", "stores.counts.factory"),
        ("serializer.registry.x.class", "serializers.registry.x.class"),
        ("jobs.name", "job.name"),
    ],
)
def test_a_misspelled_table_is_an_error_with_the_key_meant(key: str, meant: str) -> None:
    with pytest.raises(ConfigError) as exc:
        check_keys(_with(**{key: "1"}))
    _assert_names_key(exc, key)
    assert f"did you mean {meant!r}" in exc.value.problem


@pytest.mark.parametrize(
    ("key", "meant"),
    [
        ("streams.lines.msg.serde", "streams.lines.samza.msg.serde"),
        ("streams.lines.offset.default", "streams.lines.samza.offset.default"),
        ("systems.kafka.msg.serde", "systems.kafka.samza.msg.serde"),
        ("systems.kafka.factory", "systems.kafka.samza.factory"),
        ("systems.kafka.default.stream.msg.serde", "systems.kafka.default.stream.samza.msg.serde"),
        ("streams.lines.retention.msx", "streams.lines.retention.ms"),
        ("streams.lines.partition", "streams.lines.partitions"),
        ("stores.counts.changelog.kafka.cleanup.polcy", "stores.counts.changelog.kafka.cleanup.policy"),
    ],
)
def test_a_key_under_the_wrong_table_is_an_error_with_the_key_meant(key: str, meant: str) -> None:
    with pytest.raises(ConfigError) as exc:
        check_keys(_with(**{key: "1"}))
    _assert_names_key(exc, key)
    assert f"did you mean {meant!r}" in exc.value.problem


def test_a_stream_key_that_is_no_topic_config_says_so() -> None:
    with pytest.raises(ConfigError) as exc:
        check_keys(_with(**{"streams.lines.flavour": "1"}))
    assert "is taken as a Kafka topic config of stream 'lines', but 'flavour' is not one" in exc.value.problem


def test_the_legacy_per_stream_form_is_refused_with_the_modern_key() -> None:
    with pytest.raises(ConfigError) as exc:
        check_keys(_with(**{"systems.kafka.streams.lines.samza.msg.serde": "string"}))
    _assert_names_key(exc, "systems.kafka.streams.lines.samza.msg.serde")
    assert "'streams.lines.samza.msg.serde'" in exc.value.problem


@pytest.mark.parametrize("key", ["task.checkpoint.factroy", "job.coordinator.sytem", "stores.counts.facotry"])
def test_did_you_mean_stays_in_the_key_namespace(key: str) -> None:
    # The placeholder of stores.<name>.* was filled with any key's second part: task.checkpoint.factory
    # was once asked whether it meant stores.checkpoint.factory.
    namespace = key.split(".")[0]
    assert all(k.split(".")[0] == namespace and "<" not in k for k in known_keys_like(key))
    with pytest.raises(ConfigError) as exc:
        check_keys(_with(**{key: "1"}))
    _assert_names_key(exc, key)
    assert "did you mean '" + namespace + "." in exc.value.problem
    assert "<" not in exc.value.problem


def test_known_keys_like_fills_placeholders_from_the_key() -> None:
    assert "systems.kafka.samza.factory" in known_keys_like("systems.kafka.samza.factroy")
    assert "serializers.registry.foo.class" in known_keys_like("serializers.registry.foo.klass")
    assert known_keys_like("metrics.x") == [
        "metrics.log.interval.ms",
        "metrics.prometheus.port",
        "metrics.prometheus.host",
        "metrics.reporters",
    ]


@pytest.mark.parametrize(
    ("key", "meant"),
    [
        ("window.ms", "task.window.ms"),
        ("container.thread.pool.size", "job.container.thread.pool.size"),
        ("samza.msg.serde", "streams.<id>.samza.msg.serde"),
        ("lines.samza.msg.serde", "streams.lines.samza.msg.serde"),
        ("taks.window.ms", "task.window.ms"),
    ],
)
def test_a_free_key_that_looks_like_a_samzamp_key_is_a_warning(key: str, meant: str) -> None:
    warnings = _warnings_of(**{key: "1000"})
    assert list(warnings) == [key]
    assert "the task's own setting" in warnings[key]
    assert repr(meant) in warnings[key]


@pytest.mark.parametrize("key", ["word-count.output", "test.record.dir", "myapp.threshold", "enrich.url", "debug"])
def test_the_task_s_own_keys_are_accepted_without_a_word(key: str) -> None:
    assert _warnings_of(**{key: "x"}) == {}


@pytest.mark.parametrize(
    ("key", "value", "fragment"),
    [
        ("task.window.ms", 0, "must be -1 (off) or >= 1"),
        ("task.window.ms", -5, "must be -1 (off) or >= 1"),
        ("job.container.thread.pool.size", 1_000_000, "<= 256"),
        ("job.container.worker.batch.size", 10**6, "<= 65536"),
        ("task.fetch.threshold", 10**9, "<= 10000000"),
        ("task.commit.ms", 2**40, "<= 2147483647"),
        ("task.max.concurrency", 10**6, "<= 65536"),
        ("task.poll.interval.ms", 3_600_000, "<= 60000"),
        ("task.checkpoint.replication.factor", 40000, "<= 32767"),
        ("streams.lines.partitions", 10**7, "<= 100000"),
    ],
)
def test_numbers_out_of_bounds_name_the_key_and_the_bound(key: str, value: Any, fragment: str) -> None:
    with pytest.raises(ConfigError) as exc:
        validate(_with(**{key: value}))
    _assert_names_key(exc, key)
    assert fragment in exc.value.problem


def test_window_ms_minus_one_and_positive_are_accepted() -> None:
    assert validate(_with(**{"task.window.ms": -1})).task.window_ms == -1
    assert validate(_with(**{"task.window.ms": 1})).task.window_ms == 1


def test_lmdb_map_size_up_to_one_tib() -> None:
    assert validate(Config({**MINIMAL, **STORE, "stores.counts.lmdb.map.size": 1 << 40})).stores["counts"]
    with pytest.raises(ConfigError) as exc:
        validate(Config({**MINIMAL, **STORE, "stores.counts.lmdb.map.size": 2**62}))
    _assert_names_key(exc, "stores.counts.lmdb.map.size")
    assert "<= 1099511627776" in exc.value.problem


@pytest.mark.parametrize(
    "store_keys",
    [
        {"stores.counts.key.serde": "string"},
        {"stores.counts.changelog": "kafka.counts-log", "stores.counts.msg.serde": "long"},
        {"stores.counts.lmdb.map.size": 1 << 20},
    ],
)
def test_a_store_without_factory_is_an_error_naming_its_factory(store_keys: dict[str, Any]) -> None:
    with pytest.raises(ConfigError) as exc:
        validate(_with(**store_keys))
    _assert_names_key(exc, "stores.counts.factory")


def test_samza_s_global_store_keys_make_no_store() -> None:
    settings = validate(_with(**{"stores.backup.factories": "x.BlobStoreStateBackendFactory"}))
    assert settings.stores == {}
    assert [w.key for w in settings.warnings] == ["stores.backup.factories"]


def test_samza_s_rocksdb_factory_is_refused_with_what_to_do() -> None:
    with pytest.raises(ConfigError) as exc:
        validate(
            Config(
                {
                    **MINIMAL,
                    **STORE,
                    "stores.counts.factory": "org.apache.samza.storage.kv.RocksDbKeyValueStorageEngineFactory",
                }
            )
        )
    _assert_names_key(exc, "stores.counts.factory")
    assert "LMDB" in exc.value.problem
    assert "lmdb" in exc.value.problem


@pytest.mark.parametrize(
    ("factory", "serde"),
    [
        ("org.apache.samza.serializers.JsonSerdeFactory", "JsonSerde"),
        ("org.apache.samza.serializers.StringSerdeFactory", "StringSerde"),
        ("org.apache.samza.serializers.LongSerdeFactory", "LongSerde"),
        ("org.apache.samza.serializers.IntegerSerdeFactory", "IntegerSerde"),
        ("org.apache.samza.serializers.ByteSerdeFactory", "BytesSerde"),
    ],
)
def test_samza_s_builtin_serde_factories_map_to_samzamp_s(factory: str, serde: str) -> None:
    settings = validate(_with(**{"serializers.registry.mine.class": factory, "streams.lines.samza.msg.serde": "mine"}))
    assert settings.serializers["mine"] == f"samzamp.serde.registry:{serde}"
    assert settings.warnings == ()


def test_a_java_serde_factory_is_refused() -> None:
    with pytest.raises(ConfigError) as exc:
        validate(_with(**{"serializers.registry.ser.class": "org.apache.samza.serializers.SerializableSerdeFactory"}))
    _assert_names_key(exc, "serializers.registry.ser.class")
    assert "Java" in exc.value.problem


def test_job_name_and_id_default_to_app_name_and_id() -> None:
    values = {k: v for k, v in MINIMAL.items() if k != "job.name"}
    settings = validate(Config({**values, "app.name": "wc-app", "app.id": "7"}))
    assert (settings.name, settings.id) == ("wc-app", "7")
    assert settings.checkpoint_topic == checkpoint_topic_name("wc-app", "7")


@pytest.mark.parametrize(("key", "value"), [("app.name", "other"), ("app.id", "2")])
def test_app_name_or_id_disagreeing_with_the_job_s_is_an_error(key: str, value: str) -> None:
    with pytest.raises(ConfigError) as exc:
        validate(_with(**{key: value, "job.id": "1"}))
    _assert_names_key(exc, key)


def test_system_default_topic_configs_reach_every_stream_under_the_stream_s_own() -> None:
    settings = validate(
        _with(
            **{
                "systems.kafka.default.stream.retention.ms": 1000,
                "systems.kafka.default.stream.cleanup.policy": "delete",
                "streams.lines.cleanup.policy": "compact",
            }
        )
    )
    stream = settings.stream(SystemStream("kafka", "lines"))
    assert stream.topic_configs == {"retention.ms": "1000", "cleanup.policy": "compact"}


# Keys samzamp reads inside a namespace whose other keys it ignores (a key samzamp reads is checked first).
_READ_IN_IGNORED_NAMESPACE = {
    "yarn.samza.host-affinity.enabled": "yarn.*",
    **{f"metrics.reporter.counts.{k}": "metrics.reporter.*" for k in ("class", "stream", "interval", "blacklist")},
}


def test_no_key_is_both_samzamp_s_and_one_samzamp_ignores() -> None:
    for spec in KEYS:
        concrete = spec.pattern.replace("<s>", "kafka").replace("<id>", "lines").replace("<name>", "counts")
        ignored = samza_key(concrete)
        assert ignored is None or ignored.pattern == _READ_IN_IGNORED_NAMESPACE.get(concrete), spec.pattern


def test_a_stream_of_an_unknown_system_is_an_error() -> None:
    # It would be skipped when samzamp creates streams, and never found as an input's settings.
    with pytest.raises(ConfigError) as exc:
        validate(_with(**{"streams.out.samza.system": "kafak", "streams.out.partitions": 4}))
    _assert_names_key(exc, "streams.out.samza.system")
    assert "'kafak'" in exc.value.problem


def test_the_only_system_is_the_default_of_streams_changelogs_and_checkpoints() -> None:
    # Without it, a [streams.lines] table of a job without job.default.system applied to no topic.
    settings = validate(
        _with(
            **{
                "streams.lines.partitions": 3,
                "stores.counts.factory": "lmdb",
                "stores.counts.changelog": "counts-log",
                "stores.counts.key.serde": "string",
                "stores.counts.msg.serde": "long",
            }
        )
    )
    assert settings.default_system == "kafka"
    assert settings.stream(SystemStream("kafka", "lines")).partitions == 3
    assert settings.stores["counts"].changelog == SystemStream("kafka", "counts-log")


def test_a_stream_table_that_names_no_system_among_several_is_an_error() -> None:
    with pytest.raises(ConfigError) as exc:
        validate(
            _with(
                **{
                    "systems.other.samza.factory": "kafka",
                    "task.checkpoint.system": "kafka",
                    "streams.lines.partitions": 3,
                }
            )
        )
    _assert_names_key(exc, "streams.lines.samza.system")
