"""A kazoo client connected to a job's ZooKeeper (job.coordinator.zk.connect), or a clear error.

``connect`` returns a started, connected ``KazooClient`` whose session asks for the given timeout
(ZooKeeper may clamp it: see samzamp.coordinator.zk.server). After a disconnect the client keeps
reconnecting, at least once a second, until it is stopped; what a lost or expired session means for
the job is the job coordinator's business.

A reconnect never waits out the session on one server that accepted it and does not answer: kazoo
waits for the answer to its Connect request for a whole session timeout (over the host count), and
ZooKeeper 3.9 leaves a connection that arrives while it starts (its port bound, its database not
loaded yet) open without an answer: closing it fails on the missing database. A client that
reconnects in that window of a restarted server would lose its session. ``_BoundedHandshakes``
gives up an attempt whose server has said nothing for a third of the session, and the next attempt
lands while the session lives.

Samza's rule for a chroot (``host:port/chroot``): it must already exist; ``connect`` checks it. kazoo
logs a warning at every failed connection attempt: its loggers are set to WARNING (unless the
application set a level) and a warning repeated within a minute is logged once.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from typing import Any

from kazoo.client import KazooClient
from kazoo.handlers.threading import SequentialThreadingHandler
from kazoo.retry import KazooRetry

from samzamp.api.errors import ConfigError, SystemFailureError

__all__ = ["CONNECT_KEY", "connect", "split_chroot"]

log = logging.getLogger(__name__)

CONNECT_KEY = "job.coordinator.zk.connect"
CONNECTION_TIMEOUT_KEY = "job.coordinator.zk.connection.timeout.ms"
REPEAT_WINDOW_S = 60.0
CLOSE_GRACE_S = 1.0
# A connection attempt whose server has not answered within this share of the session is given up.
HANDSHAKE_SHARE = 3


def split_chroot(connect_string: str) -> tuple[str, str]:
    """(hosts, chroot) of ``host:port[,host:port...][/chroot]``; the chroot is '' when there is none."""
    hosts, slash, chroot = connect_string.partition("/")
    return hosts, (slash + chroot).rstrip("/") if chroot.strip("/") else ""


class _BoundedHandshakes(SequentialThreadingHandler):  # type: ignore[misc]
    """kazoo's threading handler, except that a new connection's first read waits at most
    ``handshake_s``: a server that accepted a connection and says nothing that long is given up (the
    attempt fails as a time-out, and the client tries again). Once the server said anything, reads
    wait as kazoo asks. Called on kazoo's connection thread only."""

    def __init__(self, handshake_s: float) -> None:
        super().__init__()
        self._handshake_s = handshake_s
        # Each new connection's deadline for its server's first answer, until the server answers.
        self._silent: weakref.WeakKeyDictionary[Any, float] = weakref.WeakKeyDictionary()

    def create_connection(self, *args: Any, **kwargs: Any) -> Any:
        sock = super().create_connection(*args, **kwargs)
        self._silent[sock] = time.monotonic() + self._handshake_s
        return sock

    def select(self, rlist: list[Any], wlist: list[Any], xlist: list[Any], timeout: float | None = None) -> Any:
        deadlines = [self._silent[s] for s in rlist if s in self._silent]
        if deadlines:
            left = max(0.0, min(deadlines) - time.monotonic())
            timeout = left if timeout is None else min(timeout, left)
        ready = super().select(rlist, wlist, xlist, timeout)
        for s in ready[0]:
            self._silent.pop(s, None)
        return ready


class _OncePerWindow(logging.Filter):
    """Lets a message through once per window: kazoo warns at every attempt while a server is down."""

    def __init__(self, window_s: float) -> None:
        super().__init__()
        self._window_s = window_s
        self._last: dict[str, float] = {}
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        now = time.monotonic()
        with self._lock:
            if now - self._last.get(message, -self._window_s) < self._window_s:
                return False
            if len(self._last) > 100:
                self._last.clear()
            self._last[message] = now
        return True


def _quiet_kazoo() -> logging.Logger:
    kazoo_log = logging.getLogger("kazoo")
    if kazoo_log.level == logging.NOTSET:
        kazoo_log.setLevel(logging.WARNING)
    client_log = logging.getLogger("kazoo.client")
    if not any(isinstance(f, _OncePerWindow) for f in client_log.filters):
        client_log.addFilter(_OncePerWindow(REPEAT_WINDOW_S))
    return client_log


def connect(connect_string: str, session_timeout_ms: int, connection_timeout_ms: int) -> KazooClient:
    """A started ``KazooClient`` connected to ``connect_string`` (job.coordinator.zk.connect).

    Raises ``SystemFailureError`` naming the key and the address when no server answers within
    ``connection_timeout_ms`` (the client is stopped and closed, by a daemon thread that outlives the
    call only while an attempt waits on a server that accepted but does not answer, at most a session
    timeout), or when the connect string's chroot does not exist; ``ConfigError`` when it names no host.
    """
    hosts, chroot = split_chroot(connect_string)
    if not hosts.strip():
        raise ConfigError(CONNECT_KEY, f"{connect_string!r} names no host: give host:port[,host:port...][/chroot]")
    client = KazooClient(
        hosts=connect_string,
        timeout=session_timeout_ms / 1000.0,
        handler=_BoundedHandshakes(session_timeout_ms / 1000.0 / HANDSHAKE_SHARE),
        # Reconnect forever (until stopped), no more than a second apart: a server back after a
        # restart is found again well within a session timeout.
        connection_retry=KazooRetry(max_tries=-1, delay=0.1, backoff=2, max_jitter=0.1, max_delay=1.0),
        logger=_quiet_kazoo(),
    )
    # Not start(timeout): on a time-out it stops the client before raising, and stop() waits for a
    # connection attempt to give up, which against a server that accepts but never answers (a
    # stopped process) takes a whole session timeout.
    connected = client.start_async()
    connected.wait(timeout=connection_timeout_ms / 1000.0)
    if not client.connected:
        _close_soon(client)
        raise SystemFailureError(
            f"{CONNECT_KEY}: no ZooKeeper answered at {connect_string} within {connection_timeout_ms} ms "
            f"({CONNECTION_TIMEOUT_KEY}): start it (samzamp zookeeper runs one on this machine) or fix the address"
        )
    if chroot:
        try:
            missing = client.exists("/") is None
        except BaseException:
            _close(client)
            raise
        if missing:
            _close(client)
            raise SystemFailureError(
                f"{CONNECT_KEY}: the chroot {chroot} does not exist on ZooKeeper at {hosts}: create it first "
                f"(zkCli.sh -server {hosts.split(',')[0]} create {chroot}) or remove it from the address"
            )
    log.debug("connected to ZooKeeper at %s (session timeout asked: %d ms)", connect_string, session_timeout_ms)
    return client


def _close(client: KazooClient) -> None:
    client.stop()
    client.close()


def _close_quietly(client: KazooClient) -> None:
    try:
        _close(client)
    except Exception:
        log.debug("closing an unconnected ZooKeeper client", exc_info=True)


def _close_soon(client: KazooClient) -> None:
    """Stop and close ``client``, waiting at most CLOSE_GRACE_S: an attempt blocked on a server that
    does not answer ends only at its socket time-out (the session timeout); a daemon thread waits
    for it instead of the caller. Against a refused or unresolvable address it ends at once."""
    closer = threading.Thread(target=_close_quietly, args=(client,), name="samzamp-zk-close", daemon=True)
    closer.start()
    closer.join(CLOSE_GRACE_S)
