"""Unit tests of samzamp.serde: built-in round trips, user serdes by import path, unknown names."""

from __future__ import annotations

import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from samzamp.api.errors import ConfigError
from samzamp.api.serde import Serde
from samzamp.config import Config, validate
from samzamp.serde import BUILTIN_SERDES, SerdeRegistry, load_object

KEY = "streams.lines.samza.msg.serde"

BASE: dict[str, Any] = {
    "job.name": "wc",
    "task.class": "samzamp.examples.word_count:WordCountTask",
    "task.inputs": ["kafka.lines"],
    "systems.kafka.samza.factory": "kafka",
}


def _serde(name: str) -> Serde:
    return SerdeRegistry({}).get(name, KEY)


def _round_trip(serde: Serde, value: Any) -> Any:
    data = serde.to_bytes(value)
    assert isinstance(data, bytes)
    return serde.from_bytes(data)


# --------------------------------------------------------------------------- built-ins


def test_every_builtin_name_resolves_to_a_serde() -> None:
    assert set(BUILTIN_SERDES) >= {"bytes", "byte", "string", "json", "msgpack", "integer", "long"}
    for name in BUILTIN_SERDES:
        assert isinstance(_serde(name), Serde)


@pytest.mark.parametrize("name", ["bytes", "byte"])
@pytest.mark.parametrize("value", [b"", b"abc", b"\x00\xff\x80", bytes(range(256))])
def test_bytes_round_trip(name: str, value: bytes) -> None:
    serde = _serde(name)
    assert serde.to_bytes(value) == value
    assert _round_trip(serde, value) == value


def test_bytes_accepts_bytearray_and_memoryview() -> None:
    serde = _serde("bytes")
    assert serde.to_bytes(bytearray(b"xy")) == b"xy"
    assert serde.to_bytes(memoryview(b"xy")) == b"xy"


@pytest.mark.parametrize("value", ["", "hello", "héllo wörld ✓", "日本語", "line\nbreak", "\x00"])
def test_string_round_trip(value: str) -> None:
    serde = _serde("string")
    assert serde.to_bytes(value) == value.encode("utf-8")
    assert _round_trip(serde, value) == value


def test_string_decodes_utf8() -> None:
    assert _serde("string").from_bytes("ß✓".encode()) == "ß✓"


JSON_VALUES: list[Any] = [
    None,
    True,
    False,
    0,
    -17,
    2**62,
    1.5,
    "text ✓",
    [],
    {},
    [1, "two", None, [3.0]],
    {"word": "count", "n": 3, "nested": {"list": [1, 2, {"x": None}], "flag": True}},
]


@pytest.mark.parametrize("value", JSON_VALUES)
def test_json_round_trip(value: Any) -> None:
    assert _round_trip(_serde("json"), value) == value


def test_json_writes_json_text() -> None:
    import json

    data = _serde("json").to_bytes({"a": [1, 2], "b": "c"})
    assert json.loads(data) == {"a": [1, 2], "b": "c"}
    assert _serde("json").from_bytes(b'{"k": [true, null]}') == {"k": [True, None]}


@pytest.mark.parametrize("value", [*JSON_VALUES, b"\x00raw bytes\xff", {"blob": b"\x01\x02"}])
def test_msgpack_round_trip(value: Any) -> None:
    assert _round_trip(_serde("msgpack"), value) == value


def test_msgpack_is_msgpack() -> None:
    # fixmap of one entry, fixstr "a", positive fixint 1
    assert _serde("msgpack").to_bytes({"a": 1}) == b"\x81\xa1a\x01"


@pytest.mark.parametrize(
    ("value", "data"),
    [
        (0, b"\x00\x00\x00\x00"),
        (1, b"\x00\x00\x00\x01"),
        (256, b"\x00\x00\x01\x00"),
        (-1, b"\xff\xff\xff\xff"),
        (2**31 - 1, b"\x7f\xff\xff\xff"),
        (-(2**31), b"\x80\x00\x00\x00"),
        (0x01020304, b"\x01\x02\x03\x04"),
    ],
)
def test_integer_is_big_endian_signed_4_bytes(value: int, data: bytes) -> None:
    serde = _serde("integer")
    assert serde.to_bytes(value) == data
    assert serde.from_bytes(data) == value


@pytest.mark.parametrize(
    ("value", "data"),
    [
        (0, b"\x00" * 8),
        (1, b"\x00" * 7 + b"\x01"),
        (-1, b"\xff" * 8),
        (2**63 - 1, b"\x7f" + b"\xff" * 7),
        (-(2**63), b"\x80" + b"\x00" * 7),
        (0x0102030405060708, b"\x01\x02\x03\x04\x05\x06\x07\x08"),
        (2**32, b"\x00\x00\x00\x01\x00\x00\x00\x00"),
    ],
)
def test_long_is_big_endian_signed_8_bytes(value: int, data: bytes) -> None:
    serde = _serde("long")
    assert serde.to_bytes(value) == data
    assert serde.from_bytes(data) == value


@pytest.mark.parametrize(("name", "width"), [("integer", 4), ("long", 8)])
def test_fixed_width_round_trips_and_orders_non_negative_values(name: str, width: int) -> None:
    serde = _serde(name)
    values = [0, 1, 2, 9, 10, 255, 256, 65535, 65536, 2 ** (8 * width - 1) - 1]
    encoded = [serde.to_bytes(v) for v in values]
    assert all(len(b) == width for b in encoded)
    assert [serde.from_bytes(b) for b in encoded] == values
    assert sorted(encoded) == encoded  # byte order is numeric order
    for v in [-1, -2, -(2 ** (8 * width - 1))]:
        assert _round_trip(serde, v) == v


# --------------------------------------------------------------------------- registry


def test_registry_shares_one_instance_per_name() -> None:
    registry = SerdeRegistry({})
    assert registry.get("json", "a.key") is registry.get("json", "another.key")


@pytest.mark.parametrize("name", ["nope", "JSON", "int", "", "strings"])
def test_unknown_serde_name_names_the_key(name: str) -> None:
    with pytest.raises(ConfigError) as exc:
        SerdeRegistry({}).get(name, KEY)
    assert exc.value.key == KEY
    assert str(exc.value).startswith(f"config error: {KEY}: ")
    assert f"unknown serde {name!r}" in exc.value.problem
    for builtin in ("bytes", "string", "json", "msgpack", "integer", "long"):
        assert builtin in exc.value.problem


def test_unknown_serde_lists_registered_names_too() -> None:
    with pytest.raises(ConfigError) as exc:
        SerdeRegistry({"mine": "x:Y"}).get("nope", KEY)
    assert "mine" in exc.value.problem


@pytest.mark.parametrize(
    ("key", "extra"),
    [
        ("streams.lines.samza.msg.serde", {}),
        ("streams.lines.samza.key.serde", {}),
        ("streams.other.samza.msg.serde", {}),
        ("systems.kafka.samza.msg.serde", {"streams.lines.samza.msg.serde": "string"}),
        ("systems.kafka.default.stream.samza.key.serde", {"streams.lines.samza.key.serde": "string"}),
        ("stores.counts.key.serde", {"stores.counts.factory": "lmdb", "stores.counts.msg.serde": "string"}),
        ("stores.counts.msg.serde", {"stores.counts.factory": "lmdb", "stores.counts.key.serde": "string"}),
    ],
)
def test_validate_reports_an_unknown_serde_naming_the_key(key: str, extra: dict[str, Any]) -> None:
    with pytest.raises(ConfigError) as exc:
        validate(Config({**BASE, **extra, key: "no-such-serde"}))
    assert exc.value.key == key
    assert "unknown serde 'no-such-serde'" in exc.value.problem


def test_validate_accepts_every_builtin_on_a_stream() -> None:
    for name in BUILTIN_SERDES:
        validate(Config({**BASE, "streams.lines.samza.msg.serde": name, "streams.lines.samza.key.serde": name}))


# --------------------------------------------------------------------------- user serdes


USER_SERDES = """
    from typing import Any


    class ReversedSerde:
        def to_bytes(self, value: Any) -> bytes:
            return str(value).encode("utf-8")[::-1]

        def from_bytes(self, data: bytes) -> Any:
            return data[::-1].decode("utf-8")


    class NeedsArgs:
        def __init__(self, required: int) -> None:
            self.required = required

        def to_bytes(self, value: Any) -> bytes:
            return b""

        def from_bytes(self, data: bytes) -> Any:
            return None


    class NotASerde:
        def encode(self, value: Any) -> bytes:
            return b""


    class Exploding:
        def __init__(self) -> None:
            raise RuntimeError("boom")


    INSTANCE = ReversedSerde()
"""


@pytest.fixture
def user_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A fresh importable module holding user serdes; yields its name."""
    name = f"samzamp_user_serdes_{uuid.uuid4().hex}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(USER_SERDES), encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name
    sys.modules.pop(name, None)


@pytest.mark.parametrize("sep", [":", "."])
def test_user_serde_by_import_path(user_module: str, sep: str) -> None:
    registry = SerdeRegistry({})
    serde = registry.get(f"{user_module}{sep}ReversedSerde", KEY)
    assert type(serde).__name__ == "ReversedSerde"
    assert serde.to_bytes("abc") == b"cba"
    assert _round_trip(serde, "héllo") == "héllo"


def test_user_serde_instance_by_import_path(user_module: str) -> None:
    serde = SerdeRegistry({}).get(f"{user_module}:INSTANCE", KEY)
    assert _round_trip(serde, "xyz") == "xyz"


def test_user_serde_registered_by_name(user_module: str) -> None:
    registry = SerdeRegistry({"rev": f"{user_module}:ReversedSerde"})
    serde = registry.get("rev", KEY)
    assert serde.to_bytes("ab") == b"ba"
    assert registry.get("rev", "other.key") is serde


def test_registered_name_shadows_a_builtin(user_module: str) -> None:
    serde = SerdeRegistry({"string": f"{user_module}:ReversedSerde"}).get("string", KEY)
    assert serde.to_bytes("ab") == b"ba"


def test_user_serde_through_validate(user_module: str) -> None:
    settings = validate(
        Config(
            {
                **BASE,
                "serializers.registry.rev.class": f"{user_module}:ReversedSerde",
                "streams.lines.samza.msg.serde": "rev",
                "streams.lines.samza.key.serde": f"{user_module}.ReversedSerde",
            }
        )
    )
    assert settings.serializers == {"rev": f"{user_module}:ReversedSerde"}


@pytest.mark.parametrize(
    ("attr", "fragment"),
    [
        ("NoSuchClass", "no attribute"),
        ("NeedsArgs", "cannot create serde"),
        ("Exploding", "cannot create serde"),
        ("NotASerde", "to_bytes"),
    ],
)
def test_bad_user_serde_by_import_path_names_the_key(user_module: str, attr: str, fragment: str) -> None:
    with pytest.raises(ConfigError) as exc:
        SerdeRegistry({}).get(f"{user_module}:{attr}", KEY)
    assert exc.value.key == KEY
    assert fragment in exc.value.problem


def test_bad_registered_serde_names_the_registry_key() -> None:
    with pytest.raises(ConfigError) as exc:
        SerdeRegistry({"mine": "no_such_module_for_serdes:Mine"}).get("mine", KEY)
    assert exc.value.key == "serializers.registry.mine.class"
    assert "cannot import" in exc.value.problem


def test_unimportable_serde_path_names_the_key() -> None:
    with pytest.raises(ConfigError) as exc:
        SerdeRegistry({}).get("no_such_module_for_serdes:Mine", KEY)
    assert exc.value.key == KEY
    assert "cannot import module 'no_such_module_for_serdes'" in exc.value.problem


@pytest.mark.parametrize("path", ["nodots", ":Name", "module:", "."])
def test_load_object_rejects_non_import_paths(path: str) -> None:
    with pytest.raises(ConfigError) as exc:
        load_object(path, "some.key")
    assert exc.value.key == "some.key"
    assert "import path" in exc.value.problem


def test_load_object_both_forms() -> None:
    assert load_object("samzamp.serde.registry:SerdeRegistry", "k") is SerdeRegistry
    assert load_object("samzamp.serde.registry.SerdeRegistry", "k") is SerdeRegistry
