"""Applications the high-level API's unit tests run (importable by path, as app.class names them)."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from samzamp import KV, StreamApplication, StreamApplicationDescriptor, Windows


class Rekey(StreamApplication):
    """Words re-keyed through an intermediate stream, then upper-cased out: no state."""

    def describe(self, app: StreamApplicationDescriptor) -> None:
        out = app.output_stream("out")
        words = app.input_stream("lines").flat_map(str.split)
        words.partition_by(lambda w: w, lambda w: 1, id="by-word").map(lambda kv: KV(kv.key, kv.key.upper())).send_to(
            out
        )


class AsyncRekey(StreamApplication):
    """Rekey with an ``async def`` map after the shuffle."""

    def describe(self, app: StreamApplicationDescriptor) -> None:
        async def upper(kv: KV) -> KV:
            await asyncio.sleep(0)
            return KV(kv.key, kv.key.upper())

        out = app.output_stream("out")
        words = app.input_stream("lines").flat_map(str.split)
        words.partition_by(lambda w: w, lambda w: 1, id="by-word").map(upper).send_to(out)


class FilterMerge(StreamApplication):
    """Two inputs merged, filtered, flat-mapped and sunk: every stateless operator."""

    def describe(self, app: StreamApplicationDescriptor) -> None:
        out = app.output_stream("out")
        a = app.input_stream("a")
        b = app.input_stream("b").map(lambda m: m * 10)

        def sink(message: Any, collector: Any, coordinator: Any) -> None:
            from samzamp import OutgoingMessageEnvelope, SystemStream

            collector.send(OutgoingMessageEnvelope(SystemStream("test", "sunk"), message))

        merged = a.merge(b).filter(lambda m: m % 2 == 0)
        merged.flat_map(lambda m: [m, m + 1]).send_to(out)
        merged.sink(sink)


class WindowJoin(StreamApplication):
    """A window and a stream-stream join: their stores and the window timer the plan derives."""

    def describe(self, app: StreamApplicationDescriptor) -> None:
        a = app.input_stream("a", key_serde="string")
        b = app.input_stream("b", key_serde="string")
        w = Windows.keyed_tumbling_window(lambda kv: kv.key, timedelta(seconds=6), int, lambda m, n: n)
        a.window(w, id="w").sink(lambda m, c, k: None)
        a.join(b, lambda x, y: (x, y), ttl=timedelta(seconds=4), id="j").sink(lambda m, c, k: None)


class DuplicateId(StreamApplication):
    def describe(self, app: StreamApplicationDescriptor) -> None:
        s = app.input_stream("lines")
        s.partition_by(lambda m: m, lambda m: m, id="same")
        s.partition_by(lambda m: m, lambda m: m, id="same")


class AsyncAfterWindow(StreamApplication):
    def describe(self, app: StreamApplicationDescriptor) -> None:
        async def late(pane: Any) -> Any:
            return pane

        window = Windows.tumbling_window(timedelta(seconds=1), int, lambda m, n: n + 1)
        app.input_stream("lines").window(window, id="w").map(late).send_to(app.output_stream("out"))


class NotAnApplication:
    def describe(self, app: StreamApplicationDescriptor) -> None:
        app.input_stream("lines")


class SessionItems(StreamApplication):
    """``events`` (``{"k", "v"}``) re-keyed by ``k`` and folded per key into a list in a keyed session
    window with a one-hour gap (it fires only on a drain or at end of stream); panes to ``out``."""

    def describe(self, app: StreamApplicationDescriptor) -> None:
        out = app.output_stream("out")
        (
            app.input_stream("events")
            .partition_by(lambda m: m["k"], lambda m: m["v"], id="by-key")
            .window(
                Windows.keyed_session_window(lambda kv: kv.key, timedelta(hours=1), list, lambda kv, a: [*a, kv.value]),
                id="items",
            )
            .map(lambda pane: KV(pane.key.key, pane.message))
            .send_to(out)
        )
