"""The handlers of a partition's lifecycle, settings and change-feed consumers.

Each runs in a write group against `storagenode.writes.WriteContext`, like every write: its
metadata changes go to the group's copies of the partitions and become visible once the group
has committed. Here are creating, dropping and retiring partitions, their throughput and TTL
settings; the TTL sweeper's own writes (`expiry.TTL_EXPIRE`, `expiry.TTL_BACKFILL`), which change
a partition's items through the group's one `apply`; and a change feed's consumers (register,
checkpoint, unregister), whose checkpoint commits with the group, the log it lets go of trimmed
in the same batch. A partition's log may be live or retired and kept for its consumers
(`changefeed.RetiredLog`).
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import orjson

from core.errors import ResourceInUse, StaleEpoch, ValidationError
from core.keycodec import successor
from rpc import ops
from rpc.ops import Target
from storagenode import changefeed, expiry, snapshots
from storagenode import transactions as txn
from storagenode.layout import Family, seq_bytes, table_prefix
from storagenode.partition import Partition
from storagenode.throughput import version_of
from storagenode.writes import PartitionRef, WriteContext, addressed

logger = logging.getLogger(__name__)


def create_partition(
    ctx: WriteContext, target: Target | None, payload: ops.CreatePartitionPayload
) -> dict[str, Any]:
    created = Partition.create(payload.table, payload.partition, payload.throughput)
    ref = (created.table_id, created.partition_id)
    existing = ctx.lookup(ref)
    if existing is not None:
        if existing.same_definition(created):
            return {}
        if existing.epoch > created.epoch:
            raise StaleEpoch(
                f"Partition {created.partition_id} is at epoch {existing.epoch}, "
                f"the request at {created.epoch}"
            )
        raise ResourceInUse(
            f"Partition {created.partition_id} of table {created.table_id} already exists "
            f"at epoch {existing.epoch} with another range or key schema"
        )
    if ctx.feed.retired(ref) is not None:
        # The partition comes back to this node (a move back) while its retired log still
        # waits for consumers: its new log starts again at seq 1, so the old one, and the
        # consumers that were reading it, go. They find the partition where it moved to.
        logger.warning("partition %s returns; its retired change log is dropped", ref)
        ctx.feed.forget(ref)
    ctx.put_partition(ref, created)
    for consumer in payload.consumers or ():
        ctx.feed.register(ref, consumer, 0, changefeed.LogBounds(1, 0))
    ctx.note_created(ref)
    return {}


def _own(ctx: WriteContext, target: Target, table_id: str, partition_id: str) -> PartitionRef:
    """The partition a node write addressed to `target` changes: the one its payload names,
    here at the target's epoch (else StaleEpoch)."""
    if (target.table_id, target.partition_id) != (table_id, partition_id):
        raise ValidationError("The request's payload names another partition than its target")
    ref = (table_id, partition_id)
    addressed(ctx.lookup(ref), target)
    return ref


def update_throughput(
    ctx: WriteContext, target: Target | None, payload: ops.UpdateThroughputPayload
) -> dict[str, Any]:
    """New throughput settings for every partition of a table on this node (UpdateTable), or
    for the one partition the request is addressed to (`ops.UpdateThroughputPayload`)."""
    throughput = payload.throughput
    version = version_of(throughput)
    updated = 0
    if target is None:
        refs = list(ctx.refs(payload.table_id))
    else:
        refs = [_own(ctx, target, payload.table_id, target.partition_id)]
    for ref in refs:
        partition = ctx.lookup(ref)
        # A late retry of an older change must not undo a newer one.
        if partition is None or version_of(partition.throughput) > version:
            continue
        if partition.throughput != throughput:
            ctx.put_partition(ref, dataclasses.replace(partition, throughput=throughput))
        updated += 1
    return {"partitions_updated": updated}


def drop_table(
    ctx: WriteContext, target: Target | None, payload: ops.DropTablePayload
) -> dict[str, Any]:
    table_id = payload.table_id
    prefix = table_prefix(table_id)
    dropped = [ref for ref in ctx.refs(table_id) if ctx.lookup(ref) is not None]
    for ref in dropped:
        ctx.put_partition(ref, None)
    batch = ctx.batch
    end = _end_of(prefix)
    # Every change-log key starts with the table id: this drops retired logs as well.
    batch.delete_range(Family.CHANGE_LOG, prefix, end)
    ctx.feed.forget_table(table_id)
    batch.delete_range(Family.ITEMS, prefix, end)
    batch.delete_range(Family.INDEX_SOURCES, prefix, end)
    batch.delete_range(Family.TTL_INDEX, prefix, end)
    # Index entry and item collection keys start with the table id too.
    batch.delete_range(Family.INDEX_ENTRIES, prefix, end)
    batch.delete_range(Family.ITEM_COLLECTIONS, prefix, end)
    # Its items' transaction locks, and its replicated partitions' records and parts (under
    # their log prefixes), go with it: nobody can commit into a dropped table.
    for kept in (txn.LOCK_PREFIX, txn.GROUP_PART_PREFIX, txn.GROUP_RECORD_PREFIX):
        batch.delete_range(Family.TRANSACTIONS, kept + prefix, kept + end)
    return {"partitions_dropped": len(dropped)}


def retire_partition(
    ctx: WriteContext, target: Target | None, payload: ops.RetirePartitionPayload
) -> dict[str, Any]:
    """Forget a split or moved partition's metadata; its items stay (`rpc.ops`).

    Its change log ends with an END record naming the children. If consumers are registered,
    the log stays (a `changefeed.RetiredLog`) until each has read to END; if not, it goes now.
    """
    ref = (payload.table_id, payload.partition_id)
    partition = ctx.lookup(ref)
    if partition is None:
        return {"retired": False}
    if partition.epoch > payload.epoch:
        raise StaleEpoch(
            f"Partition {partition.partition_id} is at epoch {partition.epoch}, "
            f"the request at {payload.epoch}"
        )
    children = payload.children or []
    if not isinstance(children, list) or not all(isinstance(c, str) for c in children):
        raise ValidationError("retire_partition's children are a list of partition ids")
    ctx.put_partition(ref, None)
    if not ctx.feed.consumers(ref):
        ctx.feed.forget(ref)
        return {"retired": True}
    end_seq = partition.last_seq + 1
    record = orjson.dumps(changefeed.end_record(end_seq, children))
    ctx.batch.put(Family.CHANGE_LOG, partition.log_prefix + seq_bytes(end_seq), record)
    ctx.feed.retire(changefeed.RetiredLog(*ref, partition.first_seq, end_seq, tuple(children)))
    ctx.feed.trim_retired(ref, ctx.node.change_log_records_max)
    return {"retired": True}


def raft_membership(
    ctx: WriteContext, target: Target | None, payload: ops.RaftMembershipPayload
) -> dict[str, Any]:
    """A membership request that reached a partition's group of one member, this node (a
    partition of one copy; a replicated one's goes to its group at its leader:
    `StorageNode.write_round`)."""
    if target is None:
        raise ValidationError("A raft_membership request names its partition")
    addressed(ctx.lookup((target.table_id, target.partition_id)), target)
    raise ValidationError(
        f"Partition {target.partition_id} has one copy: its group has no membership to change"
    )


def drop_replica(
    ctx: WriteContext, target: Target | None, payload: ops.DropReplicaPayload
) -> dict[str, Any]:
    """Drop this node's replica of a replicated partition, whose group it is no longer a member
    of (`ops.DropReplicaPayload`): its rows, its metadata, and with them its group."""
    ref = (payload.table_id, payload.partition_id)
    partition = ctx.lookup(ref)
    if partition is None:
        return {"dropped": False}
    if not ctx.node.replicated(ref):
        raise ValidationError(f"Partition {payload.partition_id} here is its only copy")
    if ctx.node.leads(ref):
        raise ValidationError(f"This node leads partition {payload.partition_id}'s group")
    snapshots.clear(ctx.node.store, ctx.batch, partition)
    ctx.put_partition(ref, None)
    ctx.feed.forget(ref)
    return {"dropped": True}


def update_ttl(
    ctx: WriteContext, target: Target | None, payload: ops.UpdateTtlPayload
) -> dict[str, Any]:
    """A table's TTL setting on every partition of it here (UpdateTimeToLive), or on the one
    partition the request is addressed to (`ops.UpdateTtlPayload`)."""
    if target is None:
        refs = list(ctx.refs(payload.table_id))
        alone = None
    else:
        refs = [_own(ctx, target, payload.table_id, target.partition_id)]
        alone = ctx.node.store
    changed = expiry.update_ttl(
        ctx.batch, payload.table_id, payload.ttl, refs, ctx.lookup, alone=alone
    )
    for ref, partition in changed.items():
        ctx.put_partition(ref, partition)
    return {"partitions_updated": sum(1 for ref in refs if ctx.lookup(ref) is not None)}


def ttl_expire(
    ctx: WriteContext, target: Target | None, payload: expiry.ExpirePayload
) -> dict[str, Any]:
    """The sweeper's deletes on one partition: never metered (TTL deletes are free). Addressed
    to its partition when it is replicated: an entry of its group, from its leader's sweeper."""
    ref = (payload.table_id, payload.partition_id)
    if target is not None:
        _own(ctx, target, *ref)
    partition = ctx.lookup(ref)
    if partition is None or not partition.serving:
        return {"deleted": 0}  # Moving: its log is final, or not yet its own.
    deleted = expiry.expire(ctx.batch, ctx.stage(ref), payload.keys, ctx.now, ctx.apply)
    return {"deleted": deleted}


def ttl_backfill(
    ctx: WriteContext, target: Target | None, payload: expiry.BackfillPayload
) -> dict[str, Any]:
    """One bounded step of indexing the items a partition held when TTL was enabled (addressed
    to it when it is replicated, as `ttl_expire`)."""
    ref = (payload.table_id, payload.partition_id)
    if target is not None:
        _own(ctx, target, *ref)
    partition = ctx.lookup(ref)
    if partition is None or not partition.serving:
        return {"done": True}  # Moving: a later sweep indexes it where it serves.
    return {"done": expiry.backfill(ctx.node.store, ctx.batch, ctx.stage(ref), ctx.now)}


def register_consumer(
    ctx: WriteContext, target: Target | None, payload: ops.RegisterConsumerPayload
) -> dict[str, Any]:
    ref, bounds = _feed_bounds(ctx, target)
    seq = ctx.feed.register(ref, payload.consumer, payload.seq, bounds)
    return {"seq": seq, **_feed_moved(ctx, ref)}


def checkpoint(
    ctx: WriteContext, target: Target | None, payload: ops.CheckpointPayload
) -> dict[str, Any]:
    ref, bounds = _feed_bounds(ctx, target)
    seq = ctx.feed.checkpoint(ref, payload.consumer, payload.seq, bounds)
    return {"seq": seq, **_feed_moved(ctx, ref)}


def unregister_consumer(
    ctx: WriteContext, target: Target | None, payload: ops.UnregisterConsumerPayload
) -> dict[str, Any]:
    ref, _ = _feed_bounds(ctx, target)
    unregistered = ctx.feed.unregister(ref, payload.consumer)
    return {"unregistered": unregistered, **_feed_moved(ctx, ref)}


def _feed_bounds(
    ctx: WriteContext, target: Target | None
) -> tuple[PartitionRef, changefeed.LogBounds]:
    """A partition's log bounds as this group sees them (live, or retired and kept)."""
    assert target is not None, "a consumer's write names its partition"
    ref = (target.table_id, target.partition_id)
    partition = ctx.lookup(ref)
    if partition is not None:
        return ref, changefeed.LogBounds(partition.first_seq, partition.last_seq)
    retired = ctx.feed.retired(ref)
    if retired is not None:
        return ref, retired.bounds()
    raise StaleEpoch(
        f"Partition {target.partition_id} of table {target.table_id} is not on this node"
    )


def _feed_moved(ctx: WriteContext, ref: PartitionRef) -> dict[str, Any]:
    """Trim a partition's log once a consumer has moved; its bounds as they will be."""
    if ctx.lookup(ref) is not None:
        staged = ctx.stage(ref)  # `finish` trims and persists it.
        keep = changefeed.first_retained_seq(
            staged.first_seq,
            staged.last_seq,
            ctx.node.change_log_records_max,
            ctx.feed.consumers(ref).values(),
        )
        return {"first_seq": keep, "last_seq": staged.last_seq}
    ctx.feed.trim_retired(ref, ctx.node.change_log_records_max)
    retired = ctx.feed.retired(ref)
    if retired is None:  # Every consumer has read to END: the log is gone.
        return {"first_seq": 0, "last_seq": 0}
    return {"first_seq": retired.first_seq, "last_seq": retired.end_seq}


def _end_of(prefix: bytes) -> bytes:
    """The exclusive end of every key that starts with `prefix` (a table id)."""
    end = successor(prefix)
    assert end is not None, "table ids are never all 0xff"
    return end
