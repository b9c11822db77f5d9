"""The settings of every Kafka client samzamp creates, built in one place: ``client_config``.

A client's settings, lowest precedence first:

1. samzamp's defaults for that client (the ``defaults`` its module passes, e.g. linger.ms = 100);
2. ``systems.<s>.kafka.*``: settings every client of the system needs (security.protocol, sasl.*,
   ssl.*, client.rack, ...);
3. ``systems.<s>.consumer.*`` for a consumer, ``systems.<s>.producer.*`` for a producer (Samza's
   keys); an admin client gets neither (librdkafka warns about consumer or producer properties
   given to an admin client);
4. what samzamp owns: ``bootstrap.servers`` (resolved once per system, see
   ``samzamp.config.settings``, so every client of a system reaches the same cluster) and the
   settings the client's code relies on (the ``owned`` its module passes, e.g. enable.auto.commit =
   false, enable.partition.eof = true where the end of a partition is found by its EOF event). A
   user value replaced by an owned one is logged once as a warning.

librdkafka's own log lines go to the Python logger ``librdkafka`` (confluent-kafka's ``logger``
setting, on every client), so they take the process's log level and format (``--log-format json``)
instead of going raw to stderr. Its levels map as confluent-kafka maps them: syslog 0-2 CRITICAL,
3 ERROR, 4 WARNING, 5-6 INFO, 7 DEBUG. A client hands its lines over when it is polled (consume,
poll, flush), so every client samzamp keeps is polled or served on use. librdkafka logs each try of a
connection that keeps failing (a few a second): a line that repeats one already logged within
``REPEATS_HELD_S`` is held back, and the next one after that says how many were.

Each client kind gets a descriptive default ``client.id``, ``samzamp-<job.name>-<job.id>[-<process>]-<kind>``
(process: ``worker-<n>``, ``drain``, ``offline``), which a ``client.id`` in the blocks above replaces.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from samzamp.config.config import redacted

if TYPE_CHECKING:
    from samzamp.config.settings import SystemSettings

__all__ = ["EOF_READER", "LIBRDKAFKA_LOG", "REPEATS_HELD_S", "ClientKind", "KafkaClientSettings", "client_config"]

log = logging.getLogger(__name__)

# Where every client's librdkafka log lines go (the ``logger`` setting each client is given).
LIBRDKAFKA_LOG = logging.getLogger("librdkafka")

REPEATS_HELD_S = 30.0

# What differs between two tries of one failing connection: "(after 3ms in state CONNECT)".
_TIMING = re.compile(r"\(after \d+ms in state \w+\)")


class _HoldRepeats(logging.Filter):
    """Passes a librdkafka line, then holds back the lines that repeat it (timings aside) for
    ``interval_s``; the first repeat after that passes, saying how many were held back."""

    MAX_KEPT = 1000  # distinct lines remembered; more (a storm of distinct errors) starts over

    def __init__(self, interval_s: float) -> None:
        super().__init__()
        self._interval_s = interval_s
        self._lock = threading.Lock()  # clients hand lines over from any thread that polls them
        self._seen: dict[str, tuple[float, int]] = {}  # line -> (when it last passed, repeats held since)

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        key = _TIMING.sub("", text)
        with self._lock:
            last = self._seen.get(key)
            if last is not None and record.created - last[0] < self._interval_s:
                self._seen[key] = (last[0], last[1] + 1)
                return False
            if len(self._seen) >= self.MAX_KEPT:
                self._seen.clear()
            self._seen[key] = (record.created, 0)
        held = last[1] if last is not None else 0
        if held:
            record.msg, record.args = f"{text} (and {held} more like it in the last {self._interval_s:g} s)", None
        return True


LIBRDKAFKA_LOG.addFilter(_HoldRepeats(REPEATS_HELD_S))

# Owned by every reader that finds a partition's end by its EOF event; none commits an offset
# (the only record of progress is samzamp's checkpoint).
EOF_READER: Mapping[str, Any] = {"enable.auto.commit": False, "enable.partition.eof": True}

ClientKind = Literal[
    "consumer",  # a container's input consumer
    "producer",  # task outputs (container and workers); samzamp-drain's coordinator-stream writes
    "checkpoint-producer",  # checkpoints and the container's coordinator-stream writes
    "metrics-producer",  # the snapshot reporter's metrics messages
    "admin",  # topic metadata and creation
    "group-offsets",  # input offsets committed to the consumer group, for lag tools
    "end-offsets",  # exact high watermarks of inputs that start at the upcoming message
    "metadata-reader",  # reads the checkpoint topic and the coordinator stream
    "changelog-producer",  # store changes
    "changelog-reader",  # store restore and trim; offline jobs' changelog reads
    "changelog-writer",  # offline compaction's writes to a new topic
]

_ROLE: dict[str, str | None] = {
    "consumer": "consumer",
    "end-offsets": "consumer",
    "metadata-reader": "consumer",
    "changelog-reader": "consumer",
    "producer": "producer",
    "checkpoint-producer": "producer",
    "metrics-producer": "producer",
    "changelog-producer": "producer",
    "changelog-writer": "producer",
    "admin": None,
    "group-offsets": None,  # an admin client
}


@dataclass(frozen=True)
class KafkaClientSettings:
    """How every client of one Kafka system is configured; plain values, so it crosses to worker
    processes and Spark executors. Build clients' dicts with ``client_config``, never by hand."""

    system: str
    bootstrap: str
    client_id_prefix: str  # samzamp-<job.name>-<job.id>[-<process>]
    # Not in the repr: they may hold secrets (sasl.password).
    common: Mapping[str, Any] = field(default_factory=dict, repr=False)  # systems.<s>.kafka.*
    consumer: Mapping[str, Any] = field(default_factory=dict, repr=False)  # systems.<s>.consumer.*
    producer: Mapping[str, Any] = field(default_factory=dict, repr=False)  # systems.<s>.producer.*

    @classmethod
    def of(
        cls, job: str, job_id: str, system: SystemSettings, bootstrap: str, process: str = ""
    ) -> KafkaClientSettings:
        """The client settings of ``system`` for job ``job``-``job_id``, reaching
        ``bootstrap`` (the system's resolved bootstrap.servers, or the embedded broker's address);
        ``process`` names where the clients live in their client.id (e.g. ``worker-0``)."""
        prefix = f"samzamp-{job}-{job_id}" + (f"-{process}" if process else "")
        return cls(system.name, bootstrap, prefix, dict(system.kafka), dict(system.consumer), dict(system.producer))


_warned: set[tuple[str, str, str]] = set()


def client_config(
    settings: KafkaClientSettings,
    kind: ClientKind,
    defaults: Mapping[str, Any] | None = None,
    owned: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The librdkafka settings of one ``kind`` of client, in the precedence the module docstring gives."""
    role = _ROLE[kind]
    conf: dict[str, Any] = {"client.id": f"{settings.client_id_prefix}-{kind}"}
    conf.update(defaults or {})
    layers: list[tuple[str, Mapping[str, Any]]] = [("kafka", settings.common)]
    if role == "consumer":
        layers.append(("consumer", settings.consumer))
    elif role == "producer":
        layers.append(("producer", settings.producer))
    user: dict[str, str] = {}  # key -> the config key it came from
    for block, values in layers:
        for k, v in values.items():
            if k == "bootstrap.servers":
                continue  # resolved once per system: settings.bootstrap
            conf[k] = v
            user[k] = f"systems.{settings.system}.{block}.{k}"
    for k, v in (owned or {}).items():
        if k in user and _text(conf[k]) != _text(v) and (user[k], kind, k) not in _warned:
            _warned.add((user[k], kind, k))
            log.warning("%s is not used by the %s client: samzamp needs %s = %s there", user[k], kind, k, _text(v))
        conf[k] = v
    conf["bootstrap.servers"] = settings.bootstrap
    conf["logger"] = LIBRDKAFKA_LOG
    if log.isEnabledFor(logging.DEBUG):
        log.debug("kafka %s client of system %r: %s", kind, settings.system, redacted(conf))
    return conf


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value).strip().lower()
