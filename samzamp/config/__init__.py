"""Configuration: load TOML to Samza's dotted keys, check every key, hand out typed views."""

from samzamp.config.config import Config
from samzamp.config.loader import flatten, load_config, parse_overrides
from samzamp.config.settings import JobSettings, StreamSettings, SystemSettings, TaskSettings
from samzamp.config.validate import validate

__all__ = [
    "Config",
    "JobSettings",
    "StreamSettings",
    "SystemSettings",
    "TaskSettings",
    "flatten",
    "load_config",
    "parse_overrides",
    "validate",
]
