"""Stub of the native extension samzamp._checksum (native/checksum.c). Private: only
samzamp.storage.checksum imports it, which documents the checksum and holds its Python reference.

Written by hand from native/checksum.c; keep the two in step (tests/unit/test_store_checksum.py checks
that every name here exists in the built module and the other way round).
"""

import mmap

__all__ = ["accelerated", "crc32c", "seal", "unseal", "verify_lmdb"]

_BytesLike = bytes | bytearray | memoryview

def crc32c(data: _BytesLike, crc: int = 0, /) -> int: ...
def seal(key: _BytesLike, value: _BytesLike, /) -> bytes: ...
def unseal(key: _BytesLike, sealed: _BytesLike, /) -> bytes | None: ...
def verify_lmdb(data: _BytesLike | mmap.mmap, name: _BytesLike, /) -> tuple[int, bytes | None]: ...
def accelerated() -> bool: ...
