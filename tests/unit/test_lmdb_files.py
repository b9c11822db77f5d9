"""Local store files are checked before LMDB maps them: a truncated, foreign or garbled ``data.mdb``
is refused with a reason (never a SIGBUS), and a task's storage removes such files and starts over;
a store's failing filesystem is one ``StoreError`` line naming the store, the task and the directory."""

from __future__ import annotations

import errno
import logging
import os
import shutil
import struct
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from samzamp.api.errors import StoreError
from samzamp.config import Config, validate
from samzamp.config.settings import JobSettings
from samzamp.storage.io_errors import store_io_error
from samzamp.storage.lmdb import DATA_FILE, LMDB_LOCK_FILE, LmdbEngine, check_env
from samzamp.storage.manager import TaskStorage
from samzamp.storage.offset_file import OFFSET_FILE, write_offset_file

KEYS = 20_000


def _good_env(path: Path) -> int:
    """An environment of a few MB (many pages past the meta pages); returns data.mdb's size."""
    engine = LmdbEngine(path)
    for batch in range(10):
        engine.apply([(f"k{batch}-{i:05d}".encode(), b"v" * 100) for i in range(KEYS // 10)], batch)
    engine.close()
    return (path / DATA_FILE).stat().st_size


@pytest.fixture(scope="module")
def good(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int]:
    path = tmp_path_factory.mktemp("good") / "env"
    return path, _good_env(path)


def _copy(good: tuple[Path, int], tmp_path: Path) -> Path:
    dst = tmp_path / "env"
    shutil.copytree(good[0], dst)
    return dst


# What a process does with a store directory: check it, then open it and read every entry. Run in a
# child process, so that a file LMDB maps past its end kills the child (SIGBUS), not the test run.
_OPEN_AND_READ = """
import sys
from pathlib import Path
from samzamp.api.errors import StoreError
from samzamp.storage.lmdb import LmdbEngine, check_env
path = Path(sys.argv[1])
print("check:", check_env(path))
try:
    engine = LmdbEngine(path)
except StoreError as e:
    print("refused:", e)
else:
    print("read:", sum(1 for _ in engine.items()), engine.changelog_offset())
"""


def _open_in_child(path: Path) -> str:
    done = subprocess.run(
        [sys.executable, "-c", _OPEN_AND_READ, str(path)], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, f"the process died ({done.returncode}): {done.stderr[-2000:]}"
    return done.stdout


@pytest.mark.parametrize(
    "size",
    [
        pytest.param(lambda n: 0, id="empty"),
        pytest.param(lambda n: 100, id="inside-the-first-meta-page"),
        pytest.param(lambda n: 4096, id="one-page"),
        pytest.param(lambda n: 8192, id="8KiB"),
        pytest.param(lambda n: n // 2, id="half"),
        pytest.param(lambda n: n - 4096, id="minus-4KiB"),
        pytest.param(lambda n: n - 1, id="minus-1-byte"),
    ],
)
def test_a_truncated_data_file_is_refused_with_its_reason_never_mapped(
    good: tuple[Path, int], tmp_path: Path, size: Callable[[int], int]
) -> None:
    path = _copy(good, tmp_path)
    cut = size(good[1])
    os.truncate(path / DATA_FILE, cut)
    check, refused = _open_in_child(path).splitlines()
    if cut >= 8192:  # both meta pages are there: they say how much is missing
        assert (
            check
            == f"check: data.mdb is {cut} bytes, shorter than the {good[1]} bytes ({good[1] // 4096} pages) its newest meta page uses"
        )
    else:
        assert check.startswith("check: data.mdb"), check
    assert refused.startswith(f"refused: store in {path}: its LMDB files cannot be opened safely: data.mdb"), refused


def test_a_good_environment_passes_and_reads_whole(good: tuple[Path, int], tmp_path: Path) -> None:
    path = _copy(good, tmp_path)
    assert check_env(path) is None
    assert _open_in_child(path).splitlines()[-1] == f"read: {KEYS} 9"


def test_no_files_at_all_is_no_problem(tmp_path: Path) -> None:
    assert check_env(tmp_path / "missing") is None
    assert check_env(tmp_path) is None


def _patch(path: Path, at: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(at)
        f.write(data)


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        (lambda p: (p / DATA_FILE).write_bytes(os.urandom(64 * 1024)), "not an LMDB file"),
        (lambda p: (p / DATA_FILE).write_bytes(b"\0" * 64 * 1024), "not an LMDB file"),
        (lambda p: _patch(p / DATA_FILE, 20, struct.pack("=I", 7)), "data version is 7"),
        (lambda p: _patch(p / DATA_FILE, 4096, os.urandom(4096)), "second meta page"),
        (lambda p: _patch(p / DATA_FILE, 40, struct.pack("=I", 3000)), "page size of 3000"),
        (lambda p: ((p / DATA_FILE).unlink(), (p / DATA_FILE).mkdir()), "data.mdb is not a regular file"),
        (lambda p: ((p / LMDB_LOCK_FILE).unlink(), (p / LMDB_LOCK_FILE).mkdir()), "lock.mdb is not a regular file"),
    ],
    ids=["garbage", "zeros", "version", "second-meta-page", "page-size", "data-is-a-dir", "lock-is-a-dir"],
)
def test_files_that_are_not_a_sound_environment_are_refused(
    good: tuple[Path, int], tmp_path: Path, damage: Callable[[Path], object], reason: str
) -> None:
    path = _copy(good, tmp_path)
    damage(path)
    problem = check_env(path)
    assert problem is not None
    assert reason in problem, problem
    with pytest.raises(StoreError, match="cannot be opened safely") as e:
        LmdbEngine(path)
    assert e.value.directory == str(path)


@pytest.mark.parametrize("lock", [b"", os.urandom(100), os.urandom(8192)], ids=["zero-length", "short", "garbage"])
def test_a_damaged_lock_file_is_rebuilt_and_the_data_kept(good: tuple[Path, int], tmp_path: Path, lock: bytes) -> None:
    """lock.mdb holds only the reader table, which LMDB rebuilds when it is the only opener (the
    store directory's LOCK makes it so)."""
    path = _copy(good, tmp_path)
    (path / LMDB_LOCK_FILE).write_bytes(lock)
    assert check_env(path) is None
    engine = LmdbEngine(path)
    try:
        assert (engine.count(), engine.changelog_offset()) == (KEYS, 9)
        engine.apply([(b"after", b"1")], 10)
    finally:
        engine.close()


# -- the task's storage: unusable files are removed, with one warning ------------------------------


def _settings(tmp_path: Path) -> JobSettings:
    return validate(
        Config(
            {
                "job.name": "files",
                "task.class": "samzamp.examples.word_count:WordCountTask",
                "task.inputs": ["kafka.lines"],
                "systems.kafka.samza.factory": "kafka",
                "job.non-logged.store.base.dir": str(tmp_path / "state"),
                "stores.scratch.factory": "lmdb",
                "stores.scratch.key.serde": "string",
                "stores.scratch.msg.serde": "long",
            }
        )
    )


def test_a_task_storage_removes_unusable_files_and_says_which_and_why(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings = _settings(tmp_path)
    storage = TaskStorage("Partition 3", settings, 3, {}, {})
    storage.open({})
    storage.stores["scratch"].put("kept", 1)
    storage.commit()
    storage.close()
    path = tmp_path / "state" / "scratch" / "Partition_3"

    storage = TaskStorage("Partition 3", settings, 3, {}, {})
    storage.open({})  # sound files: kept, no warning
    assert storage.stores["scratch"].get("kept") == 1
    storage.close()
    assert "cannot be used" not in caplog.text

    # Cut inside the second meta page (a cut past the meta pages is tested in a child process: LMDB
    # itself would kill this one).
    os.truncate(path / DATA_FILE, 4096)
    with caplog.at_level(logging.WARNING, logger="samzamp.storage.manager"):
        storage = TaskStorage("Partition 3", settings, 3, {}, {})
        storage.open({})
    try:
        assert storage.stores["scratch"].get("kept") is None  # a non-logged store starts empty
    finally:
        storage.close()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings
    assert warnings[0].startswith(f"store 'scratch' of task 'Partition 3': the LMDB files in {path} cannot be used")
    assert "second meta page" in warnings[0]


# -- failing filesystems: one line naming what failed and what to do -------------------------------


def test_a_full_disk_is_named_with_its_directory_and_what_to_do(tmp_path: Path) -> None:
    err = store_io_error(tmp_path, "writing to LMDB", OSError(errno.ENOSPC, "No space left on device"))
    named = err.of("counts", "Partition 0")
    text = str(named)
    assert "\n" not in text
    assert text.startswith(f"store 'counts' of task 'Partition 0' in {tmp_path}: no space left on its filesystem")
    assert "free space there" in text
    assert "job.logged.store.base.dir" in text


def test_an_io_error_with_space_left_is_an_io_error(tmp_path: Path) -> None:
    text = str(store_io_error(tmp_path, "syncing LMDB to disk", OSError(errno.EIO, "Input/output error")).of("c"))
    assert text.startswith(f"store 'c' in {tmp_path}: I/O error while syncing LMDB to disk")
    assert "check the disk" in text


def test_the_store_name_fills_the_config_key_in_the_advice(tmp_path: Path) -> None:
    text = str(store_io_error(tmp_path, "growing", OSError(errno.ENOMEM, "Cannot allocate memory")).of("counts", "t"))
    assert "stores.counts.lmdb.map.size" in text


def test_a_failed_offset_file_write_is_a_store_error_naming_the_directory(tmp_path: Path) -> None:
    (tmp_path / (OFFSET_FILE + ".tmp")).mkdir()  # the temporary file cannot be opened for writing
    with pytest.raises(StoreError, match=f"store in {tmp_path}: failed while writing its OFFSET file") as e:
        write_offset_file(tmp_path, "kafka.log.0", 5)
    assert isinstance(e.value.__cause__, OSError)


def test_a_new_store_on_a_full_filesystem_is_an_error_not_a_crash(tmp_path: Path) -> None:
    """LMDB writes its lock file's header through a map of a file it extends sparse: on a full
    filesystem that was a SIGBUS. The engine allocates the file first, so it is a StoreError."""
    if shutil.which("unshare") is None:
        pytest.skip("a full filesystem is a tmpfs in a user namespace here, and unshare(1) is not installed")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    script = 'mount -t tmpfs -o size=64k tmpfs "$1" || exit 99; head -c 1000000 /dev/zero > "$1/fill"; shift; exec "$@"'
    child = (
        "import sys; from pathlib import Path; from samzamp.storage.lmdb import LmdbEngine\n"
        "try:\n    LmdbEngine(Path(sys.argv[1]))\nexcept Exception as e:\n    print(type(e).__name__, e)"
    )
    done = subprocess.run(
        ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", script, "sh", str(mnt)]
        + [sys.executable, "-c", child, str(mnt / "store")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if done.returncode == 99 or "unshare:" in done.stderr:
        pytest.skip(f"cannot mount a tmpfs in a user namespace here: {done.stderr}")
    assert done.returncode == 0, f"the process died ({done.returncode}): {done.stderr[-2000:]}"
    assert done.stdout.startswith(f"StoreError store in {mnt / 'store'}: no space left on its filesystem"), done.stdout
