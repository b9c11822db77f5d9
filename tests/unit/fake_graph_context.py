"""A GraphContext for driving one operator by hand: real LMDB stores with JSON serdes (as the planner
configures an operator's stores) and a clock the test sets."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from samzamp.metrics.registry import MetricsRegistry
from samzamp.serde.registry import JsonSerde
from samzamp.storage.lmdb import LmdbEngine
from samzamp.storage.store import LmdbKeyValueStore


class FakeGraphContext:
    def __init__(self, base: Path, now: int = 0, task_name: str = "Partition 0") -> None:
        self.base = base
        self.now = now
        self.task_name = task_name
        self.metrics = MetricsRegistry()
        self.collector: Any = None
        self.coordinator: Any = None
        self.stores: dict[str, LmdbKeyValueStore] = {}

    def store(self, name: str) -> LmdbKeyValueStore:
        if name not in self.stores:
            engine = LmdbEngine(self.base / name, sync=False)
            self.stores[name] = LmdbKeyValueStore(name, engine, JsonSerde(), JsonSerde(), None)
        return self.stores[name]

    def now_ms(self) -> int:
        return self.now

    def stream(self, stream_id: str) -> Any:
        raise AssertionError("an operator under test sends nowhere")

    def flush(self, before: str) -> None:
        pass

    def contents(self, name: str) -> dict[str, Any]:
        """A store's entries, keys as JSON text (lists are not hashable)."""
        with self.store(name).all() as entries:
            return {json.dumps(k, separators=(",", ":")): v for k, v in entries}

    def restart(self) -> FakeGraphContext:
        """Commit the stores and close them, as a task does at its last commit; a new context over the
        same directories, as the restarted task gets."""
        for st in self.stores.values():
            st.commit(0)
            st.close()
        return FakeGraphContext(self.base, self.now, self.task_name)
