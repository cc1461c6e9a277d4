"""Apply: the one hook that turns a planned write (`core.writes.WriteEffect`) into storage writes.

Everything a write does to storage happens here, in the group's write batch: the item itself, its
change-log record (`{seq, kind, keys, old, new, by_service}`), the item's entry in the TTL expiry
index (`expiry.index_changes`) and the partition's counters (items, bytes, last seq, log bytes).
Local secondary index entries will be written here too, so that they can never disagree with the
item. The effect was decided by `core.writes.plan`; this module decides nothing about the write,
only how it is laid out (`layout.py`).

`apply` encodes everything it will store before it changes anything, so a failure (a bug) leaves
the batch and the partition's counters exactly as they were and fails that write alone.
"""

from __future__ import annotations

import orjson

from core.writes import ChangeKind, WriteEffect
from storagenode import expiry
from storagenode.layout import Family, encode_item, seq_bytes
from storagenode.partition import Partition
from storagenode.store import WriteBatchView


def apply(
    batch: WriteBatchView,
    partition: Partition,
    items_key: bytes,
    effect: WriteEffect,
    *,
    by_service: bool = False,
    now: float,
) -> int:
    """Store `effect` on `partition` (a copy private to the batch) under `items_key`; return the
    bytes of the change-log record it appended (0 when it recorded nothing).

    Like DynamoDB Streams, a write that leaves the item exactly as it was stores nothing and
    records nothing. `by_service` marks a change the service made itself rather than a client,
    as DynamoDB Streams marks a TTL deletion (`userIdentity` "dynamodb.amazonaws.com"): every
    client write passes False; the TTL sweeper passes True. `now` (epoch seconds, the group's
    clock) decides whether the new image's TTL time is recent enough to be indexed.
    """
    kind = effect.kind
    if kind is None:
        return 0
    seq = partition.last_seq + 1
    item_value = (
        None if effect.new is None else encode_item(orjson.dumps(effect.new), effect.new_bytes)
    )
    record = orjson.dumps(
        {
            "seq": seq,
            "kind": kind.value,
            "keys": effect.key,
            "old": effect.old,
            "new": effect.new,
            "by_service": by_service,
        }
    )
    ttl_changes = expiry.index_changes(
        partition, items_key[len(partition.item_prefix) :], effect.old, effect.new, now
    )
    if item_value is None:
        batch.delete(Family.ITEMS, items_key)
    else:
        batch.put(Family.ITEMS, items_key, item_value)
    batch.put(Family.CHANGE_LOG, partition.log_prefix + seq_bytes(seq), record)
    expiry.write_index_changes(batch, ttl_changes)
    if kind is ChangeKind.INSERT:
        partition.item_count += 1
    elif kind is ChangeKind.REMOVE:
        partition.item_count -= 1
    partition.size_bytes += effect.new_bytes - effect.old_bytes
    partition.last_seq = seq
    partition.log_bytes += len(record)
    return len(record)
