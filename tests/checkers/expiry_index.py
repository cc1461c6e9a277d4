"""The TTL expiry index of a node against its table data, and the TTL counters against the log.

`problems(store, now)` lists, for every partition on the node:

- an index entry whose item is missing, sits at another second than its TTL time says, belongs
  to no partition here, or belongs to a table whose TTL is not enabled (a phantom or stale entry);
- an item that TTL may delete (a Number time not more than five years before `now`) without its
  entry, in a partition whose TTL is enabled and whose backfill has passed it (a missing entry:
  the sweeper would never delete it);
- a partition whose item count is not the number of its items;
- a partition whose committed `ttl_deleted` is not the number of REMOVE records marked
  `by_service` in its change log (when the log still holds every record since seq 1).
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

import orjson

from core import ttl
from storagenode.layout import Family, item_json_of, ttl_index_entry
from storagenode.partition import Partition
from storagenode.store import NodeStore


def _walk(store: NodeStore, family: Family, lo: bytes = b"", hi: bytes | None = None) -> Any:
    return store.walk(family, lo, hi, forward=True)


def problems(store: NodeStore, now: float) -> list[str]:
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
