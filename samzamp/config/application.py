"""Planning an application (app.class): run its ``describe`` and derive the job's config from the
graph, as Samza's execution planner does.

The graph adds what a low-level job would spell out, each only where the config does not already
say it (the user's keys win, except ``task.inputs``, which must then name the same streams):

- ``task.inputs``: the application's input streams and its intermediate streams;
- per intermediate stream (``partition_by``, stream id = op id): ``streams.<op id>.samza.system``
  (job.default.system), ``.samza.intermediate = true``, its key and message serdes, and
  ``.partitions`` from ``job.intermediate.stream.partitions`` when set (else the largest input
  partition count, decided when the topic is created);
- per window (``stores.<op id>``), stream-stream join (``stores.<op id>-L`` and ``-R``) and table:
  an LMDB store with JSON serdes, changelogged to a topic of the store's name on
  job.changelog.system (else the default system) when that system holds changelogs;
- input and output serdes named in ``describe``; ``task.window.ms`` (unset) as Samza derives it:
  the greatest common divisor of the windows' intervals and gaps and the joins' TTLs.
"""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass
from typing import Any

from samzamp.api.application import StreamApplication, StreamApplicationDescriptor
from samzamp.api.envelope import SystemStream
from samzamp.api.errors import ConfigError
from samzamp.api.operators import OperatorSpec
from samzamp.config.config import Config
from samzamp.config.system_kinds import system_kind
from samzamp.serde.registry import load_object

__all__ = ["ApplicationPlan", "JoinSides", "load_application", "plan_application"]


@dataclass(frozen=True)
class JoinSides:
    """A stream-stream join and the streams each side reads from (their partition counts must match)."""

    op_id: str
    left: frozenset[SystemStream]
    right: frozenset[SystemStream]


@dataclass(frozen=True)
class ApplicationPlan:
    """An application's graph and what the job derives from it."""

    app_class: str
    graph: StreamApplicationDescriptor
    digest: str
    streams: dict[str, SystemStream]  # every input, intermediate and output stream id -> its stream
    intermediate: frozenset[SystemStream]
    # Each intermediate stream -> the streams whose messages reach its partition_by inside a task:
    # a task reading any of them sends to it (and its end of stream).
    feeds: dict[SystemStream, frozenset[SystemStream]]
    joins: tuple[JoinSides, ...]
    derived: frozenset[str] = frozenset()  # the keys the plan added to the user's config

    def is_async(self) -> bool:
        """Some operator runs an ``async def``: the graph runs on the container's loop."""
        return any(op.is_async for op in self.graph.operators)


def load_application(path: str) -> type[StreamApplication]:
    """Import app.class and check it is a ``StreamApplication`` that implements ``describe``."""
    cls = load_object(path, "app.class")
    if not inspect.isclass(cls) or not issubclass(cls, StreamApplication):
        raise ConfigError("app.class", f"{path!r} must be a class that subclasses samzamp.StreamApplication")
    if inspect.isabstract(cls):
        raise ConfigError("app.class", f"{path!r} does not implement describe(self, app)")
    return cls


def describe(path: str, job_name: str, job_id: str) -> StreamApplicationDescriptor:
    """Run app.class's ``describe``: the graph it builds. A failure is a ConfigError naming app.class."""
    cls = load_application(path)
    graph = StreamApplicationDescriptor(job_name, job_id)
    try:
        cls().describe(graph)
    except ConfigError:
        raise
    except Exception as e:
        raise ConfigError("app.class", f"{path}.describe failed: {type(e).__name__}: {e}") from e
    if not graph.inputs:
        raise ConfigError("app.class", f"{path}.describe declared no input stream (app.input_stream)")
    return graph


def _resolve(config: Config, stream_id: str, default_system: str | None) -> SystemStream:
    system = config.get_str(f"streams.{stream_id}.samza.system") or default_system
    if system is None:
        raise ConfigError(f"streams.{stream_id}.samza.system", "names no system: set it, or set job.default.system")
    return SystemStream(system, config.get_str(f"streams.{stream_id}.samza.physical.name") or stream_id)


def _sources(op: OperatorSpec) -> frozenset[str]:
    """The stream ids of the input operators whose messages reach ``op`` (within a task)."""
    seen: set[str] = set()
    stack = [op]
    out: set[str] = set()
    while stack:
        o = stack.pop()
        if o.op_id in seen:
            continue
        seen.add(o.op_id)
        if o.opcode == "input":
            assert o.stream is not None
            out.add(o.stream)
        stack.extend(o.parents)
    return frozenset(out)


def plan_application(
    config: Config, job_name: str, job_id: str, default_system: str | None
) -> tuple[Config, ApplicationPlan]:
    """The config with what the graph of app.class derives, and the plan (see the module docstring)."""
    path = config.require_str("app.class", "the application class as module:Class")
    if config.get_str("task.class"):
        raise ConfigError(
            "app.class",
            "and task.class are both set: a job is an application (app.class) or a task (task.class); keep one",
        )
    graph = describe(path, job_name, job_id)
    derived: dict[str, Any] = {}

    def default(key: str, value: Any) -> None:
        if key not in config:
            derived[key] = value

    def serdes(sid: str, key_serde: str | None, msg_serde: str | None) -> None:
        """The serdes ``describe`` named for stream ``sid`` (None: the config's, or the system's)."""
        if key_serde is not None:
            default(f"streams.{sid}.samza.key.serde", key_serde)
        if msg_serde is not None:
            default(f"streams.{sid}.samza.msg.serde", msg_serde)

    streams: dict[str, SystemStream] = {}
    for sid, op in graph.inputs.items():
        streams[sid] = _resolve(config, sid, default_system)
        serdes(sid, op.key_serde, op.msg_serde)
    intermediate: set[SystemStream] = set()
    for sid, op in graph.intermediates.items():
        if default_system is None and not config.get_str(f"streams.{sid}.samza.system"):
            raise ConfigError("job.default.system", f"is required: intermediate stream {sid!r} is created on it")
        default(f"streams.{sid}.samza.system", default_system)
        derived[f"streams.{sid}.samza.intermediate"] = True
        serdes(sid, op.key_serde, op.msg_serde)
        partitions = config.get_int("job.intermediate.stream.partitions", 0)
        if partitions > 0:
            default(f"streams.{sid}.partitions", partitions)
        ss = streams[sid] = _resolve(Config({**config, **derived}), sid, default_system)
        intermediate.add(ss)
    for sid, out in graph.outputs.items():
        streams[sid] = _resolve(config, sid, default_system)
        serdes(sid, out.key_serde, out.msg_serde)

    # Operator state is changelogged where the changelog system can hold one (a job all in memory,
    # as TestRunner runs it, keeps it in its local stores only).
    changelog_system = config.get_str("job.changelog.system") or default_system
    kind = system_kind(config.get_str(f"systems.{changelog_system}.samza.factory") or "")
    changelogged = kind is not None and kind.changelogs

    def add_store(name: str, key_serde: str, msg_serde: str) -> None:
        default(f"stores.{name}.factory", "lmdb")
        default(f"stores.{name}.key.serde", key_serde)
        default(f"stores.{name}.msg.serde", msg_serde)
        if changelogged:
            default(f"stores.{name}.changelog", name)

    durations: list[int] = []
    joins: list[JoinSides] = []
    feeds: dict[SystemStream, frozenset[SystemStream]] = {}
    for op in graph.operators:
        stores: list[tuple[str, str, str]] = []
        if op.opcode == "window":
            assert op.window is not None
            durations.append(op.window.duration_ms)
            stores.append((op.op_id, "json", "json"))
        elif op.opcode == "join" and op.table is None:
            durations.append(op.ttl_ms)
            stores += [(f"{op.op_id}-L", "json", "json"), (f"{op.op_id}-R", "json", "json")]
            left, right = op.parents
            joins.append(
                JoinSides(
                    op.op_id,
                    frozenset(streams[s] for s in _sources(left)),
                    frozenset(streams[s] for s in _sources(right)),
                )
            )
        elif op.opcode == "partition_by":
            assert op.stream is not None
            feeds[streams[op.stream]] = frozenset(streams[s] for s in _sources(op))
        for name, key_serde, msg_serde in stores:
            add_store(name, key_serde, msg_serde)
    for table in graph.tables.values():
        add_store(table.store, table.key_serde, table.msg_serde)
    if durations:
        default("task.window.ms", math.gcd(*durations))

    inputs = [streams[s] for s in graph.inputs] + sorted(intermediate)
    listed = [f"{ss.system}.{ss.stream}" for ss in inputs]
    given = config.get_list("task.inputs")
    if given:
        named = {i if "." in i else f"{default_system}.{i}" for i in given}
        if named != set(listed):
            raise ConfigError(
                "task.inputs",
                f"names {sorted(named)}, but app.class {path!r} reads {sorted(listed)}; remove task.inputs "
                "(an application's inputs come from its graph)",
            )
    derived["task.inputs"] = listed
    plan = ApplicationPlan(
        app_class=path,
        graph=graph,
        digest=graph.digest(),
        streams=streams,
        intermediate=frozenset(intermediate),
        feeds=feeds,
        joins=tuple(joins),
        derived=frozenset(derived),
    )
    return Config({**config, **derived}), plan
