"""The operator graph of the high-level API: ``MessageStream`` and what its methods record.

Calling a ``MessageStream`` method runs nothing: it adds an ``OperatorSpec`` to the application's
graph (``StreamApplicationDescriptor``) and returns the stream of its results. samzamp runs the
graph as one operator-graph task per task name (Samza's StreamOperatorTask).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, NamedTuple, Protocol

from samzamp.api.errors import ConfigError
from samzamp.api.windows import WindowSpec

__all__ = ["KV", "GraphBuilder", "MessageStream", "OperatorSpec", "OutputStream", "Table"]


class KV(NamedTuple):
    """A keyed message: what ``partition_by`` emits and what joins and keyed sends read."""

    key: Any
    value: Any


@dataclass(frozen=True, eq=False)
class OutputStream:
    """An output stream of the application (``app.output_stream``): a target of ``send_to``."""

    stream_id: str
    key_serde: str | None = None
    msg_serde: str | None = None


@dataclass(frozen=True, eq=False)
class Table:
    """A local table (``app.table``): an LMDB store of the task, changelogged to ``changelog``.

    ``send_to(table)`` writes ``KV`` messages into it (a None value deletes the key);
    ``join(table, fn)`` reads it."""

    table_id: str
    store: str  # the store's name, which is also its changelog topic
    key_serde: str = "json"
    msg_serde: str = "json"


@dataclass(eq=False)
class OperatorSpec:
    """One operator of the graph: its op id (``<job.name>-<job.id>-<opcode>-<id>``), its opcode
    (Samza's, lower-cased), the operators it reads from, and what it does.

    ``fn`` is the user function (map, filter, flat_map, sink, join); ``is_async`` when it is an
    ``async def``. Kind-specific parts: ``stream`` (input: the stream id; send_to: the output
    stream; partition_by: the intermediate stream's id), ``table``, ``window``, ``ttl_ms``,
    ``key_fn``/``value_fn`` and serdes (partition_by, input)."""

    op_id: str
    opcode: str
    parents: tuple[OperatorSpec, ...] = ()
    fn: Callable[..., Any] | None = None
    is_async: bool = False
    stream: str | None = None
    output: OutputStream | None = None
    table: Table | None = None
    window: WindowSpec | None = None
    ttl_ms: int = 0
    key_fn: Callable[[Any], Any] | None = None
    value_fn: Callable[[Any], Any] | None = None
    key_serde: str | None = None
    msg_serde: str | None = None
    keyed: bool = False  # input: the stream's messages are KV(key, value)
    children: list[OperatorSpec] = field(default_factory=list)

    def digest_line(self) -> str:
        """What must be the same wherever ``describe`` runs: id, opcode, parents, streams."""
        parents = ",".join(p.op_id for p in self.parents)
        target = (
            self.stream or (self.output.stream_id if self.output else "") or (self.table.store if self.table else "")
        )
        window = f"{self.window.kind}/{self.window.duration_ms}" if self.window else ""
        return f"{self.op_id}|{self.opcode}|{parents}|{target}|{window}|{self.ttl_ms}|{int(self.is_async)}"


class GraphBuilder(Protocol):
    """What a ``MessageStream`` adds its operators to (``StreamApplicationDescriptor``)."""

    def add_operator(
        self, opcode: str, user_id: str | None, parents: tuple[OperatorSpec, ...], **parts: Any
    ) -> OperatorSpec: ...

    def add_intermediate_input(self, partition_by: OperatorSpec) -> OperatorSpec: ...


def _check_fn(fn: Any, what: str) -> None:
    if not callable(fn):
        raise TypeError(f"{what} takes a function, got {type(fn).__name__}")


class MessageStream:
    """A stream of messages in the application's graph. Each method adds an operator and returns
    the stream of its results (``send_to`` and ``sink`` end a branch)."""

    __slots__ = ("_app", "_spec")

    def __init__(self, app: GraphBuilder, spec: OperatorSpec) -> None:
        self._app = app
        self._spec = spec

    @property
    def spec(self) -> OperatorSpec:
        """The operator whose results this stream carries."""
        return self._spec

    @property
    def application(self) -> GraphBuilder:
        """The application whose graph the stream is part of."""
        return self._app

    def _then(
        self, opcode: str, user_id: str | None = None, *, parents: tuple[OperatorSpec, ...] = (), **parts: Any
    ) -> MessageStream:
        spec = self._app.add_operator(opcode, user_id, (self._spec, *parents), **parts)
        return MessageStream(self._app, spec)

    def map(self, fn: Callable[[Any], Any]) -> MessageStream:
        """Each message ``m`` becomes ``fn(m)`` (``fn`` may be an ``async def``)."""
        _check_fn(fn, "map")
        return self._then("map", fn=fn, is_async=inspect.iscoroutinefunction(fn))

    def filter(self, fn: Callable[[Any], Any]) -> MessageStream:
        """Only the messages for which ``fn(m)`` is true (``fn`` may be an ``async def``)."""
        _check_fn(fn, "filter")
        return self._then("filter", fn=fn, is_async=inspect.iscoroutinefunction(fn))

    def flat_map(self, fn: Callable[[Any], Iterable[Any]]) -> MessageStream:
        """Each message ``m`` becomes the messages of the iterable ``fn(m)`` (``fn`` may be an
        ``async def`` returning an iterable)."""
        _check_fn(fn, "flat_map")
        is_async = inspect.iscoroutinefunction(fn)
        return self._then("async_flat_map" if is_async else "flat_map", fn=fn, is_async=is_async)

    def merge(self, *others: MessageStream) -> MessageStream:
        """The messages of this stream and of ``others``, each in its own order."""
        for other in others:
            if not isinstance(other, MessageStream) or other.application is not self._app:
                raise TypeError("merge takes MessageStreams of the same application")
        return self._then("merge", parents=tuple(o.spec for o in others))

    def partition_by(
        self,
        key_fn: Callable[[Any], Any],
        value_fn: Callable[[Any], Any],
        *,
        id: str,  # noqa: A002 - Samza's name for the operator id
        key_serde: str = "json",
        msg_serde: str = "json",
    ) -> MessageStream:
        """Re-key: a stream of ``KV(key_fn(m), value_fn(m))`` read back from the intermediate topic
        ``<job.name>-<job.id>-partition_by-<id>``, where a key's messages land in one partition
        (Kafka's murmur2 of the serialized key), so one task sees every message of a key."""
        _check_fn(key_fn, "partition_by's key_fn")
        _check_fn(value_fn, "partition_by's value_fn")
        spec = self._app.add_operator(
            "partition_by",
            id,
            (self._spec,),
            key_fn=key_fn,
            value_fn=value_fn,
            key_serde=key_serde,
            msg_serde=msg_serde,
        )
        spec.stream = spec.op_id
        return MessageStream(self._app, self._app.add_intermediate_input(spec))

    def window(self, window: WindowSpec, *, id: str) -> MessageStream:  # noqa: A002
        """A stream of ``WindowPane``: the messages folded per key and window (see ``Windows``)."""
        if not isinstance(window, WindowSpec):
            raise TypeError("window takes a window from samzamp.Windows")
        return self._then("window", id, window=window)

    def join(
        self,
        other: MessageStream | Table,
        fn: Callable[[Any, Any], Any],
        *,
        ttl: timedelta | None = None,
        id: str | None = None,  # noqa: A002
    ) -> MessageStream:
        """Inner join on the key of ``KV`` messages.

        With another stream: each message joins the latest message of the other side with its
        key seen within ``ttl``, giving ``fn(value, other_value)`` (this stream's value first);
        both streams must come from streams with the same partition count. With a ``Table``: each
        message joins the table's record of its key, giving ``fn(value, record)``; a message with
        no record is dropped (counted)."""
        _check_fn(fn, "join")
        if isinstance(other, Table):
            if ttl is not None:
                raise TypeError("a join with a table takes no ttl")
            return self._then("join", id, fn=fn, table=other)
        if not isinstance(other, MessageStream) or other.application is not self._app:
            raise TypeError("join takes a MessageStream of the same application or a Table")
        if ttl is None or id is None:
            raise TypeError("a join of two streams needs ttl= (a timedelta) and id=")
        ttl_ms = int(ttl.total_seconds() * 1000)
        if ttl_ms <= 0:
            raise ValueError(f"join {id!r}: the ttl must be at least one millisecond, got {ttl}")
        return self._then("join", id, parents=(other.spec,), fn=fn, ttl_ms=ttl_ms)

    def send_to(self, target: OutputStream | Table) -> None:
        """Send each message to an output stream (a ``KV`` as key and value, anything else as a
        value with no key) or into a table (``KV`` messages; a None value deletes the key)."""
        if isinstance(target, OutputStream):
            self._then("send_to", output=target)
        elif isinstance(target, Table):
            self._then("send_to", table=target)
        else:
            raise TypeError("send_to takes an output stream (app.output_stream) or a table (app.table)")

    def sink(self, fn: Callable[[Any, Any, Any], None]) -> None:
        """Call ``fn(message, collector, coordinator)`` for each message."""
        _check_fn(fn, "sink")
        self._then("sink", fn=fn)


def check_op_id(op_id: str, opcode: str) -> None:
    """An op id names topics, stores and config keys: Kafka's topic characters but the dot, at most 249."""
    if len(op_id) > 249 or not all(c.isascii() and (c.isalnum() or c in "_-") for c in op_id):
        raise ConfigError(
            "app.class",
            f"{opcode} operator {op_id!r}: an op id must be at most 249 of the characters a-z A-Z 0-9 _ - "
            "(it names a topic, a store and config keys); choose another id (or a job.name without dots)",
        )
