"""``samzamp stores inspect`` on store directories made here: what it reads, that it changes nothing,
damaged values, the old store format, a store a live process holds, and names that do not exist.
(The run against a real job: tests/integration/test_ops_inspect.py.)"""

from __future__ import annotations

import hashlib
import json
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from samzamp.config import Config, validate
from samzamp.config.settings import JobSettings
from samzamp.storage.dirs import StoreLockedError, lock_store_dir, unlock_store_dir
from samzamp.storage.inspect import StoreNotFoundError, inspect_store, key_candidates
from samzamp.storage.lmdb import LmdbEngine

ROOT = Path(__file__).resolve().parents[2]


def _config(tmp_path: Path, checksums: bool = True) -> dict[str, object]:
    return {
        "job.name": "inspect",
        "task.class": "samzamp.examples.word_count:WordCountTask",
        "task.inputs": ["kafka.lines"],
        "systems.kafka.samza.factory": "kafka",
        "job.non-logged.store.base.dir": str(tmp_path / "state"),
        "stores.counts.factory": "lmdb",
        "stores.counts.key.serde": "string",
        "stores.counts.msg.serde": "long",
        "stores.counts.lmdb.checksums": checksums,
        "stores.docs.factory": "lmdb",
        "stores.docs.key.serde": "integer",
        "stores.docs.msg.serde": "json",
    }


def _settings(tmp_path: Path, checksums: bool = True) -> JobSettings:
    return validate(Config(_config(tmp_path, checksums)))


def _counts(tmp_path: Path, task: str = "Partition_1", checksums: bool = True, n: int = 5) -> Path:
    path = tmp_path / "state" / "counts" / task
    engine = LmdbEngine(path, checksums=checksums)
    engine.apply([(f"w{i}".encode(), struct.pack(">q", i * 10)) for i in range(n)], 7)
    engine.close()
    return path


def _fingerprint(path: Path) -> dict[str, tuple[str, int]]:
    """Each file of the directory: its bytes' digest and its mtime."""
    return {f.name: (hashlib.sha256(f.read_bytes()).hexdigest(), f.stat().st_mtime_ns) for f in sorted(path.iterdir())}


def _flip_value(path: Path, value: bytes) -> None:
    """Change one byte of ``value`` where data.mdb holds it (as a bad sector would)."""
    data = bytearray((path / "data.mdb").read_bytes())
    at = data.find(value)
    assert at >= 0
    data[at] ^= 0x01
    (path / "data.mdb").write_bytes(bytes(data))


def test_it_reads_keys_and_values_with_the_store_serdes_and_changes_no_file(tmp_path: Path) -> None:
    path = _counts(tmp_path)
    before = _fingerprint(path)
    listing = inspect_store(_settings(tmp_path), "counts", "Partition 1")
    assert [(e.key, e.value) for e in listing.entries] == [(f"w{i}", i * 10) for i in range(5)]
    assert (listing.count, listing.format, listing.changelog_offset, listing.truncated) == (5, 2, 7, False)
    assert inspect_store(_settings(tmp_path), "counts", "Partition_1", limit=2).truncated
    assert [e.value for e in inspect_store(_settings(tmp_path), "counts", "Partition 1", key="w3").entries] == [30]
    missing = inspect_store(_settings(tmp_path), "counts", "Partition 1", key="w9")
    assert missing.missing_key
    assert missing.entries == []
    assert _fingerprint(path) == before


def test_a_key_is_found_through_the_key_serde_from_its_text(tmp_path: Path) -> None:
    assert key_candidates("12") == ["12", 12, 12, b"12"]
    path = tmp_path / "state" / "docs" / "Partition_0"
    engine = LmdbEngine(path)
    engine.apply([(struct.pack(">i", 12), b'{"a":[1,2]}')], 0)
    engine.close()
    found = inspect_store(_settings(tmp_path), "docs", "Partition 0", key="12")
    assert [(e.key, e.value) for e in found.entries] == [(12, {"a": [1, 2]})]


def test_a_damaged_value_is_reported_never_shown_and_the_store_is_not_marked(tmp_path: Path) -> None:
    path = _counts(tmp_path)
    _flip_value(path, struct.pack(">q", 30))  # w3's value
    before = _fingerprint(path)
    listing = inspect_store(_settings(tmp_path), "counts", "Partition 1")
    assert [e.key for e in listing.damaged] == ["w3"]
    assert {e.key: e.value for e in listing.entries if not e.damaged} == {"w0": 0, "w1": 10, "w2": 20, "w4": 40}
    assert _fingerprint(path) == before  # no DAMAGED file: a tool changes nothing

    r = _cli(tmp_path, "--store", "counts", "--task", "Partition 1")
    assert r.returncode == 1
    assert "w3" not in r.stdout
    assert r.stdout.count("\n") == 4
    assert "damaged: the value of key w3 in store 'counts' of task 'Partition 1' fails its checksum" in r.stderr


def test_a_store_of_the_old_format_is_read_as_it_is_and_not_converted(tmp_path: Path) -> None:
    path = _counts(tmp_path, checksums=False)
    before = _fingerprint(path)
    listing = inspect_store(_settings(tmp_path), "counts", "Partition 1")  # the config asks for checksums
    assert listing.format == 1
    assert [e.value for e in listing.entries] == [0, 10, 20, 30, 40]
    assert _fingerprint(path) == before


def test_a_store_a_live_process_holds_is_refused_unless_a_snapshot_is_asked_for(tmp_path: Path) -> None:
    path = _counts(tmp_path)
    fd = lock_store_dir(path)  # as a running task holds it
    try:
        with pytest.raises(StoreLockedError, match=r"store .counts. of task .Partition 1. .* \(pid \d+ .*--snapshot"):
            inspect_store(_settings(tmp_path), "counts", "Partition 1")
        snap = inspect_store(_settings(tmp_path), "counts", "Partition 1", snapshot=True)
        assert snap.snapshot
        assert len(snap.entries) == 5
        r = _cli(tmp_path, "--store", "counts", "--task", "Partition 1")
        assert r.returncode == 3, r.stderr
        assert "--snapshot" in r.stderr
    finally:
        unlock_store_dir(fd)


def test_a_missing_store_or_task_names_what_exists(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    with pytest.raises(StoreNotFoundError, match="its stores are counts, docs"):
        inspect_store(settings, "count", "Partition 1")
    with pytest.raises(StoreNotFoundError, match="no directory .*state/counts"):
        inspect_store(settings, "counts", "Partition 1")
    _counts(tmp_path, "Partition_1")
    _counts(tmp_path, "Partition_10")
    _counts(tmp_path, "Partition_2")
    with pytest.raises(StoreNotFoundError, match="are Partition_1, Partition_2, Partition_10$"):
        inspect_store(settings, "counts", "Partition 3")
    r = _cli(tmp_path, "--store", "counts", "--task", "Partition 3")
    assert r.returncode == 2
    assert "Partition_10" in r.stderr


def test_json_output_is_one_document(tmp_path: Path) -> None:
    _counts(tmp_path)
    r = _cli(tmp_path, "--store", "counts", "--task", "Partition 1", "--json", "--limit", "2")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["entries"] == [{"key": "w0", "value": 0}, {"key": "w1", "value": 10}]
    assert (doc["count"], doc["truncated"], doc["format"], doc["changelog_offset"]) == (5, True, 2, 7)


def _cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cfg = tmp_path / "job.toml"
    cfg.write_text("".join(f'"{k}" = {json.dumps(v)}\n' for k, v in _config(tmp_path).items()))
    return subprocess.run(
        [sys.executable, "-m", "samzamp", "stores", "inspect", str(cfg), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=ROOT,
    )
