"""The embedded ZooKeeper (server, ``samzamp-zookeeper``), ``connect()`` and its errors, and the
root's protocol version check: all against the real server from pyspark's jars."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from kazoo.client import KazooClient, KazooState

from samzamp import __version__
from samzamp.api.errors import ConfigError, SystemFailureError
from samzamp.coordinator.zk.client import CONNECT_KEY, connect, split_chroot
from samzamp.coordinator.zk.errors import ZkProtocolError
from samzamp.coordinator.zk.keys import PROTOCOL_VERSION, ZkKeys, ensure_root
from samzamp.coordinator.zk.server import EmbeddedZooKeeper, _four_letter_word, java_binary

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def client(zookeeper: EmbeddedZooKeeper) -> Iterator[KazooClient]:
    c = connect(zookeeper.connect_string, 10_000, 10_000)
    try:
        yield c
    finally:
        c.stop()
        c.close()


def _listening(pid: int) -> list[tuple[str, int]]:
    return sorted(
        (c.laddr.ip, c.laddr.port) for c in psutil.Process(pid).net_connections(kind="inet") if c.status == "LISTEN"
    )


def _session_timeout_ms(zookeeper: EmbeddedZooKeeper, c: KazooClient) -> int:
    """The timeout the server gave ``c``'s session, from ``cons`` (kazoo does not keep it)."""
    sid = f"sid=0x{c.client_id[0]:x},"
    line = next(line for line in _four_letter_word(zookeeper.port, b"cons").splitlines() if sid in line)
    found = re.search(r"\bto=(\d+)", line)
    assert found is not None, line
    return int(found.group(1))


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _wait_gone(pid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while not _gone(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)  # another process's death gives this one no event to wait on
    return True


# --- the server ---------------------------------------------------------------------------------


def test_it_serves_on_127_0_0_1_only_and_no_admin_server(zookeeper: EmbeddedZooKeeper) -> None:
    assert zookeeper.pid is not None
    assert "Mode: standalone" in _four_letter_word(zookeeper.port, b"srvr")
    # Its only listening socket is the client port on the loopback address: no admin server (8080).
    assert [(ip.removeprefix("::ffff:"), port) for ip, port in _listening(zookeeper.pid)] == [
        ("127.0.0.1", zookeeper.port)
    ]
    assert zookeeper.connect_string == f"127.0.0.1:{zookeeper.port}"


def test_short_and_samza_default_session_timeouts_are_honoured(zookeeper: EmbeddedZooKeeper) -> None:
    # ZooKeeper's default bounds with a 500 ms tick would be [1000, 10000]: 30000 would become 10000.
    for asked in (1_000, 30_000):
        c = connect(zookeeper.connect_string, asked, 10_000)
        try:
            assert _session_timeout_ms(zookeeper, c) == asked
        finally:
            c.stop()
            c.close()


def test_a_stopped_processes_session_expires_within_its_timeout_and_a_tick(
    zookeeper: EmbeddedZooKeeper, client: KazooClient, unique: str
) -> None:
    path = f"/expiry-{unique}"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(
                f"""
                import time
                from samzamp.coordinator.zk.client import connect
                c = connect({zookeeper.connect_string!r}, 1000, 10000)
                c.create({path!r}, ephemeral=True)
                print("ready", flush=True)
                time.sleep(600)
                """
            ),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "ready"
        deleted = threading.Event()
        assert client.exists(path, watch=lambda event: deleted.set()) is not None
        holder.send_signal(signal.SIGSTOP)
        stopped_at = time.monotonic()
        assert deleted.wait(15), "the stopped process's session did not expire"
        # At most its 1 s timeout and a 500 ms tick after the last ping it sent, plus slack for a
        # loaded machine; never ZooKeeper's default clamp (a 4 s session with a 2 s tick).
        assert time.monotonic() - stopped_at < 3.5
        assert client.exists(path) is None
    finally:
        holder.kill()
        holder.wait()
        if holder.stdout is not None:
            holder.stdout.close()


def test_started_again_on_its_work_dir_and_port_it_keeps_znodes_and_sessions(tmp_path: Path) -> None:
    work = tmp_path / "zk"
    first = EmbeddedZooKeeper(work_dir=work).start()
    c = connect(first.connect_string, 20_000, 10_000)
    try:
        c.create("/kept", b"v")
        c.create("/mine", ephemeral=True)
        back = threading.Event()
        states: list[str] = []

        def listen(state: str) -> None:
            states.append(state)
            if state == KazooState.CONNECTED and KazooState.SUSPENDED in states:
                back.set()

        c.add_listener(listen)
        port = first.port
        first.stop()
        assert (work / "data" / "version-2").is_dir()
        assert (work / "zoo.cfg").is_file()
        with EmbeddedZooKeeper(work_dir=work, port=port) as second:
            assert second.connect_string == f"127.0.0.1:{port}"
            # The client retries at least once a second: it is back well within its session. Should
            # it not be, the server's side of the attempts is in its log (both starts append to it).
            if not back.wait(10):
                log_tail = (work / "zookeeper.log").read_text(errors="replace").splitlines()[-40:]
                raise AssertionError(f"client states {states}; the server's log ends:\n" + "\n".join(log_tail))
            assert KazooState.LOST not in states
            assert c.get("/kept")[0] == b"v"
            assert c.exists("/mine") is not None
    finally:
        c.stop()
        c.close()


def test_stop_ends_the_process_and_removes_its_temporary_work_dir() -> None:
    z = EmbeddedZooKeeper().start()
    pid, work = z.pid, z.work_dir
    assert pid is not None
    assert work is not None
    assert (work / "zookeeper.log").is_file()
    z.stop()
    assert _gone(pid)
    assert not work.exists()
    assert z.pid is None
    assert z.work_dir is None


def test_it_dies_with_the_process_that_started_it() -> None:
    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import time\n"
            "from samzamp.coordinator.zk.server import EmbeddedZooKeeper\n"
            "z = EmbeddedZooKeeper(die_with_parent=True).start()\n"
            "print(z.pid, z.work_dir, flush=True)\n"
            "time.sleep(600)\n",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert parent.stdout is not None
    pid_text, work = parent.stdout.readline().split()
    parent.stdout.close()
    try:
        parent.kill()
        parent.wait()
        assert _wait_gone(int(pid_text), 15), "ZooKeeper outlived the process that started it"
    finally:
        if not _gone(int(pid_text)):
            os.kill(int(pid_text), signal.SIGKILL)
        shutil.rmtree(work, ignore_errors=True)


def test_a_taken_port_is_named(zookeeper: EmbeddedZooKeeper) -> None:
    with pytest.raises(SystemFailureError, match=rf"127\.0\.0\.1:{zookeeper.port}: the port is in use"):
        EmbeddedZooKeeper(port=zookeeper.port).start()


def test_no_java_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JAVA_HOME", str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(SystemFailureError, match=r"needs Java 17: found none in \$JAVA_HOME/bin/java .* nor on PATH"):
        java_binary()
    with pytest.raises(SystemFailureError, match="needs Java 17"):
        EmbeddedZooKeeper().start()


# --- samzamp-zookeeper ---------------------------------------------------------------------------


def test_cli_serves_until_sigterm() -> None:
    proc = subprocess.Popen([str(ROOT / "bin" / "samzamp-zookeeper")], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        assert line.startswith("job.coordinator.zk.connect=127.0.0.1:"), line
        address = line.split("=", 1)[1]
        c = connect(address, 10_000, 10_000)
        try:
            c.create("/cli", b"ok")
            assert c.get("/cli")[0] == b"ok"
        finally:
            c.stop()
            c.close()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        # Its server went with it.
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", int(address.rsplit(":", 1)[1])), 1).close()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


def _cli(*args: str, env: dict[str, str] | None = None, code: str = "") -> subprocess.CompletedProcess[str]:
    run = f"{code}import sys; from samzamp.cli.zookeeper import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run(
        [sys.executable, "-c", run, *args], capture_output=True, text=True, timeout=60, check=False, env=env
    )


def test_cli_help_and_version_start_nothing() -> None:
    r = _cli("--help")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("usage: samzamp zookeeper [-h] [--version]")
    assert not [line for line in r.stdout.splitlines() if line.startswith("job.coordinator.zk.connect=")]
    r = _cli("--version")
    assert r.returncode == 0
    assert r.stdout == f"samzamp {__version__}\n"


def test_cli_without_pyspark_exits_2_naming_the_extra() -> None:
    r = _cli(code="import sys; sys.modules['pyspark'] = None; ")  # as if it were not installed
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert r.stderr == (
        "samzamp zookeeper: needs PySpark: pip install 'samzamp[offline]' (its jars hold the ZooKeeper server)\n"
    )


def test_cli_without_java_exits_1_naming_it(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"} | {"PATH": str(tmp_path)}
    r = _cli(env=env)
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert r.stderr.startswith("samzamp zookeeper: failed: the embedded ZooKeeper needs Java 17: found none in")
    assert r.stderr.count("\n") == 1


# --- connect() ---------------------------------------------------------------------------------


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_an_unreachable_zookeeper_fails_within_the_connection_timeout_naming_the_key() -> None:
    address = f"127.0.0.1:{_closed_port()}"
    threads = set(threading.enumerate())
    started = time.monotonic()
    with pytest.raises(SystemFailureError) as failed:
        connect(address, 10_000, 2_000)
    elapsed = time.monotonic() - started
    assert 1.9 <= elapsed < 3.5, elapsed
    message = str(failed.value)
    assert message.startswith(f"{CONNECT_KEY}: no ZooKeeper answered at {address} within 2000 ms"), message
    assert "job.coordinator.zk.connection.timeout.ms" in message
    assert "samzamp zookeeper" in message
    assert set(threading.enumerate()) == threads, "a thread of the failed client lingers"


def test_a_server_that_never_answers_fails_within_the_connection_timeout_too() -> None:
    # A stopped ZooKeeper: the kernel accepts the connection, nothing answers.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        address = f"127.0.0.1:{silent.getsockname()[1]}"
        threads = set(threading.enumerate())
        started = time.monotonic()
        with pytest.raises(SystemFailureError, match=CONNECT_KEY):
            connect(address, 4_000, 1_500)
        assert time.monotonic() - started < 3.5
        # What is left of the client ends by itself, within the session timeout.
        for t in set(threading.enumerate()) - threads:
            t.join(10)
            assert not t.is_alive(), t.name


def test_an_attempt_on_a_server_that_accepts_and_never_answers_is_given_up_within_a_third_of_the_session() -> None:
    """ZooKeeper 3.9 leaves a connection made while it starts open and silent: a reconnecting client
    must not wait its whole session on it (kazoo's own bound), or it loses the session."""
    accepted: list[tuple[float, socket.socket]] = []
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)

        def hold() -> None:  # accept every connection, answer nothing
            while True:
                try:
                    accepted.append((time.monotonic(), silent.accept()[0]))
                except OSError:
                    return

        threading.Thread(target=hold, daemon=True).start()
        try:
            with pytest.raises(SystemFailureError, match=CONNECT_KEY):
                connect(f"127.0.0.1:{silent.getsockname()[1]}", 6_000, 5_000)
            times = [t for t, _ in accepted]
            # Without the bound the first attempt waits the whole 6 s session: one connection here.
            assert len(times) >= 2, times
            assert times[1] - times[0] < 6.0 / 3 + 1.5
        finally:
            silent.shutdown(socket.SHUT_RDWR)
            for _, conn in accepted:
                conn.close()


def test_a_missing_chroot_is_named(zookeeper: EmbeddedZooKeeper, unique: str) -> None:
    chroot = f"/no-such-chroot-{unique}"
    with pytest.raises(SystemFailureError) as failed:
        connect(zookeeper.connect_string + chroot, 10_000, 10_000)
    assert str(failed.value).startswith(
        f"{CONNECT_KEY}: the chroot {chroot} does not exist on ZooKeeper at {zookeeper.connect_string}: create it"
    )


def test_an_existing_chroot_roots_every_path(zookeeper: EmbeddedZooKeeper, client: KazooClient, unique: str) -> None:
    chroot = f"/chroot-{unique}"
    client.create(chroot)
    rooted = connect(f"{zookeeper.connect_string}{chroot}/", 10_000, 10_000)
    try:
        rooted.create("/inside", b"x")
    finally:
        rooted.stop()
        rooted.close()
    assert client.get(f"{chroot}/inside")[0] == b"x"


def test_split_chroot() -> None:
    assert split_chroot("a:1,b:2") == ("a:1,b:2", "")
    assert split_chroot("a:1,b:2/x/y/") == ("a:1,b:2", "/x/y")
    assert split_chroot("a:1/") == ("a:1", "")


def test_a_connect_string_without_host_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=rf"{re.escape(CONNECT_KEY)}: '/chroot' names no host"):
        connect("/chroot", 10_000, 1_000)


# --- the root's protocol version -----------------------------------------------------------------


def test_ensure_root_writes_the_protocol_version_once(client: KazooClient, unique: str) -> None:
    keys = ZkKeys(f"job-{unique}", "1")
    ensure_root(client, keys)
    ensure_root(client, keys)
    data, stat = client.get(keys.root)
    assert data == PROTOCOL_VERSION.encode() == b"1.0"
    assert stat.version == 0


def test_ensure_root_fills_in_a_root_made_as_a_parent(client: KazooClient, unique: str) -> None:
    keys = ZkKeys(f"job-{unique}", "1")
    client.create(keys.processors_dir, makepath=True)
    ensure_root(client, keys)
    assert client.get(keys.root)[0] == b"1.0"


def test_ensure_root_refuses_another_protocol_version(client: KazooClient, unique: str) -> None:
    keys = ZkKeys(f"job-{unique}", "1")
    client.create(keys.root, b"0.9", makepath=True)
    with pytest.raises(ZkProtocolError) as refused:
        ensure_root(client, keys)
    assert (refused.value.path, refused.value.found, refused.value.expected) == (keys.root, "0.9", "1.0")
    assert str(refused.value).startswith(
        f"ZooKeeper node {keys.root} holds coordination protocol version '0.9', this samzamp speaks '1.0': run"
    )
    assert client.get(keys.root)[0] == b"0.9", "the other version's data must be left alone"
