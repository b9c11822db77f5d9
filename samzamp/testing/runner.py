"""``TestRunner``: the real container and run loop over the in-memory system, with bounded inputs.

    result = (
        TestRunner(WordCountTask, {"task.window.ms": 10})
        .add_input("lines", ["a b", "b"], partitions=2)
        .run()
    )
    result.messages("word-counts")   # what the task sent, decoded

Inputs end (end of stream), so the job stops by itself once every task has processed all its input
(and run ``on_end_of_stream``). Keys and messages travel through the msgpack serde unless the config
names others, so tests can use plain Python values. Output streams are read from the same system:
a task sends to ``SystemStream("test", "<stream>")`` (the system is named ``TestRunner.SYSTEM``) --
or to any system name you map with ``system_alias`` (e.g. ``"kafka"``), so production tasks run as-is.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

from samzamp.config import load_config, validate
from samzamp.container.container import SamzaContainer
from samzamp.serde.registry import SerdeRegistry
from samzamp.systems.inmemory.system import InMemoryStreams

__all__ = ["TestResult", "TestRunner"]


class TestResult:
    """What a TestRunner run produced."""

    __test__ = False  # not a pytest test class

    def __init__(self, streams: InMemoryStreams, container: SamzaContainer, serdes: Any) -> None:
        self._streams = streams
        self.container = container
        self.metrics = container.metrics.snapshot()
        self._serdes = serdes

    def records(self, stream: str) -> list[list[tuple[Any, Any]]]:
        """(key, message) pairs per partition of ``stream``, decoded."""
        key_serde, msg_serde = self._serdes(stream)
        out = []
        for log in self._streams.partitions.get(stream, []):
            out.append(
                [
                    (
                        None if k is None else key_serde.from_bytes(k),
                        None if v is None else msg_serde.from_bytes(v),
                    )
                    for _o, k, v, _t in log
                ]
            )
        return out

    def messages(self, stream: str) -> list[Any]:
        """Every message sent to ``stream``, partition by partition."""
        return [m for part in self.records(stream) for _k, m in part]


class TestRunner:
    """Runs one task class on in-memory inputs in this process and returns its outputs."""

    __test__ = False
    SYSTEM = "test"

    def __init__(
        self, task_class: type | str, config: Mapping[str, Any] | None = None, system_alias: str | None = None
    ) -> None:
        path = task_class if isinstance(task_class, str) else f"{task_class.__module__}:{task_class.__qualname__}"
        self._system = system_alias or self.SYSTEM
        self._config: dict[str, Any] = {
            "job.name": "test-runner",
            "job.default.system": self._system,
            "task.class": path,
            "task.commit.ms": -1,
            "metrics.log.interval.ms": 0,
            f"systems.{self._system}.samza.factory": "inmemory",
            f"systems.{self._system}.samza.key.serde": "msgpack",
            f"systems.{self._system}.samza.msg.serde": "msgpack",
            f"systems.{self._system}.default.stream.samza.offset.default": "oldest",
        }
        self._config.update(config or {})
        self._inputs: dict[str, list[list[tuple[Any, Any]]]] = {}

    def add_input(
        self, stream: str, messages: Sequence[Any], partitions: int = 1, keys: Sequence[Any] | None = None
    ) -> TestRunner:
        """Messages for ``stream``, spread round-robin over ``partitions`` (or give a list per partition
        with ``add_partitioned_input``). ``keys`` (optional) pairs a key with each message."""
        parts: list[list[tuple[Any, Any]]] = [[] for _ in range(partitions)]
        for i, m in enumerate(messages):
            parts[i % partitions].append((keys[i] if keys is not None else None, m))
        self._inputs[stream] = parts
        return self

    def add_partitioned_input(self, stream: str, partitions: Sequence[Sequence[Any]]) -> TestRunner:
        self._inputs[stream] = [[(None, m) for m in p] for p in partitions]
        return self

    def run(self, timeout_s: float = 60.0) -> TestResult:
        """Run until every task has reached the end of its inputs; raise what the task raised."""
        config = dict(self._config)
        config["task.inputs"] = [f"{self._system}.{s}" for s in self._inputs]
        settings = validate(load_config(None, config))
        serdes = SerdeRegistry(settings.serializers)

        def serdes_of(stream: str) -> tuple[Any, Any]:
            ss = settings.stream(type(settings.task.inputs[0])(self._system, stream))
            return (
                serdes.get(ss.key_serde or "bytes", f"streams.{stream}.samza.key.serde"),
                serdes.get(ss.msg_serde or "bytes", f"streams.{stream}.samza.msg.serde"),
            )

        streams = InMemoryStreams()
        for stream, parts in self._inputs.items():
            streams.create(stream, len(parts), bounded=True)
            key_serde, msg_serde = serdes_of(stream)
            for p, msgs in enumerate(parts):
                for k, m in msgs:
                    streams.append(stream, p, None if k is None else key_serde.to_bytes(k), msg_serde.to_bytes(m))
        container = SamzaContainer(settings, inmemory={self._system: streams})

        async def main() -> None:
            await asyncio.wait_for(container.run(), timeout_s)

        asyncio.run(main())
        return TestResult(streams, container, serdes_of)
