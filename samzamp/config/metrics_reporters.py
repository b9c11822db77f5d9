"""``metrics.reporters``: the metrics reporters a job starts, Samza's keys for them, read and checked.

samzamp has one reporter besides its metrics log: Samza's snapshot reporter, which sends one JSON
message per metrics source to a stream every interval. As in Samza, ``metrics.reporters`` names the
reporters (a TOML array or Samza's comma-separated string) and each named reporter's keys sit under
``metrics.reporter.<name>.``:

- ``class``: Samza's ``org.apache.samza.metrics.reporter.MetricsSnapshotReporterFactory``, or
  ``snapshot`` (may be left out for the reporter named ``snapshot``); any other class is an error,
  as ignoring it would leave the job without the reporter asked for;
- ``stream``: where the snapshots go, ``system.stream`` (required);
- ``interval``: seconds between reports (default 60);
- ``blacklist``: a regular expression over ``group.metric`` (with Samza's group names, as the
  messages carry them): a metric it matches whole is left out.

Keys of a reporter that ``metrics.reporters`` does not name are unused, as in Samza: a warning says so.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from samzamp.api.envelope import SystemStream
from samzamp.api.errors import ConfigError
from samzamp.config.keys import ConfigWarning
from samzamp.config.settings import JobSettings, parse_system_stream

__all__ = ["SNAPSHOT_FACTORY", "SnapshotReporterSettings", "reporter_warnings", "snapshot_reporters"]

SNAPSHOT_FACTORY = "org.apache.samza.metrics.reporter.MetricsSnapshotReporterFactory"
_SNAPSHOT_CLASSES = (SNAPSHOT_FACTORY, "snapshot")
_REPORTER_KEY = re.compile(r"^metrics\.reporter\.([^.]+)\.(class|stream|interval|blacklist)$")


@dataclass(frozen=True)
class SnapshotReporterSettings:
    """One snapshot reporter: its name in metrics.reporters and its keys."""

    name: str
    stream: SystemStream
    interval_s: int
    blacklist: re.Pattern[str] | None


def snapshot_reporters(settings: JobSettings) -> tuple[SnapshotReporterSettings, ...]:
    """The reporters metrics.reporters names, each checked; ConfigError naming the key that is wrong."""
    config = settings.config
    out: list[SnapshotReporterSettings] = []
    for name in dict.fromkeys(config.get_list("metrics.reporters")):
        p = f"metrics.reporter.{name}."
        cls = config.get_str(p + "class")
        if cls is None and name != "snapshot":
            raise ConfigError(
                p + "class",
                f"is required for reporter {name!r} (named in metrics.reporters); samzamp's one reporter is Samza's "
                f"snapshot reporter: set it to {SNAPSHOT_FACTORY} (or snapshot), or remove {name!r} from metrics.reporters",
            )
        if cls is not None and cls not in _SNAPSHOT_CLASSES:
            raise ConfigError(
                p + "class",
                f"is {cls!r}, a reporter samzamp does not have; its one reporter is Samza's snapshot reporter "
                f"({SNAPSHOT_FACTORY}, or snapshot): use it, or remove {name!r} from metrics.reporters",
            )
        text = config.require_str(
            p + "stream", f"the stream reporter {name!r} sends its snapshots to, as system.stream (e.g. kafka.metrics)"
        )
        stream = parse_system_stream(p + "stream", text, settings.default_system, settings.systems)
        blacklist = None
        pattern = config.get_str(p + "blacklist")
        if pattern:
            try:
                blacklist = re.compile(pattern)
            except re.error as e:
                raise ConfigError(p + "blacklist", f"is not a regular expression: {e}") from None
        out.append(SnapshotReporterSettings(name, stream, config.get_int(p + "interval", 60), blacklist))
    return tuple(out)


def reporter_warnings(settings: JobSettings) -> list[ConfigWarning]:
    """A warning per key of a reporter that metrics.reporters does not name: it is not started."""
    named = set(settings.config.get_list("metrics.reporters"))
    warnings = []
    for key in sorted(settings.config):
        m = _REPORTER_KEY.match(key)
        if m is not None and m.group(1) not in named:
            warnings.append(
                ConfigWarning(key, f"reporter {m.group(1)!r} is not in metrics.reporters, so it is not started")
            )
    return warnings
