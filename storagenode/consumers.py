"""The handlers of a change feed's consumers: register, checkpoint and unregister.

Each runs in a write group (`storagenode.writes.WriteContext`), so a consumer's checkpoint
commits with the group, and the log it lets go of is trimmed in the same batch. A partition's
log may be live or retired and kept for its consumers (`changefeed.RetiredLog`).
"""

from __future__ import annotations

from typing import Any

from core.errors import StaleEpoch
from rpc import ops
from rpc.ops import Target
from storagenode import changefeed
from storagenode.writes import PartitionRef, WriteContext


def register_consumer(
    ctx: WriteContext, target: Target | None, payload: ops.RegisterConsumerPayload
) -> dict[str, Any]:
    ref, bounds = _bounds(ctx, target)
    seq = ctx.feed.register(ref, payload.consumer, payload.seq, bounds)
    return {"seq": seq, **_moved(ctx, ref)}


def checkpoint(
    ctx: WriteContext, target: Target | None, payload: ops.CheckpointPayload
) -> dict[str, Any]:
    ref, bounds = _bounds(ctx, target)
    seq = ctx.feed.checkpoint(ref, payload.consumer, payload.seq, bounds)
    return {"seq": seq, **_moved(ctx, ref)}


def unregister_consumer(
    ctx: WriteContext, target: Target | None, payload: ops.UnregisterConsumerPayload
) -> dict[str, Any]:
    ref, _ = _bounds(ctx, target)
    unregistered = ctx.feed.unregister(ref, payload.consumer)
    return {"unregistered": unregistered, **_moved(ctx, ref)}


def _bounds(ctx: WriteContext, target: Target | None) -> tuple[PartitionRef, changefeed.LogBounds]:
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


def _moved(ctx: WriteContext, ref: PartitionRef) -> dict[str, Any]:
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
