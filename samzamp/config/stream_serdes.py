"""The serdes of each stream, as the config names them (streams.<id>.samza.key.serde / msg.serde,
falling back to the system's defaults). Shared by the container and its worker processes."""

from __future__ import annotations

from typing import TYPE_CHECKING

from samzamp.api.envelope import SystemStream
from samzamp.api.serde import Serde
from samzamp.serde.intermediate import IntermediateMessageSerde
from samzamp.serde.registry import SerdeRegistry

if TYPE_CHECKING:
    from samzamp.config.settings import JobSettings

__all__ = ["StreamSerdes"]


class StreamSerdes:
    """``serdes(ss)`` -> (key serde, msg serde); None where the config names none (bytes pass through).
    An intermediate stream's message serde writes and reads the type byte of its records
    (``serde.intermediate``) around the one the config names."""

    def __init__(self, settings: JobSettings) -> None:
        self._settings = settings
        self._registry = SerdeRegistry(settings.serializers)
        self._intermediate: dict[SystemStream, Serde] = {}
        # Each stream's pair, once: every task asks for the streams it reads and writes (thousands
        # of tasks in a processor), and a stream's settings are read from the whole config.
        self._pairs: dict[SystemStream, tuple[Serde | None, Serde | None]] = {}

    def __call__(self, ss: SystemStream) -> tuple[Serde | None, Serde | None]:
        pair = self._pairs.get(ss)
        if pair is None:
            pair = self._pairs[ss] = self._pair(ss)
        return pair

    def _pair(self, ss: SystemStream) -> tuple[Serde | None, Serde | None]:
        if ss.system not in self._settings.systems:
            return None, None
        stream = self._settings.stream(ss)
        key = (
            self._registry.get(stream.key_serde, f"streams.{stream.stream_id}.samza.key.serde")
            if stream.key_serde
            else None
        )
        msg = (
            self._registry.get(stream.msg_serde, f"streams.{stream.stream_id}.samza.msg.serde")
            if stream.msg_serde
            else None
        )
        if stream.intermediate:  # its values carry a type byte: user message or control message
            msg = self._intermediate.get(ss) or self._intermediate.setdefault(ss, IntermediateMessageSerde(msg))
        return key, msg
