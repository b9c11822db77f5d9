"""The serde interface: how keys and messages become bytes and back."""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

__all__ = ["Serde"]


@runtime_checkable
class Serde(Protocol):
    """Turns values into bytes and back. Must be stateless and safe to share between tasks.

    A user serde is named in config by its import path (``mypkg.serdes:MySerde`` or
    ``mypkg.serdes.MySerde``); samzamp instantiates it with no arguments.
    """

    def to_bytes(self, value: Any) -> bytes: ...

    def from_bytes(self, data: bytes) -> Any: ...
