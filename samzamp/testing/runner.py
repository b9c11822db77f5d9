"""``TestRunner``: the real container and run loop over in-memory systems, with bounded inputs.

    result = (
        TestRunner(WordCount, {"task.window.ms": 10})
        .add_input("words", ["a", "b", "a"])
        .run()
    )
    result.messages("counts")   # what the task sent to "counts", decoded: [2, 1]
    result.store("counts")      # a store's committed contents, decoded (when the task has one)
    result.task_metrics("Partition 0")  # a task's metrics: its own (context.metrics) and samzamp's

What it promises (closer to Kafka Streams' TopologyTestDriver than to a mock):

- The task runs in the real ``StreamProcessor``, ``SamzaContainer`` and ``RunLoop`` of this process (every task inline,
  whatever job.container.thread.pool.size says), so ordering, windows, commits and errors are the
  container's.
- Every system the config names (``TestRunner.from_config("job.toml")`` reads a job's file) becomes
  an in-memory system of the same name, keeping its serdes; its Kafka client settings are dropped.
  The runner's own system is ``system_alias``, else job.default.system, else the config's only
  system, else ``TestRunner.SYSTEM`` (``test``); when the config does not describe it, it gets
  msgpack keys and messages, so tests use plain Python values. An input goes to the system
  task.inputs names it on, else to the runner's own. A send to a system the config does not name
  goes to the runner's own system (same stream name), so a task that sends to
  ``SystemStream("kafka", ...)`` runs as it is (the container itself rejects such a send).
- Inputs are bounded: each partition ends after its messages, and the job stops by itself once
  every task reached the end of its inputs. task.window.on.end.of.stream defaults to true here: a
  windowable task gets one last window() at the end of its input, then on_end_of_stream().
  Windows also fire on task.window.ms, by the wall clock, as in production.
- Every input starts at its oldest message. Inputs named in task.inputs that the test gives no
  messages are empty.
- Stores live in a temporary directory that the result owns (unless the config sets
  job.logged.store.base.dir / job.non-logged.store.base.dir), and the run ends with the container's
  final commit, so ``result.store(name)`` reads what the task committed. Changelogs are dropped
  (stores.<name>.changelog is ignored): changelogs and restore need Kafka, so test them against a
  broker (the embedded one will do).
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import tempfile
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from samzamp.api.envelope import SystemStream
from samzamp.api.serde import Serde
from samzamp.config import JobSettings, load_config, validate
from samzamp.config.config import Config
from samzamp.config.stream_serdes import StreamSerdes
from samzamp.processor.stream_processor import StreamProcessor
from samzamp.serde.registry import SerdeRegistry
from samzamp.storage.dirs import store_dir
from samzamp.storage.lmdb import LmdbEngine
from samzamp.systems.inmemory.system import InMemoryStreams
from samzamp.systems.partitioner import murmur2_partition

__all__ = ["Record", "TestResult", "TestRunner"]

log = logging.getLogger(__name__)

_CLIENT_KEYS = (".bootstrap.servers", ".consumer.", ".producer.")


@dataclass(frozen=True)
class Record:
    """One input message with its key and timestamp (ms since the epoch; None: when it was added)."""

    message: Any
    key: Any = None
    timestamp: int | None = None


class TestResult:
    """What a TestRunner run produced: the outputs, the stores' committed contents, the metrics."""

    __test__ = False  # not a pytest test class

    def __init__(
        self,
        streams: dict[str, InMemoryStreams],
        own_system: str,
        processor: StreamProcessor,
        state_dir: str,
    ) -> None:
        self._streams = streams
        self._own = own_system
        self.processor = processor  # the run's processor, stopped: its systems and metrics
        self.settings: JobSettings = processor.settings
        self.metrics = processor.metrics.snapshot()
        self._task_names = sorted(processor.container.tasks) if processor.container is not None else []
        self._serdes = SerdeRegistry(self.settings.serializers)
        self._stream_serdes_of = StreamSerdes(self.settings)
        # The stores' directory lives as long as this result: removed by ``close`` or when the
        # result is garbage-collected (or at exit).
        self._cleanup = weakref.finalize(self, shutil.rmtree, state_dir, ignore_errors=True)

    @property
    def tasks(self) -> list[str]:
        """The names of the run's tasks (``"Partition 0"``, ...), sorted."""
        return list(self._task_names)

    def task_metrics(self, task: str | None = None) -> dict[str, Any]:
        """The metrics of task ``task`` at the end of the run, by name: its own
        (``context.metrics``) and samzamp's of it (``process-calls``, ``send-calls``, ...), as the
        container's registry holds them (a timer as ``{"avg": ns, "count": n, "max": ns}``). None:
        the only task's (a KeyError names the tasks when there are several)."""
        if task is None:
            if len(self._task_names) != 1:
                raise KeyError(f"the run had tasks {self._task_names}: pass task=")
            task = self._task_names[0]
        if task not in self._task_names:
            raise KeyError(f"no task {task!r} ran (tasks: {self._task_names})")
        return dict(self.metrics.get(f"TaskName-{task}", {}))

    def close(self) -> None:
        """Remove the temporary directory of the stores now (``store`` cannot be read after)."""
        self._cleanup()

    def __enter__(self) -> TestResult:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _system_of(self, stream: str, system: str | None) -> str | None:
        """The system holding ``stream`` (None: none has it, nothing was sent there)."""
        found = sorted(s for s, streams in self._streams.items() if stream in streams.partitions)
        if system is not None:
            return system if system in found else None
        if len(found) > 1:
            if self._own in found:
                return self._own
            raise KeyError(f"stream {stream!r} exists in systems {found}: pass system=")
        return found[0] if found else None

    def _stream_serdes(self, ss: SystemStream) -> tuple[Serde | None, Serde | None]:
        return self._stream_serdes_of(ss)

    def records(self, stream: str, system: str | None = None) -> list[list[tuple[Any, Any]]]:
        """(key, message) pairs per partition of ``stream``, decoded with the stream's serdes; [] if
        nothing was sent there. ``system``: needed only when several systems have a stream of that
        name (else the runner's own system's)."""
        name = self._system_of(stream, system)
        if name is None:
            return []
        key_serde, msg_serde = self._stream_serdes(SystemStream(name, stream))
        return [
            [
                (
                    k if k is None or key_serde is None else key_serde.from_bytes(k),
                    v if v is None or msg_serde is None else msg_serde.from_bytes(v),
                )
                for _o, k, v, _t in part
            ]
            for part in self._streams[name].partitions[stream]
        ]

    def messages(self, stream: str, system: str | None = None) -> list[Any]:
        """Every message sent to ``stream``, partition by partition, each in the order sent."""
        return [m for part in self.records(stream, system) for _k, m in part]

    def store(self, name: str, task: str | None = None) -> dict[Any, Any]:
        """The committed contents of store ``name``, decoded with its serdes: of one task (its name,
        e.g. ``"Partition 0"``), or of every task merged (a key in two tasks' stores is an error)."""
        st = self.settings.stores.get(name)
        if st is None:
            raise KeyError(f"no store {name!r} is configured (stores.{name}.factory)")
        key_serde = self._serdes.get(st.key_serde, f"stores.{name}.key.serde")
        msg_serde = self._serdes.get(st.msg_serde, f"stores.{name}.msg.serde")
        base = Path(self.settings.logged_store_base_dir if st.changelog else self.settings.non_logged_store_base_dir)
        names = self._task_names
        tasks = [task] if task is not None else names
        out: dict[Any, Any] = {}
        owner: dict[Any, str] = {}
        for t in tasks:
            path = store_dir(base, name, t)
            if not (path / "data.mdb").exists():
                if task is not None:
                    raise KeyError(f"task {task!r} has no store {name!r} (tasks: {names})")
                continue
            engine = LmdbEngine(path, st.map_size, sync=False, checksums=st.checksums)
            try:
                for kb, vb in engine.items():
                    key = key_serde.from_bytes(kb)
                    if key in owner:
                        raise ValueError(
                            f"store {name!r}: key {key!r} is in the stores of tasks {owner[key]!r} and {t!r}; "
                            "pass task= to read one task's store"
                        )
                    owner[key] = t
                    out[key] = msg_serde.from_bytes(vb)
            finally:
                engine.close()
        return out


class TestRunner:
    """Runs one task class on in-memory inputs in this process and returns its outputs (see the
    module docstring for what a run promises). Add inputs, then ``run()``; a runner may run again."""

    __test__ = False
    SYSTEM = "test"

    def __init__(
        self,
        task_class: type | str | None = None,
        config: Mapping[str, Any] | None = None,
        system_alias: str | None = None,
    ) -> None:
        """``task_class``: the task (or None when the config names task.class); ``config``: the job's
        keys (dotted, as after TOML flattening); ``system_alias``: the runner's own system's name."""
        self._config: dict[str, Any] = dict(config or {})
        if task_class is not None:
            self._config["task.class"] = (
                task_class if isinstance(task_class, str) else f"{task_class.__module__}:{task_class.__qualname__}"
            )
        configured = _system_names(self._config)
        default = self._config.get("job.default.system")
        self._system: str = system_alias or (
            default if isinstance(default, str) else (configured[0] if len(configured) == 1 else self.SYSTEM)
        )
        # Per input: records per partition, or records and a partition count (spread at run()).
        self._inputs: dict[SystemStream, list[list[Record]] | tuple[list[Record], int]] = {}
        self._streams: dict[str, InMemoryStreams] = {}  # of the latest run

    @classmethod
    def from_app(cls, app_class: type | str, config: Mapping[str, Any] | None = None) -> TestRunner:
        """A runner for the application ``app_class`` (a ``StreamApplication``): its input streams
        are given with ``add_input``; its intermediate streams run in memory, and the run ends when
        end of stream has gone through the whole graph."""
        path = app_class if isinstance(app_class, str) else f"{app_class.__module__}:{app_class.__qualname__}"
        return cls(None, {**(config or {}), "app.class": path})

    @classmethod
    def from_config(
        cls, path: str | Path, overrides: Mapping[str, Any] | None = None, task_class: type | str | None = None
    ) -> TestRunner:
        """A runner for the job in TOML file ``path`` (with ``overrides``), its systems made in-memory."""
        return cls(task_class, dict(load_config(path, overrides).items()))

    # -- inputs ---------------------------------------------------------------------------------
    def _input(self, stream: str) -> SystemStream:
        """The input of that stream name: the system task.inputs gives it, else the runner's own."""
        for ss in _configured_inputs(self._config, self._system):
            if ss.stream == stream:
                return ss
        return SystemStream(self._system, stream)

    def add_input(
        self,
        stream: str,
        messages: Sequence[Any],
        partitions: int = 1,
        keys: Sequence[Any] | None = None,
        timestamps: Sequence[int] | None = None,
    ) -> TestRunner:
        """Messages for ``stream`` over ``partitions``: a message with a key goes to the partition its
        serialized key hashes to (as the in-memory producer sends it), one without goes round-robin.
        A message may be a ``Record``; else ``keys`` / ``timestamps`` (ms since the epoch) pair one
        with each message."""
        for what, given in (("keys", keys), ("timestamps", timestamps)):
            if given is not None and len(given) != len(messages):
                raise ValueError(f"input {stream!r}: {len(given)} {what} for {len(messages)} messages")
        records = []
        for i, m in enumerate(messages):
            r = m if isinstance(m, Record) else Record(m)
            records.append(
                Record(
                    r.message,
                    keys[i] if keys is not None else r.key,
                    timestamps[i] if timestamps is not None else r.timestamp,
                )
            )
        self._inputs[self._input(stream)] = (records, partitions)
        return self

    def add_partitioned_input(self, stream: str, partitions: Sequence[Sequence[Any]]) -> TestRunner:
        """Messages for ``stream``, one list per partition; an item may be a ``Record`` (key, timestamp)."""
        self._inputs[self._input(stream)] = [[m if isinstance(m, Record) else Record(m) for m in p] for p in partitions]
        return self

    # -- config ---------------------------------------------------------------------------------
    def _job_config(self, state_dir: str) -> dict[str, Any]:
        """The job's config with every system in-memory (without its client settings), the runner's
        own system added, changelogs dropped, stores under ``state_dir`` unless the config places
        them, inputs from their oldest message, every task inline, no Prometheus endpoint."""
        own = self._system
        config: dict[str, Any] = {
            "job.name": "test-runner",
            "job.default.system": own,
            "task.commit.ms": -1,
            "metrics.log.interval.ms": 0,
            "task.window.on.end.of.stream": True,
            "job.drain-monitor.enabled": False,
        }
        config.update(self._config)
        systems = set(_system_names(config))
        if f"systems.{own}.samza.factory" not in config:  # the runner's system: plain Python values
            config.setdefault(f"systems.{own}.samza.key.serde", "msgpack")
            config.setdefault(f"systems.{own}.samza.msg.serde", "msgpack")
        for s in systems:
            for k in [k for k in config if k.startswith(f"systems.{s}.") and any(c in k for c in _CLIENT_KEYS)]:
                del config[k]
            config[f"systems.{s}.samza.factory"] = "inmemory"
        config[f"systems.{own}.samza.factory"] = "inmemory"
        for s in systems | {own}:
            config[f"systems.{s}.default.stream.samza.offset.default"] = "oldest"
        for k in [k for k in config if k.startswith("streams.") and k.endswith(".samza.offset.default")]:
            config[k] = "oldest"
        for k in [k for k in config if k.startswith("stores.") and k.endswith(".changelog") and k.count(".") == 2]:
            log.info("TestRunner: %s is ignored (changelogs need Kafka); the store has none", k)
            del config[k]
        config.pop("job.container.thread.pool.size", None)  # every task inline, in this process
        # No Prometheus endpoint: a test binds no port of the job's production config.
        config.pop("metrics.prometheus.port", None)
        if not config.get("app.class"):  # an application's inputs come from its graph
            inputs = list(dict.fromkeys([*_configured_inputs(config, own), *self._inputs]))
            config["task.inputs"] = [f"{ss.system}.{ss.stream}" for ss in inputs]
        config.setdefault("job.logged.store.base.dir", state_dir)
        config.setdefault("job.non-logged.store.base.dir", state_dir)
        return config

    # -- run ------------------------------------------------------------------------------------
    def run(self, timeout_s: float = 60.0) -> TestResult:
        """Run until every task has reached the end of its inputs; raise what the task raised."""
        state_dir = tempfile.mkdtemp(prefix="samzamp-test-")
        try:
            processor = self._run(state_dir, timeout_s)
        except BaseException:
            shutil.rmtree(state_dir, ignore_errors=True)
            raise
        return TestResult(self._streams, self._system, processor, state_dir)

    def _run(self, state_dir: str, timeout_s: float) -> StreamProcessor:
        settings = validate(load_config(None, self._job_config(state_dir)))
        registry = SerdeRegistry(settings.serializers)
        streams = self._streams = {name: InMemoryStreams() for name in settings.systems}
        for ss in settings.task.inputs:
            st = settings.stream(ss)
            if st.intermediate:  # created by the processor, as on a broker, and never bounded
                continue
            key_serde = registry.get(st.key_serde, f"streams.{st.stream_id}.samza.key.serde") if st.key_serde else None
            msg_serde = registry.get(st.msg_serde, f"streams.{st.stream_id}.samza.msg.serde") if st.msg_serde else None
            given = self._inputs.get(ss, [[] for _ in range(st.partitions or 1)])  # no messages: empty
            parts: list[list[tuple[bytes | None, bytes | None, int | None]]]
            if isinstance(given, tuple):
                records, n = given
                parts = [[] for _ in range(n)]
                unkeyed = 0
                for r in records:
                    kb = None if r.key is None else _encode(key_serde, r.key, ss, "key")
                    if kb is None:
                        p, unkeyed = unkeyed % n, unkeyed + 1
                    else:
                        p = murmur2_partition(kb, n)
                    parts[p].append(
                        (kb, None if r.message is None else _encode(msg_serde, r.message, ss, "message"), r.timestamp)
                    )
            else:
                parts = [
                    [
                        (
                            None if r.key is None else _encode(key_serde, r.key, ss, "key"),
                            None if r.message is None else _encode(msg_serde, r.message, ss, "message"),
                            r.timestamp,
                        )
                        for r in part
                    ]
                    for part in given
                ]
            target = streams[ss.system]
            target.create(ss.stream, len(parts), bounded=True)
            for p, raws in enumerate(parts):
                for kb, vb, ts in raws:
                    target.append(ss.stream, p, kb, vb, ts)
        processor = StreamProcessor(settings, inmemory=streams, unconfigured_sends_to=self._system)

        async def main() -> None:
            await asyncio.wait_for(processor.run(), timeout_s)

        asyncio.run(main())
        return processor


def _encode(serde: Serde | None, value: Any, ss: SystemStream, what: str) -> bytes:
    if serde is not None:
        return serde.to_bytes(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    raise TypeError(f"input {ss}: no serde is configured for its {what}s and {type(value).__name__} is not bytes")


def _system_names(config: Mapping[str, Any]) -> list[str]:
    return sorted({k.split(".")[1] for k in config if k.startswith("systems.") and k.count(".") >= 2})


def _configured_inputs(config: Mapping[str, Any], own: str) -> list[SystemStream]:
    """task.inputs as written (system.stream, or a bare stream on job.default.system or ``own``)."""
    default = config.get("job.default.system") or own
    out = []
    for item in Config(config).get_list("task.inputs"):
        system, dot, stream = item.partition(".")
        out.append(SystemStream(system, stream) if dot else SystemStream(str(default), system))
    return out
