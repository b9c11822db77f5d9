"""DrainMonitor: watches the metadata store for a drain notification for this run (Samza's DrainMonitor).

``start()`` checks once at once: a notification written before the container started (or while it
was down, being restarted) drains it right away, and the monitor never polls. Otherwise it polls
every job.drain-monitor.poll.interval.ms on a thread (the store does blocking I/O) until it finds
one, then stops and calls ``on_drain`` on the event loop. States: INIT -> RUNNING -> STOPPED.

Notifications for other run ids are stale (an earlier deployment's, or meant for a later one): they
are logged once each and ignored. A failing read is logged and retried at the next poll; it does not
stop the container.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Callable

from samzamp.coordinator.metadata_store import MetadataStore
from samzamp.drain.notification import DrainNotification, read_drain_notifications

__all__ = ["DrainMonitor", "MonitorState"]

log = logging.getLogger(__name__)


class MonitorState(enum.Enum):
    INIT = "init"
    RUNNING = "running"
    STOPPED = "stopped"


class DrainMonitor:
    def __init__(
        self,
        store: MetadataStore,
        run_id: str,
        poll_interval_ms: int,
        on_drain: Callable[[DrainNotification], None],
    ) -> None:
        self._store = store
        self.run_id = run_id
        self._interval_s = poll_interval_ms / 1000
        self._on_drain = on_drain
        self._stale_seen: set[str] = set()
        self._poller: asyncio.Task[None] | None = None
        self.state = MonitorState.INIT

    def check(self) -> DrainNotification | None:
        """One read of the store (blocking): this run's notification, if there is one."""
        found = None
        for n in read_drain_notifications(self._store):
            if n.run_id == self.run_id:
                found = found or n
            elif n.uuid not in self._stale_seen:
                self._stale_seen.add(n.uuid)
                log.info(
                    "ignoring drain notification %s: it is for run %s, this run is %s", n.uuid, n.run_id, self.run_id
                )
        return found

    async def start(self) -> None:
        """Check now; drain at once if asked to, else poll in the background."""
        if self.state is not MonitorState.INIT:
            raise RuntimeError(f"DrainMonitor.start() in state {self.state.value}")
        try:
            found = await asyncio.to_thread(self.check)
        except Exception as e:  # the broker may be briefly unreachable: the polls will see it
            log.warning("drain monitor: reading the metadata store at start failed (polling): %s", e)
            found = None
        if found is not None:
            self.state = MonitorState.STOPPED
            log.info("drain notification %s for this run found at start", found.uuid)
            self._on_drain(found)
            return
        self.state = MonitorState.RUNNING
        self._poller = asyncio.get_running_loop().create_task(self._poll())

    async def _poll(self) -> None:
        while self.state is MonitorState.RUNNING:
            await asyncio.sleep(self._interval_s)
            try:
                found = await asyncio.to_thread(self.check)
            except Exception as e:  # the broker may be briefly unreachable: try again next time
                log.warning("drain monitor: reading the metadata store failed (retrying): %s", e)
                continue
            if found is not None and self.state is MonitorState.RUNNING:
                self.state = MonitorState.STOPPED
                log.info("drain notification %s for this run found", found.uuid)
                self._on_drain(found)

    def stop(self) -> None:
        self.state = MonitorState.STOPPED
        if self._poller is not None:
            self._poller.cancel()
            self._poller = None
