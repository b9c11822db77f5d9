"""One task's store read from its local files without changing them: what ``samzamp stores inspect`` shows.

The store directory is found as the container lays it out (``dirs.store_dir``: the store's base
dir, job.logged.store.base.dir for a changelogged store, job.non-logged.store.base.dir for the
others, then the store, then the task). Nothing is created, converted, locked exclusively or
marked: the files are read through ``lmdb.LmdbSnapshot`` and each value's checksum is checked as
the task checks it; keys and values are decoded with the store's serdes.

While a live process holds the directory (the task runs: ``dirs.LOCK_FILE`` is locked) the read is
refused with ``StoreLockedError``, unless ``snapshot``: then it reads one consistent LMDB read
transaction of the running task's store, as of the moment it opened (the task's writes since its
last commit are not in the files yet; LMDB registers the reader in the task's ``lock.mdb``).
Otherwise the directory's lock is held shared while reading, so no task starts writing meanwhile.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from samzamp.api.errors import ConfigError, SamzampError
from samzamp.api.serde import Serde
from samzamp.config.settings import JobSettings, StoreSettings
from samzamp.model.grouper import task_order
from samzamp.serde.registry import SerdeRegistry
from samzamp.storage.dirs import StoreLockedError, hold_store_dir_shared, store_dir, task_dir_name, unlock_store_dir
from samzamp.storage.lmdb import LmdbSnapshot, StoredEntry

__all__ = ["DEFAULT_LIMIT", "Entry", "StoreListing", "StoreNotFoundError", "inspect_store", "locate_store"]

DEFAULT_LIMIT = 1000


class StoreNotFoundError(SamzampError):
    """The store, or the task's directory of it, does not exist here; the message lists what does."""


@dataclass(frozen=True)
class Entry:
    """One entry as read: its key decoded, and its value decoded, or ``damaged`` (its checksum
    fails: the value is None and never shown)."""

    key: Any
    value: Any
    damaged: bool = False


@dataclass
class StoreListing:
    """What a read of one task's store found.

    ``entries``: in key-byte order, at most the limit (``truncated`` when there were more), or the
    one entry asked for (none: ``missing_key``). ``count``: the entries the store holds.
    ``snapshot``: it was read as a snapshot while a live process held it (``running_pid``, where
    its LOCK file records one).
    ``format``: the store format (2: checksummed values, 1: plain, 0: empty and never written).
    """

    store: str
    task: str
    path: Path
    format: int
    count: int
    changelog_offset: int | None
    dirty: bool
    entries: list[Entry] = field(default_factory=list)
    truncated: bool = False
    missing_key: bool = False
    running_pid: int | None = None
    snapshot: bool = False

    @property
    def damaged(self) -> list[Entry]:
        return [e for e in self.entries if e.damaged]


def _store_settings(settings: JobSettings, store: str) -> StoreSettings:
    st = settings.stores.get(store)
    if st is None:
        configured = ", ".join(sorted(settings.stores)) or "none"
        raise StoreNotFoundError(
            f"store {store!r} is not configured in this job (stores.{store}.factory): its stores are {configured}"
        )
    return st


def _base(settings: JobSettings, st: StoreSettings) -> tuple[Path, str]:
    if st.changelog is not None:
        return Path(settings.logged_store_base_dir), "job.logged.store.base.dir"
    return Path(settings.non_logged_store_base_dir), "job.non-logged.store.base.dir"


def locate_store(settings: JobSettings, store: str, task: str) -> Path:
    """The directory of ``task``'s ``store`` as the container lays it out (a space in the task name
    is ``_`` there, so either spelling finds it). ``StoreNotFoundError`` naming what is missing and
    listing what exists: the job's stores, or the task directories the store has here."""
    st = _store_settings(settings, store)
    base, key = _base(settings, st)
    root = base / store
    if not root.is_dir():
        raise StoreNotFoundError(
            f"store {store!r} has no local files here: no directory {root} ({key} = {str(base)!r}, relative to "
            f"the current directory {Path.cwd()}): no task ran with it on this machine, or run from the job's "
            f"directory, or --set {key}=..."
        )
    path = store_dir(base, store, task)
    if not path.is_dir():
        tasks = sorted((d.name for d in root.iterdir() if d.is_dir()), key=task_order)
        virtual = ""
        if settings.elasticity_factor > 1:
            f = settings.elasticity_factor
            virtual = f" (job.elasticity.factor = {f}: each task is a key bucket, e.g. 'Partition 0_1_{f}')"
        raise StoreNotFoundError(
            f"task {task!r} has no store {store!r} here: no directory {root / task_dir_name(task)}; the tasks "
            f"with one in {root} are {', '.join(tasks) or 'none'}{virtual}"
        )
    return path


def _serdes(settings: JobSettings, st: StoreSettings) -> tuple[Serde, Serde]:
    registry = SerdeRegistry(settings.serializers)
    return (
        registry.get(st.key_serde, f"stores.{st.name}.key.serde"),
        registry.get(st.msg_serde, f"stores.{st.name}.msg.serde"),
    )


def _decode(serde: Serde, data: bytes, key: str, what: str) -> Any:
    try:
        return serde.from_bytes(data)
    except Exception as e:
        raise ConfigError(
            key,
            f"its serde cannot decode {what} ({type(e).__name__}: {e}): is it the serde the job wrote the store with?",
        ) from e


def key_candidates(text: str) -> list[Any]:
    """What a key given as ``text`` on the command line may be, most literal first: the text itself,
    the number it spells, the JSON value it is, its UTF-8 bytes (for a bytes serde)."""
    out: list[Any] = [text]
    with contextlib.suppress(ValueError):
        out.append(int(text))
    with contextlib.suppress(ValueError):
        out.append(json.loads(text))
    out.append(text.encode())
    return out


def _key_bytes(serde: Serde, text: str) -> list[bytes]:
    """The distinct encodings by ``serde`` of the keys ``text`` may be (those it can encode)."""
    out: list[bytes] = []
    for candidate in key_candidates(text):
        try:
            raw = serde.to_bytes(candidate)
        except Exception:
            continue
        if raw not in out:
            out.append(raw)
    return out


@contextlib.contextmanager
def _open(path: Path, store: str, task: str, snapshot: bool) -> Iterator[tuple[LmdbSnapshot, bool, int | None]]:
    """The store's snapshot, whether a live process holds it (read with ``snapshot``), and its pid."""
    try:
        held = hold_store_dir_shared(path)
    except StoreLockedError as e:
        if not snapshot:
            who = f"pid {e.pid}" if e.pid is not None else "a live process"
            raise StoreLockedError(
                f"store {store!r} of task {task!r} ({path}) is locked by a running task ({who} holds its LOCK "
                "file): stop the job first, or pass --snapshot to read a consistent snapshot of its last commit",
                e.pid,
            ) from None
        with LmdbSnapshot(path, shared=True) as snap:
            yield snap, True, e.pid
        return
    try:
        with LmdbSnapshot(path, shared=False) as snap:
            yield snap, False, None
    finally:
        if held is not None:
            unlock_store_dir(held)


def inspect_store(
    settings: JobSettings,
    store: str,
    task: str,
    *,
    key: str | None = None,
    limit: int = DEFAULT_LIMIT,
    snapshot: bool = False,
) -> StoreListing:
    """Read ``task``'s ``store`` (see the module docstring): the entry of ``key`` (given as text:
    ``key_candidates``) or the first ``limit`` entries. Raises ``StoreNotFoundError`` (see
    ``locate_store``), ``StoreLockedError`` while a task holds it and not ``snapshot``,
    ``StoreError`` when its files cannot be read, ``ConfigError`` when a serde cannot decode them."""
    st = _store_settings(settings, store)
    path = locate_store(settings, store, task)
    key_serde, msg_serde = _serdes(settings, st)
    key_setting, msg_setting = f"stores.{store}.key.serde", f"stores.{store}.msg.serde"

    def entry(stored: StoredEntry) -> Entry:
        if stored.value is None:  # the key's bytes may be what changed: shown raw where they do not decode
            try:
                return Entry(key_serde.from_bytes(stored.key), None, damaged=True)
            except Exception:
                return Entry(stored.key, None, damaged=True)
        shown = _decode(key_serde, stored.key, key_setting, f"the key {stored.key!r}")
        return Entry(shown, _decode(msg_serde, stored.value, msg_setting, f"the value of key {stored.key!r}"))

    with _open(path, store, task, snapshot) as (snap, running, pid):
        listing = StoreListing(
            store,
            task,
            path,
            snap.format,
            snap.count(),
            snap.changelog_offset,
            snap.dirty,
            running_pid=pid,
            snapshot=running,
        )
        if key is not None:
            found = next((e for raw in _key_bytes(key_serde, key) if (e := snap.get(raw)) is not None), None)
            listing.missing_key = found is None
            listing.entries = [] if found is None else [entry(found)]
            return listing
        for stored in snap.entries():
            if len(listing.entries) >= limit:
                listing.truncated = True
                break
            listing.entries.append(entry(stored))
    return listing
