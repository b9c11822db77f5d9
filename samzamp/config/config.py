"""``Config``: the flat, read-only map of dotted keys with typed getters that name the key on error."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

from samzamp.api.errors import ConfigError

__all__ = ["Config", "redacted"]

# Keys whose values are secrets: librdkafka's sensitive properties (it prints them as [redacted]
# too) and anything named like a password or a secret, in samzamp's keys and the task's own.
_SECRET_KEY = re.compile(r"password|secret|jaas|oauthbearer\.config|ssl\.key\.pem|ssl_key|sasl\.username", re.I)


def redacted(values: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` fit for a log or an error message: each secret's value replaced by ``[redacted]``."""
    return {k: "[redacted]" if _SECRET_KEY.search(k) else v for k, v in values.items()}


_TRUE = {"true", "yes", "on", "1"}
_FALSE = {"false", "no", "off", "0"}


class Config(Mapping[str, Any]):
    """Immutable flat config. Getters coerce strings (from ``--set``) and raise ConfigError naming the key."""

    __slots__ = ("_values",)

    def __init__(self, values: Mapping[str, Any]) -> None:
        self._values = dict(values)

    def __getitem__(self, key: str) -> Any:
        return self._values[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        return f"Config({redacted(self._values)!r})"

    def subset(self, prefix: str) -> dict[str, Any]:
        """Keys under ``prefix`` (which should end with a dot), with the prefix stripped."""
        n = len(prefix)
        return {k[n:]: v for k, v in self._values.items() if k.startswith(prefix)}

    def get_str(self, key: str, default: str | None = None) -> str | None:
        value = self._values.get(key)
        if value is None:
            return default
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, (list, dict)):
            raise ConfigError(key, f"must be a string, got {type(value).__name__} {value!r}")
        return str(value).strip()

    def require_str(self, key: str, what: str) -> str:
        value = self.get_str(key)
        if not value:
            raise ConfigError(key, f"is required: {what}")
        return value

    def get_int(self, key: str, default: int) -> int:
        value = self._values.get(key)
        if value is None or value == "":
            return default
        if isinstance(value, bool):
            raise ConfigError(key, f"must be an integer, got boolean {value!r}")
        if isinstance(value, int):
            return value
        try:
            return int(str(value).strip())
        except ValueError:
            raise ConfigError(key, f"must be an integer, got {value!r}") from None

    def get_bool(self, key: str, default: bool) -> bool:
        value = self._values.get(key)
        if value is None or value == "":
            return default
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in _TRUE:
            return True
        if text in _FALSE:
            return False
        raise ConfigError(key, f"must be true or false, got {value!r}")

    def get_list(self, key: str) -> list[str]:
        """A TOML array of strings, or one comma-separated string (Samza's form)."""
        value = self._values.get(key)
        if value is None:
            return []
        if isinstance(value, list):
            if not all(isinstance(v, str) for v in value):
                raise ConfigError(key, f"must be a list of strings, got {value!r}")
            return [v.strip() for v in value if v.strip()]
        if isinstance(value, str):
            return [v.strip() for v in value.split(",") if v.strip()]
        raise ConfigError(key, f"must be a list of strings or a comma-separated string, got {value!r}")
