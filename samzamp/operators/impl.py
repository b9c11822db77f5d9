"""The stateless operators, and what every operator implementation is.

An operator takes one message at a time (``process``) and returns the messages it gives its
downstream operators (an iterable; empty for a sink); a timer tick (``on_timer``) and the end of
its inputs (``on_end_of_stream``) may give messages too. The graph (``graph.OperatorGraph``) calls
them and moves what they return downstream; an operator never calls another.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Protocol

from samzamp.api.collector import MessageCollector, TaskCoordinator
from samzamp.api.envelope import OutgoingMessageEnvelope, SystemStream
from samzamp.api.operators import KV, OperatorSpec
from samzamp.metrics.registry import MetricsRegistry

__all__ = [
    "FilterOperator",
    "FlatMapOperator",
    "GraphContext",
    "InputOperator",
    "MapOperator",
    "MergeOperator",
    "OperatorImpl",
    "PartitionByOperator",
    "SendToOperator",
    "SendToTableOperator",
    "SinkOperator",
]

NOTHING: tuple[Any, ...] = ()


class GraphContext(Protocol):
    """What an operator reaches of its task: the collector and coordinator of the call in progress,
    its stores, the clock, the streams of the job, and the metrics."""

    task_name: str
    collector: MessageCollector
    coordinator: TaskCoordinator
    metrics: MetricsRegistry

    def store(self, name: str) -> Any: ...

    def stream(self, stream_id: str) -> SystemStream: ...

    def now_ms(self) -> int: ...

    def flush(self, before: str) -> None: ...


class OperatorImpl:
    """One operator of a task's graph (Samza's OperatorImpl). Subclasses override ``process``
    (or ``process_async`` when ``is_async``), and ``on_timer``/``on_end_of_stream`` when they hold
    state."""

    is_async = False

    def __init__(self, spec: OperatorSpec) -> None:
        self.spec = spec
        self.op_id = spec.op_id
        self.children: list[OperatorImpl] = []
        self.ended = False  # every input of the operator ended (end of stream handled)
        self.drained = False  # every input of the operator drained (drain handled)
        # The least of its inputs' watermarks (None until each input has one); never goes back.
        self.watermark: int | None = None

    def init(self, context: GraphContext) -> None:
        """Open what the operator keeps (its stores): before the first message."""

    def process(self, message: Any) -> Iterable[Any]:
        """The messages ``message`` gives downstream."""
        raise NotImplementedError

    async def process_async(self, message: Any) -> Iterable[Any]:
        return self.process(message)

    def on_timer(self, now_ms: int) -> Iterable[Any]:
        """The window timer ticked (task.window.ms): what fires now."""
        return NOTHING

    def on_end_of_stream(self) -> Iterable[Any]:
        """Every input of the operator ended: what it still holds, emitted once (then cleared)."""
        return NOTHING

    def on_drain(self) -> Iterable[Any]:
        """Every input of the operator drained: what it must not keep past the drain, emitted once
        (then cleared). What it keeps by design (a join's or table's state) stays."""
        return NOTHING

    def flush(self) -> None:
        """The task commits: write what the operator holds in memory to its stores first."""

    def close(self) -> None:
        """The task closes."""


class InputOperator(OperatorImpl):
    """An input stream (a source, or an intermediate stream read back): its messages as they are."""

    def process(self, message: Any) -> Iterable[Any]:
        return (message,)


class MapOperator(OperatorImpl):
    def __init__(self, spec: OperatorSpec) -> None:
        super().__init__(spec)
        assert spec.fn is not None
        self.fn: Callable[[Any], Any] = spec.fn
        self.is_async = spec.is_async

    def process(self, message: Any) -> Iterable[Any]:
        return (self.fn(message),)

    async def process_async(self, message: Any) -> Iterable[Any]:
        result = self.fn(message)
        return (await result if self.is_async else result,)


class FilterOperator(MapOperator):
    def process(self, message: Any) -> Iterable[Any]:
        return (message,) if self.fn(message) else NOTHING

    async def process_async(self, message: Any) -> Iterable[Any]:
        result = self.fn(message)
        keep = await result if self.is_async else result
        return (message,) if keep else NOTHING


class FlatMapOperator(MapOperator):
    def process(self, message: Any) -> Iterable[Any]:
        result = self.fn(message)
        return NOTHING if result is None else result

    async def process_async(self, message: Any) -> Iterable[Any]:
        result: Any = self.fn(message)
        if self.is_async:
            result = await result
        return NOTHING if result is None else result


class MergeOperator(OperatorImpl):
    def process(self, message: Any) -> Iterable[Any]:
        return (message,)


class SinkOperator(OperatorImpl):
    """``sink(fn)``: ``fn(message, collector, coordinator)``."""

    def init(self, context: GraphContext) -> None:
        self.context = context
        assert self.spec.fn is not None
        self.fn: Callable[[Any, MessageCollector, TaskCoordinator], Any] = self.spec.fn

    def process(self, message: Any) -> Iterable[Any]:
        ctx = self.context
        self.fn(message, ctx.collector, ctx.coordinator)
        return NOTHING


class SendToOperator(OperatorImpl):
    """``send_to(output_stream)``: a ``KV`` as key and value, anything else as a value with no key."""

    def init(self, context: GraphContext) -> None:
        self.context = context
        assert self.spec.output is not None
        self.stream = context.stream(self.spec.output.stream_id)

    def process(self, message: Any) -> Iterable[Any]:
        if isinstance(message, KV):
            envelope = OutgoingMessageEnvelope(self.stream, message.value, key=message.key)
        else:
            envelope = OutgoingMessageEnvelope(self.stream, message)
        self.context.collector.send(envelope)
        return NOTHING


class SendToTableOperator(OperatorImpl):
    """``send_to(table)``: a ``KV`` upserts its key; a None value deletes it."""

    def init(self, context: GraphContext) -> None:
        assert self.spec.table is not None
        self.store = context.store(self.spec.table.store)

    def process(self, message: Any) -> Iterable[Any]:
        if not isinstance(message, KV):
            raise TypeError(f"{self.op_id}: send_to(table) takes KV(key, value) messages, got {type(message).__name__}")
        if message.value is None:
            self.store.delete(message.key)
        else:
            self.store.put(message.key, message.value)
        return NOTHING


class PartitionByOperator(OperatorImpl):
    """``partition_by``: each message as ``KV(key_fn(m), value_fn(m))`` to the intermediate stream,
    placed by its key (murmur2 of the key's bytes, as Kafka's Java producer does; a None key goes
    to partition 0, as Samza sends it). Its downstream is the stream's input, in whichever task
    reads the key's partition."""

    def init(self, context: GraphContext) -> None:
        self.context = context
        assert self.spec.stream is not None
        assert self.spec.key_fn is not None
        assert self.spec.value_fn is not None
        self.stream = context.stream(self.spec.stream)
        self.key_fn = self.spec.key_fn
        self.value_fn = self.spec.value_fn

    def process(self, message: Any) -> Iterable[Any]:
        key = self.key_fn(message)
        value = self.value_fn(message)
        partition = 0 if key is None else None
        self.context.collector.send(OutgoingMessageEnvelope(self.stream, value, key=key, partition=partition))
        return NOTHING
