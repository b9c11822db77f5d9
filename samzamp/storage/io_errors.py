"""What a failed read or write of a store's local files becomes: a one-line ``StoreError`` that says
what failed in which directory and what to do (a full disk, an I/O error, anything else).

The store and task are added by whoever knows them (``StoreError.of``): the engine knows only its
directory.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from samzamp.api.errors import StoreError

__all__ = ["FULL_BELOW", "store_files", "store_io_error"]

# Free space under which a failed write is reported as a full disk: LMDB turns a short write into
# EIO, so the errno alone cannot tell a full disk from a failing one.
FULL_BELOW = 1 << 20

_RESTART = "and restart: a changelogged store is restored from its changelog where its local files are behind"


def _free_bytes(directory: Path) -> int | None:
    for d in (directory, *directory.parents):
        try:
            st = os.statvfs(d)
        except OSError:
            continue
        return st.f_bavail * st.f_frsize
    return None


def store_io_error(directory: Path, doing: str, error: BaseException, code: int | None = None) -> StoreError:
    """``error``, raised while ``doing`` something to the store files in ``directory``, as a StoreError.

    ``code``: the errno when ``error`` does not carry one (LMDB's errors do not)."""
    if code is None:
        code = getattr(error, "errno", None)
    free = _free_bytes(directory)
    what = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
    if code in (errno.ENOSPC, errno.EDQUOT) or (code == errno.EIO and free is not None and free < FULL_BELOW):
        left = f"{free} bytes free" if free is not None else "free space unknown"
        return StoreError(
            str(directory),
            f"no space left on its filesystem ({left}) while {doing} ({what})",
            "free space there, or move job.logged.store.base.dir / job.non-logged.store.base.dir to a bigger "
            f"filesystem, {_RESTART}",
        )
    if code == errno.EIO:
        return StoreError(
            str(directory),
            f"I/O error while {doing} ({what})",
            f"check the disk (the kernel log names the device); once it is repaired or replaced, {_RESTART}",
        )
    if code == errno.ENOMEM:
        return StoreError(
            str(directory),
            f"out of memory or address space while {doing} ({what})",
            f"lower stores.<name>.lmdb.map.size, or raise the process's address-space limit (ulimit -v), {_RESTART}",
        )
    return StoreError(
        str(directory),
        f"failed while {doing} ({what})",
        f"check the directory's filesystem and permissions, {_RESTART}",
    )


@contextmanager
def store_files(directory: Path, doing: str) -> Iterator[None]:
    """Turn an OSError raised inside into ``store_io_error(directory, doing, ...)``."""
    try:
        yield
    except OSError as e:
        raise store_io_error(directory, doing, e) from e
