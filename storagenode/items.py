"""The handlers of item writes: a client's put, update and delete, and a global index's entries.

An item write is planned, then applied: the handler reads the item as the write group sees it
(`WriteContext.read_item`: through the batch's overlay, so each write sees every earlier one of its
group), `core.writes.plan` decides the effect (condition, update, size, ReturnValues, units), and
the group's one `apply` stores it with its change-log record and the partition's counters. A
single writer thread serialises the groups, so a condition and the write it guards are atomic.

`index_apply` stores the GSI replicator's projected changes in a global index partition through
the same `apply`: an entry is an item of the index partition. It appends to the partition's
change log only while a move holds it (`storagenode.index_move`); otherwise an index partition
logs nothing.
"""

from __future__ import annotations

from typing import Any

from core import expressions, limits
from core.capacity import item_write_units, write_units
from core.catalog import IndexStatus, index_storage_name
from core.errors import (
    GSI_THROTTLED,
    DynamoError,
    LeaseFenced,
    OnDemandThrottled,
    ThrottlingReason,
    ThroughputExceeded,
    TransactionConflict,
    ValidationError,
)
from core.gsi import consumer_of
from core.index_pressure import PressedRange
from core.indexes import EntryChange, check_index_keys, entry_changes
from core.size import item_size_bytes
from core.transactions import CONFLICT_MESSAGE
from core.values import Item
from core.writes import DeleteRequest, PutRequest, UpdateRequest, WriteRequest, plan
from rpc import ops
from rpc.ops import Target
from storagenode import transactions as txn
from storagenode.layout import Family, index_source_bytes, index_source_key, index_source_of
from storagenode.move import MOVE_CONSUMER
from storagenode.partition import Partition
from storagenode.store import DataCorruption
from storagenode.writes import NodeState, PartitionRef, WriteContext, addressed, where


def write_request(payload: ops.ItemWritePayload, partition: Partition) -> WriteRequest:
    """The `core.writes` request of a put, update or delete, its key checked against the
    partition's key shape (and a put's item against its indexes' key types), its expressions
    compiled."""
    shape = partition.key_shape
    names, values = payload.names, payload.values
    text = payload.condition
    condition = None if text is None else expressions.condition(text, names, values)
    return_values, on_failure = payload.return_values, payload.return_on_failure
    if isinstance(payload, ops.PutPayload):
        shape.extract(payload.item)
        check_index_keys(payload.item, partition.key_checked_indexes(payload.global_indexes))
        return PutRequest(payload.item, condition, return_values, on_failure)
    key = shape.check_key(payload.key)
    if isinstance(payload, ops.UpdatePayload):
        update_text = payload.update
        update = (
            None
            if update_text is None
            else expressions.update(update_text, names, values, legacy=payload.legacy)
        )
        return UpdateRequest(key, update, condition, return_values, on_failure)
    return DeleteRequest(key, condition, return_values, on_failure)


def item_write(
    ctx: WriteContext, target: Target | None, payload: ops.ItemWritePayload
) -> dict[str, Any] | DynamoError:
    """Plan a put, update or delete against the item as this group sees it, then apply it; the
    units it consumed (a failed condition's too) go to `ctx.consumed`."""
    assert target is not None, "an item write names its partition"
    ref = (target.table_id, target.partition_id)
    partition = addressed(ctx.lookup(ref), target)
    request = write_request(payload, partition)
    key = request.item if isinstance(request, PutRequest) else request.key
    items_key = partition.item_prefix + partition.storage_key(key)
    try:
        if txn.locked(ctx.batch, items_key):
            # A prepared item takes no other write until its transaction is decided.
            raise TransactionConflict(CONFLICT_MESSAGE)
        old, old_bytes = ctx.read_item(items_key)
    except DataCorruption as error:
        raise error.within(where(target)) from None
    effect = plan(request, old, partition.key_shape, old_bytes=old_bytes)
    if effect.condition_failed:
        ctx.consumed = effect.units
        return effect.failure()
    if isinstance(request, UpdateRequest) and effect.new is not None:
        # An update may give an index key attribute a wrong type or an empty value.
        check_index_keys(effect.new, partition.key_checked_indexes(payload.global_indexes))
    # Global index writes are made later by the GSI replicator and charged to each index's
    # own throughput (`index_apply`); the write reports what they cost, for ConsumedCapacity.
    global_indexes = partition.named_global_indexes(payload.global_indexes)
    global_changes = entry_changes(effect.old, effect.new, global_indexes, partition.key_shape)
    global_units = {c.index.name: c.units for c in global_changes if c.units}
    if global_units:
        _hold_back_for_indexes(ctx, partition, [c for c in global_changes if c.units])
    staged = ctx.stage(ref)
    applied = ctx.apply(ctx.batch, staged, items_key, effect, now=ctx.now)
    reply = effect.reply()
    # Local index writes are charged to the table's throughput (seed 000, L-29), and
    # reported apart for ReturnConsumedCapacity INDEXES.
    index_units = {c.index.name: c.units for c in applied.entries if c.units}
    if index_units:
        reply["index_units"] = index_units
    if global_units:
        reply["global_index_units"] = global_units
    if applied.collection_bytes is not None:
        reply["collection_bytes"] = applied.collection_bytes
    ctx.consumed = effect.units + sum(index_units.values())
    return reply


def _hold_back_for_indexes(
    ctx: WriteContext, partition: Partition, changes: list[EntryChange]
) -> None:
    """Refuse a write that would change global index entries (`changes`, each with its units)
    that one of those indexes cannot take now (back-pressure: DynamoDB throttles a base write
    whose global index has no write capacity for it, and leaves writes that do not touch that
    index alone), with ProvisionedThroughputExceededException and a ThrottlingReason per index:

    - an index partition the write would change refused the GSI replicator's writes for its own
      capacity (`core.index_pressure`: the reason is the one that partition gave, provisioned
      units or its key range's ceiling);
    - the replicator consumer that keeps one of the indexes is more than `gsi_lag_records_max`
      change records behind (the lag stands in for the index's capacity, and is named as
      DynamoDB names an index out of it).

    An index added online counts once it is ACTIVE: while it is copied, its consumer stays where
    the copy began, and the writes during a backfill must go on."""
    counted = [
        change
        for change in changes
        if not change.index.online or change.index.status is IndexStatus.ACTIVE
    ]
    node = ctx.node
    reasons = list(
        node.index_pressure.refusals(partition.table_id, counted, partition.key_shape, ctx.now)
    )
    indexes = [change.index for change in counted]
    provisioned = (partition.throughput or {}).get("billing_mode") == "PROVISIONED"
    for consumer in sorted({consumer_of(index) for index in indexes}):
        checkpoint = node.consumer_checkpoint(partition.table_id, partition.partition_id, consumer)
        if checkpoint is None or partition.last_seq - checkpoint <= node.gsi_lag_records_max:
            continue
        for index in indexes:
            if consumer_of(index) != consumer:
                continue
            lagging = ThrottlingReason.of(
                index_storage_name(partition.table_name, index.name),
                read=False,
                provisioned=provisioned,
            )
            if all(reason.resource != lagging.resource for reason in reasons):
                reasons.append(lagging)
    if not reasons:
        return
    if (partition.throughput or {}).get("billing_mode") == "PAY_PER_REQUEST":
        # An on-demand table's indexes are on demand too: DynamoDB answers ThrottlingException.
        raise OnDemandThrottled(reasons=tuple(reasons))
    raise ThroughputExceeded(GSI_THROTTLED, tuple(reasons))


def index_pressure(
    node: NodeState, target: Target | None, payload: ops.IndexPressurePayload
) -> dict[str, Any]:
    """Note, renew or drop the GSI replicator's report that a partition of a global index has no
    write capacity (`core.index_pressure`); base writes of the table that would change it are
    refused meanwhile (`_hold_back_for_indexes`). Soft state: nothing is written."""
    pressure = node.index_pressure
    now = node.clock()
    if not payload.reasons or payload.seconds <= 0:
        pressure.release(payload.table_id, payload.index, payload.partition_id, now)
        return {}
    seconds = min(payload.seconds, limits.GSI_INDEX_PRESSURE_SECONDS)
    reason = payload.reasons[0]
    pressed = PressedRange(
        bytes.fromhex(payload.start),
        None if payload.end is None else bytes.fromhex(payload.end),
        ThrottlingReason(reason["reason"], reason["resource"]),
        now + seconds,
    )
    pressure.press(payload.table_id, payload.index, payload.partition_id, pressed, now)
    return {}


def index_apply(
    ctx: WriteContext, target: Target | None, payload: ops.IndexApplyPayload
) -> dict[str, Any]:
    """Apply base partitions' projected changes to a global index partition (`rpc.ops`), each
    part in order, as one write: a busy table's changes from many base partitions cost one
    write of the index node's group commit, the per-source seqs committed with the entries.

    A part refused on its own (fenced by a later lease, or a malformed change) is answered with
    its refusal in its place and applies nothing; the others go on."""
    assert target is not None, "an index write names its partition"
    ref = (target.table_id, target.partition_id)
    partition = addressed(ctx.lookup(ref), target)
    replies: list[dict[str, Any]] = []
    units = 0.0
    for part in payload.parts:
        try:
            reply = _apply_part(ctx, ref, partition, part)
        except (LeaseFenced, ValidationError) as error:
            replies.append(ops.part_refused(error))
            continue
        units += reply["units"]
        replies.append(reply)
    ctx.consumed = units
    return {"parts": replies, "units": units}


def _apply_part(
    ctx: WriteContext, ref: PartitionRef, partition: Partition, part: ops.IndexApplyPart
) -> dict[str, Any]:
    """Apply one base partition's projected changes (an `IndexApplyPart`).

    Changes at or below the seq this partition last applied from that source are skipped;
    the new seq is stored in the same batch as the entries. Every entry key is checked and
    every entry measured before the batch is touched, so a refused part changes nothing.
    Each entry write goes through the group's `apply`, appended to the partition's change log
    only while the partition is being moved away (its log held by the move's consumer), which
    the move's catch-up carries to the target (`storagenode.index_move`).
    """
    shape = partition.key_shape
    source_key = index_source_key(partition.table_id, partition.partition_id, part.source)
    stored = ctx.batch.get(Family.INDEX_SOURCES, source_key)
    applied_seq, fence = (0, 0) if stored is None else index_source_of(stored)
    if part.lease_epoch < fence:
        raise LeaseFenced(
            f"Source {part.source} is leased under epoch {fence} here, not {part.lease_epoch}"
        )
    fenced_at = fence
    fence = max(fence, part.lease_epoch)
    writes: list[tuple[bytes, Item, Item | None, int]] = []
    new_bytes: list[int] = []
    applied = 0
    for change in part.changes:
        seq = int(change["seq"])
        if part.backfill:
            seq = applied_seq  # A copy's puts leave the source's seq where it is.
        elif seq <= applied_seq:
            continue
        deleted, entry = change.get("delete"), change.get("put")
        if deleted is not None:
            key = shape.check_key(deleted)
            writes.append((partition.item_prefix + partition.storage_key(key), key, None, 0))
        if entry is not None:
            key = shape.key_of(entry)
            size = item_size_bytes(entry)
            items_key = partition.item_prefix + partition.storage_key(key)
            writes.append((items_key, key, entry, size))
            new_bytes.append(size)
        applied_seq = seq
        applied += 1
    if not applied:
        if fence > fenced_at:
            ctx.batch.put(Family.INDEX_SOURCES, source_key, index_source_bytes(applied_seq, fence))
        return {"applied": 0, "source_seq": applied_seq, "new_bytes": [], "units": 0.0}
    staged = ctx.stage(ref)
    units = 0.0
    logged = MOVE_CONSUMER in ctx.feed.consumers(ref)
    for items_key, key, entry, size in writes:
        effect = ctx.replacing(staged, items_key, key, entry, size)
        # Deleting an entry costs its size; deleting one that is not there, nothing.
        if entry is None:
            units += write_units(effect.old_bytes) if effect.old is not None else 0.0
        else:
            units += item_write_units(effect.old_bytes if effect.old is not None else None, size)
        ctx.apply(ctx.batch, staged, items_key, effect, now=ctx.now, capped=False, logged=logged)
    if not part.backfill or fence > fenced_at:
        # A copy leaves the source's seq where it is (`applied_seq` did not move).
        ctx.batch.put(Family.INDEX_SOURCES, source_key, index_source_bytes(applied_seq, fence))
    return {
        "applied": applied,
        "source_seq": applied_seq,
        "new_bytes": new_bytes,
        "units": units,
    }
