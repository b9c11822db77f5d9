"""``LmdbKeyValueStore``: the KeyValueStore a task gets from ``context.get_store`` (Samza's store stack:
null-safe -> serialized -> logged -> engine), with a write buffer that only a commit applies.

- Every put/delete is sent to the changelog first (a delete as a null value), then kept in the write
  buffer (SAMZA-1065's order). Reads see the buffer first (read-your-writes), then LMDB.
- ``commit(offset)`` applies the buffer to LMDB in one transaction that also records the changelog
  offset the data now contains. So LMDB on disk is always the state at some commit: never a state
  that no checkpoint covers, which is what lets restore trust it.
- A buffer that grows past ``SPILL_AT`` entries is written early, marked *dirty* (a restart then
  rebuilds the store from the changelog); this bounds memory between commits.
- ``flush()`` does nothing: writes become durable at the next commit, which a task can ask for with
  ``coordinator.commit()``.

One task uses a store, from the thread that runs the task.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from samzamp.api.serde import Serde
from samzamp.storage.lmdb import LmdbEngine

__all__ = ["SPILL_AT", "LmdbKeyValueStore", "StoreIterator"]

SPILL_AT = 200_000

ChangelogSend = Callable[[bytes, "bytes | None"], None]


class StoreIterator:
    """Entries in key-byte order, decoded; a context manager (close it when done)."""

    def __init__(self, entries: list[tuple[bytes, bytes]], key_serde: Serde, msg_serde: Serde) -> None:
        self._entries: list[tuple[bytes, bytes]] | None = entries
        self._key = key_serde.from_bytes
        self._msg = msg_serde.from_bytes

    def __iter__(self) -> Iterator[tuple[Any, Any]]:
        if self._entries is None:
            raise ValueError("this store iterator was closed")
        key, msg = self._key, self._msg
        for k, v in self._entries:
            yield key(k), msg(v)

    def __enter__(self) -> StoreIterator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._entries = None


class LmdbKeyValueStore:
    def __init__(
        self, name: str, engine: LmdbEngine, key_serde: Serde, msg_serde: Serde, changelog: ChangelogSend | None
    ) -> None:
        self.name = name
        self.engine = engine
        self._key_to = key_serde.to_bytes
        self._msg_to = msg_serde.to_bytes
        self._key_from = key_serde.from_bytes
        self._msg_from = msg_serde.from_bytes
        self._key_serde = key_serde
        self._msg_serde = msg_serde
        self._changelog = changelog
        self._buffer: dict[bytes, bytes | None] = {}

    def _kb(self, key: Any) -> bytes:
        if key is None:
            raise ValueError(f"store {self.name!r}: keys may not be None")
        return self._key_to(key)

    # -- KeyValueStore ----------------------------------------------------------------------------
    def get(self, key: Any) -> Any:
        kb = self._kb(key)
        buffer = self._buffer
        vb = buffer[kb] if kb in buffer else self.engine.get(kb)
        return None if vb is None else self._msg_from(vb)

    def get_all(self, keys: list[Any]) -> dict[Any, Any]:
        out = {}
        for k in keys:
            v = self.get(k)
            if v is not None:
                out[k] = v
        return out

    def put(self, key: Any, value: Any) -> None:
        if value is None:
            raise ValueError(f"store {self.name!r}: values may not be None (use delete)")
        kb = self._kb(key)
        vb = self._msg_to(value)
        if self._changelog is not None:
            self._changelog(kb, vb)
        self._buffer[kb] = vb
        if len(self._buffer) >= SPILL_AT:
            self._spill()

    def put_all(self, entries: list[tuple[Any, Any]]) -> None:
        for k, v in entries:
            self.put(k, v)

    def delete(self, key: Any) -> None:
        kb = self._kb(key)
        if self._changelog is not None:
            self._changelog(kb, None)
        self._buffer[kb] = None
        if len(self._buffer) >= SPILL_AT:
            self._spill()

    def delete_all(self, keys: list[Any]) -> None:
        for k in keys:
            self.delete(k)

    def range(self, from_key: Any, to_key: Any) -> StoreIterator:
        """Entries with from_key <= key < to_key (by serialized key bytes)."""
        return self._iterate(self._kb(from_key), self._kb(to_key))

    def all(self) -> StoreIterator:
        return self._iterate(None, None)

    def flush(self) -> None:
        """Nothing to do: writes are durable at the next commit (see the module docstring)."""

    # -- engine side ------------------------------------------------------------------------------
    def _iterate(self, start: bytes | None, stop: bytes | None) -> StoreIterator:
        merged = dict(self.engine.items(start, stop))
        for kb, vb in self._buffer.items():
            if (start is None or kb >= start) and (stop is None or kb < stop):
                if vb is None:
                    merged.pop(kb, None)
                else:
                    merged[kb] = vb
        return StoreIterator(sorted(merged.items()), self._key_serde, self._msg_serde)

    def _spill(self) -> None:
        self.engine.apply(self._buffer.items(), None)  # dirty until the next commit
        self._buffer.clear()

    def commit(self, changelog_offset: int) -> None:
        """Apply the buffered writes with the changelog offset they reach (commit step 4)."""
        self.engine.apply(self._buffer.items(), changelog_offset)
        self._buffer.clear()
        self.engine.sync()

    def close(self) -> None:
        self._buffer.clear()
        self.engine.close()
