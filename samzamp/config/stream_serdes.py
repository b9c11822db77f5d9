"""The serdes of each stream, as the config names them (streams.<id>.samza.key.serde / msg.serde,
falling back to the system's defaults). Shared by the container and its worker processes."""

from __future__ import annotations

from typing import TYPE_CHECKING

from samzamp.api.envelope import SystemStream
from samzamp.api.serde import Serde
from samzamp.serde.registry import SerdeRegistry

if TYPE_CHECKING:
    from samzamp.config.settings import JobSettings

__all__ = ["StreamSerdes"]


class StreamSerdes:
    """``serdes(ss)`` -> (key serde, msg serde); None where the config names none (bytes pass through)."""

    def __init__(self, settings: JobSettings) -> None:
        self._settings = settings
        self._registry = SerdeRegistry(settings.serializers)

    def __call__(self, ss: SystemStream) -> tuple[Serde | None, Serde | None]:
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
        return key, msg
