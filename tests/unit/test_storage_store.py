"""The node's RocksDB store: batches that read their own writes, walks, keys of any length, and
data directories of another format refused with a clear message."""

from __future__ import annotations

from pathlib import Path

import pytest

from storagenode.layout import FORMAT_KEY, FORMAT_VERSION, Family
from storagenode.store import Store, StoreFormatError


@pytest.fixture
def store(tmp_path: Path) -> Store:
    opened = Store(tmp_path / "node")
    yield opened
    opened.close()


def fill(store: Store, keys: list[bytes]) -> None:
    batch = store.batch()
    for key in keys:
        batch.put(Family.ITEMS, key, b"v" + key)
    store.commit(batch)


def test_a_batch_reads_its_own_puts_deletes_and_range_deletes_before_the_store(
    store: Store,
) -> None:
    fill(store, [b"a", b"b", b"c"])
    batch = store.batch()
    batch.put(Family.ITEMS, b"a", b"new")
    batch.delete(Family.ITEMS, b"b")
    batch.put(Family.ITEMS, b"d", b"pending")
    assert [batch.get(Family.ITEMS, k) for k in (b"a", b"b", b"c", b"d")] == [
        b"new",
        None,
        b"vc",
        b"pending",
    ]
    batch.delete_range(Family.ITEMS, b"c", b"e")
    assert batch.get(Family.ITEMS, b"c") is None and batch.get(Family.ITEMS, b"d") is None
    batch.put(Family.ITEMS, b"d", b"again")  # A put after the range delete stands.
    assert batch.get(Family.ITEMS, b"d") == b"again"
    # Nothing is visible outside the batch until it commits.
    assert store.get(Family.ITEMS, b"a") == b"va" and store.get(Family.ITEMS, b"d") is None
    store.commit(batch)
    assert list(store.walk(Family.ITEMS, b"", None, forward=True)) == [
        (b"a", b"new"),
        (b"d", b"again"),
    ]


def test_walks_are_bounded_both_ways(store: Store) -> None:
    fill(store, [b"a", b"b", b"c", b"d"])

    def keys(lo: bytes, hi: bytes | None, forward: bool) -> list[bytes]:
        return [key for key, _ in store.walk(Family.ITEMS, lo, hi, forward=forward)]

    assert keys(b"b", b"d", True) == [b"b", b"c"]
    assert keys(b"b", b"d", False) == [b"c", b"b"]
    assert keys(b"b", b"c\x00", False) == [b"c", b"b"]
    assert keys(b"", None, False) == [b"d", b"c", b"b", b"a"]
    assert keys(b"e", None, True) == [] and keys(b"", b"a", False) == []


def test_a_walk_reads_the_state_of_its_call_not_of_its_first_step(store: Store) -> None:
    """A split pins a partition by making walks on the writer thread and reads them later
    (`storagenode.split.pin`): what commits in between must not show."""
    fill(store, [b"a", b"c"])
    forward = store.walk(Family.ITEMS, b"", None, forward=True)
    backward = store.walk(Family.ITEMS, b"", None, forward=False)
    fill(store, [b"b", b"d"])
    batch = store.batch()
    batch.delete(Family.ITEMS, b"a")
    store.commit(batch)
    assert [key for key, _ in forward] == [b"a", b"c"]
    assert [key for key, _ in backward] == [b"c", b"a"]


def test_keys_of_any_length_and_shared_prefixes_keep_byte_order(store: Store) -> None:
    prefix = b"\x00\xff" * 3000  # 6 KB, the size of a GSI entry's key at DynamoDB's limits.
    keys = [prefix + bytes([tail]) for tail in (0xFF, 0x00, 0x80)] + [prefix]
    fill(store, keys)
    assert [key for key, _ in store.walk(Family.ITEMS, b"", None, forward=True)] == sorted(keys)
    assert store.get(Family.ITEMS, prefix + b"\x80") == b"v" + prefix + b"\x80"


def test_committed_batches_survive_reopening(tmp_path: Path) -> None:
    first = Store(tmp_path / "node")
    fill(first, [b"k"])
    first.close()
    second = Store(tmp_path / "node")
    assert second.get(Family.ITEMS, b"k") == b"vk"
    second.close()


def test_a_second_store_on_the_same_directory_is_refused(store: Store, tmp_path: Path) -> None:
    with pytest.raises(OSError, match="in use by another storage node"):
        Store(tmp_path / "node")


def test_a_first_stage_lmdb_directory_is_refused_naming_both_versions(tmp_path: Path) -> None:
    old = tmp_path / "old"
    old.mkdir()
    (old / "data.mdb").write_bytes(b"\x00" * 64)
    with pytest.raises(StoreFormatError) as refused:
        Store(old)
    message = str(refused.value)
    assert "format version 1 (LMDB" in message and f"reads version {FORMAT_VERSION}" in message
    assert sorted(path.name for path in old.iterdir()) == ["data.mdb"]  # Left as it was.


def test_a_directory_of_another_format_version_is_refused(tmp_path: Path) -> None:
    store = Store(tmp_path / "node")
    store._db.put(FORMAT_KEY, b"99")  # As a later version of dynalab would have written it.
    store.close()
    with pytest.raises(StoreFormatError, match="format version 99; this node reads version 2"):
        Store(tmp_path / "node")
