"""Applications of the high-level API (Samza's StreamApplication).

A job sets ``app.class = "module:Class"``; the class describes its operator graph::

    class WordCount(StreamApplication):
        def describe(self, app):
            words = app.input_stream("lines").flat_map(str.split)
            counts = words.partition_by(lambda w: w, lambda w: 1, id="by-word").window(
                Windows.keyed_tumbling_window(lambda kv: kv.key, timedelta(seconds=2), int, lambda kv, n: n + 1),
                id="count",
            )
            counts.map(lambda pane: KV(pane.key.key, pane.message)).send_to(app.output_stream("counts"))

``describe`` runs in every process that runs tasks (the container and each worker process) and
must build the same graph each time: no randomness, no reading of changing files.
"""

from __future__ import annotations

import hashlib
import re
from abc import ABC, abstractmethod
from typing import Any

from samzamp.api.errors import ConfigError
from samzamp.api.operators import MessageStream, OperatorSpec, OutputStream, Table, check_op_id

__all__ = ["StreamApplication", "StreamApplicationDescriptor"]

_USER_ID = re.compile(r"[A-Za-z0-9_-]+")


class StreamApplication(ABC):
    """A job written as an operator graph. Subclass it and implement ``describe``."""

    @abstractmethod
    def describe(self, app: StreamApplicationDescriptor) -> None:
        """Declare the inputs, operators, outputs and tables through ``app``."""


class StreamApplicationDescriptor:
    """What ``describe`` builds the graph with: inputs, outputs and tables, and (through their
    ``MessageStream``s) the operators. Op ids are ``<job.name>-<job.id>-<opcode>-<id>``: the id a
    user gave, else the operator's position among the operators ``describe`` created."""

    def __init__(self, job_name: str, job_id: str) -> None:
        self.job_name = job_name
        self.job_id = job_id
        self.operators: list[OperatorSpec] = []  # in describe order, inputs included
        self.inputs: dict[str, OperatorSpec] = {}  # stream id -> its input operator (sources)
        self.intermediates: dict[str, OperatorSpec] = {}  # stream id -> its input operator
        self.outputs: dict[str, OutputStream] = {}
        self.tables: dict[str, Table] = {}
        self._ids: set[str] = set()
        self._sequence = 0

    # -- what describe calls ---------------------------------------------------------------------
    def input_stream(
        self, stream_id: str, *, key_serde: str | None = None, msg_serde: str | None = None
    ) -> MessageStream:
        """The messages of input ``stream_id`` (resolved as task.inputs are: ``streams.<id>.*``, else
        the default system and a topic of that name). Serdes are names, as in the config; without
        them the stream's configured serdes apply. With ``key_serde`` the messages are ``KV(key,
        value)``; else they are the values."""
        if stream_id in self.inputs:
            return MessageStream(self, self.inputs[stream_id])
        spec = OperatorSpec(
            stream_id, "input", stream=stream_id, key_serde=key_serde, msg_serde=msg_serde, keyed=key_serde is not None
        )
        self.operators.append(spec)
        self.inputs[stream_id] = spec
        return MessageStream(self, spec)

    def output_stream(
        self, stream_id: str, *, key_serde: str | None = None, msg_serde: str | None = None
    ) -> OutputStream:
        """Output ``stream_id`` (resolved as inputs are), a target for ``MessageStream.send_to``."""
        out = self.outputs.get(stream_id)
        if out is None:
            out = self.outputs[stream_id] = OutputStream(stream_id, key_serde, msg_serde)
        elif (out.key_serde, out.msg_serde) != (key_serde, msg_serde):
            raise ConfigError("app.class", f"output stream {stream_id!r} is declared twice with different serdes")
        return out

    def table(self, table_id: str, *, key_serde: str | None = None, msg_serde: str | None = None) -> Table:
        """A local table: an LMDB store changelogged to ``<job.name>-<job.id>-table-<table_id>``
        (JSON keys and values unless serdes are named)."""
        if not _USER_ID.fullmatch(table_id):
            raise ConfigError("app.class", f"table id {table_id!r}: use the characters a-z A-Z 0-9 _ -")
        name = f"{self.job_name}-{self.job_id}-table-{table_id}"
        table = self.tables.get(table_id)
        if table is None:
            check_op_id(name, "table")
            table = self.tables[table_id] = Table(table_id, name, key_serde or "json", msg_serde or "json")
        return table

    # -- what MessageStream calls ----------------------------------------------------------------
    def add_operator(
        self, opcode: str, user_id: str | None, parents: tuple[OperatorSpec, ...], **parts: Any
    ) -> OperatorSpec:
        """A new operator reading ``parents``, with the next op id (Samza's getNextOpId)."""
        if user_id is not None and not (isinstance(user_id, str) and _USER_ID.fullmatch(user_id)):
            raise ConfigError("app.class", f"{opcode} operator id {user_id!r}: use the characters a-z A-Z 0-9 _ -")
        suffix = user_id if user_id is not None else str(self._sequence)
        self._sequence += 1
        op_id = f"{self.job_name}-{self.job_id}-{opcode}-{suffix}"
        if op_id in self._ids:
            raise ConfigError(
                "app.class", f"{opcode} operator {op_id!r}: the id {suffix!r} is used twice; ids are unique"
            )
        check_op_id(op_id, opcode)
        self._ids.add(op_id)
        spec = OperatorSpec(op_id, opcode, parents, **parts)
        for parent in parents:
            parent.children.append(spec)
        self.operators.append(spec)
        return spec

    def add_intermediate_input(self, partition_by: OperatorSpec) -> OperatorSpec:
        """The input operator reading ``partition_by``'s intermediate stream (its messages are KV)."""
        assert partition_by.stream is not None
        spec = OperatorSpec(
            partition_by.stream,
            "input",
            stream=partition_by.stream,
            key_serde=partition_by.key_serde,
            msg_serde=partition_by.msg_serde,
            keyed=True,
        )
        self.operators.append(spec)
        self.intermediates[partition_by.stream] = spec
        return spec

    # -- the graph, for the planner ---------------------------------------------------------------
    def digest(self) -> str:
        """A digest of the graph (op ids, opcodes, edges, streams): the same wherever it is built."""
        lines = "\n".join(op.digest_line() for op in self.operators)
        return hashlib.sha256(lines.encode()).hexdigest()[:16]
