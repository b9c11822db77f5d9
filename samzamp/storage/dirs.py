"""Where a task's store lives on disk, and the lock that says a live process holds it.

Layout (Samza's): ``<base>/<store name>/<task name with ' ' replaced by '_'>/``, e.g.
``state/counts/Partition_0/``, with the LMDB files, the ``OFFSET`` file and ``LOCK``.
``base`` is job.logged.store.base.dir for changelogged stores and job.non-logged.store.base.dir for the
others (default ``./state`` for both).

``LOCK`` is held with an exclusive ``flock`` by the process that has the store open (a container, one of
its workers, or an offline job); a second taker fails at once. The kernel drops the lock when the
process dies, however it dies. A tool that reads a store without changing it
(``samzamp stores inspect``) holds it shared instead (``hold_store_dir_shared``): a task cannot take
it meanwhile, and the tool is refused while a task holds it.
"""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path

from samzamp.storage.io_errors import store_files

__all__ = [
    "StoreLockedError",
    "hold_store_dir_shared",
    "lock_store_dir",
    "store_dir",
    "task_dir_name",
    "unlock_store_dir",
]

LOCK_FILE = "LOCK"


class StoreLockedError(RuntimeError):
    """Another live process holds the store directory; ``pid``: the one its LOCK file records, if any."""

    def __init__(self, message: str, pid: int | None = None) -> None:
        super().__init__(message)
        self.pid = pid


def _recorded_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode(errors="replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def task_dir_name(task_name: str) -> str:
    return task_name.replace(" ", "_")


def store_dir(base: Path, store: str, task_name: str) -> Path:
    return base / store / task_dir_name(task_name)


def lock_store_dir(path: Path, wait_s: float = 0.0) -> int:
    """Take the directory's lock (creating the directory); returns the fd that holds it.

    ``wait_s``: how long to keep trying (a container restarted right after a kill waits for the old
    one's workers, which the kernel is still killing); 0 fails at once (offline tools). A filesystem
    that refuses the directory or the file (full, read-only) raises ``StoreError``.
    """
    with store_files(path, f"creating its {LOCK_FILE} file"):
        path.mkdir(parents=True, exist_ok=True)
        fd = os.open(path / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    deadline = time.monotonic() + wait_s
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if time.monotonic() >= deadline:
                os.close(fd)
                raise StoreLockedError(
                    f"store directory {path} is held by a live process (its {LOCK_FILE} file is locked)"
                ) from None
            time.sleep(0.05)
    try:
        with store_files(path, f"writing its {LOCK_FILE} file"):
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
    except BaseException:
        os.close(fd)
        raise
    return fd


def hold_store_dir_shared(path: Path) -> int | None:
    """Hold the directory's lock shared, creating and writing nothing: the fd that holds it, or None
    when the directory has no ``LOCK`` file (no process ever took it). Raises ``StoreLockedError``
    (with the pid the file records) at once while a live process holds it. While held, a process
    that takes the lock (``lock_store_dir``) waits, and fails after its ``wait_s``; release it with
    ``unlock_store_dir``."""
    try:
        fd = os.open(path / LOCK_FILE, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        pid = _recorded_pid(fd)
        os.close(fd)
        holder = f" (pid {pid})" if pid is not None else ""
        raise StoreLockedError(
            f"store directory {path} is held by a live process{holder} (its {LOCK_FILE} file is locked)", pid
        ) from None
    except BaseException:
        os.close(fd)
        raise
    return fd


def unlock_store_dir(fd: int) -> None:
    os.close(fd)  # closing the only fd releases the flock
