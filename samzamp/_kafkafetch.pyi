"""Stub of the native extension samzamp._kafkafetch (native/kafkafetch.c). Private: only
samzamp.systems.kafka.consumer imports it.

Written by hand from native/kafkafetch.c; keep the two in step (tests/unit/test_kafkafetch.py checks that
every name here exists in the built module and the other way round).
"""

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

__all__ = ["attach"]

_K = TypeVar("_K")
_S = TypeVar("_S")
_R = TypeVar("_R")

class Reader:
    """A confluent-kafka Consumer's batches read from librdkafka and packed, as ``attach`` made it."""

    def read_batch(
        self,
        batch: int,
        timeout_s: float,
        lookup: Mapping[_K, _S],
        single_topic: bool,
        split: Mapping[_S, tuple[int, bool]],
        size: int,
        run_type: Callable[[int, Any, bytes], _R],
        array_type: Callable[[str, bytes], Any],
        /,
    ) -> tuple[dict[_S, tuple[int, list[list[_R]]]], list[tuple[int, str]], int]: ...

def attach(consumer: Any, consumer_type: type, cimpl_path: str, logger: Any, /) -> Reader: ...
