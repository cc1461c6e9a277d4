"""Apply: the one hook that turns a planned write (`core.writes.WriteEffect`) into storage writes.

Everything a write does to storage happens here, in the group's write batch: the item itself, its
local secondary index entries, its item collection's size, its change-log record (`{seq, kind,
keys, old, new, by_service, at}`), the item's entry in the TTL expiry index (`expiry.index_changes`)
and the partition's counters (items, bytes, index entries and bytes, last seq, log bytes). So an
index entry can never disagree with its item, whatever process dies when: the batch commits whole
or not at all. The effect was decided by `core.writes.plan`, and what it does to each local index
by `core.indexes`; this module decides nothing about the write, only how it is laid out
(`layout.py`).

`apply` encodes everything it will store, and refuses a write that would grow an item collection
past its cap, before it changes anything, so a refusal or a failure (a bug) leaves the batch and
the partition's counters exactly as they were and fails that write alone. Every delete, a
client's or the service's own (the TTL sweeper's), passes here and removes the item's entries.
"""

from __future__ import annotations

from dataclasses import dataclass

import orjson

from core import indexes, limits
from core.indexes import EntryChange
from core.size import item_size_bytes
from core.writes import ChangeKind, WriteEffect
from storagenode import expiry
from storagenode.layout import (
    Family,
    collection_size_of,
    encode_collection_size,
    encode_item,
    seq_bytes,
)
from storagenode.partition import Partition
from storagenode.store import WriteBatchView


@dataclass(frozen=True, slots=True)
class Applied:
    """What a write did beyond its item: each local index's entry change (and its units), the
    size of its item collection after it (None for a table without local indexes), and the bytes
    of the change-log record it appended (0 when it recorded nothing)."""

    entries: tuple[EntryChange, ...] = ()
    collection_bytes: int | None = None
    record_bytes: int = 0


def apply(
    batch: WriteBatchView,
    partition: Partition,
    items_key: bytes,
    effect: WriteEffect,
    *,
    by_service: bool = False,
    now: float,
    collection_bytes_max: int | None = limits.ITEM_COLLECTION_BYTES_MAX,
    logged: bool = True,
    record_json: bytes | None = None,
) -> Applied:
    """Store `effect` on `partition` (a copy private to the batch) under `items_key`; return what
    it did beyond the item (`Applied`: index entries, collection size, change-record bytes).

    Like DynamoDB Streams, a write that leaves the item exactly as it was stores nothing and
    records nothing. `by_service` marks a change the service made itself rather than a client,
    as DynamoDB Streams marks a TTL deletion (`userIdentity` "dynamodb.amazonaws.com"): every
    client write passes False; the TTL sweeper passes True. `now` (epoch seconds, the group's
    clock) decides whether the new image's TTL time is recent enough to be indexed. A write that
    would grow its item collection past `collection_bytes_max` raises
    ItemCollectionSizeLimitExceeded (None: the cap was checked before, as a transaction's commit
    after its prepare checked it).

    A move (`storagenode/move.py`) copies a partition's items with `logged` False (nothing is
    appended to the change log, whose records are copied as they are) and applies the source's
    records written since with `record_json`, the source's record, stored as it is.
    """
    local = partition.local_indexes
    collection_key = None
    collection_bytes = None
    if local:
        collection_key = partition.collection_key(
            effect.key[partition.key_shape.partition_key.name]
        )
        collection_bytes = collection_size_of(batch.get(Family.ITEM_COLLECTIONS, collection_key))
    kind = effect.kind
    if kind is None:
        return Applied((), collection_bytes)
    changes = indexes.entry_changes(effect.old, effect.new, local, partition.key_shape)
    if collection_key is not None and collection_bytes is not None:
        delta = indexes.collection_delta(effect.old_bytes, effect.new_bytes, changes)
        if collection_bytes_max is not None:
            indexes.check_collection_growth(collection_bytes, delta, collection_bytes_max)
        collection_bytes += delta
    seq = partition.last_seq + 1
    item_value = (
        None if effect.new is None else encode_item(orjson.dumps(effect.new), effect.new_bytes)
    )
    # A copy's write (`logged` False) appends nothing, so it encodes no record either.
    record = b""
    if logged:
        record = record_json or orjson.dumps(
            {
                "seq": seq,
                "kind": kind.value,
                "keys": effect.key,
                "old": effect.old,
                "new": effect.new,
                "by_service": by_service,
                "at": now,
            }
        )
    ttl_changes = expiry.index_changes(
        partition, items_key[len(partition.item_prefix) :], effect.old, effect.new, now
    )
    entry_writes = _entry_writes(partition, changes)
    if item_value is None:
        batch.delete(Family.ITEMS, items_key)
    else:
        batch.put(Family.ITEMS, items_key, item_value)
    for key, value in entry_writes:
        if value is None:
            batch.delete(Family.INDEX_ENTRIES, key)
        else:
            batch.put(Family.INDEX_ENTRIES, key, value)
    if collection_key is not None and collection_bytes is not None:
        if collection_bytes:
            batch.put(
                Family.ITEM_COLLECTIONS, collection_key, encode_collection_size(collection_bytes)
            )
        else:
            batch.delete(Family.ITEM_COLLECTIONS, collection_key)
    if logged:
        batch.put(Family.CHANGE_LOG, partition.log_prefix + seq_bytes(seq), record)
    expiry.write_index_changes(batch, ttl_changes)
    if kind is ChangeKind.INSERT:
        partition.item_count += 1
    elif kind is ChangeKind.REMOVE:
        partition.item_count -= 1
    partition.size_bytes += effect.new_bytes - effect.old_bytes
    if changes:
        # A new dict: the committed partition this copy was made from shares the old one.
        stats = {name: list(counts) for name, counts in partition.index_stats.items()}
        for change in changes:
            counts = stats.setdefault(change.index.name, [0, 0])
            counts[0] += (change.new is not None) - (change.old is not None)
            counts[1] += change.bytes_delta
        partition.index_stats = stats
    if not logged:
        return Applied(changes, collection_bytes)
    partition.last_seq = seq
    partition.log_bytes += len(record)
    return Applied(changes, collection_bytes, len(record))


def _entry_writes(
    partition: Partition, changes: tuple[EntryChange, ...]
) -> list[tuple[bytes, bytes | None]]:
    """The `index_entries` keys a write deletes (value None) and puts, deletes first."""
    deletes: list[tuple[bytes, bytes | None]] = []
    puts: list[tuple[bytes, bytes | None]] = []
    for change in changes:
        if change.old == change.new:
            continue
        prefix, shape = partition.index_layout[change.index.name]
        if change.old is not None:
            deletes.append((prefix + shape.storage_key(change.old), None))
        if change.new is not None:
            value = encode_item(orjson.dumps(change.new), item_size_bytes(change.new))
            puts.append((prefix + shape.storage_key(change.new), value))
    return deletes + puts
