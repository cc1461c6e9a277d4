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

`check_expiry_index` compares a node's TTL expiry index (`storagenode.expiry`) with its items and
its TTL counters with its change logs. It lists an index entry whose item is missing, sits at
another second than its TTL time says, belongs to no partition here or to a table whose TTL is
off (a phantom or stale entry); an item that TTL may delete (a Number time not more than five
years before `now`) without its entry, in a partition whose TTL is enabled and whose backfill has
passed it (the sweeper would never delete it); a partition whose item count is not the number of
its items; and a partition whose committed `ttl_deleted` is not the number of REMOVE records
marked `by_service` in its change log (checked while the log holds every record since seq 1).

`check_stream` compares what a DynamoDB Streams reader saw (every record of every shard, read
parent first) with what a writer was told: every acknowledged change must appear exactly once, in
the order the writer made it, per item; a change whose outcome the writer does not know may
appear once or not at all, and nothing else may appear.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson

from core import ttl
from core.indexes import entry_size_bytes, index_entry
from core.keycodec import successor
from storagenode.layout import (
    Family,
    collection_size_of,
    item_json_of,
    item_size_of,
    ttl_index_entry,
)
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


def _walk(store: NodeStore, family: Family, lo: bytes = b"", hi: bytes | None = None) -> Any:
    return store.walk(family, lo, hi, forward=True)


def check_expiry_index(store: NodeStore, now: float) -> list[str]:
    """Every disagreement between a node's TTL expiry index and its items, and between its TTL
    counters and its change logs, as of wall-clock `now` (empty when all agree): see the module's
    last paragraph."""
    found: list[str] = []
    partitions = [Partition.from_meta(meta) for meta in store.load_partition_metas()]
    by_table: dict[bytes, list[Partition]] = {}
    for partition in partitions:
        by_table.setdefault(partition.item_prefix, []).append(partition)

    entries: set[tuple[bytes, int, bytes]] = set()
    for key, _ in _walk(store, Family.TTL_INDEX):
        prefix = key[:16]
        seconds, storage_key = ttl_index_entry(key)
        entries.add((prefix, seconds, storage_key))
        holder = next((p for p in by_table.get(prefix, []) if p.holds(storage_key)), None)
        if holder is None:
            found.append(f"index entry {key.hex()} is in no partition on this node")
            continue
        attribute = holder.ttl_attribute
        if attribute is None:
            found.append(f"index entry {key.hex()} of {holder.partition_id}, whose TTL is off")
            continue
        raw = store.get(Family.ITEMS, prefix + storage_key)
        if raw is None:
            found.append(f"index entry {key.hex()} of {holder.partition_id} has no item")
            continue
        expires = ttl.expiry_time(orjson.loads(item_json_of(raw)), attribute)
        expected = (
            None if expires is None else min(max(math.floor(expires), 0), ttl.INDEX_SECONDS_MAX)
        )
        if expected != seconds:
            found.append(
                f"index entry {key.hex()} of {holder.partition_id} at second {seconds}, "
                f"its item's TTL time is {expires}"
            )

    for partition in partitions:
        prefix = partition.item_prefix
        end = prefix + partition.end if partition.end is not None else None
        items = 0
        attribute = partition.ttl_attribute
        cursor = None if partition.ttl_backfill is None else bytes.fromhex(partition.ttl_backfill)
        for items_key, raw in _walk(store, Family.ITEMS, prefix + partition.start, end):
            if not items_key.startswith(prefix):
                break
            items += 1
            storage_key = items_key[len(prefix) :]
            if attribute is None or (cursor is not None and storage_key >= cursor):
                continue
            seconds = ttl.index_seconds(orjson.loads(item_json_of(raw)), attribute, now)
            if seconds is not None and (prefix, seconds, storage_key) not in entries:
                found.append(
                    f"item {storage_key.hex()} of {partition.partition_id} expires at second "
                    f"{seconds} and has no index entry"
                )
        if items != partition.item_count:
            found.append(
                f"partition {partition.partition_id} counts {partition.item_count} items "
                f"and holds {items}"
            )
        if partition.first_seq == 1:
            kinds: Counter[str] = Counter()
            log = partition.log_prefix
            for _, record in _walk(store, Family.CHANGE_LOG, log, log + b"\xff" * 9):
                change = orjson.loads(record)
                if change["kind"] == "REMOVE" and change.get("by_service"):
                    kinds["ttl"] += 1
            if kinds["ttl"] != partition.ttl_deleted:
                found.append(
                    f"partition {partition.partition_id} counts {partition.ttl_deleted} TTL "
                    f"deletions and its change log holds {kinds['ttl']}"
                )
    return found


def check_data_dir(path: Path) -> list[str]:
    """`check_local_indexes` on the data directory of a stopped storage node."""
    store = Store(path)
    try:
        return check_local_indexes(store)
    finally:
        store.close()


def check_stream(
    acknowledged: Mapping[str, list[Any]],
    seen: Mapping[str, list[Any]],
    unknown: Mapping[str, set[Any]] | None = None,
) -> list[str]:
    """What is wrong with a stream's records, per item key (empty: nothing).

    `acknowledged[key]` is the changes the writer was told succeeded, in the order it made them
    (one writer per key: its changes are ordered), each named by a value its stream record shows
    (a version in the new image, or a marker for a delete); `seen[key]` is those values in the
    order the reader met the key's records, shards read parent first; `unknown[key]` the values
    of the changes whose outcome the writer does not know.
    """
    unknown = unknown or {}
    problems: list[str] = []
    for key in sorted(set(acknowledged) | set(seen)):
        wanted = acknowledged.get(key, [])
        maybe = unknown.get(key, set())
        got = seen.get(key, [])
        counts = Counter(got)
        for value, count in counts.items():
            if count > 1:
                problems.append(f"{key}: change {value!r} appeared {count} times")
            if value not in wanted and value not in maybe:
                problems.append(f"{key}: change {value!r} was never made")
        missing = [value for value in wanted if value not in counts]
        if missing:
            problems.append(f"{key}: acknowledged changes {missing!r} never appeared")
        order = [value for value in got if value in wanted]
        expected = [value for value in wanted if value in counts]
        if len(order) == len(expected) and order != expected:
            problems.append(f"{key}: changes appeared as {order!r}, made as {expected!r}")
    return problems
