"""Stub of the native extension samzamp._fetchpack (native/fetchpack.c). Private: only
samzamp.systems.kafka.consumer imports it.

Written by hand from native/fetchpack.c; keep the two in step (tests/unit/test_fetchpack.py checks that
every name here exists in the built module and the other way round).
"""

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

__all__ = ["pack_consumed"]

_K = TypeVar("_K")
_S = TypeVar("_S")
_R = TypeVar("_R")

def pack_consumed(
    msgs: Sequence[Any],
    lookup: Mapping[_K, _S],
    single_topic: bool,
    split: Mapping[_S, tuple[int, bool]],
    size: int,
    run_type: Callable[[int, Any, bytes], _R],
    array_type: Callable[[str, bytes], Any],
    /,
) -> tuple[dict[_S, tuple[int, list[list[_R]]]], list[Any], int]: ...
