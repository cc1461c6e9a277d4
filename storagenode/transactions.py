"""A node's side of transactions: records, prepares, commits and releases, in the group commit.

Every operation here runs inside a group commit (`writes.WriteContext`), so what it writes is
durable when it is acknowledged and sees every earlier write of its group. The decisions are
`core.transactions`'; this module only reads and writes the `transactions` column family:

- `R` ‖ record id -> the transaction's record (`core.transactions.Record`), on the node holding
  the partition the coordinator chose for it;
- `L` ‖ items key -> the lock of a prepared item (`core.transactions.ItemLock`), beside the item;
- `P` ‖ attempt id -> this node's part of an attempt: `{"state", "keys": [[table id, partition
  id, items key hex], ...], "record": [table id, partition id], "prepared", "deadline" (the
  latest of its prepares' deadlines), "done"}`. PENDING
  while it holds locks; COMMITTED or ABORTED once applied, kept `TRANSACTION_RESOLVE_SECONDS` more
  so that a prepare arriving after its attempt was applied or released here (a duplicate, or one
  delayed past its coordinator's death) is refused rather than locking items nobody will release.

A replicated partition (a Raft group with members on other nodes) keeps its share of all this
in its own group, so that every member holds it and a new leader finds it: its records are
`r` ‖ its log prefix ‖ record id, its part of an attempt `p` ‖ its log prefix ‖ attempt id (its
own locks only), its locks `L` ‖ items key as above. Every change of them is a write addressed
to the partition, an entry of its log at its leader: the record's steps and the prepare (data
ops), the commit or release (`txn_apply` addressed to it) and the forgetting of what is done
with (`txn_sweep` addressed to it); a snapshot of the partition carries their ranges
(`storagenode.snapshots.ranges`). The node's own sweep reports what the partitions it leads
left behind, and leaves the rows of the others to their leaders.

A commit plans each locked item's write again (`core.writes.plan`, without its condition: the item
has been locked since the condition held) and applies it through the node's one write hook
(`replica.apply`), so local indexes, the TTL index and the change feed follow, as for any write.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import orjson

from core import expressions, limits
from core import transactions as txn
from core.capacity import ReadConsistency, read_units
from core.errors import ValidationError
from core.indexes import check_index_keys, entry_changes
from core.keycodec import successor
from core.writes import PutRequest, UpdateRequest, WriteEffect, WriteRequest, plan
from rpc import ops
from rpc.ops import Target
from rpc.transactions import (
    TxnApplyPayload,
    TxnGetPayload,
    TxnPreparePayload,
    TxnRecordPayload,
)
from storagenode.layout import (
    Family,
    change_log_prefix,
    collection_size_of,
    item_json_of,
    item_size_of,
    seq_bytes,
    split_log_key,
)
from storagenode.partition import Partition
from storagenode.store import NodeStore, WriteBatchView
from storagenode.writes import WriteContext, addressed

logger = logging.getLogger(__name__)

RECORD_PREFIX = b"R"
LOCK_PREFIX = b"L"
PART_PREFIX = b"P"
# A replicated partition's records and parts, under its log prefix.
GROUP_RECORD_PREFIX = b"r"
GROUP_PART_PREFIX = b"p"

PartitionRef = tuple[str, str]
ITEM_WRITE_PAYLOADS: dict[str, Callable[[dict[str, Any]], ops.ItemWritePayload]] = {
    ops.PUT: ops.PutPayload.from_json,
    ops.UPDATE: ops.UpdatePayload.from_json,
    ops.DELETE: ops.DeletePayload.from_json,
}
CHECK = "check"


@dataclasses.dataclass(frozen=True, slots=True)
class Group:
    """What a transaction operation needs of the group commit it runs in: the group's public
    write interface (`ctx`: its batch, clock, overlay of partitions and the one apply), and the
    item writes' check of a write against its partition (`write_request`,
    `storagenode.items.write_request`, handed in because `items` reads this module's locks)."""

    ctx: WriteContext
    write_request: Callable[[ops.ItemWritePayload, Partition], WriteRequest]


PREPARE_SECONDS = limits.TRANSACTION_PREPARE_SECONDS


def _deadline_of(part: dict[str, Any]) -> float:
    """A part's prepare deadline (parts written before deadlines were kept: prepared + the
    prepare's time)."""
    deadline = part.get("deadline")
    return float(part["prepared"] + PREPARE_SECONDS if deadline is None else deadline)


def lock_key(items_key: bytes) -> bytes:
    return LOCK_PREFIX + items_key


def locked(batch: WriteBatchView | NodeStore, items_key: bytes) -> bool:
    """Whether a transaction has prepared the item stored under `items_key`."""
    return batch.get(Family.TRANSACTIONS, lock_key(items_key)) is not None


def _load(batch: WriteBatchView, key: bytes) -> dict[str, Any] | None:
    raw = batch.get(Family.TRANSACTIONS, key)
    return None if raw is None else orjson.loads(raw)


def _put(batch: WriteBatchView, key: bytes, value: dict[str, Any]) -> None:
    batch.put(Family.TRANSACTIONS, key, orjson.dumps(value))


def group_record_key(table_id: str, partition_id: str, record_id: str) -> bytes:
    """The key of a record kept by a replicated partition."""
    return GROUP_RECORD_PREFIX + change_log_prefix(table_id, partition_id) + record_id.encode()


def group_part_key(table_id: str, partition_id: str, attempt: str) -> bytes:
    """The key of a replicated partition's part of an attempt."""
    return GROUP_PART_PREFIX + change_log_prefix(table_id, partition_id) + attempt.encode()


def _record_key(group: Group, ref: PartitionRef, record_id: str) -> bytes:
    if group.ctx.node.replicated(ref):
        return group_record_key(*ref, record_id)
    return RECORD_PREFIX + record_id.encode()


def _part_key(group: Group, ref: PartitionRef | None, attempt: str) -> bytes:
    """Where the part of `attempt` is: the node's (`ref` None, or a partition of one copy), or
    the replicated partition `ref`'s own."""
    if ref is not None and group.ctx.node.replicated(ref):
        return group_part_key(*ref, attempt)
    return PART_PREFIX + attempt.encode()


def carry_to_children(ctx: WriteContext, parent: Partition, children: Sequence[Partition]) -> None:
    """At a replicated partition's split (its install, an entry of its group), move its
    transaction rows to the children that take them over: each part of an attempt to every
    child holding some of its locked items (a part done with, a tombstone refusing a late
    prepare, to each child), naming the child's items; each record to the child whose range
    holds its key (`core.transactions.record_key`), where every router looks for it. Locks stay,
    beside their items."""
    for key, value in _partition_rows(
        ctx, GROUP_PART_PREFIX, (parent.table_id, parent.partition_id)
    ):
        part = orjson.loads(value)
        attempt = key[len(GROUP_PART_PREFIX) + len(parent.log_prefix) :].decode()
        for child in children:
            keys = [
                [child.table_id, child.partition_id, key_hex]
                for _, _, key_hex in part["keys"]
                if child.holds(bytes.fromhex(key_hex)[len(child.item_prefix) :])
            ]
            if keys or part["state"] != txn.State.PENDING.value:
                moved = {**part, "keys": keys}
                _put(ctx.batch, group_part_key(child.table_id, child.partition_id, attempt), moved)
        ctx.batch.delete(Family.TRANSACTIONS, key)
    for key, value in _partition_rows(
        ctx, GROUP_RECORD_PREFIX, (parent.table_id, parent.partition_id)
    ):
        record_id = key[len(GROUP_RECORD_PREFIX) + len(parent.log_prefix) :].decode()
        held = txn.record_key(record_id)
        child = next((c for c in children if c.holds(held)), children[0])
        ctx.batch.put(
            Family.TRANSACTIONS,
            group_record_key(child.table_id, child.partition_id, record_id),
            value,
        )
        ctx.batch.delete(Family.TRANSACTIONS, key)


# Records ----------------------------------------------------------------------------------------


def record(group: Group, target: Target, payload: TxnRecordPayload) -> dict[str, Any]:
    """txn_record: begin, decide, finish, resolve or read the record `payload.record_id`, kept
    by the addressed partition."""
    key = _record_key(group, (target.table_id, target.partition_id), payload.record_id)
    stored = _load(group.ctx.batch, key)
    existing = None if stored is None else txn.Record.from_json(stored)
    action = payload.action
    if action == "read":
        return {"record": stored}
    if action == "begin":
        assert payload.record is not None
        asked = txn.Record.from_json(payload.record)
        begun = txn.begin(
            existing, asked.id, asked.digest, asked.participants, group.ctx.now, token=asked.token
        )
        if begun is not existing:
            _put(group.ctx.batch, key, begun.to_json())
            logger.info(
                "transaction %s began with %d participants",
                begun.attempt_id,
                len(begun.participants),
            )
        return {"record": begun.to_json()}
    if existing is None:
        return {"record": None}
    if action == "decide":
        assert payload.outcome is not None
        changed = txn.decide(existing, payload.attempt, txn.State(payload.outcome), group.ctx.now)
    elif action == "resolve":
        outcome = txn.resolution(existing, payload.attempt, group.ctx.now)
        if outcome is None or outcome is txn.State.PENDING:
            return {"record": stored}
        if existing.attempt != payload.attempt:
            return {"record": stored}
        changed = txn.decide(existing, payload.attempt, outcome, group.ctx.now)
    elif action == "finish":
        changed = txn.finish(existing, payload.attempt, group.ctx.now)
        if changed is not existing and not changed.token:
            # Nobody will ask again: without a ClientRequestToken there is no retry to answer.
            group.ctx.batch.delete(Family.TRANSACTIONS, key)
            return {"record": changed.to_json()}
    else:
        raise ValidationError(f"Unknown txn_record action {action!r}")
    if changed is not existing:
        _put(group.ctx.batch, key, changed.to_json())
        if changed.state is not existing.state:
            logger.info("transaction %s %s (%s)", changed.attempt_id, changed.state.value, action)
    return {"record": changed.to_json()}


# Prepare ----------------------------------------------------------------------------------------


def prepare(group: Group, target: Target, payload: TxnPreparePayload) -> dict[str, Any]:
    """txn_prepare: vote on each action and lock every item, or, if any vote is no, lock none.

    Every vote yes, the partition is charged what the actions cost (`core.transactions.Cost`)
    before any lock is taken: a partition without the capacity votes ThrottlingError or
    ProvisionedThroughputExceeded for all of them and locks nothing."""
    ref = (target.table_id, target.partition_id)
    partition = group.ctx.lookup(ref)
    assert partition is not None, "the group checked the target"
    attempt = payload.attempt
    part_key = _part_key(group, ref, attempt)
    part = _load(group.ctx.batch, part_key)
    if part is not None and part["state"] != txn.State.PENDING.value:
        # The attempt was already committed or released here: this prepare came too late.
        return {"votes": [txn.CONFLICT.to_json()] * len(payload.actions), "sizes": [], "costs": []}
    votes: list[txn.Vote] = []
    sizes: list[list[int]] = []
    costs: list[txn.Cost] = []
    locks: list[tuple[bytes, txn.ItemLock]] = []
    collections: dict[bytes, int] = {}
    for action in payload.actions:
        prepared = _prepare_action(group, partition, payload, action, collections)
        votes.append(prepared.vote)
        sizes.append(prepared.sizes)
        costs.append(prepared.cost)
        if prepared.lock is not None:
            locks.append((prepared.items_key, prepared.lock))
    if all(vote.yes for vote in votes):
        refusal = group.ctx.node.admit_transaction(ref, sum(cost.charged for cost in costs))
        if refusal is not None:
            votes = [refusal] * len(votes)
    if all(vote.yes for vote in votes):
        keys = [] if part is None else list(part["keys"])
        for items_key, lock in locks:
            _put(group.ctx.batch, lock_key(items_key), lock.to_json())
            keys.append([partition.table_id, partition.partition_id, items_key.hex()])
        # No prepare of this attempt locks anything here after its deadline: past it (and its
        # grace) the sweep reports the locks for a resolver to settle from the record.
        deadline = target.deadline if target.deadline > 0 else group.ctx.now + PREPARE_SECONDS
        if part is not None:
            deadline = max(deadline, _deadline_of(part))
        _put(
            group.ctx.batch,
            part_key,
            {
                "state": txn.State.PENDING.value,
                "keys": keys,
                "record": payload.record,
                "prepared": group.ctx.now,
                "deadline": deadline,
                "done": None,
            },
        )
        logger.info("transaction %s prepared %d items of partition %s", attempt, len(locks), ref[1])
    else:
        logger.info(
            "transaction %s refused on partition %s: %s",
            attempt,
            ref[1],
            [vote.code.value for vote in votes],
        )
    return {
        "votes": [vote.to_json() for vote in votes],
        "sizes": sizes,
        "costs": [cost.to_json() for cost in costs],
    }


@dataclasses.dataclass(frozen=True, slots=True)
class _Prepared:
    """One action at prepare: its vote, its items key, the lock it would take, its item's
    [old, new] sizes and its cost."""

    vote: txn.Vote
    items_key: bytes
    lock: txn.ItemLock | None
    sizes: list[int]
    cost: txn.Cost


def _prepare_action(
    group: Group,
    partition: Partition,
    payload: TxnPreparePayload,
    action: dict[str, Any],
    collections: dict[bytes, int],
) -> _Prepared:
    """One action's vote and what it would lock and cost. `collections` holds the item
    collections' sizes as this prepare's earlier actions leave them."""
    op, body = action["op"], action["body"]
    shape = partition.key_shape
    request: WriteRequest | None = None
    condition: expressions.Condition | None = None
    if op == CHECK:
        key = shape.check_key(body["key"])
        condition = expressions.condition(body["condition"], body.get("names"), body.get("values"))
    else:
        write = ITEM_WRITE_PAYLOADS[op](body)
        request = group.write_request(write, partition)
        key = request.item if isinstance(request, PutRequest) else request.key
    items_key = partition.item_prefix + partition.storage_key(key)
    held = _load(group.ctx.batch, lock_key(items_key))
    lock_vote = txn.prepare_vote(
        None if held is None else txn.ItemLock.from_json(held), payload.attempt
    )
    if lock_vote is not None:
        return _Prepared(lock_vote, items_key, None, [0, 0], txn.Cost(0.0))
    raw = group.ctx.batch.get(Family.ITEMS, items_key)
    old = None if raw is None else orjson.loads(item_json_of(raw))
    old_bytes = 0 if raw is None else item_size_of(raw)
    unchanged = txn.action_cost(old_bytes, old_bytes, (), ())
    lock = txn.ItemLock(
        payload.attempt,
        partition.table_id,
        partition.partition_id,
        payload.record[0],
        payload.record[1],
        group.ctx.now,
        op,
        None if op == CHECK else body,
    )
    sizes = [old_bytes, old_bytes]
    if request is None:
        assert condition is not None
        if condition.evaluate(old):
            return _Prepared(txn.YES, items_key, lock, sizes, unchanged)
        failed = old if body.get("return_on_failure") else None
        return _Prepared(txn.condition_failed(failed), items_key, None, sizes, unchanged)
    try:
        effect = plan(request, old, shape, old_bytes=old_bytes)
        if isinstance(request, UpdateRequest) and effect.new is not None:
            assert isinstance(write, ops.UpdatePayload)
            check_index_keys(effect.new, partition.key_checked_indexes(write.global_indexes))
    except ValidationError as error:
        vote = txn.Vote(txn.Code.VALIDATION_ERROR, error.message)
        return _Prepared(vote, items_key, None, sizes, unchanged)
    if effect.condition_failed:
        failed = old if effect.return_on_failure else None
        return _Prepared(txn.condition_failed(failed), items_key, None, sizes, unchanged)
    local = entry_changes(effect.old, effect.new, partition.local_indexes, shape)
    cost = txn.action_cost(
        effect.old_bytes,
        effect.new_bytes,
        local,
        entry_changes(
            effect.old, effect.new, partition.named_global_indexes(write.global_indexes), shape
        ),
    )
    sizes = [effect.old_bytes, effect.new_bytes]
    if partition.local_indexes:
        collection_key = partition.collection_key(effect.key[shape.partition_key.name])
        current = collections.get(collection_key)
        if current is None:
            current = collection_size_of(
                group.ctx.batch.get(Family.ITEM_COLLECTIONS, collection_key)
            )
        vote, after = txn.collection_vote(
            current,
            effect.old_bytes,
            effect.new_bytes,
            local,
            group.ctx.node.item_collection_bytes_max,
        )
        if not vote.yes:
            return _Prepared(vote, items_key, None, sizes, cost)
        collections[collection_key] = after
        cost = dataclasses.replace(cost, collection_bytes=after)
    return _Prepared(txn.YES, items_key, lock, sizes, cost)


# Commit and release -----------------------------------------------------------------------------


def apply(group: Group, target: Target | None, payload: TxnApplyPayload) -> dict[str, Any]:
    """txn_apply: commit or release every lock the attempt holds on this node (or, addressed to
    a replicated partition, in that partition), once."""
    attempt = payload.attempt
    ref = None
    if target is not None:
        ref = (target.table_id, target.partition_id)
        addressed(group.ctx.lookup(ref), target)
    part_key = _part_key(group, ref, attempt)
    part = _load(group.ctx.batch, part_key)
    outcome = txn.State.COMMITTED if payload.commit else txn.State.ABORTED
    done: dict[str, Any] = {
        "state": outcome.value,
        "keys": [],
        "record": None,
        "prepared": group.ctx.now,
    }
    if part is None:
        # Nothing prepared here (every vote was no, or the prepare has not arrived): remember the
        # outcome so that a late prepare is refused.
        _put(group.ctx.batch, part_key, {**done, "done": group.ctx.now})
        return {"applied": 0}
    if part["state"] != txn.State.PENDING.value:
        return {"applied": 0}
    applied = 0
    for table_id, partition_id, key_hex in part["keys"]:
        items_key = bytes.fromhex(key_hex)
        held = _load(group.ctx.batch, lock_key(items_key))
        if held is None:
            continue
        lock = txn.ItemLock.from_json(held)
        if lock.attempt_id != attempt:
            continue
        if payload.commit and lock.op != CHECK:
            _commit_item(group, (table_id, partition_id), items_key, lock)
        group.ctx.batch.delete(Family.TRANSACTIONS, lock_key(items_key))
        applied += 1
    _put(
        group.ctx.batch,
        part_key,
        {**part, "state": outcome.value, "keys": [], "done": group.ctx.now},
    )
    logger.info("transaction %s %s on this node (%d items)", attempt, outcome.value, applied)
    return {"applied": applied}


def _commit_item(group: Group, ref: PartitionRef, items_key: bytes, lock: txn.ItemLock) -> None:
    """Apply a locked item's write: planned again without its condition, applied like any write."""
    partition = group.ctx.staged(ref)
    if partition is None:
        # The partition split since the prepare (the lock, keyed by the item, stayed where the
        # item is): the child now holding the item commits it.
        holder = group.ctx.holder(ref[0], items_key)
        partition = None if holder is None else group.ctx.staged(holder)
    if partition is None:
        # The table was dropped: its items went with it.
        logger.warning(
            "transaction %s: partition %s is gone; its write is dropped", lock.attempt_id, ref
        )
        return
    assert lock.body is not None
    payload = ITEM_WRITE_PAYLOADS[lock.op](lock.body)
    payload.condition = None
    request = group.write_request(payload, partition)
    raw = group.ctx.batch.get(Family.ITEMS, items_key)
    old = None if raw is None else orjson.loads(item_json_of(raw))
    old_bytes = 0 if raw is None else item_size_of(raw)
    effect: WriteEffect = plan(request, old, partition.key_shape, old_bytes=old_bytes)
    # The item collection cap was checked at prepare, and the decision is durable: the write is
    # applied even if single-item writes to other items of its collection have grown it since.
    group.ctx.apply(group.ctx.batch, partition, items_key, effect, now=group.ctx.now, capped=False)


# The sweep: what resolvers should look at -------------------------------------------------------


def sweep(ctx: WriteContext, target: Target | None) -> dict[str, Any]:
    """txn_sweep, to the node: the attempts holding locks whose prepares are over (past their
    deadline and grace), the records left unresolved past `TRANSACTION_RESOLVE_SECONDS`, and
    the forgetting of what is done with; of the replicated partitions, those this node leads
    report theirs (`group_locks`, `group_records`) and are named in `forget` when they have
    rows to forget, which a sweep addressed to each forgets as an entry of its group. Addressed
    to a replicated partition: forget its rows done with, nothing else."""
    now = ctx.now
    if target is not None:
        ref = (target.table_id, target.partition_id)
        addressed(ctx.lookup(ref), target)
        return {"forgotten": _forget_group(ctx, ref)}
    store, batch = ctx.node.store, ctx.batch
    locks: list[list[Any]] = []
    records: list[list[Any]] = []
    for key, value in store.walk(Family.TRANSACTIONS, PART_PREFIX, b"Q", forward=True):
        part = orjson.loads(value)
        attempt = key[len(PART_PREFIX) :].decode()
        if _held_over(part, now):
            locks.append([attempt, *part["record"]])
        elif _part_done_with(part, now):
            batch.delete(Family.TRANSACTIONS, key)
        if len(locks) >= limits.TRANSACTION_SWEEP_ITEMS_MAX:
            break
    for key, value in store.walk(Family.TRANSACTIONS, RECORD_PREFIX, b"S", forward=True):
        found = txn.Record.from_json(orjson.loads(value))
        if txn.idempotency_expired(found, now):
            batch.delete(Family.TRANSACTIONS, key)
        elif _stuck(found, now):
            records.append([found.id, found.attempt])
        if len(records) >= limits.TRANSACTION_SWEEP_ITEMS_MAX:
            break
    group_locks: list[list[Any]] = []
    group_records: list[list[Any]] = []
    forget: set[PartitionRef] = set()
    for ref, name, value in _group_rows(ctx, GROUP_PART_PREFIX):
        part = orjson.loads(value)
        if _held_over(part, now):
            group_locks.append([name, *part["record"], *ref])
        elif _part_done_with(part, now):
            forget.add(ref)
        if len(group_locks) >= limits.TRANSACTION_SWEEP_ITEMS_MAX:
            break
    for ref, _name, value in _group_rows(ctx, GROUP_RECORD_PREFIX):
        found = txn.Record.from_json(orjson.loads(value))
        if txn.idempotency_expired(found, now):
            forget.add(ref)
        elif _stuck(found, now):
            group_records.append([found.id, found.attempt, *ref])
        if len(group_records) >= limits.TRANSACTION_SWEEP_ITEMS_MAX:
            break
    return {
        "locks": locks,
        "records": records,
        "group_locks": group_locks,
        "group_records": group_records,
        "forget": sorted([*ref] for ref in forget),
    }


def _held_over(part: dict[str, Any], now: float) -> bool:
    """Whether a part holds locks its prepares can no longer add to, naming its record."""
    return (
        part["state"] == txn.State.PENDING.value
        and txn.prepare_over(_deadline_of(part), now)
        and bool(part["record"])
    )


def _part_done_with(part: dict[str, Any], now: float) -> bool:
    """Whether an applied part has been kept long enough to refuse a late prepare."""
    return (
        part["state"] != txn.State.PENDING.value
        and now - float(part["done"]) >= limits.TRANSACTION_RESOLVE_SECONDS
    )


def _stuck(record: txn.Record, now: float) -> bool:
    """Whether a record has waited past `TRANSACTION_RESOLVE_SECONDS` for its next step."""
    since = record.began if record.decided is None else record.decided
    return record.finished is None and now - since >= limits.TRANSACTION_RESOLVE_SECONDS


def _group_rows(ctx: WriteContext, prefix: bytes) -> Iterator[tuple[PartitionRef, str, bytes]]:
    """(partition, record or attempt id, value) of the replicated partitions' rows under
    `prefix` that this node's sweep speaks for: those of the partitions it leads. A row of a
    partition no longer on this node is deleted here (its group is gone with it)."""
    end = successor(prefix)
    assert end is not None
    for key, value in ctx.node.store.walk(Family.TRANSACTIONS, prefix, end, forward=True):
        ref, name = split_log_key(key[len(prefix) :])
        if ref not in ctx.node.partitions:
            ctx.batch.delete(Family.TRANSACTIONS, key)
        elif ctx.node.leads(ref):
            yield ref, name.decode(), value


def _forget_group(ctx: WriteContext, ref: PartitionRef) -> int:
    """Delete a replicated partition's parts kept long enough and its records past their
    token's time, in the write addressed to it (an entry of its group); how many. Each row is
    judged as the group holds it (a begin earlier in the group may have renewed a record)."""
    now = ctx.now
    doomed = [
        key
        for key, value in _partition_rows(ctx, GROUP_PART_PREFIX, ref)
        if _part_done_with(orjson.loads(value), now)
    ]
    doomed.extend(
        key
        for key, value in _partition_rows(ctx, GROUP_RECORD_PREFIX, ref)
        if txn.idempotency_expired(txn.Record.from_json(orjson.loads(value)), now)
    )
    for key in doomed:
        ctx.batch.delete(Family.TRANSACTIONS, key)
    return len(doomed)


def _partition_rows(
    ctx: WriteContext, prefix: bytes, ref: PartitionRef
) -> Iterator[tuple[bytes, bytes]]:
    """The rows under `prefix` of one replicated partition, as the group holds them."""
    lo = prefix + change_log_prefix(*ref)
    hi = successor(lo)
    assert hi is not None
    keys = {key for key, _ in ctx.node.store.walk(Family.TRANSACTIONS, lo, hi, forward=True)}
    keys.update(ctx.batch.written(Family.TRANSACTIONS, lo, hi))
    for key in sorted(keys):
        current = ctx.batch.get(Family.TRANSACTIONS, key)
        if current is not None:
            yield key, current


# TransactGetItems ---------------------------------------------------------------------------------


def get(
    store: NodeStore,
    partition: Partition,
    payload: TxnGetPayload,
    admit: Callable[[PartitionRef, float], txn.Vote | None],
    last_seq_now: Callable[[], int],
) -> dict[str, Any]:
    """txn_get: the items, which are prepared (`locked`, per item), and the partition's last
    change seq read before them (`last_seq`).

    With `payload.since` (the seq an earlier round reported), also whether any of these items
    was written after it (`changed`): the change-log records from `since` to the seq read after
    the items (`last_seq_now`) are looked through for their keys. An item no record names held
    its value from before the earlier round's read to after this one, whatever else the
    partition took meanwhile. A log trimmed past `since`, or more than
    `TRANSACT_GET_LOG_RECORDS_MAX` records to look through, count as changed.

    With `payload.charge`, the partition is charged two read units per 4 KB of each item read
    (the Developer Guide's price of a transactional read); when its bucket is empty the reply
    carries the throttled vote (`throttled`) instead."""
    last_seq = partition.last_seq
    items: list[dict[str, Any] | None] = []
    read_bytes: list[int] = []
    locks: list[bool] = []
    storage_keys: set[bytes] = set()
    for entry in payload.gets:
        key = partition.key_shape.check_key(entry["key"])
        storage_key = partition.storage_key(key)
        storage_keys.add(storage_key)
        items_key = partition.item_prefix + storage_key
        locks.append(locked(store, items_key))
        raw = store.get(Family.ITEMS, items_key)
        if raw is None:
            items.append(None)
            read_bytes.append(0)
            continue
        item = orjson.loads(item_json_of(raw))
        projection = entry.get("projection")
        if projection is not None:
            item = expressions.projection(projection, entry.get("names")).apply(item)
        items.append(item)
        read_bytes.append(item_size_of(raw))
    reply: dict[str, Any] = {
        "items": items,
        "read_bytes": read_bytes,
        "locked": any(locks),
        "locks": locks,
        "last_seq": last_seq,
    }
    if payload.since is not None:
        reply["changed"] = _written_since(
            store, partition, storage_keys, payload.since, last_seq_now()
        )
    if payload.charge:
        units = sum(read_units(size, ReadConsistency.TRANSACTIONAL) for size in read_bytes)
        refusal = admit((partition.table_id, partition.partition_id), units)
        if refusal is not None:
            return {"throttled": refusal.to_json()}
    return reply


def _written_since(
    store: NodeStore, partition: Partition, storage_keys: set[bytes], since: int, until: int
) -> bool:
    """Whether a change-log record with seq in (since, until] names one of `storage_keys`."""
    if until <= since:
        return False
    if until - since > limits.TRANSACT_GET_LOG_RECORDS_MAX:
        return True
    rows = store.walk(
        Family.CHANGE_LOG,
        partition.log_prefix + seq_bytes(since + 1),
        partition.log_prefix + seq_bytes(until + 1),
        forward=True,
    )
    expected = since + 1
    for _, value in rows:
        record = orjson.loads(value)
        if record["seq"] != expected:
            return True  # Trimmed past `since`: what was written is unknown.
        expected += 1
        keys = record.get("keys")
        if keys is not None and partition.key_shape.storage_key(keys) in storage_keys:
            return True
    return expected <= until
