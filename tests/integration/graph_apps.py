"""Applications (app.class) used by the integration tests of the high-level API."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from samzamp import KV, StreamApplication, StreamApplicationDescriptor, WindowPane, Windows
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


GAP = timedelta(hours=1)


class SessionItemsApp(StreamApplication):
    """``events`` (JSON ``{"k", "src", "seq"}``) re-keyed by ``k``; a keyed session window with a
    one-hour gap folds each key's ``[src, seq]`` pairs (so it fires only on a drain or at end of
    stream); each pane goes to ``out`` as ``key -> {"key": key, "items": [[src, seq], ...]}``."""

    def describe(self, app: StreamApplicationDescriptor) -> None:
        events = app.input_stream("events", msg_serde="json")
        out = app.output_stream("out", key_serde="string", msg_serde="json")
        (
            events.partition_by(lambda m: m["k"], lambda m: [m["src"], m["seq"]], id="by-key")
            .window(Windows.keyed_session_window(lambda kv: kv.key, GAP, list, _add_item), id="items")
            .map(lambda pane: KV(pane.key.key, {"key": pane.key.key, "items": pane.message}))
            .send_to(out)
        )


def _add_item(kv: KV[Any, Any], items: list[Any]) -> list[Any]:
    items.append(kv.value)
    return items


class SessionItemsAppV2(SessionItemsApp):
    """``SessionItemsApp`` after an upgrade of its intermediate schema: ``partition_by`` sends
    ``{"src", "seq"}`` objects where it sent ``[src, seq]`` pairs. A record of the old schema reaching
    its fold fails the task (a list has no "src")."""

    def describe(self, app: StreamApplicationDescriptor) -> None:
        events = app.input_stream("events", msg_serde="json")
        out = app.output_stream("out", key_serde="string", msg_serde="json")
        (
            events.partition_by(lambda m: m["k"], lambda m: {"src": m["src"], "seq": m["seq"]}, id="by-key")
            .window(Windows.keyed_session_window(lambda kv: kv.key, GAP, list, _add_object), id="items")
            .map(lambda pane: KV(pane.key.key, {"key": pane.key.key, "items": pane.message}))
            .send_to(out)
        )


def _add_object(kv: KV[Any, Any], items: list[Any]) -> list[Any]:
    items.append([kv.value["src"], kv.value["seq"]])
    return items
