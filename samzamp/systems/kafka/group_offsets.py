"""Input offsets committed to the consumer group, for lag tools (``kafka-consumer-groups``, Burrow,
kafka-lag-exporter): the Kafka system's ``GroupOffsetCommitter``.

The input consumers only ``assign()``: they never join their group, so the group has no members
and its offsets may be set from outside, as ``kafka-consumer-groups --reset-offsets`` does. This
sends them with AlterConsumerGroupOffsets (an OffsetCommit of generation -1, which Kafka accepts
for a group with no members) from an admin client of its own: its futures complete on librdkafka's
background thread, so nothing here needs polling, and the input consumer, which another thread
polls, is never touched.

One request at a time: offsets given while one is in flight are merged (the newest value of a
partition wins) and sent when it ends, so the group sees them in the order they were given and
never an older value after a newer one.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from typing import Any

from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient

from samzamp.api.envelope import SystemStreamPartition
from samzamp.systems.kafka.client_config import KafkaClientSettings, client_config
from samzamp.systems.kafka.consumer import consumer_group

__all__ = ["KafkaGroupOffsets"]

log = logging.getLogger(__name__)

Done = Callable[[str | None], None]


class KafkaGroupOffsets:
    """Commits input offsets to the group of the system's input consumers (see the module docstring)."""

    def __init__(self, clients: KafkaClientSettings, group_id: str, request_timeout_s: float = 30.0) -> None:
        """``group_id``: what the system's consumers are made with (``consumer(group_id)``); the group
        is the one their settings give (``systems.<s>.consumer.group.id`` replaces it)."""
        self.group = consumer_group(clients, group_id)
        self._system = clients.system
        self._timeout_s = request_timeout_s
        self._admin: Any = AdminClient(client_config(clients, "group-offsets"))
        self._lock = threading.Lock()
        self._next: dict[tuple[str, int], int] = {}  # what the next request sends
        self._waiting: list[Done] = []  # told how the next request went
        self._idle = threading.Event()  # no request in flight
        self._idle.set()

    def commit(self, offsets: Mapping[SystemStreamPartition, int], done: Done) -> None:
        with self._lock:
            if self._admin is None:
                stopped = True
            else:
                stopped = False
                self._next.update(((s.stream, s.partition), o) for s, o in offsets.items())
                self._waiting.append(done)
                if not self._idle.is_set():
                    return  # sent once the request in flight ends
                self._idle.clear()
        if stopped:
            done("the committer is stopped")
            return
        self._send()

    def _send(self) -> None:
        """Send what is waiting (one request in flight: ``_idle`` is clear)."""
        with self._lock:
            batch, waiting = self._next, self._waiting
            self._next, self._waiting = {}, []
            admin = self._admin
        if not batch or admin is None:
            self._ended(waiting, None if admin is not None else "the committer is stopped")
            return
        admin.poll(0)  # serves librdkafka's log lines, which wait for a poll
        tps = [TopicPartition(topic, p, o) for (topic, p), o in sorted(batch.items())]
        try:
            futures = admin.alter_consumer_group_offsets(
                [ConsumerGroupTopicPartitions(self.group, tps)], request_timeout=self._timeout_s
            )
        except Exception as e:  # a value librdkafka refuses: said, never raised into a commit
            self._ended(waiting, f"{type(e).__name__}: {e}")
            return
        futures[self.group].add_done_callback(lambda f: self._ended(waiting, _failure(f)))

    def _ended(self, waiting: list[Done], error: str | None) -> None:
        """A request ended (any thread): tell its callers, then send what came meanwhile."""
        for done in waiting:
            try:
                done(error)
            except Exception:  # a caller's bug must not stop the commits
                log.exception("group %r: a commit's callback failed", self.group)
        with self._lock:
            more = bool(self._next) and self._admin is not None
            if not more:
                self._idle.set()
        if more:
            self._send()

    def stop(self, timeout_s: float) -> None:
        if not self._idle.wait(timeout_s):
            log.warning(
                "system %r: offsets committed to group %r not acknowledged within %.0f s",
                self._system,
                self.group,
                timeout_s,
            )
        with self._lock:
            admin, self._admin = self._admin, None
        if admin is not None:
            admin.poll(0)


def _failure(future: Future[Any]) -> str | None:
    """What failed in an AlterConsumerGroupOffsets request, or None."""
    try:
        result = future.result()
    except Exception as e:
        return str(e.args[0].str()) if e.args and hasattr(e.args[0], "str") else str(e)
    failed = [f"{tp.topic}[{tp.partition}]: {tp.error.str()}" for tp in result.topic_partitions if tp.error]
    return "; ".join(failed) or None
