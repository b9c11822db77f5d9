"""What each ``systems.<s>.samza.factory`` value means: the kinds of system samzamp has, and what each can do.

A kind is declared here, below the systems, because the config is checked before any system code is
loaded (``JobSettings.from_config`` refuses an unknown factory, a changelog on a system that cannot
hold one, worker processes on a system they cannot reach). The code that makes a kind's clients is
its ``SystemFactory`` in the module ``SystemKind.module`` names (``samzamp.systems.registry`` finds it
there, by the kind's name). A new system is that module and one ``SystemKind`` below.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["INMEMORY", "KAFKA", "SystemKind", "system_kind", "system_kind_names", "system_kinds"]


@dataclass(frozen=True)
class SystemKind:
    """One kind of system: its samzamp name, the Samza factory classes that mean it, and its capabilities.

    Each capability is a promise the config checks rely on; a system's ``SystemFactory`` keeps it.
    """

    name: str  # what systems.<s>.samza.factory says, and SystemSettings.factory holds
    samza_classes: tuple[str, ...]  # Samza's SystemFactory class names accepted for it, as Samza configs write them
    module: str  # the module whose import registers this kind's SystemFactory (samzamp.systems.registry)
    # Another process reaches it on its own (worker processes, samzamp-drain, offline jobs): a real
    # cluster, not this process's memory.
    shared: bool
    changelogs: bool  # holds stores' changelogs (storage reads and writes them as Kafka topics)
    checkpoints: bool  # holds the checkpoint topic (task.checkpoint.system)
    coordinator_stream: bool  # holds the coordinator stream (job.coordinator.system)
    offline: bool  # the offline Spark jobs read its changelogs, checkpoints, inputs and task history

    def __str__(self) -> str:
        return self.name


KAFKA = SystemKind(
    name="kafka",
    samza_classes=("org.apache.samza.system.kafka.KafkaSystemFactory",),
    module="samzamp.systems.kafka.factory",
    shared=True,
    changelogs=True,
    checkpoints=True,
    coordinator_stream=True,
    offline=True,
)

INMEMORY = SystemKind(
    name="inmemory",
    samza_classes=("org.apache.samza.system.inmemory.InMemorySystemFactory",),
    module="samzamp.systems.inmemory.factory",
    shared=False,
    changelogs=False,
    checkpoints=True,
    coordinator_stream=True,
    offline=False,
)

_KINDS = (KAFKA, INMEMORY)
_BY_NAME = {name: kind for kind in _KINDS for name in (kind.name, *kind.samza_classes)}


def system_kind(factory: str) -> SystemKind | None:
    """The kind a ``systems.<s>.samza.factory`` value names (samzamp's name or Samza's class), or None."""
    return _BY_NAME.get(factory)


def system_kinds() -> tuple[SystemKind, ...]:
    """Every kind, in the order error messages list them."""
    return _KINDS


def system_kind_names(which: Callable[[SystemKind], bool] = lambda kind: True) -> str:
    """The names of the kinds ``which`` accepts, for an error message: "kafka or inmemory"."""
    names = [k.name for k in _KINDS if which(k)]
    return " or ".join(names) if len(names) <= 2 else ", ".join(names[:-1]) + " or " + names[-1]
