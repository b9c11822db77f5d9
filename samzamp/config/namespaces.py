"""What a key that samzamp does not read means, by where it sits: the rules of each namespace.

* samzamp's namespaces (``job.``, ``task.``, ``app.``, ``metrics.``, ``serializers.``, ``systems.``,
  ``streams.``, ``stores.``, and standalone mode's ``processor.`` and ``locationid.``): every key is
  samzamp's, so an unknown one is an error, with a did-you-mean. Inside them, three blocks pass through: Kafka client settings
  (``systems.<s>.consumer.*``, ``producer.*``, ``kafka.*``) and Kafka topic configs
  (``streams.<id>.<config>``, ``systems.<s>.default.stream.<config>``,
  ``stores.<n>.changelog.kafka.<config>``), where only Kafka's own topic config names are accepted.
* a top-level name that is one of those spelled in the singular or plural (``stream``, ``tasks``):
  an error, with the key it was surely meant to be.
* any other key is the task's own setting (read through ``context.config``) and is accepted; a warning
  says so when it looks like a samzamp key in the wrong place (``window.ms`` above the first table).
"""

from __future__ import annotations

import difflib

from samzamp.api.errors import ConfigError
from samzamp.config.keys import KEYS, ConfigWarning, known_keys_like, spec_for
from samzamp.config.topic_configs import TOPIC_CONFIGS, is_topic_config

__all__ = ["OWNED", "unknown_key"]

OWNED = ("job", "task", "app", "metrics", "serializers", "systems", "streams", "stores", "processor", "locationid")
_CLIENT_BLOCKS = ("consumer", "producer", "kafka")  # systems.<s>.<block>.*: Kafka client settings

# The part of each placeholder key after its name (samza.msg.serde, lmdb.map.size, ...), so that a
# key written outside its table is recognised; the tables are tried in this order.
_TABLES = ("streams", "stores", "systems", "serializers")
# (A reporter's keys are left out: a task's own top-level ``stream`` or ``interval`` is no misplaced key.)
_TAILS: list[tuple[str, str]] = sorted(
    (
        (s.pattern.split(">.", 1)[1], s.pattern)
        for s in KEYS
        if ">." in s.pattern and s.pattern.split(".")[0] in _TABLES
    ),
    key=lambda t: _TABLES.index(t[1].split(".")[0]),
)


def unknown_key(key: str) -> ConfigError | ConfigWarning | None:
    """The finding for a key that matches no spec and is not one of Samza's keys (None: accepted)."""
    parts = key.split(".")
    if parts[0] in OWNED:
        return _owned(key, parts)
    return _free(key, parts)


def _owned(key: str, parts: list[str]) -> ConfigError | None:
    head = parts[0]
    if head == "systems" and len(parts) >= 4:
        if parts[2] in _CLIENT_BLOCKS:
            return None
        if parts[2:4] == ["default", "stream"] and len(parts) >= 5 and parts[4] != "samza":
            return _topic_config(key, ".".join(parts[4:]), f"for every stream of system {parts[1]!r}")
        if parts[2] == "streams":
            # Samza's legacy per-stream form systems.<s>.streams.<stream>.<prop>.
            meant = ".".join(["streams", *parts[3:]])
            return ConfigError(
                key,
                f"is Samza's legacy form of a stream's settings; samzamp reads streams.<id>.*: did you mean {meant!r}"
                + (f" (with streams.{parts[3]}.samza.system = {parts[1]!r})" if len(parts) >= 5 else "")
                + "?",
            )
    if head == "streams" and len(parts) >= 3 and parts[2] != "samza":
        return _topic_config(key, ".".join(parts[2:]), f"of stream {parts[1]!r}")
    if head == "stores" and len(parts) >= 5 and parts[2:4] == ["changelog", "kafka"]:
        return _topic_config(key, ".".join(parts[4:]), f"of the changelog of store {parts[1]!r}")
    hint = _did_you_mean(key)
    return ConfigError(
        key,
        f"unknown key in samzamp's {head}.* namespace (a typo?)"
        + (f"; did you mean {hint!r}?" if hint else "; see the config reference in docs/configuration.md"),
    )


def _topic_config(key: str, name: str, whose: str) -> ConfigError | None:
    if is_topic_config(name):
        return None
    problem = f"is taken as a Kafka topic config {whose}, but {name!r} is not one"
    close = difflib.get_close_matches(name, TOPIC_CONFIGS, n=1, cutoff=0.8)
    hint = _samza_prefixed(key) or (key[: -len(name)] + close[0] if close else None) or _did_you_mean(key)
    return ConfigError(key, problem + (f"; did you mean {hint!r}?" if hint else " (see Kafka's topic configs)"))


def _did_you_mean(key: str) -> str | None:
    """The known key ``key`` most likely meant, or None."""
    close = difflib.get_close_matches(key, known_keys_like(key), n=1, cutoff=0.75)
    return _samza_prefixed(key) or (close[0] if close else None)


def _samza_prefixed(key: str) -> str | None:
    """A samza.* key written without its prefix (``[streams.lines] msg.serde``): the key meant, or None."""
    parts = key.split(".")
    if parts[0] in ("systems", "streams") and len(parts) >= 3 and parts[2] != "samza":
        for at in (2, 4):  # systems.<s>.samza.* and systems.<s>.default.stream.samza.*
            meant = ".".join([*parts[:at], "samza", *parts[at:]])
            if spec_for(meant) is not None:
                return meant
    return None


def _free(key: str, parts: list[str]) -> ConfigError | ConfigWarning | None:
    head, rest = parts[0], parts[1:]
    for owned in OWNED:
        if head == owned + "s" or (owned.endswith("s") and head == owned[:-1]):
            meant = ".".join([owned, *rest])
            hint = meant if spec_for(meant) is not None else _did_you_mean(meant) or meant
            return ConfigError(key, f"{head!r} is not a samzamp table, {owned!r} is; did you mean {hint!r}?")
    close = difflib.get_close_matches(head, OWNED, n=1, cutoff=0.75)
    if close and rest and spec_for(".".join([close[0], *rest])) is not None:
        meant = ".".join([close[0], *rest])
        return ConfigWarning(key, f"is taken as the task's own setting, but looks like {meant!r} misspelled")
    meant_key = _outside_its_table(key, parts)
    if meant_key is not None:
        return ConfigWarning(
            key,
            f"is taken as the task's own setting, but looks like {meant_key!r} written outside its table "
            "(a key above the first [table] header, or under the wrong one)",
        )
    return None


def _outside_its_table(key: str, parts: list[str]) -> str | None:
    for ns in ("job", "task", "app", "metrics"):
        if spec_for(f"{ns}.{key}") is not None:
            return f"{ns}.{key}"
    for tail, pattern in _TAILS:
        if key == tail:
            return pattern
        if len(parts) >= 2 and "." in tail and ".".join(parts[1:]) == tail:
            return pattern.split("<", 1)[0] + parts[0] + "." + tail
    return None
