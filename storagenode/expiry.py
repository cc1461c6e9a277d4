"""The expiry index and the TTL writes of a node: kept with the item, swept, backfilled, dropped.

What expires is `core.ttl`'s decision; this module is how a node keeps it in storage, in the group
commit's write batch like every other write:

- `index_changes` is `replica.apply`'s TTL part: the expiry-index entry an item loses and the one
  it gains, written in the same batch as the item, so the index never disagrees with the table.
  Only partitions whose table has TTL enabled keep entries.
- `expire` is the sweeper's write: each item named is deleted only if it is still expired when
  the write runs (a client may have extended or deleted it since the sweeper read the index), and
  it is deleted through the ordinary write path (`core.writes.plan` of a DeleteRequest, then
  `replica.apply`), so it leaves a REMOVE record in the change feed marked `by_service`, takes its
  index entries (expiry, and any other `apply` keeps) with it, and counts in the partition's
  metadata. It is never metered: TTL deletes consume no write capacity (T-15).
- `backfill` indexes, a bounded step at a time, the items a partition held when TTL was enabled;
  the step's cursor is in the partition's metadata, committed with the entries, so a restarted
  node resumes where it stopped.
- `update_ttl` takes a table's new TTL setting (UpdateTimeToLive) on every partition of the table
  here; disabling drops the table's entries at once, and the sweeper stops looking.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterator
from typing import Any, Protocol

import orjson

from core import limits, ttl
from core.keycodec import successor
from core.values import Item
from core.writes import DeleteRequest, WriteEffect, plan
from storagenode.layout import Family, item_json_of, table_prefix, ttl_index_entry, ttl_index_key
from storagenode.partition import Partition
from storagenode.store import NodeStore, WriteBatchView

PartitionRef = tuple[str, str]
Lookup = Callable[[PartitionRef], Partition | None]


class Apply(Protocol):
    """The write group's one apply (`writes.WriteContext.apply`, around `replica.apply`, which
    imports this module); what it returns is not used here."""

    def __call__(
        self,
        batch: WriteBatchView,
        partition: Partition,
        items_key: bytes,
        effect: WriteEffect,
        *,
        by_service: bool,
        now: float,
    ) -> object: ...


# The node's own writes (never on the wire): the sweeper's deletes and the backfill's steps, run
# by the group committer like any write.
TTL_EXPIRE = "ttl_expire"
TTL_BACKFILL = "ttl_backfill"


@dataclasses.dataclass(slots=True)
class ExpirePayload:
    """ttl_expire: delete the items of one partition under these storage keys that are still
    expired. Reply: {"deleted": int}."""

    table_id: str
    partition_id: str
    keys: list[bytes]

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> ExpirePayload:
        return cls(body["table_id"], body["partition_id"], [bytes.fromhex(k) for k in body["keys"]])

    def to_json(self) -> dict[str, Any]:
        return {
            "table_id": self.table_id,
            "partition_id": self.partition_id,
            "keys": [key.hex() for key in self.keys],
        }


@dataclasses.dataclass(slots=True)
class BackfillPayload:
    """ttl_backfill: index the next items of one partition. Reply: {"done": bool}."""

    table_id: str
    partition_id: str

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> BackfillPayload:
        return cls(body["table_id"], body["partition_id"])

    def to_json(self) -> dict[str, Any]:
        return {"table_id": self.table_id, "partition_id": self.partition_id}


def index_changes(
    partition: Partition, storage_key: bytes, old: Item | None, new: Item | None, now: float
) -> tuple[bytes | None, bytes | None]:
    """(entry to delete, entry to put) in the expiry index for a write of `old` into `new`.

    The old image's entry is found from its time alone: it was put under the five-year rule of its
    own write, which `now` may no longer grant, and deleting an entry that is not there is
    harmless. (None, None) when TTL is off or the entry stays where it is.
    """
    attribute = partition.ttl_attribute
    if attribute is None:
        return None, None
    prefix = partition.item_prefix
    old_time = ttl.expiry_time(old, attribute)
    old_key = (
        None
        if old_time is None
        else ttl_index_key(
            prefix, min(max(math.floor(old_time), 0), ttl.INDEX_SECONDS_MAX), storage_key
        )
    )
    new_seconds = ttl.index_seconds(new, attribute, now)
    new_key = None if new_seconds is None else ttl_index_key(prefix, new_seconds, storage_key)
    if old_key == new_key:
        return None, None
    return old_key, new_key


def write_index_changes(batch: WriteBatchView, changes: tuple[bytes | None, bytes | None]) -> None:
    delete, put = changes
    if delete is not None:
        batch.delete(Family.TTL_INDEX, delete)
    if put is not None:
        batch.put(Family.TTL_INDEX, put, b"")


def expired_entries(
    store: NodeStore,
    table_id: str,
    now: float,
    limit: int,
    keep: Callable[[bytes], bool] | None = None,
) -> list[tuple[int, bytes]]:
    """Up to `limit` entries (expiry second, storage key) of the table's index on this node that
    are expired at `now`, oldest first, of the items `keep` accepts (None: all): a walk of what
    expires, never of the table."""
    prefix = table_prefix(table_id)
    bound = ttl_index_key(prefix, ttl.sweep_bound(now), b"")
    entries: list[tuple[int, bytes]] = []
    for key, _ in store.walk(Family.TTL_INDEX, prefix, bound, forward=True):
        entry = ttl_index_entry(key)
        if keep is not None and not keep(entry[1]):
            continue
        entries.append(entry)
        if len(entries) >= limit:
            break
    return entries


def oldest_expired(store: NodeStore, table_id: str, now: float) -> int | None:
    """The expiry second of the oldest item of the table here that is expired and not yet
    deleted; None when there is none."""
    entries = expired_entries(store, table_id, now, 1)
    return entries[0][0] if entries else None


def expire(
    batch: WriteBatchView,
    partition: Partition,
    storage_keys: list[bytes],
    now: float,
    apply: Apply,
) -> int:
    """Delete each of the partition's items named that is still expired at `now`, through
    `apply` (`replica.apply`) with `by_service`; count them in the partition (a copy private to
    the batch). Returns how many were deleted."""
    attribute = partition.ttl_attribute
    if attribute is None:  # TTL was disabled after the sweeper read the index.
        return 0
    deleted = 0
    for storage_key in storage_keys:
        if not partition.holds(storage_key):
            continue
        items_key = partition.item_prefix + storage_key
        raw = batch.get(Family.ITEMS, items_key)
        old = None if raw is None else orjson.loads(item_json_of(raw))
        if old is None or not ttl.expired(old, attribute, now):
            continue
        effect = plan(DeleteRequest(partition.key_shape.key_of(old)), old, partition.key_shape)
        apply(batch, partition, items_key, effect, by_service=True, now=now)
        partition.ttl_deleted += 1
        deleted += 1
    return deleted


def backfill(store: NodeStore, batch: WriteBatchView, partition: Partition, now: float) -> bool:
    """Index the next `TTL_BACKFILL_BATCH_ITEMS_MAX` items of a partition (a copy private to the
    batch) from its cursor, and move the cursor; True once the partition is fully indexed.

    Items are read through the batch, so an item written or deleted earlier in the same group is
    indexed as it now stands (and `apply` has already kept its entry).
    """
    attribute = partition.ttl_attribute
    cursor = partition.ttl_backfill
    if attribute is None or cursor is None:
        partition.ttl_backfill = None
        return True
    prefix = partition.item_prefix
    end = prefix + partition.end if partition.end is not None else successor(prefix)
    count = 0
    for items_key, _ in store.walk(Family.ITEMS, prefix + bytes.fromhex(cursor), end, forward=True):
        if count >= limits.TTL_BACKFILL_BATCH_ITEMS_MAX:
            partition.ttl_backfill = items_key[len(prefix) :].hex()
            return False
        count += 1
        raw = batch.get(Family.ITEMS, items_key)
        if raw is None:
            continue
        seconds = ttl.index_seconds(orjson.loads(item_json_of(raw)), attribute, now)
        if seconds is not None:
            batch.put(
                Family.TTL_INDEX, ttl_index_key(prefix, seconds, items_key[len(prefix) :]), b""
            )
    partition.ttl_backfill = None
    return True


def own_entries(store: NodeStore, partition: Partition) -> Iterator[bytes]:
    """The keys of the expiry-index entries of `partition`'s items in `store`: the table's
    index walked (its keys are by expiry second, then item, so a partition's entries are no range
    of their own), keeping those whose item the partition holds."""
    prefix = table_prefix(partition.table_id)
    end = successor(prefix)
    assert end is not None
    for key, _ in store.walk(Family.TTL_INDEX, prefix, end, forward=True):
        if partition.holds(ttl_index_entry(key)[1]):
            yield key


def update_ttl(
    batch: WriteBatchView,
    table_id: str,
    document: dict[str, Any],
    refs: list[PartitionRef],
    lookup: Lookup,
    *,
    alone: NodeStore | None = None,
) -> dict[PartitionRef, Partition]:
    """The table's partitions here with TTL setting `document` (`rpc.ops` TTL), staged: enabling
    starts indexing each partition from its first key; disabling drops the table's entries, or,
    given `alone` (the store, for an update addressed to one partition, an entry of its group),
    only the entries of the partitions in `refs` (`own_entries`), one delete each, so every
    replica deletes exactly those and no other partition's it may hold.

    A setting older than a partition's (a lower version, a late retry) changes nothing, and the
    same version again is a no-op. Returns the partitions that changed.
    """
    changed: dict[PartitionRef, Partition] = {}
    dropped = False
    for ref in refs:
        partition = lookup(ref)
        if partition is None:
            continue
        held = partition.ttl
        if held is not None and held["version"] >= document["version"]:
            continue
        staged = dataclasses.replace(partition, ttl=dict(document))
        staged.ttl_backfill = partition.start.hex() if document["enabled"] else None
        if not document["enabled"] and alone is not None:
            for key in own_entries(alone, partition):
                batch.delete(Family.TTL_INDEX, key)
        elif not document["enabled"] and not dropped:
            prefix = table_prefix(table_id)
            end = successor(prefix)
            assert end is not None
            batch.delete_range(Family.TTL_INDEX, prefix, end)
            dropped = True
        changed[ref] = staged
    return changed
