"""Environment variables in config values: ``${NAME}`` is replaced by the variable's value at load.

Anywhere in a string value (also inside a TOML array of strings, and in ``--set`` values), so a
secret can stay out of the file and off the command line (where ``ps`` shows it)::

    systems.kafka.kafka.sasl.password = "${SAMZAMP_KAFKA_PASSWORD}"

``$${`` writes a literal ``${`` (``"$${HOME}"`` is the text ``${HOME}``; in general, in a run of
dollars before a ``{`` each ``$$`` is one literal ``$``, so ``"$$${HOME}"`` is ``$`` and the home
directory); a ``$`` not followed by ``{`` is just a dollar sign. A variable that is not set is a
ConfigError naming the key (never a value). Keys are not interpolated.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from samzamp.api.errors import ConfigError

__all__ = ["interpolate", "interpolate_value"]

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def interpolate_value(key: str, value: str, env: Mapping[str, str]) -> str:
    """``value`` with every ``${NAME}`` replaced from ``env``; before a ``{``, ``$$`` is one literal ``$``."""
    if "${" not in value:
        return value
    out: list[str] = []
    i = 0
    while (j := value.find("${", i)) >= 0:
        first = j  # the run of dollars that ends in this ${
        while first > i and value[first - 1] == "$":
            first -= 1
        dollars = j - first + 1
        out.append(value[i:first] + "$" * (dollars // 2))
        if dollars % 2 == 0:  # all escaped: a literal ${
            out.append("{")
            i = j + 2
            continue
        end = value.find("}", j + 2)
        if end < 0:
            raise ConfigError(key, "has a ${ without its closing }; write $${ for a literal ${")
        name = value[j + 2 : end]
        if not _NAME.fullmatch(name):
            raise ConfigError(
                key,
                f"${{{name}}} is not an environment variable name (letters, digits, _); write $${{ for a literal ${{",
            )
        found = env.get(name)
        if found is None:
            raise ConfigError(
                key,
                f"refers to environment variable {name}, which is not set; set it (or write $${{ for a literal ${{)",
            )
        out.append(found)
        i = end + 1
    out.append(value[i:])
    return "".join(out)


def interpolate(values: Mapping[str, Any], env: Mapping[str, str]) -> dict[str, Any]:
    """Every string value (and string in a list) of ``values`` interpolated from ``env``."""
    out: dict[str, Any] = {}
    for key, value in values.items():
        if isinstance(value, str):
            value = interpolate_value(key, value, env)
        elif isinstance(value, list):
            value = [interpolate_value(key, v, env) if isinstance(v, str) else v for v in value]
        out[key] = value
    return out
