"""The OFFSET file of a store directory (Samza's idea): the changelog offset the local store is at.

Format (version 1): 4 bytes big-endian CRC32 of the payload, then the payload, UTF-8 JSON::

    {"version": 1, "changelog": "<system>.<stream>.<partition>", "offset": <int>}

Written to ``OFFSET.tmp``, fsynced, then renamed over ``OFFSET`` (atomic on POSIX), so a reader sees
the old file or the new one, never a torn one; then the directory is fsynced, so that the rename
itself survives a power loss (until then the directory entry may still name the old file). A file
that fails its checksum or does not parse is treated as absent (the store is then rebuilt from the
changelog).
"""

from __future__ import annotations

import os
import zlib
from pathlib import Path

import msgspec

from samzamp.storage.io_errors import store_files

__all__ = ["OFFSET_FILE", "StoreOffset", "fsync_dir", "read_offset_file", "write_offset_file"]

OFFSET_FILE = "OFFSET"


class StoreOffset(msgspec.Struct, frozen=True):
    version: int
    changelog: str  # "<system>.<stream>.<partition>"
    offset: int  # the newest changelog offset the local store contains; -1: none


def write_offset_file(store_dir: Path, changelog: str, offset: int) -> None:
    """Record ``offset`` (atomically, durably); ``StoreError`` when the filesystem refuses it."""
    payload = msgspec.json.encode(StoreOffset(1, changelog, offset))
    tmp = store_dir / (OFFSET_FILE + ".tmp")
    with store_files(store_dir, f"writing its {OFFSET_FILE} file"):
        with open(tmp, "wb") as f:
            f.write(zlib.crc32(payload).to_bytes(4, "big") + payload)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, store_dir / OFFSET_FILE)
        fsync_dir(store_dir)


def fsync_dir(path: Path) -> None:
    """Make the directory's entries (a rename into it) durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_offset_file(store_dir: Path) -> StoreOffset | None:
    """The recorded offset, or None if there is no valid file."""
    try:
        data = (store_dir / OFFSET_FILE).read_bytes()
    except OSError:
        return None
    if len(data) < 4 or zlib.crc32(data[4:]).to_bytes(4, "big") != data[:4]:
        return None
    try:
        return msgspec.json.decode(data[4:], type=StoreOffset)
    except msgspec.DecodeError:
        return None
