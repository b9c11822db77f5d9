"""``ZkMetadataStore`` against the real ZooKeeper: the MetadataStore contract, values over a znode's
1 MiB split and checked, atomic replacement, two clients, and key names ZooKeeper would refuse."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator

import pytest
from kazoo.client import KazooClient

from samzamp.coordinator.metadata_store import MetadataStore
from samzamp.coordinator.zk.client import connect
from samzamp.coordinator.zk.errors import ZkValueError
from samzamp.coordinator.zk.keys import ZkKeys, decode_name, encode_name
from samzamp.coordinator.zk.metadata_store import ZkMetadataStore, ZkMetadataStores
from samzamp.coordinator.zk.server import EmbeddedZooKeeper
from samzamp.coordinator.zk.values import SEGMENT_BYTES

pytestmark = pytest.mark.integration

BIG = 5 * 1024 * 1024 + 17  # six segments, the last one short


def _connect(zookeeper: EmbeddedZooKeeper) -> KazooClient:
    return connect(zookeeper.connect_string, 10_000, 10_000)


@pytest.fixture
def client(zookeeper: EmbeddedZooKeeper) -> Iterator[KazooClient]:
    c = _connect(zookeeper)
    try:
        yield c
    finally:
        c.stop()
        c.close()


@pytest.fixture
def stores(client: KazooClient, unique: str) -> ZkMetadataStores:
    return ZkMetadataStores(client, ZkKeys(f"job-{unique}", "1"))


def _generations(client: KazooClient, store: ZkMetadataStore, key: str) -> list[str]:
    return sorted(client.get_children(f"{store.path}/{encode_name(key)}"))


def test_it_is_a_metadata_store(stores: ZkMetadataStores) -> None:
    store: MetadataStore = stores.namespace("runs")
    assert store.get("a") is None
    assert store.all() == {}
    store.put("a", b"1")
    store.put_all({"b": b"2", "c": b""})
    store.put("a", b"one")
    assert store.get("a") == b"one"
    assert store.get("c") == b""
    assert store.all() == {"a": b"one", "b": b"2", "c": b""}
    store.delete("b")
    store.delete("b")  # absent: nothing to do
    assert store.get("b") is None
    assert store.all() == {"a": b"one", "c": b""}


def test_namespaces_are_apart_and_live_under_the_jobs_root(client: KazooClient, stores: ZkMetadataStores) -> None:
    runs, drains = stores.namespace("runs"), stores.namespace("drain notifications")
    runs.put("k", b"run")
    drains.put("k", b"drain")
    assert (runs.get("k"), drains.get("k")) == (b"run", b"drain")
    assert runs.path == f"{stores.keys.root}/metadata/runs"
    assert sorted(client.get_children(stores.keys.metadata_root)) == ["drain notifications", "runs"]


def test_a_value_of_several_mib_is_split_and_read_back_whole(client: KazooClient, stores: ZkMetadataStores) -> None:
    store = stores.namespace("big")
    value = os.urandom(BIG)
    store.put("model", value)
    assert store.get("model") == value
    [generation] = _generations(client, store, "model")
    segments = client.get_children(f"{store.path}/model/{generation}")
    assert sorted(segments, key=int) == [str(i) for i in range(-(-BIG // SEGMENT_BYTES))] == [str(i) for i in range(6)]
    # Replaced by another large value: one generation again, the new one; by a small one: none.
    other = os.urandom(2 * SEGMENT_BYTES + 1)
    store.put("model", other)
    assert store.get("model") == other
    [newer] = _generations(client, store, "model")
    assert newer > generation
    store.put("model", b"small")
    assert store.get("model") == b"small"
    assert _generations(client, store, "model") == []
    store.put("model", value)
    store.delete("model")
    assert store.get("model") is None
    assert client.exists(f"{store.path}/model") is None


def test_a_value_of_exactly_one_segment_stays_in_its_node(client: KazooClient, stores: ZkMetadataStores) -> None:
    store = stores.namespace("edge")
    value = os.urandom(SEGMENT_BYTES)
    store.put("k", value)
    assert store.get("k") == value
    assert _generations(client, store, "k") == []
    store.put("k", value + b"!")
    assert store.get("k") == value + b"!"
    assert len(_generations(client, store, "k")) == 1


def test_a_corrupt_segment_is_detected(client: KazooClient, stores: ZkMetadataStores) -> None:
    store = stores.namespace("corrupt")
    value = os.urandom(BIG)
    store.put("model", value)
    [generation] = _generations(client, store, "model")
    segment = f"{store.path}/model/{generation}/3"
    data = bytearray(client.get(segment)[0])
    data[1000] ^= 0xFF
    client.set(segment, bytes(data))
    with pytest.raises(ZkValueError, match=r"has CRC32 0x[0-9a-f]{8} where its header says 0x[0-9a-f]{8}") as bad:
        store.get("model")
    assert bad.value.path == f"{store.path}/model"
    with pytest.raises(ZkValueError):
        store.all()
    # A missing or truncated segment: nothing partial is returned either.
    client.set(segment, bytes(data[:-1]))
    with pytest.raises(ZkValueError, match="bytes long where its header says"):
        store.get("model")
    client.delete(segment)
    with pytest.raises(ZkValueError, match=f"misses segments of its generation {generation}"):
        store.get("model")
    # Writing it again repairs it.
    store.put("model", value)
    assert store.get("model") == value


def test_a_corrupt_small_value_and_foreign_data_are_detected(client: KazooClient, stores: ZkMetadataStores) -> None:
    store = stores.namespace("corrupt-small")
    store.put("k", b"hello")
    node = f"{store.path}/k"
    data = client.get(node)[0]
    client.set(node, data[:-1] + b"X")
    with pytest.raises(ZkValueError, match="has CRC32"):
        store.get("k")
    client.set(node, b"written by someone else")
    with pytest.raises(ZkValueError, match="has no samzamp value header"):
        store.get("k")


def test_two_clients_see_each_others_writes(zookeeper: EmbeddedZooKeeper, client: KazooClient, unique: str) -> None:
    keys = ZkKeys(f"job-{unique}", "1")
    other = _connect(zookeeper)
    try:
        mine, theirs = ZkMetadataStores(client, keys).namespace("ns"), ZkMetadataStores(other, keys).namespace("ns")
        mine.put("k", b"from one")
        assert theirs.get("k") == b"from one"
        big = os.urandom(3 * SEGMENT_BYTES)
        theirs.put("k", big)
        assert mine.get("k") == big
        assert mine.all() == {"k": big}
        theirs.delete("k")
        assert mine.get("k") is None
        assert mine.all() == {}
    finally:
        other.stop()
        other.close()


def test_a_reader_never_sees_a_mix_of_two_large_values(
    zookeeper: EmbeddedZooKeeper, client: KazooClient, unique: str
) -> None:
    keys = ZkKeys(f"job-{unique}", "1")
    a, b = b"a" * (2 * SEGMENT_BYTES + 5), b"b" * (2 * SEGMENT_BYTES + 5)
    writer = ZkMetadataStores(client, keys).namespace("ns")
    writer.put("k", a)
    reader_client = _connect(zookeeper)
    seen: list[bytes | None] = []
    errors: list[BaseException] = []
    done = threading.Event()

    def read() -> None:
        reader = ZkMetadataStores(reader_client, keys).namespace("ns")
        try:
            while not done.is_set():
                seen.append(reader.get("k"))
        except BaseException as e:
            errors.append(e)

    thread = threading.Thread(target=read)
    thread.start()
    try:
        for i in range(12):
            writer.put("k", b if i % 2 == 0 else a)
    finally:
        done.set()
        thread.join(60)
        reader_client.stop()
        reader_client.close()
    assert errors == []
    assert seen
    assert {bytes(v[:1]) if v else None for v in seen} <= {b"a", b"b"}
    assert all(v in (a, b) for v in seen)


AWKWARD = [
    "Partition 3_1_2",
    "SystemStreamPartition [kafka, in, 0]",
    "a/b/c",
    "/",
    "100%",
    "%2F",
    ".",
    "..",
    "...",
    "tab\there",
    "line\nbreak",
    "naïve ünïcode 名前",
    "zookeeper",
]


@pytest.mark.parametrize("name", AWKWARD)
def test_encode_name_is_one_node_name_and_reversible(name: str) -> None:
    encoded = encode_name(name)
    assert "/" not in encoded
    assert encoded not in (".", "..")
    assert all(0x20 <= ord(ch) < 0x7F for ch in encoded)
    assert decode_name(encoded) == name


def test_readable_names_stay_readable() -> None:
    assert encode_name("Partition 3_1_2") == "Partition 3_1_2"
    assert encode_name("SystemStreamPartition [kafka, in, 0]") == "SystemStreamPartition [kafka, in, 0]"
    assert encode_name("a/b") == "a%2Fb"
    assert encode_name("100%") == "100%25"
    with pytest.raises(ValueError, match="empty name"):
        encode_name("")


def test_awkward_keys_round_trip_through_zookeeper(stores: ZkMetadataStores) -> None:
    store = stores.namespace("a/namespace with [brackets]")
    values = {name: name.encode() for name in AWKWARD}
    store.put_all(values)
    assert store.all() == values
    for name in AWKWARD:
        assert store.get(name) == name.encode()
    store.delete("a/b/c")
    assert "a/b/c" not in store.all()
    assert stores.namespace("a").all() == {}


def test_the_layout_is_samzas() -> None:
    keys = ZkKeys("word count", "2")
    root = "/app-word count-2/word count-2-2.0-coordinationData"
    assert keys.root == root
    assert keys.processors_dir == f"{root}/processors"
    assert keys.job_model_version == f"{root}/jobModelGeneration/jobModelVersion"
    assert keys.active_job_model_version == f"{root}/jobModelGeneration/activeJobModelVersion"
    assert keys.job_model(7) == f"{root}/jobModelGeneration/jobModels/7"
    barrier = f"{root}/jobModelGeneration/jobModelUpgradeBarrier/versionBarriers/barrier_7"
    assert keys.barrier_state("7") == f"{barrier}/barrier_state"
    assert keys.barrier_participant(7, "p/1") == f"{barrier}/barrier_participants/p%2F1"
    assert keys.task_locality("Partition 0") == f"{root}/taskLocality/Partition 0"
    assert ZkKeys("a/b", "1").root == "/app-a%2Fb-1/a%2Fb-1-2.0-coordinationData"
