"""Checkers: invariants a storage node's data must hold whatever happened to the node, for the
fault lab and the integration tests to run after a crash and restart.

`check_local_indexes` reads a node's store (a stopped node's data directory, `check_data_dir`)
and compares, for every partition of a table with local secondary indexes, what its items say
with what is stored beside them: each index's entries must be exactly the items' projections
(`core.indexes.index_entry`) under their entry keys, each item collection's recorded size must be
its items' bytes plus its entries' bytes and overhead, and the partition's per-index counters
must count those entries. The node writes all of it in the item's own write batch
(`storagenode.replica`), so after a `kill -9` every one of these holds exactly; a checker that
finds otherwise names what differs.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import orjson

from core.indexes import entry_size_bytes, index_entry
from core.keycodec import successor
from storagenode.layout import Family, collection_size_of, item_json_of, item_size_of
from storagenode.partition import Partition
from storagenode.store import NodeStore, Store

# A checker names at most this many differences per index or partition, so that a broken store
# gives a readable report rather than one line per item.
DIFFERENCES_SHOWN_MAX = 5


def _range(prefix: bytes, partition: Partition) -> tuple[bytes, bytes | None]:
    """The keys under `prefix` that fall in the partition's storage-key range."""
    if partition.end is not None:
        return prefix + partition.start, prefix + partition.end
    return prefix + partition.start, successor(prefix)


def _differences(
    what: str, expected: Mapping[bytes, object], actual: Mapping[bytes, object]
) -> list[str]:
    problems = []
    missing = [key for key in expected if key not in actual]
    extra = [key for key in actual if key not in expected]
    wrong = [key for key in expected if key in actual and expected[key] != actual[key]]
    for label, keys in (("missing", missing), ("extra", extra), ("different", wrong)):
        if keys:
            shown = ", ".join(key.hex() for key in keys[:DIFFERENCES_SHOWN_MAX])
            problems.append(f"{what}: {len(keys)} {label} (keys {shown})")
    return problems


def check_partition(store: NodeStore, partition: Partition) -> list[str]:
    """Every difference between one partition's items and its local indexes, collections and
    counters (empty when they agree)."""
    shape = partition.key_shape
    partition_key = shape.partition_key.name
    where = f"table {partition.table_name} partition {partition.partition_id}"
    expected_entries: dict[str, dict[bytes, object]] = {
        index.name: {} for index in partition.local_indexes
    }
    expected_stats = {index.name: [0, 0] for index in partition.local_indexes}
    collections: dict[bytes, int] = {}
    for _, value in store.walk(
        Family.ITEMS, *_range(partition.item_prefix, partition), forward=True
    ):
        item = orjson.loads(item_json_of(value))
        collection = partition.collection_key(item[partition_key])
        size = collections.get(collection, 0) + item_size_of(value)
        for index in partition.local_indexes:
            entry = index_entry(item, index, shape)
            if entry is None:
                continue
            prefix, entry_shape = partition.index_layout[index.name]
            expected_entries[index.name][prefix + entry_shape.storage_key(entry)] = entry
            entry_bytes = entry_size_bytes(entry)
            size += entry_bytes
            expected_stats[index.name][0] += 1
            expected_stats[index.name][1] += entry_bytes
        collections[collection] = size
    problems = []
    for index in partition.local_indexes:
        prefix, _ = partition.index_layout[index.name]
        actual = {
            key: orjson.loads(item_json_of(value))
            for key, value in store.walk(
                Family.INDEX_ENTRIES, *_range(prefix, partition), forward=True
            )
        }
        problems += _differences(
            f"{where} index {index.name} entries", expected_entries[index.name], actual
        )
        recorded = partition.index_stats.get(index.name, [0, 0])
        if list(recorded) != expected_stats[index.name]:
            problems.append(
                f"{where} index {index.name}: counters {recorded} (entries, bytes), "
                f"entries stored {expected_stats[index.name]}"
            )
    if partition.local_indexes:
        recorded_sizes = {
            key: collection_size_of(value)
            for key, value in store.walk(
                Family.ITEM_COLLECTIONS, *_range(partition.item_prefix, partition), forward=True
            )
        }
        problems += _differences(f"{where} item collection sizes", collections, recorded_sizes)
    return problems


def check_local_indexes(store: NodeStore) -> list[str]:
    """Every difference between the items and the local index data of every partition in a
    node's store (empty when all agree)."""
    problems = []
    for meta in store.load_partition_metas():
        partition = Partition.from_meta(meta)
        if partition.local_indexes:
            problems += check_partition(store, partition)
    return problems


def check_data_dir(path: Path) -> list[str]:
    """`check_local_indexes` on the data directory of a stopped storage node."""
    store = Store(path)
    try:
        return check_local_indexes(store)
    finally:
        store.close()
