"""The embedded ZooKeeper: the real server (3.9) from the jars the pyspark wheel ships, run with Java 17.

Always bound to 127.0.0.1 (``clientPortAddress``), on a free port unless one is given; the admin
server is off and only the ``srvr``, ``ruok`` and ``cons`` four-letter words answer; ready once
``srvr`` reports a serving server; stopped by its pid (SIGTERM, then SIGKILL after a grace). With
``die_with_parent`` the kernel kills it if the process that started it dies (Linux PR_SET_PDEATHSIG),
as the embedded broker does.

Session timeouts: ZooKeeper clamps the session timeout a client asks for into [minSessionTimeout,
maxSessionTimeout], [2, 20] ticks unless set. The tick here is 500 ms unless given, and the bounds
are 2 ticks and ``max_session_timeout_ms`` (120 s), so a test's 1 s sessions and Samza's default
30 s (job.coordinator.zk.session.timeout.ms) are both honoured. ZooKeeper expires a silent session
between its timeout and one tick later.

Files: the work directory (a temporary one, removed at stop, unless ``work_dir`` is given) holds
``zoo.cfg``, ``log4j2.properties``, ``zookeeper.log`` (the JVM's output: ZooKeeper's log at INFO) and
``data/`` (snapshots and the transaction log). A given ``work_dir`` is kept, so a server started
again on it, on the same ``port``, finds its znodes and its clients' sessions.

Needs Java (``$JAVA_HOME/bin/java``, else ``java`` on PATH; 17 is what pyspark's jars are tested
with) and pyspark's jars (samzamp[offline]); pyspark itself is never imported.
"""

from __future__ import annotations

import ctypes
import importlib.util
import logging
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from samzamp.api.errors import SystemFailureError
from samzamp.extras import OFFLINE, MissingExtraError

__all__ = [
    "DEFAULT_MAX_SESSION_TIMEOUT_MS",
    "DEFAULT_TICK_TIME_MS",
    "EmbeddedZooKeeper",
    "java_binary",
    "zookeeper_classpath",
]

log = logging.getLogger(__name__)

DEFAULT_TICK_TIME_MS = 500
DEFAULT_MAX_SESSION_TIMEOUT_MS = 120_000
MAIN_CLASS = "org.apache.zookeeper.server.ZooKeeperServerMain"
STOP_GRACE_S = 5.0
# The server keeps little: a small heap and the serial collector spare a shared machine's cores.
JVM_OPTIONS = ["-Xmx256m", "-XX:+UseSerialGC", "-Dzookeeper.jmx.log4j.disable=true"]

LOG4J2 = """\
status = warn
appender.out.type = Console
appender.out.name = out
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = %d{ISO8601} %-5p [%t] %c{1}: %m%n
rootLogger.level = info
rootLogger.appenderRef.out.ref = out
"""


def java_binary() -> str:
    """``$JAVA_HOME/bin/java`` when it is there, else ``java`` on PATH; ``SystemFailureError`` naming
    both places when neither is."""
    home = os.environ.get("JAVA_HOME")
    if home:
        candidate = Path(home) / "bin" / "java"
        if os.access(candidate, os.X_OK):
            return str(candidate)
    found = shutil.which("java")
    if found:
        return found
    where = f"$JAVA_HOME/bin/java ({home}/bin/java)" if home else "$JAVA_HOME (unset)"
    raise SystemFailureError(
        f"the embedded ZooKeeper needs Java 17: found none in {where} nor on PATH; install one "
        "(e.g. apt-get install openjdk-17-jre-headless) or set JAVA_HOME"
    )


def zookeeper_classpath() -> str:
    """The class path ``<pyspark>/jars/*``, found without importing pyspark; ``MissingExtraError``
    without pyspark, ``SystemFailureError`` when its jars hold no ZooKeeper."""
    spec = importlib.util.find_spec("pyspark")
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    if not locations:
        raise MissingExtraError(OFFLINE, " (its jars hold the ZooKeeper server)")
    for location in locations:
        jars = Path(location) / "jars"
        if any(jars.glob("zookeeper-[0-9]*.jar")) and any(jars.glob("zookeeper-jute-*.jar")):
            return str(jars / "*")
    raise SystemFailureError(
        f"no zookeeper-*.jar and zookeeper-jute-*.jar in {Path(locations[0]) / 'jars'}: this pyspark does not "
        "ship the ZooKeeper server; reinstall it with pip install 'samzamp[offline]'"
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _port_is_free(port: int) -> bool:
    with socket.socket() as s:
        # As ZooKeeper binds: a port a stopped server left in TIME_WAIT counts as free.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def _die_with_parent() -> None:
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _four_letter_word(port: int, word: bytes, timeout_s: float = 1.0) -> str:
    with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as s:
        s.sendall(word)
        chunks = []
        while chunk := s.recv(4096):
            chunks.append(chunk)
    return b"".join(chunks).decode("utf-8", "replace")


class EmbeddedZooKeeper:
    """A standalone ZooKeeper server on 127.0.0.1. Use as a context manager, or call start() / stop().

    ``port`` 0 picks a free one; ``tick_time_ms`` sets ZooKeeper's tick, and with it the shortest
    session (2 ticks) and how late past its timeout a session expires (at most a tick).
    """

    def __init__(
        self,
        die_with_parent: bool = False,
        work_dir: str | Path | None = None,
        port: int = 0,
        tick_time_ms: int = DEFAULT_TICK_TIME_MS,
        max_session_timeout_ms: int = DEFAULT_MAX_SESSION_TIMEOUT_MS,
    ) -> None:
        if tick_time_ms <= 0 or max_session_timeout_ms < 2 * tick_time_ms:
            raise ValueError(
                f"tick_time_ms={tick_time_ms}, max_session_timeout_ms={max_session_timeout_ms}: "
                "the tick must be positive and the longest session at least 2 ticks"
            )
        self.port = port
        self.process: subprocess.Popen[bytes] | None = None
        self._fixed_port = port
        self._die_with_parent = die_with_parent
        self._given_dir = Path(work_dir) if work_dir is not None else None
        self._work_dir: Path | None = None
        self.tick_time_ms = tick_time_ms
        self.max_session_timeout_ms = max_session_timeout_ms

    @property
    def connect_string(self) -> str:
        """``127.0.0.1:<port>``: the value of job.coordinator.zk.connect."""
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        """The server's pid while it runs."""
        return self.process.pid if self.process is not None else None

    @property
    def work_dir(self) -> Path | None:
        """The directory of its config, log and data while it runs (see the module docstring)."""
        return self._work_dir

    @property
    def log_path(self) -> Path | None:
        """The JVM's output (ZooKeeper's log) while it runs."""
        return self._work_dir / "zookeeper.log" if self._work_dir is not None else None

    def start(self, timeout_s: float = 60.0) -> EmbeddedZooKeeper:
        """Start the server and wait until it serves; returns self. ``SystemFailureError`` names what
        is missing or what went wrong (with the last lines of its log) when it cannot start."""
        if self.process is not None:
            return self
        java = java_binary()
        classpath = zookeeper_classpath()
        if self._fixed_port and not _port_is_free(self._fixed_port):
            raise SystemFailureError(
                f"the embedded ZooKeeper cannot listen on 127.0.0.1:{self._fixed_port}: the port is in use; "
                "stop what holds it, or let it pick a free port"
            )
        why = ""
        for _attempt in range(1 if self._fixed_port else 3):  # a free port can be taken between probe and bind
            self.port = self._fixed_port or _free_port()
            work = self._prepare_work_dir()
            with open(work / "zookeeper.log", "ab") as out:
                self.process = subprocess.Popen(
                    [
                        java,
                        *JVM_OPTIONS,
                        f"-Dlog4j2.configurationFile={work / 'log4j2.properties'}",
                        "-cp",
                        classpath,
                        MAIN_CLASS,
                        str(work / "zoo.cfg"),
                    ],
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=out,
                    cwd=work,
                    preexec_fn=_die_with_parent if self._die_with_parent else None,
                )
            why = self._wait_ready(timeout_s)
            if not why:
                log.info("embedded ZooKeeper (pid %d) at %s", self.process.pid, self.connect_string)
                return self
            why += self._log_tail()
            self.stop()
        raise SystemFailureError(f"the embedded ZooKeeper did not start on 127.0.0.1:{self.port}: {why}")

    def _prepare_work_dir(self) -> Path:
        if self._given_dir is not None:
            work = self._given_dir
            work.mkdir(parents=True, exist_ok=True)
        else:
            work = Path(tempfile.mkdtemp(prefix="samzamp-zookeeper-"))
        self._work_dir = work
        (work / "data").mkdir(exist_ok=True)
        (work / "log4j2.properties").write_text(LOG4J2)
        (work / "zoo.cfg").write_text(
            "\n".join(
                [
                    f"tickTime={self.tick_time_ms}",
                    f"dataDir={work / 'data'}",
                    f"clientPort={self.port}",
                    "clientPortAddress=127.0.0.1",
                    f"minSessionTimeout={2 * self.tick_time_ms}",
                    f"maxSessionTimeout={self.max_session_timeout_ms}",
                    # Every processor, tool and test of one machine connects from 127.0.0.1.
                    "maxClientCnxns=0",
                    "admin.enableServer=false",
                    "4lw.commands.whitelist=srvr,ruok,cons",
                    "",
                ]
            )
        )
        return work

    def _wait_ready(self, timeout_s: float) -> str:
        """'' once the server serves, else why not."""
        assert self.process is not None
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            code = self.process.poll()
            if code is not None:
                return f"java exited with code {code}"
            try:
                if "Mode: standalone" in _four_letter_word(self.port, b"srvr"):
                    return ""
            except OSError:
                pass
            time.sleep(0.1)  # not an event: the JVM starts in ~1 s and says nothing when it listens
        return f"not serving within {timeout_s:.0f} s"

    def _log_tail(self, lines: int = 3) -> str:
        path = self.log_path
        try:
            text = path.read_text(errors="replace") if path is not None else ""
        except OSError:
            return ""
        tail = [line.strip() for line in text.splitlines() if line.strip()][-lines:]
        return f"; its log ends: {' | '.join(tail)[-600:]}" if tail else ""

    def stop(self) -> None:
        """Stop the server (SIGTERM, SIGKILL after a grace) and remove a temporary work directory."""
        p = self.process
        if p is not None:
            if p.poll() is None:
                os.kill(p.pid, signal.SIGTERM)
                try:
                    p.wait(timeout=STOP_GRACE_S)
                except subprocess.TimeoutExpired:
                    os.kill(p.pid, signal.SIGKILL)
                    p.wait()
            self.process = None
        if self._work_dir is not None and self._given_dir is None:
            shutil.rmtree(self._work_dir, ignore_errors=True)
        self._work_dir = None

    def __enter__(self) -> EmbeddedZooKeeper:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
