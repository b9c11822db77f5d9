"""The system factories, by kind: the one place that decides which code serves a configured system.

A kind (``samzamp.config.system_kinds``) names the module of its ``SystemFactory``; that module
registers the factory when it is imported, and ``system_factory`` imports it on first use, so a
process loads only the systems its job configures (an in-memory job never imports confluent_kafka).
"""

from __future__ import annotations

import importlib

from samzamp.config.settings import JobSettings
from samzamp.config.system_kinds import SystemKind
from samzamp.systems.factory import Place, System, SystemFactory

__all__ = ["open_system", "register", "system_factory"]

_FACTORIES: dict[str, SystemFactory] = {}


def register(factory: SystemFactory) -> None:
    """Make ``factory`` serve its kind; a module registers its factory once, when it is imported."""
    name = factory.kind.name
    known = _FACTORIES.get(name)
    if known is not None and known is not factory:
        msg = f"system kind {name!r} already has a factory ({type(known).__name__}); register one per kind"
        raise ValueError(msg)
    _FACTORIES[name] = factory


def system_factory(kind: SystemKind) -> SystemFactory:
    """The factory of ``kind``, importing the module that registers it the first time."""
    factory = _FACTORIES.get(kind.name)
    if factory is None:
        importlib.import_module(kind.module)
        factory = _FACTORIES.get(kind.name)
        if factory is None:
            msg = f"module {kind.module} registers no factory for system kind {kind.name!r}"
            raise LookupError(msg)
    return factory


def open_system(settings: JobSettings, system: str, place: Place) -> System:
    """``system``'s clients in this process, from the factory of its kind."""
    return system_factory(settings.systems[system].kind).open(settings, system, place)
