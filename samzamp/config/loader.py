"""Reads a job's TOML and flattens it to Samza's dotted keys, then applies ``--set`` overrides.

``[job] container.thread.pool.size = 2`` and ``job.container.thread.pool.size = 2`` are the same key.
Values keep their TOML types (int, bool, str, list); overrides from the command line are strings and
are coerced by the typed getters of ``Config``. ``${NAME}`` in a string value (file or override) is
replaced by the environment variable NAME (see ``samzamp.config.interpolate``).
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from samzamp.api.errors import ConfigError
from samzamp.config.config import Config
from samzamp.config.interpolate import interpolate

__all__ = ["flatten", "load_config", "parse_overrides"]


def flatten(table: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Flatten nested TOML tables into dotted keys; arrays stay lists."""
    flat: dict[str, Any] = {}
    for name, value in table.items():
        key = f"{prefix}.{name}" if prefix else str(name)
        nested = flatten(value, key) if isinstance(value, Mapping) else {key: value}
        for k, v in nested.items():
            if k in flat:
                raise ConfigError(k, "is set twice (once as a dotted key, once in a table); keep one")
            flat[k] = v
    return flat


def parse_overrides(pairs: Iterable[str]) -> dict[str, str]:
    """Parse ``key=value`` strings from ``--set``."""
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(pair or "--set", "an override must look like key=value (e.g. --set task.window.ms=1000)")
        out[key] = value.strip()
    return out


def load_config(
    path: str | Path | None, overrides: Mapping[str, Any] | None = None, env: Mapping[str, str] | None = None
) -> Config:
    """Load ``path`` (TOML), flatten it, apply ``overrides`` and replace ``${NAME}`` in values from ``env``
    (default: the process's environment). Does not validate (see ``validate``)."""
    values: dict[str, Any] = {}
    if path is not None:
        p = Path(path)
        try:
            raw = p.read_bytes()
        except OSError as e:
            raise ConfigError(str(p), f"cannot read the job config: {e.strerror}") from None
        try:
            values = flatten(tomllib.loads(raw.decode("utf-8")))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
            raise ConfigError(str(p), f"not valid TOML: {e}") from None
    values.update(overrides or {})
    return Config(interpolate(values, os.environ if env is None else env))
