"""A task's operator graph: the application's operators built for one task, and the rules that
move messages between them (Samza's OperatorImplGraph and the handling in OperatorImpl).

- A message of an input stream goes to that stream's input operator; what an operator returns goes
  to each of its downstream operators, depth first, in the order ``describe`` declared them.
- A control message on an intermediate stream is counted (``control.EndOfStreamStates``), never
  given to an operator.
- An operator ends when every operator it reads from ended; ending, it gives what it still holds
  (a window its panes), and a ``partition_by`` sends its end of stream to the intermediate stream.
  A task's source inputs end together (``sources_ended``: the container saw each of its source
  SSPs end); a source stream the task has no partition of has ended from the start; an
  intermediate stream ends when each of its partitions in the task is done.
- When every operator ended, the task commits and votes to shut down.
- A drain (seed 003) goes the same way with drain messages of the job's run: the container tells
  the task that its sources drained (``sources_drained``, its on_drain); an operator drains when
  every operator it reads from drained (a window emits its panes and deletes its state; a
  ``partition_by`` sends a named drain message, after a flush); an intermediate stream drains for
  the task when each of its partitions here counted every producer's drain message
  (``control.DrainStates``) or got the aggregate partition's copy. When every operator drained the
  task asks to commit and shut down: the container takes that as its drain done.
- Watermarks go the same way (``control.WatermarkStates``): an input's watermark is its stream's
  (an intermediate stream's: the least over the task's partitions of it, each the least over the
  stream's producers once every one reported), an operator's the least of its inputs', never going
  back; a ``partition_by`` whose watermark moves sends it on, named, to its aggregate partition,
  whose task (bucket 0) copies each advance to the other partitions. Windows here run in processing
  time, so watermarks only travel: a drain moves the sources' to the end of time first
  (``MAX_WATERMARK``), as Samza's drain does in a job with intermediate streams.
- What the task counted (``control_state``) goes into its checkpoint, and comes back at ``init``
  after a restart within the same run.

Operators that run an ``async def`` run on the loop, through ``process_async``; what a window
emits on its timer or at end of stream runs through synchronous operators only (a plan with an
async function after a window is refused).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

from samzamp.api.collector import MessageCollector, TaskCoordinator
from samzamp.api.context import TaskContext
from samzamp.api.envelope import IncomingMessageEnvelope, OutgoingMessageEnvelope, SystemStream, SystemStreamPartition
from samzamp.api.errors import ConfigError, SystemFailureError
from samzamp.api.operators import KV, OperatorSpec
from samzamp.config.application import ApplicationPlan
from samzamp.metrics.registry import Counter, MetricsRegistry, Timer
from samzamp.model.control_state import ControlState
from samzamp.operators.control import DrainStates, EndOfStreamStates, WatermarkStates
from samzamp.operators.impl import (
    NOTHING,
    FilterOperator,
    FlatMapOperator,
    InputOperator,
    MapOperator,
    MergeOperator,
    OperatorImpl,
    PartitionByOperator,
    SendToOperator,
    SendToTableOperator,
    SinkOperator,
)
from samzamp.operators.join import StreamStreamJoinOperator, StreamTableJoinOperator
from samzamp.operators.window import WindowOperator
from samzamp.serde.intermediate import (
    MAX_WATERMARK,
    ControlMessage,
    DrainMessage,
    EndOfStreamMessage,
    WatermarkMessage,
    aggregate_partition,
)

__all__ = ["OperatorGraph", "check_plan"]

METRICS_GROUP = "OperatorImpl"
# One message in this many (a power of two) is timed into <op id>-handle-message-ns (every one is
# counted in <op id>-messages).
TIMED_EVERY = 16
Push = Callable[[Any], None]
FLUSH_TIMEOUT_S = 60.0


def _make(spec: OperatorSpec) -> OperatorImpl:
    opcode = spec.opcode
    if opcode == "input":
        return InputOperator(spec)
    if opcode == "map":
        return MapOperator(spec)
    if opcode == "filter":
        return FilterOperator(spec)
    if opcode in ("flat_map", "async_flat_map"):
        return FlatMapOperator(spec)
    if opcode == "merge":
        return MergeOperator(spec)
    if opcode == "partition_by":
        return PartitionByOperator(spec)
    if opcode == "sink":
        return SinkOperator(spec)
    if opcode == "send_to":
        return SendToTableOperator(spec) if spec.table is not None else SendToOperator(spec)
    if opcode == "window":
        return WindowOperator(spec)
    if opcode == "join":
        return StreamTableJoinOperator(spec) if spec.table is not None else StreamStreamJoinOperator(spec)
    raise ValueError(f"unknown opcode {opcode!r} of operator {spec.op_id!r}")


def _input_of(child: OperatorImpl, child_spec: OperatorSpec, parent: OperatorSpec) -> OperatorImpl:
    """What ``parent``'s messages go to in ``child``: a stream-stream join takes them through the
    side ``parent`` is on (Samza's PartialJoinOperatorImpl), any other operator itself."""
    if isinstance(child, StreamStreamJoinOperator):
        return child.left if child_spec.parents[0] is parent else child.right
    return child


def check_plan(plan: ApplicationPlan) -> None:
    """What the graph runner cannot run, as a config error naming the operator."""
    for spec in plan.graph.operators:
        if spec.opcode != "window":
            continue
        stack = list(spec.children)
        while stack:
            op = stack.pop()
            if op.is_async:
                raise ConfigError(
                    "app.class",
                    f"{op.opcode} operator {op.op_id!r} is an async def after window {spec.op_id!r}: panes are "
                    "emitted on the window timer, which cannot await; use a plain function there",
                )
            stack.extend(op.children)


class _Context:
    """The ``impl.GraphContext`` of one task."""

    def __init__(self, task: TaskContext, plan: ApplicationPlan, metrics: MetricsRegistry) -> None:
        self.task_name = task.task_name
        self._task = task
        self._plan = plan
        self.metrics = metrics
        self.collector: Any = None  # the current call's (process, window, end of stream)
        self.coordinator: Any = None

    def store(self, name: str) -> Any:
        return self._task.get_store(name)

    def stream(self, stream_id: str) -> SystemStream:
        return self._plan.streams[stream_id]

    def now_ms(self) -> int:
        return int(time.time() * 1000)

    def flush(self, before: str) -> None:
        """Every message the task sent so far acknowledged (or failed: the commit judges those),
        ``before`` its control message of that kind goes out."""
        flush: Callable[[float], int] | None = getattr(self.collector, "flush", None)
        if flush is not None:
            unacked = flush(FLUSH_TIMEOUT_S)
            if unacked:
                raise SystemFailureError(
                    f"task {self.task_name!r}: {unacked} messages were not acknowledged within {FLUSH_TIMEOUT_S:.0f} s "
                    f"before its {before} message to an intermediate stream; it cannot be sent after them"
                )


class OperatorGraph:
    """The operators of one task and the rules of the module docstring."""

    def __init__(self, plan: ApplicationPlan) -> None:
        self.plan = plan
        self.ops: list[OperatorImpl] = []
        # By spec: an intermediate stream's input has the op id of its partition_by (Samza's stream id).
        impl_of: dict[int, OperatorImpl] = {}
        for spec in plan.graph.operators:
            op = impl_of[id(spec)] = _make(spec)
            self.ops.append(op)
        self.parents: dict[OperatorImpl, list[OperatorImpl]] = {}
        for spec in plan.graph.operators:
            op = impl_of[id(spec)]
            op.children = [_input_of(impl_of[id(c)], c, spec) for c in spec.children]
            self.parents[op] = [impl_of[id(p)] for p in spec.parents]
            if isinstance(op, StreamStreamJoinOperator):  # its sides give what it gives
                op.left.children = op.right.children = op.children
        self._inputs: dict[SystemStream, InputOperator] = {}
        self._keyed: set[SystemStream] = set()
        self._metrics: dict[OperatorImpl, tuple[Counter, Timer]] = {}
        self._timed = [op for op in self.ops if type(op).on_timer is not OperatorImpl.on_timer]
        self._voted = False
        self._deferred = False  # ends found at init, propagated at the first call with a collector
        self._drain_requested = False  # the container said the task's sources drained (on_drain)
        self._drain_voted = False
        self._sources_ended = False
        # The task's own drain (end-of-stream) messages went out before a restart: its checkpoint,
        # written after they were acknowledged, said its sources drained (ended). Not sent again.
        self._drain_sent = self._eos_sent = False
        self.run_id = ""

    # -- set-up ---------------------------------------------------------------------------------
    def init(self, context: TaskContext) -> None:
        metrics = context.registry if context.registry is not None else MetricsRegistry()
        ctx = self.ctx = _Context(context, self.plan, metrics)
        plan = self.plan
        for op in self.ops:
            if isinstance(op, InputOperator):
                assert op.spec.stream is not None
                ss = plan.streams[op.spec.stream]
                self._inputs[ss] = op
                if op.spec.keyed:
                    self._keyed.add(ss)
            counted = (
                metrics.counter(METRICS_GROUP, f"{op.op_id}-messages"),
                metrics.timer(METRICS_GROUP, f"{op.op_id}-handle-message-ns"),
            )
            self._metrics[op] = counted
            if isinstance(op, StreamStreamJoinOperator):
                self._metrics[op.left] = self._metrics[op.right] = counted
            op.init(ctx)
        self._timer_ns = {op: metrics.timer(METRICS_GROUP, f"{op.op_id}-handle-timer-ns") for op in self._timed}
        self._pushes: dict[OperatorImpl, Push] = {}
        for op in self.ops:
            self._compile(op)
        self._input_push = {ss: self._pushes[op] for ss, op in self._inputs.items()}
        model = context.task_model
        streams = model.intermediate if model is not None else {}
        ssps = context.ssps
        mine = {ssp.system_stream for ssp in ssps}
        # Each intermediate stream as the job model sees it: its partitions and its producers.
        known = {ss: streams.get(f"{ss.system}.{ss.stream}") for ss in plan.intermediate}
        facts = {ss: f for ss, f in known.items() if f is not None}
        self._partitions = {ss: f.partitions for ss, f in facts.items()}
        expected = {ss: f.producers for ss, f in facts.items()}
        intermediate_ssps = [s for s in ssps if s.system_stream in plan.intermediate]
        self.end_of_stream = EndOfStreamStates(intermediate_ssps, expected)
        # The run the task runs in; what its last checkpoint counted, if that was in this run.
        self.run_id = model.run_id if model is not None else ""
        self.drains = DrainStates(intermediate_ssps, expected, self.run_id)
        self.watermarks = WatermarkStates(intermediate_ssps, expected)
        control = model.control if model is not None else None
        if control is not None and control.run_id == self.run_id:
            self.drains.restore(control.drain)
            self.end_of_stream.restore(control.end_of_stream)
            self._drain_sent = control.sources_drained
            self._eos_sent = control.sources_ended
        group = f"TaskName-{context.task_name}"
        self._m_drains = metrics.counter(group, "drain-messages-received")
        self._m_eos = metrics.counter(group, "eos-messages-received")
        self._m_foreign = metrics.counter(group, "foreign-drain-messages")
        # The intermediate streams this task sends its control messages to: those fed by a stream it reads.
        self._produces = {ss for ss, feeds in plan.feeds.items() if feeds & mine}
        for ss, op in self._inputs.items():
            if ss not in mine:  # no partition of it here: it never gives this task a message
                op.ended = True
                op.drained = ss in plan.intermediate  # a source's drain comes with the others'
                op.watermark = MAX_WATERMARK  # nor holds any watermark back
                self._deferred = True
            elif ss in plan.intermediate:  # restored: drained or ended before a restart
                op.drained = self.drains.stream_done(ss)
                if self.end_of_stream.stream_done(ss):
                    op.ended = self._deferred = True

    # -- messages -------------------------------------------------------------------------------
    def _arrive(
        self, envelope: IncomingMessageEnvelope, collector: MessageCollector, coordinator: TaskCoordinator
    ) -> tuple[SystemStream, Any] | None:
        """A message reaches the task: its input stream and what its input operator takes (a ``KV``
        on a keyed stream), or None when it was a control message, counted here."""
        ctx = self.ctx
        ctx.collector = collector
        ctx.coordinator = coordinator
        if self._deferred:
            self._propagate()
        ssp = envelope.system_stream_partition
        message = envelope.message
        if isinstance(message, ControlMessage):
            self._on_control(ssp, message)
            return None
        ss = ssp.system_stream
        return ss, (KV(envelope.key, message) if ss in self._keyed else message)

    def process(
        self, envelope: IncomingMessageEnvelope, collector: MessageCollector, coordinator: TaskCoordinator
    ) -> None:
        arrived = self._arrive(envelope, collector, coordinator)
        if arrived is not None:
            ss, message = arrived
            self._input_push[ss](message)

    async def process_async(
        self, envelope: IncomingMessageEnvelope, collector: MessageCollector, coordinator: TaskCoordinator
    ) -> None:
        arrived = self._arrive(envelope, collector, coordinator)
        if arrived is not None:
            ss, message = arrived
            await self._push_async(self._inputs[ss], message, collector, coordinator)

    def _compile(self, op: OperatorImpl) -> Push:
        """``op``'s push: process a message, count it, time one in ``TIMED_EVERY``, and push what it
        gives to each downstream operator. A closure per operator, built once: the per-message path
        looks nothing up (timing each call would double the cost of a light operator)."""
        built = self._pushes.get(op)
        if built is not None:
            return built
        children = tuple(self._compile(c) for c in op.children)
        counter, timer = self._metrics[op]
        process = op.process
        clock = time.perf_counter_ns
        mask = TIMED_EVERY - 1

        def push(message: Any) -> None:
            n = counter.count = counter.count + 1
            if n & mask:
                outs = process(message)
            else:
                started = clock()
                outs = process(message)
                ns = clock() - started
                timer.count += 1
                timer.total_ns += ns
                if ns > timer.max_ns:
                    timer.max_ns = ns
            if outs is NOTHING:
                return
            for out in outs:
                for child in children:
                    child(out)

        self._pushes[op] = push
        return push

    async def _push_async(
        self, op: OperatorImpl, message: Any, collector: MessageCollector, coordinator: TaskCoordinator
    ) -> None:
        """``_compile``'s push for a graph on the loop, where up to task.max.concurrency messages are
        in flight at once: each operator sees the collector and coordinator of its own message."""
        counter, timer = self._metrics[op]
        counter.count += 1
        ctx = self.ctx
        started = time.perf_counter_ns()
        if op.is_async:
            outs = await op.process_async(message)
        else:
            ctx.collector = collector  # set just before the call: nothing runs in between
            ctx.coordinator = coordinator
            outs = op.process(message)
        ns = time.perf_counter_ns() - started
        timer.count += 1
        timer.total_ns += ns
        if ns > timer.max_ns:
            timer.max_ns = ns
        if outs is NOTHING:
            return
        children = op.children
        for out in outs:
            for child in children:
                await self._push_async(child, out, collector, coordinator)

    def _emit(self, op: OperatorImpl, outs: Iterable[Any]) -> None:
        """What ``op`` gave outside a message (timer, end of stream), to its downstream operators."""
        pushes = [self._pushes[child] for child in op.children]
        for out in outs:
            for push in pushes:
                push(out)

    # -- timer ----------------------------------------------------------------------------------
    def window(self, collector: MessageCollector, coordinator: TaskCoordinator) -> None:
        ctx = self.ctx
        ctx.collector = collector
        ctx.coordinator = coordinator
        if self._deferred:
            self._propagate()
        now = ctx.now_ms()
        for op in self._timed:
            started = time.perf_counter_ns()
            outs = op.on_timer(now)
            self._emit(op, outs)
            timer = self._timer_ns[op]
            ns = time.perf_counter_ns() - started
            timer.count += 1
            timer.total_ns += ns
            timer.max_ns = max(timer.max_ns, ns)

    # -- end of stream --------------------------------------------------------------------------
    def sources_ended(self, collector: MessageCollector, coordinator: TaskCoordinator) -> None:
        """Every source SSP of the task ended (the container's on_end_of_stream)."""
        ctx = self.ctx
        ctx.collector = collector
        ctx.coordinator = coordinator
        self._sources_ended = True
        for ss, op in self._inputs.items():
            if ss not in self.plan.intermediate:
                op.ended = True
        self._propagate()

    def sources_drained(self, collector: MessageCollector, coordinator: TaskCoordinator) -> None:
        """Every source SSP of the task passed its drain marker (the container's on_drain)."""
        ctx = self.ctx
        ctx.collector = collector
        ctx.coordinator = coordinator
        self._drain_requested = True
        sources = [op for ss, op in self._inputs.items() if ss not in self.plan.intermediate]
        for op in sources:
            op.watermark = MAX_WATERMARK  # the end of time, ahead of the drain (Samza's order)
        self._propagate_watermark()
        for op in sources:
            op.drained = True
        self._propagate_drain()

    def control_state(self) -> ControlState | None:
        """What the task counted of its run's drain and end-of-stream messages (for its checkpoint)."""
        if not self.run_id:
            return None
        return ControlState(
            self.run_id,
            sources_drained=self._drain_requested or self._drain_sent,
            sources_ended=self._sources_ended or self._eos_sent,
            drain=self.drains.snapshot(),
            end_of_stream=self.end_of_stream.snapshot(),
        )

    def _on_control(self, ssp: SystemStreamPartition, message: ControlMessage) -> None:
        if isinstance(message, DrainMessage):
            self._on_drain_message(ssp, message)
            return
        if isinstance(message, WatermarkMessage):
            self._on_watermark(ssp, message)
            return
        if not isinstance(message, EndOfStreamMessage):
            return
        self._m_eos.count += 1
        states = self.end_of_stream
        # The aggregate partition heard from every producer: the other partitions learn it, from
        # the one virtual task of it that owns key bucket 0 (each of them counted the same names).
        if states.update(ssp, message.task_name) and ssp.key_bucket <= 0:
            for p in range(self._partitions[ssp.system_stream]):
                if p != ssp.partition:
                    self._send_control(ssp.system_stream, EndOfStreamMessage(None), p)
        ss = ssp.system_stream
        if states.stream_done(ss) and not self._inputs[ss].ended:
            self._inputs[ss].ended = True
            self._propagate()

    def _on_drain_message(self, ssp: SystemStreamPartition, message: DrainMessage) -> None:
        states = self.drains
        self._m_drains.count += 1
        if message.run_id != states.run_id:  # left by an earlier run's drain: skipped
            states.update_drain(ssp, message.task_name, message.run_id)
            self._m_foreign.count += 1
            return
        # The aggregate partition heard from every producer: the other partitions learn it, from
        # the one virtual task of it that owns key bucket 0 (each of them counted the same names).
        if states.update_drain(ssp, message.task_name, message.run_id) and ssp.key_bucket <= 0:
            for p in range(self._partitions[ssp.system_stream]):
                if p != ssp.partition:
                    self._send_control(ssp.system_stream, DrainMessage(None, message.run_id), p)
        ss = ssp.system_stream
        op = self._inputs[ss]
        if states.stream_done(ss) and not op.drained:
            op.drained = True
            self._propagate_drain()

    def _on_watermark(self, ssp: SystemStreamPartition, message: WatermarkMessage) -> None:
        states = self.watermarks
        # The aggregate partition's watermark moved (every producer reported): the other partitions
        # learn it, from the one virtual task of it that owns key bucket 0.
        if states.update(ssp, message.task_name, message.timestamp) and ssp.key_bucket <= 0:
            mark = states.watermark(ssp)
            copy = WatermarkMessage(None, message.timestamp if mark is None else mark)
            for p in range(self._partitions[ssp.system_stream]):
                if p != ssp.partition:
                    self._send_control(ssp.system_stream, copy, p)
        ss = ssp.system_stream
        mark = states.stream_watermark(ss)
        op = self._inputs[ss]
        if mark is not None and (op.watermark is None or mark > op.watermark):
            op.watermark = mark
            self._propagate_watermark()

    def _propagate_watermark(self) -> None:
        """Move each operator's watermark to the least of its inputs', in graph order; a
        ``partition_by`` whose watermark moved sends it on."""
        for op in self.ops:
            if isinstance(op, InputOperator):
                continue
            marks = [p.watermark for p in self.parents[op]]
            if any(m is None for m in marks):
                continue
            mark = min(m for m in marks if m is not None)
            if op.watermark is not None and mark <= op.watermark:
                continue
            op.watermark = mark
            if isinstance(op, PartitionByOperator) and op.stream in self._produces:
                if mark == MAX_WATERMARK and self._drain_sent:
                    continue  # sent with the drain before a restart
                self._send_named(op.stream, WatermarkMessage(self.ctx.task_name, mark), "watermark")

    def _send_control(self, ss: SystemStream, message: ControlMessage, partition: int) -> None:
        self.ctx.collector.send(OutgoingMessageEnvelope(ss, message, partition=partition))

    def _send_named(self, ss: SystemStream, message: ControlMessage, kind: str) -> None:
        """The task's own control message to ``ss``'s aggregate partition, after every record it sent
        before is acknowledged: none can land after the message in any partition (R-A11)."""
        self.ctx.flush(kind)
        self._send_control(ss, message, aggregate_partition(ss.stream, self._partitions[ss]))

    def _propagate_drain(self) -> None:
        """Drain each operator whose inputs all drained, in graph order; once all did (and the
        container drained the task's sources), ask to commit and shut down: the task drained."""
        for op in self.ops:
            if op.drained or isinstance(op, InputOperator):
                continue
            if all(p.drained for p in self.parents[op]):
                op.drained = True
                self._emit(op, op.on_drain())
                if isinstance(op, PartitionByOperator) and op.stream in self._produces and not self._drain_sent:
                    self._send_named(op.stream, DrainMessage(self.ctx.task_name, self.run_id), "drain")
        if self._drain_requested and not self._drain_voted and all(op.drained for op in self.ops):
            self._drain_voted = True
            self.ctx.coordinator.commit()
            self.ctx.coordinator.shutdown()

    def _propagate(self) -> None:
        """End each operator whose inputs all ended, in graph order; vote once all ended."""
        self._deferred = False
        for op in self.ops:
            if op.ended or isinstance(op, InputOperator):
                continue
            if all(p.ended for p in self.parents[op]):
                op.ended = True
                self._emit(op, op.on_end_of_stream())
                if isinstance(op, PartitionByOperator) and op.stream in self._produces and not self._eos_sent:
                    self._send_named(op.stream, EndOfStreamMessage(self.ctx.task_name), "end-of-stream")
        if not self._voted and all(op.ended for op in self.ops):
            self._voted = True
            self.ctx.coordinator.commit()
            self.ctx.coordinator.shutdown()

    def before_commit(self) -> None:
        """The task commits: each operator's state held in memory goes to its store first, so the
        checkpoint covers every message processed before it."""
        for op in self.ops:
            op.flush()

    def close(self) -> None:
        for op in self.ops:
            op.close()
