"""``check_keys``: every key of a config is known, passed through, or the task's own, and well typed.

A key is checked in this order: a key samzamp reads (``samzamp.config.keys``) must have a value of
its type within its bounds; one of Samza's keys samzamp does not use (``samzamp.config.samza_keys``)
is a warning or, where ignoring it would change what the job does, an error; any other key follows
the rules of its namespace (``samzamp.config.namespaces``). Errors raise ConfigError naming the key;
warnings are returned, for the container to log once at start.
"""

from __future__ import annotations

from samzamp.api.errors import ConfigError
from samzamp.config.config import Config
from samzamp.config.keys import KEYS, ConfigWarning, KeySpec, spec_for
from samzamp.config.namespaces import unknown_key
from samzamp.config.samza_keys import samza_key

__all__ = ["KEYS", "ConfigWarning", "KeySpec", "check_keys", "spec_for"]


def check_keys(config: Config) -> list[ConfigWarning]:
    """Raise ConfigError for the first bad key (in key order); return the warnings of the others."""
    warnings: list[ConfigWarning] = []
    for key in sorted(config):
        spec = spec_for(key)
        if spec is not None:
            _check_value(config, key, spec)
            continue
        samza = samza_key(key)
        finding = samza.verdict(key, config[key]) if samza is not None else unknown_key(key)
        if isinstance(finding, ConfigError):
            raise finding
        if finding is not None:
            warnings.append(finding)
    return warnings


def _check_value(config: Config, key: str, spec: KeySpec) -> None:
    if spec.kind == "int":
        value = config.get_int(key, 0)
        if spec.off is not None and value == spec.off:
            return
        low, high = spec.minimum, spec.maximum
        if (low is not None and value < low) or (high is not None and value > high):
            raise ConfigError(key, f"{_range(spec)}, got {value}")
    elif spec.kind == "bool":
        config.get_bool(key, False)
    elif spec.kind == "list":
        config.get_list(key)
    elif spec.kind == "str":
        config.get_str(key)
    else:
        allowed = spec.kind.split("|")
        text = config.get_str(key)
        if text is not None and text not in allowed:
            raise ConfigError(key, f"must be one of {', '.join(allowed)}, got {text!r}")


def _range(spec: KeySpec) -> str:
    low, high = spec.minimum, spec.maximum
    if low is not None and high is not None:
        bound = f">= {low} and <= {high}"
    elif low is not None:
        bound = f">= {low}"
    else:
        bound = f"<= {high}"
    return f"must be {spec.off} (off) or {bound}" if spec.off is not None else f"must be {bound}"
