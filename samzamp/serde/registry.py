"""Built-in serdes and the lookup of a serde by name or import path.

``integer`` and ``long`` are big-endian signed 4- and 8-byte values, as Samza's IntegerSerde and
LongSerde write them, so that their byte order is their numeric order for non-negative values.
``json`` and ``msgpack`` use msgspec.
"""

from __future__ import annotations

import importlib
import struct
from collections.abc import Callable
from typing import Any

import msgspec

from samzamp.api.errors import ConfigError
from samzamp.api.serde import Serde

__all__ = ["BUILTIN_SERDES", "SerdeRegistry", "load_object"]


class BytesSerde:
    def to_bytes(self, value: Any) -> bytes:
        if not isinstance(value, (bytes, bytearray, memoryview)):
            raise TypeError(f"the bytes serde takes bytes, got {type(value).__name__}")
        return bytes(value)

    def from_bytes(self, data: bytes) -> Any:
        return data


class StringSerde:
    # C callables, no Python frame per message: str.encode raises TypeError for a non-str value
    # (the collector reports it naming the stream). bytes.decode (UTF-8) takes bytes only, which
    # is what every system and store hands a serde, and costs half of str(data, "utf-8").
    to_bytes: Callable[[Any], bytes]
    from_bytes: Callable[[bytes], Any]

    def __init__(self) -> None:
        self.to_bytes = str.encode
        self.from_bytes = bytes.decode


class JsonSerde:
    # The encoder's and decoder's bound methods themselves: no Python frame per message.
    to_bytes: Callable[[Any], bytes]
    from_bytes: Callable[[bytes], Any]

    def __init__(self) -> None:
        self.to_bytes = msgspec.json.Encoder().encode
        self.from_bytes = msgspec.json.Decoder().decode


class MsgpackSerde:
    to_bytes: Callable[[Any], bytes]
    from_bytes: Callable[[bytes], Any]

    def __init__(self) -> None:
        self.to_bytes = msgspec.msgpack.Encoder().encode
        self.from_bytes = msgspec.msgpack.Decoder().decode


class IntegerSerde:
    _s = struct.Struct(">i")

    def to_bytes(self, value: Any) -> bytes:
        return self._s.pack(value)

    def from_bytes(self, data: bytes) -> Any:
        return self._s.unpack(data)[0]


class LongSerde:
    _s = struct.Struct(">q")

    def to_bytes(self, value: Any) -> bytes:
        return self._s.pack(value)

    def from_bytes(self, data: bytes) -> Any:
        return self._s.unpack(data)[0]


BUILTIN_SERDES: dict[str, type] = {
    "bytes": BytesSerde,
    "byte": BytesSerde,  # Samza's name
    "string": StringSerde,
    "json": JsonSerde,
    "msgpack": MsgpackSerde,
    "integer": IntegerSerde,
    "long": LongSerde,
}


def load_object(path: str, key: str) -> Any:
    """Import ``module:attr`` or ``module.attr``; ConfigError naming ``key`` when it cannot."""
    module_name, sep, attr = path.partition(":")
    if not sep:
        module_name, _, attr = path.rpartition(".")
    if not module_name or not attr:
        raise ConfigError(key, f"{path!r} is not an import path; write it as package.module:Name")
    try:
        module = importlib.import_module(module_name)
    except Exception as e:  # any import-time failure is the user's config to fix
        raise ConfigError(key, f"cannot import module {module_name!r}: {type(e).__name__}: {e}") from None
    try:
        return getattr(module, attr)
    except AttributeError:
        raise ConfigError(key, f"module {module_name!r} has no attribute {attr!r}") from None


class SerdeRegistry:
    """Resolves serde names to shared instances: built-ins, serializers.registry.<name>.class, import paths."""

    def __init__(self, registered: dict[str, str]) -> None:
        self._registered = registered
        self._cache: dict[str, Serde] = {}

    def get(self, name: str, key: str) -> Serde:
        """The serde called ``name``; ``key`` is the config key that named it (for the error)."""
        serde = self._cache.get(name)
        if serde is not None:
            return serde
        if name in self._registered:
            factory = load_object(self._registered[name], f"serializers.registry.{name}.class")
        elif name in BUILTIN_SERDES:
            factory = BUILTIN_SERDES[name]
        elif "." in name or ":" in name:
            factory = load_object(name, key)
        else:
            known = ", ".join(sorted({*BUILTIN_SERDES, *self._registered}))
            raise ConfigError(key, f"unknown serde {name!r}; use one of {known}, or an import path")
        try:
            obj = factory() if isinstance(factory, type) else factory
        except Exception as e:
            raise ConfigError(key, f"cannot create serde {name!r}: {type(e).__name__}: {e}") from None
        if not isinstance(obj, Serde):
            raise ConfigError(key, f"serde {name!r} must have to_bytes(value) and from_bytes(data)")
        self._cache[name] = obj
        return obj
