"""`MemoryStore`: the node store's interface (`storagenode.store.NodeStore`) over dictionaries.

For simulation (`tests/sim`): a whole cluster in one process, with nothing on disk. Each column
family is a dict of key -> value plus a sorted list of its keys (kept with `bisect`), so walks are
ordered like RocksDB's byte order. Batches are the same `WriteBatchView` overlay the RocksDB store
uses, and `commit` replays its recorded writes in order, at once: a committed batch is visible
whole, and nothing of it before.

A walk reads a snapshot taken when it starts, as a RocksDB iterator does, so a commit during a
walk does not show through it.
"""

from __future__ import annotations

import bisect
import sys
from collections.abc import Iterator

import orjson

from storagenode.layout import Family
from storagenode.store import DELETE, PUT, WriteBatchView


class _Family:
    """One column family: values by key, and the keys in byte order."""

    def __init__(self) -> None:
        self.values: dict[bytes, bytes] = {}
        self.keys: list[bytes] = []

    def put(self, key: bytes, value: bytes) -> None:
        if key not in self.values:
            bisect.insort(self.keys, key)
        self.values[key] = value

    def delete(self, key: bytes) -> None:
        if self.values.pop(key, None) is not None:
            del self.keys[bisect.bisect_left(self.keys, key)]

    def delete_range(self, lo: bytes, hi: bytes) -> None:
        first, last = bisect.bisect_left(self.keys, lo), bisect.bisect_left(self.keys, hi)
        for key in self.keys[first:last]:
            del self.values[key]
        del self.keys[first:last]


class MemoryStore:
    """A node's store in memory, with `Store`'s methods: get, walk, batch, commit, close."""

    def __init__(self) -> None:
        self._families = {family: _Family() for family in Family}
        self.closed = False
        self.commits = 0

    def close(self) -> None:
        self.closed = True

    def get(self, family: Family, key: bytes) -> bytes | None:
        return self._families[family].values.get(key)

    def walk(
        self, family: Family, lo: bytes, hi: bytes | None, *, forward: bool
    ) -> Iterator[tuple[bytes, bytes]]:
        """Keys lo <= key < hi (hi None: to the end) in key order or reverse key order."""
        data = self._families[family]
        first = bisect.bisect_left(data.keys, lo)
        last = len(data.keys) if hi is None else bisect.bisect_left(data.keys, hi)
        keys = data.keys[first:last]
        if not forward:
            keys.reverse()
        snapshot = [(key, data.values[key]) for key in keys]
        return iter(snapshot)

    def values(self, family: Family) -> Iterator[bytes]:
        """Every value of a family, in key order."""
        data = self._families[family]
        return iter([data.values[key] for key in data.keys])

    def batch(self) -> WriteBatchView:
        return WriteBatchView(self)

    def commit(self, batch: WriteBatchView) -> None:
        """Apply the batch's writes in order; all of them become visible together."""
        for kind, family, key, value in batch.ops:
            data = self._families[family]
            if kind == PUT:
                assert value is not None
                data.put(key, value)
            elif kind == DELETE:
                data.delete(key)
            else:
                assert value is not None
                data.delete_range(key, value)
        self.commits += 1

    def load_partition_metas(self) -> list[dict[str, object]]:
        return [orjson.loads(value) for value in self.values(Family.PARTITIONS)]

    def free_bytes(self) -> int:
        """Memory is not a disk that fills: always past any reserve."""
        return sys.maxsize

    @property
    def disk_reserve_bytes(self) -> int:
        return 0

    @property
    def read_only(self) -> bool:
        return False
