"""Joins on the key of ``KV`` messages (Samza's PartialJoinOperatorImpl and StreamTableJoinOperatorImpl).

``StreamStreamJoinOperator`` is the join of two streams; the graph gives the messages of its
first input to ``left`` and of its second to ``right``, whose results go to the join's downstream
operators. Each side keeps the latest message of each key with the time it arrived (processing
time) in its store, ``<op id>-L`` or ``<op id>-R`` (``[value, ms]`` under the key), and joins a
message with the other side's latest of its key if that arrived within the ttl (``ts > now - ttl``).
So each pair is joined once, when its second message arrives. LMDB has no TTL: the join's timer
deletes the entries older than the ttl, at most once per ttl (an entry is gone within two ttls and
never joins after one).

``StreamTableJoinOperator`` joins one stream with a table: ``fn(value, record)`` with the table's
record of the message's key; a message whose key has no record is dropped and counted
(``join-dropped-messages`` in the task's ``TaskName-<task name>`` group).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from samzamp.api.operators import KV, OperatorSpec
from samzamp.operators.impl import NOTHING, GraphContext, OperatorImpl

__all__ = ["JoinSide", "StreamStreamJoinOperator", "StreamTableJoinOperator"]


def _check(op_id: str, message: Any) -> KV:
    """``message`` as a KV with a key, or the error naming the join."""
    if not isinstance(message, KV):
        raise TypeError(f"join {op_id!r} takes KV(key, value) messages, got {type(message).__name__}")
    if message.key is None:
        raise ValueError(f"join {op_id!r}: a message with a None key cannot be joined (store keys may not be None)")
    return message


class JoinSide(OperatorImpl):
    """One input of a stream-stream join: stores each message as its key's latest on this side and
    joins it with the other side's latest of the key. Opened by the join's ``init``."""

    def __init__(self, spec: OperatorSpec, is_left: bool) -> None:
        super().__init__(spec)
        assert spec.fn is not None
        self.fn: Callable[[Any, Any], Any] = spec.fn
        self.is_left = is_left
        self.ttl_ms = spec.ttl_ms

    def open(self, context: GraphContext, own: Any, other: Any) -> None:
        """Use ``own`` for this side's messages and ``other`` for the other side's."""
        self.context = context
        self.own = own
        self.other = other

    def process(self, message: Any) -> Iterable[Any]:
        kv = _check(self.op_id, message)
        now = self.context.now_ms()
        self.own.put(kv.key, [kv.value, now])
        other = self.other.get(kv.key)
        if other is None or other[1] <= now - self.ttl_ms:
            return NOTHING
        # The join function takes the first input's value first, whichever side this is.
        return (self.fn(kv.value, other[0]) if self.is_left else self.fn(other[0], kv.value),)


class StreamStreamJoinOperator(OperatorImpl):
    """``stream.join(other, fn, ttl=, id=)``: ``fn(left value, right value)`` for each message that
    finds the other side's latest message of its key within the ttl (see the module docstring)."""

    def __init__(self, spec: OperatorSpec) -> None:
        super().__init__(spec)
        self.ttl_ms = spec.ttl_ms
        self.left = JoinSide(spec, is_left=True)
        self.right = JoinSide(spec, is_left=False)
        self._next_purge = 0  # the first timer purges: entries may have expired while the job was down

    def init(self, context: GraphContext) -> None:
        self.left_store = context.store(f"{self.op_id}-L")
        self.right_store = context.store(f"{self.op_id}-R")
        self.left.open(context, self.left_store, self.right_store)
        self.right.open(context, self.right_store, self.left_store)

    def process(self, message: Any) -> Iterable[Any]:
        raise TypeError(f"join {self.op_id!r}: messages go to its sides (left, right), not to the join")

    def on_timer(self, now_ms: int) -> Iterable[Any]:
        """Delete the entries that can no longer join (``ts <= now - ttl``); at most once per ttl,
        as a purge scans both stores."""
        if now_ms < self._next_purge:
            return NOTHING
        self._next_purge = now_ms + self.ttl_ms
        cutoff = now_ms - self.ttl_ms
        for store in (self.left_store, self.right_store):
            with store.all() as entries:
                expired = [key for key, (_value, ts) in entries if ts <= cutoff]
            store.delete_all(expired)
        return NOTHING


class StreamTableJoinOperator(OperatorImpl):
    """``stream.join(table, fn)``: ``fn(value, record)`` with the table's record of the message's
    key; a message with no record is dropped and counted."""

    def init(self, context: GraphContext) -> None:
        spec = self.spec
        assert spec.table is not None
        assert spec.fn is not None
        self.fn: Callable[[Any, Any], Any] = spec.fn
        self.store = context.store(spec.table.store)
        self.dropped = context.metrics.counter(f"TaskName-{context.task_name}", "join-dropped-messages")

    def process(self, message: Any) -> Iterable[Any]:
        kv = _check(self.op_id, message)
        record = self.store.get(kv.key)
        if record is None:
            self.dropped.count += 1
            return NOTHING
        return (self.fn(kv.value, record),)
