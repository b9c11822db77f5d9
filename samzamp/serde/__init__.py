"""Serdes by name (bytes, string, json, msgpack, integer, long) and user serdes by import path."""

from samzamp.serde.registry import BUILTIN_SERDES, SerdeRegistry, load_object

__all__ = ["BUILTIN_SERDES", "SerdeRegistry", "load_object"]
