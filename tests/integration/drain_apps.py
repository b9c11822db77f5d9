"""The application of the drain acceptance tests (test_application_drain.py): a 2-stage pipeline.

Stage 1 reads ``events`` (JSON ``{"k": key, "src": partition, "seq": offset}``) and re-keys each by
``k`` through the intermediate topic ``<job.name>-<job.id>-partition_by-by-key`` as the pair
``[src, seq]``. Stage 2 folds the pairs of each key in a keyed session window with a one-hour gap,
so a pane can only come out at a drain (or an end of stream), never during a test, and sends each
pane to ``out`` as ``key -> {"key": key, "items": [[src, seq], ...]}`` (JSON).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from samzamp import KV, StreamApplication, StreamApplicationDescriptor, WindowPane, Windows

__all__ = ["GAP", "PARTITION_BY_ID", "WINDOW_ID", "ReKeyedSessionApp"]

PARTITION_BY_ID = "by-key"
WINDOW_ID = "items"
GAP = timedelta(hours=1)


def _pane(pane: WindowPane[str, list[list[int]]]) -> Any:
    return KV(pane.key.key, {"key": pane.key.key, "items": pane.message})


class ReKeyedSessionApp(StreamApplication):
    """``events`` -> partition_by(k) -> session window per k (1 h gap) collecting [src, seq] -> ``out``."""

    def describe(self, app: StreamApplicationDescriptor) -> None:
        events = app.input_stream("events", key_serde="string", msg_serde="json")
        out = app.output_stream("out", key_serde="string", msg_serde="json")
        (
            events.map(lambda kv: kv.value)
            .partition_by(lambda m: m["k"], lambda m: [m["src"], m["seq"]], id=PARTITION_BY_ID)
            .window(
                Windows.keyed_session_window(lambda kv: kv.key, GAP, lambda: [], lambda kv, items: [*items, kv.value]),
                id=WINDOW_ID,
            )
            .map(_pane)
            .send_to(out)
        )
