"""Applications (app.class) used by the integration tests of the high-level API."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from samzamp import KV, StreamApplication, StreamApplicationDescriptor, WindowPane
from samzamp.examples.word_count_app import WordCountApp


class PaneCountApp(WordCountApp):
    """The example word count, each pane sent as ``word -> {"pane": pane id, "count": n}`` (JSON), so
    that a pane emitted again after a restart is recognised by its (word, pane id)."""

    @staticmethod
    def pane_message(pane: WindowPane[str, int]) -> Any:
        return KV(pane.key.key, {"pane": pane.key.pane_id, "count": pane.message})


class NotAnApp:
    """Has a describe, but is no StreamApplication."""

    def describe(self, app: StreamApplicationDescriptor) -> None:
        app.input_stream("lines").send_to(app.output_stream("out"))


class DuplicateIdApp(StreamApplication):
    """Two partition_by operators with the one id "twice"."""

    def describe(self, app: StreamApplicationDescriptor) -> None:
        lines = app.input_stream("lines", msg_serde="string")
        out = app.output_stream("out")
        lines.partition_by(lambda m: m, lambda m: 1, id="twice").send_to(out)
        lines.partition_by(lambda m: m[:1], lambda m: 1, id="twice").send_to(out)


TTL = timedelta(seconds=1)


class StreamJoinApp(StreamApplication):
    """Orders joined with payments of the same key seen within 1 s (either side first):
    ``key -> {"order": ..., "payment": ...}`` to "paid"."""

    def describe(self, app: StreamApplicationDescriptor) -> None:
        orders = app.input_stream("orders", key_serde="string", msg_serde="string")
        payments = app.input_stream("payments", key_serde="string", msg_serde="string")
        paid = app.output_stream("paid", key_serde="string", msg_serde="json")
        orders.join(payments, lambda order, payment: {"order": order, "payment": payment}, ttl=TTL, id="paid").send_to(
            paid
        )
