"""Stub of the native extension samzamp._keyhash (native/keyhash.c). Private: only
samzamp.consume.key_bucket imports it, which documents the hash and holds its Python reference.

Written by hand from native/keyhash.c; keep the two in step (tests/unit/test_key_bucket.py checks that
every name here exists in the built module and the other way round).
"""

from collections.abc import Sequence
from typing import TypeVar

__all__ = ["key_hash", "split_by_key_bucket"]

_BytesLike = bytes | bytearray | memoryview
# A message as the fetch thread holds it: (offset, key, value, timestamp); a negative offset is a marker.
_M = TypeVar("_M", bound=tuple[int, _BytesLike | None, bytes | None, int])

def key_hash(key: _BytesLike, /) -> int: ...
def split_by_key_bucket(msgs: Sequence[_M], factor: int, control_to_all: bool = False, /) -> list[list[_M]]: ...
