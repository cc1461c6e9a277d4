"""The in-memory store behaves as the RocksDB one: the batch overlay, ordered walks, snapshots."""

from __future__ import annotations

from pathlib import Path

import pytest

from storagenode.layout import Family
from storagenode.memory_store import MemoryStore
from storagenode.store import Store


@pytest.fixture(params=["memory", "rocksdb"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> MemoryStore | Store:
    opened = MemoryStore() if request.param == "memory" else Store(tmp_path / "node")
    yield opened
    opened.close()


def fill(store: MemoryStore | Store, keys: list[bytes]) -> None:
    batch = store.batch()
    for key in keys:
        batch.put(Family.ITEMS, key, b"v" + key)
    store.commit(batch)


def test_batches_read_their_own_writes_and_commit_in_order(store: MemoryStore | Store) -> None:
    fill(store, [b"a", b"b", b"c"])
    batch = store.batch()
    batch.put(Family.ITEMS, b"a", b"new")
    batch.delete(Family.ITEMS, b"b")
    batch.put(Family.ITEMS, b"d", b"pending")
    batch.delete_range(Family.ITEMS, b"c", b"e")
    batch.put(Family.ITEMS, b"d", b"again")
    assert [batch.get(Family.ITEMS, k) for k in (b"a", b"b", b"c", b"d")] == [
        b"new",
        None,
        None,
        b"again",
    ]
    assert store.get(Family.ITEMS, b"d") is None
    store.commit(batch)
    assert list(store.walk(Family.ITEMS, b"", None, forward=True)) == [
        (b"a", b"new"),
        (b"d", b"again"),
    ]


def test_walks_are_bounded_both_ways_and_read_a_snapshot(store: MemoryStore | Store) -> None:
    fill(store, [b"a", b"b", b"c", b"d"])

    def keys(lo: bytes, hi: bytes | None, forward: bool) -> list[bytes]:
        return [key for key, _ in store.walk(Family.ITEMS, lo, hi, forward=forward)]

    assert keys(b"b", b"d", True) == [b"b", b"c"]
    assert keys(b"b", b"d", False) == [b"c", b"b"]
    assert keys(b"b", b"c\x00", False) == [b"c", b"b"]
    assert keys(b"", None, False) == [b"d", b"c", b"b", b"a"]
    assert keys(b"e", None, True) == [] and keys(b"", b"a", False) == []
    walk = store.walk(Family.ITEMS, b"", None, forward=True)
    assert next(walk) == (b"a", b"va")
    fill(store, [b"bb"])
    assert [key for key, _ in walk] == [b"b", b"c", b"d"]
    assert store.get(Family.PARTITIONS, b"a") is None  # Families are apart.
