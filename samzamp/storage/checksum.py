"""The checksum each value of a store carries on disk, and the store formats that say whether it does.

A store of format 2 (``CHECKSUMMED``, the default) keeps every value *sealed*: the CRC32C
(Castagnoli) of the key bytes followed by the value bytes, 4 bytes little endian, then the value
bytes. Every read checks it (``unseal``), iteration too: a value whose bytes changed on disk, or that
sits under another key than the one it was written under, fails the check instead of being served.
A store of format 1 (``PLAIN``: what samzamp wrote before checksums, and what
``stores.<name>.lmdb.checksums = false`` keeps) holds the values as they are.

Only the local LMDB files carry checksums: the changelog's records are the values as the serde wrote
them, in every format. CRC32C is RocksDB's block checksum too; it finds every burst of up to 32
flipped bits and all but one in 2^32 of the rest.

The work is done by the native extension ``samzamp._checksum`` (native/checksum.c; the CPU's crc32
instruction where x86-64 has SSE 4.2); ``crc32c_reference`` is the definition in Python, which the
native code must match bit for bit (tests/unit/test_store_checksum.py). ``verify_lmdb`` checks every
value of a store straight from its LMDB file's pages (``LmdbEngine.verify``, at a task's start).
"""

from __future__ import annotations

from samzamp import _checksum

__all__ = [
    "CHECKSUMMED",
    "FORMATS",
    "PLAIN",
    "crc32c",
    "crc32c_reference",
    "seal",
    "seal_reference",
    "unseal",
    "verify_lmdb",
]

PLAIN = 1
CHECKSUMMED = 2
FORMATS = (PLAIN, CHECKSUMMED)

_POLY = 0x82F63B78

crc32c = _checksum.crc32c
seal = _checksum.seal
unseal = _checksum.unseal
verify_lmdb = _checksum.verify_lmdb


def crc32c_reference(data: bytes, crc: int = 0) -> int:
    """CRC32C of ``data``, continuing ``crc``, one bit at a time: the definition ``crc32c`` meets."""
    c = crc ^ 0xFFFFFFFF
    for byte in data:
        c ^= byte
        for _ in range(8):
            c = (c >> 1) ^ (_POLY if c & 1 else 0)
    return c ^ 0xFFFFFFFF


def seal_reference(key: bytes, value: bytes) -> bytes:
    """What ``seal`` makes of ``key`` and ``value``, in Python."""
    return crc32c_reference(value, crc32c_reference(key)).to_bytes(4, "little") + value
