"""The key-value store interface a task reads and writes (implemented by the LMDB stores in samzamp.storage)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

__all__ = ["Entry", "KeyValueIterator", "KeyValueStore"]


class Entry(Protocol):
    key: Any
    value: Any


class KeyValueIterator(Protocol):
    """A one-pass iterator over (key, value) entries in key order, streamed (bounded memory).

    It sees the store as it was when ``range``/``all`` returned it; the task may write to the store
    meanwhile (those writes are not seen by it). Close it (or use ``with``) before process() or
    window() returns: an open iterator holds a read snapshot of the store; closing twice is fine,
    using it after close raises ValueError."""

    def __iter__(self) -> Iterator[tuple[Any, Any]]: ...

    def __enter__(self) -> KeyValueIterator: ...

    def __exit__(self, *exc: object) -> None: ...

    def close(self) -> None: ...


class KeyValueStore(Protocol):
    """A task's key-value store. Keys and values pass through the store's serdes; None is not allowed.

    Range order is that of the serialized key bytes. Writes are changelogged when the store has a
    changelog; a checkpoint covers every write made before it.
    """

    def get(self, key: Any) -> Any: ...

    def get_all(self, keys: list[Any]) -> dict[Any, Any]: ...

    def put(self, key: Any, value: Any) -> None: ...

    def put_all(self, entries: list[tuple[Any, Any]]) -> None: ...

    def delete(self, key: Any) -> None: ...

    def delete_all(self, keys: list[Any]) -> None: ...

    def range(self, from_key: Any, to_key: Any) -> KeyValueIterator: ...

    def all(self) -> KeyValueIterator: ...

    def flush(self) -> None: ...
