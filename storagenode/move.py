"""Moving a partition to another node: the source drives the move, the target receives it.

The states and the rules are `core.moves`; this module does their IO. `Mover` (one per node, on
the event loop, sharing the splitter's lock so a partition is never split and moved at once)
moves a partition when asked (the `move_partition` control op, which the router's admin endpoint
and its placement check send), in steps each idempotent:

1. **incoming**: the target drops any copy left by an earlier try and creates an INCOMING copy
   at the next epoch, which refuses every client request (`move_receive` "abort", "create");
2. **pin**: an internal write (`move_source` "pin") registers the `__move` consumer on the
   source's log, from its first retained record, and makes iterators over the retained log and
   the items, which pin the committed state of the partition's last seq S;
3. **copy**: the retained log records, as they are ("log"), then the items in bounded pages
   ("items", stored without logging: the target's own apply maintains local index entries,
   collection sizes, the TTL index and the counters, so they are exact);
4. **catch-up**: the records after S, read from the source's log and applied on the target in
   seq order, each stored as the source's record ("apply": a replay changes nothing), until
   fewer than MOVE_FENCE_LAG_RECORDS_MAX are left;
5. **fence**: an internal write (`move_source` "fence") records `moving_to` in the source's
   metadata, after which every client request is refused with StaleEpoch before it is planned,
   and answers the final seq; it waits while transactions are in flight on the node;
6. **drain**: the records to the final seq, then the source's settings, its consumers'
   checkpoints and its finished transaction records ("drain");
7. **switch**: the table's catalog row, by compare-and-set (`core.moves.switched`): the target's
   node and the next epoch. This is the decision;
8. **activate** the target's copy ("activate"), and **drop** the source's (`move_source`
   "drop": its items, index entries, collections, TTL entries, log and consumers).

These steps are the effects of the move machine (`core.machines.move`), which `Mover` runs
through the one driver (`rpc.machines.Driver`): its record is kept in the source partition's
metadata (`move_source` "record") before each effect, so a process may die between any two
effects (the driver's crash points) and the record says what comes next. A failure before the
switch rolls back (unfence, and drop the target's copy); after it, or when the switch's outcome
is unknown (decided by reading the catalog once its call's deadline has passed), the move is
finished. A restarted source drives each record it finds on with RESTARTED every
MOVE_CHECK_SECONDS, and a target activates a copy the catalog names it for, or drops one the
catalog went past (`core.moves.target_recovery`), so a source that dies after the switch leaves
the partition served by its target within a second.

A global index's partition moves the same way; `storagenode.index_move` holds what it needs
more (its entry writes logged while it moves, its per-source rows carried by the drain).

The target's log is the source's: the same seqs and records, from the source's first retained
one, and every consumer's checkpoint is carried, so the GSI replicator and Streams read on from
their checkpoint on the new node (they look a partition up in the catalog again when its node
answers that it is not there).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import orjson

from core import catalog, limits, machines, moves
from core.catalog import PartitionDef, TableDef
from core.errors import DynamoError, ResourceInUse, StaleEpoch
from core.keycodec import successor
from core.machines import Effect, Event
from core.machines import move as move_machine
from core.machines.move import MoveRecord, MoveState
from core.size import item_size_bytes
from core.transactions import Record
from rpc import ops
from rpc.background import BackgroundTask
from rpc.machines import CrashPoints, Driver, Handler, HoldPoints
from rpc.transport import NodeTransport
from storagenode import changefeed, expiry, index_move
from storagenode import transactions as txn
from storagenode.layout import Family, item_json_of, seq_bytes
from storagenode.partition import Partition
from storagenode.store import PUT
from storagenode.throughput import version_of
from storagenode.writes import NodeState, PartitionRef, WriteContext

if TYPE_CHECKING:
    from storagenode.split import Splitter

logger = logging.getLogger(__name__)

MOVE_SOURCE = "move_source"  # The source's internal writes of a move (never on the wire).
# The change-feed consumer holding a partition's log while it moves, on the source and the target.
MOVE_CONSUMER = "__move"
# Points of a move where a test may stop or kill a node (`rpc.machines` crash points): the
# source's, between two effects of the move machine (its recorded states, lower case; these are
# those of every move of a table partition that succeeds), and the
# target's, "target-" and a step it receives ("target-items": once the first page of items has
# committed there, before its reply is sent).
MOVE_CRASH_STEPS = tuple(
    state.value.lower()
    for state in (
        MoveState.INCOMING,
        MoveState.PINNED,
        MoveState.COPIED,
        MoveState.FENCED,
        MoveState.DRAINED,
        MoveState.SWITCHED,
    )
)
MOVE_TARGET_CRASH_STEPS = tuple(
    f"target-{step}" for step in ("create", "items", "apply", "drain", "activate")
)
_SOURCE_STEPS = frozenset({"record", "register", "pin", "fence", "unfence", "drop"})


@dataclasses.dataclass(slots=True)
class SourceStepPayload:
    """move_source: one of the source's own steps of moving partition `partition_id` at `epoch`:
    "record" (the move machine's `record` kept in the partition's metadata, None once the move
    has ended), "register" (the move's consumer only, a global index partition's first step: its
    writes are logged from then on), "pin", "fence" (for node `target`), "unfence" or "drop".
    Replies: record {}; register {}; pin {"pinned": Pinned}
    (an object: the op never leaves the node); fence {"seq": final seq}; unfence {}; drop
    {"dropped": bool}."""

    table_id: str
    partition_id: str
    epoch: int
    step: str
    target: str = ""
    record: dict[str, Any] | None = None

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> SourceStepPayload:
        if body["step"] not in _SOURCE_STEPS:
            raise ValueError(f"move_source's step is one of {sorted(_SOURCE_STEPS)}")
        return cls(
            body["table_id"],
            body["partition_id"],
            body["epoch"],
            body["step"],
            body["target"],
            body.get("record"),
        )

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(slots=True)
class Pinned:
    """A partition's committed metadata with iterators over its retained change log and its
    items, made on the writer thread between two commits: the state of `partition.last_seq`."""

    partition: Partition
    log: Iterator[tuple[bytes, bytes]]
    items: Iterator[tuple[bytes, bytes]]


# The source's steps, in a write group ------------------------------------------------------------


def source_step(
    group: WriteContext, target: ops.Target | None, payload: SourceStepPayload
) -> dict[str, Any]:
    """Run one of the source's steps in the group's batch (the writer thread)."""
    ref = (payload.table_id, payload.partition_id)
    partition = group.lookup(ref)
    if payload.step == "record":
        # Gone once dropped (a finished move's last record has nowhere to go, nor need to).
        if partition is not None and partition.epoch == payload.epoch:
            staged = group.stage(ref)
            staged.move = payload.record
        return {}
    if payload.step == "drop":
        if partition is None or partition.epoch != payload.epoch:
            return {"dropped": False}
        _drop(group, ref, partition)
        return {"dropped": True}
    if payload.step == "unfence":
        if partition is None or partition.epoch != payload.epoch:
            return {}
        if partition.moving_to is not None:
            staged = group.stage(ref)
            staged.moving_to = None
        group.feed.unregister(ref, MOVE_CONSUMER)
        return {}
    if partition is None or partition.epoch != payload.epoch or partition.incoming_from:
        raise StaleEpoch(
            f"Partition {payload.partition_id} at epoch {payload.epoch} is not on this node"
        )
    if payload.step in ("register", "pin"):
        committed = group.node.partitions.get(ref)
        assert committed is not None and committed.epoch == partition.epoch
        if payload.step == "register":
            _hold_log(group, ref, committed)  # A global index partition's: see index_move.
            return {}
        return {"pinned": _pin(group, ref, committed)}
    if partition.moving_to is not None:
        if partition.moving_to != payload.target:
            raise moves.MoveConflict(
                f"Partition {partition.partition_id} is moving to {partition.moving_to}"
            )
        return {"seq": partition.last_seq}
    if not _is_index_partition(partition):  # A transaction never writes an index partition.
        _check_no_transactions(group, partition)
    staged = group.stage(ref)
    staged.moving_to = payload.target
    return {"seq": staged.last_seq}


def _pin(group: WriteContext, ref: PartitionRef, partition: Partition) -> Pinned:
    """Iterators over the committed state of `partition` (its committed metadata, so a write
    earlier in this group is one of the records after the pin), and the move's consumer."""
    _hold_log(group, ref, partition)
    store = group.node.store
    log = store.walk(
        Family.CHANGE_LOG,
        partition.log_prefix + seq_bytes(partition.first_seq),
        partition.log_prefix + seq_bytes(partition.last_seq + 1),
        forward=True,
    )
    items = store.walk(Family.ITEMS, *_bounds(partition.item_prefix, partition), forward=True)
    return Pinned(partition, log, items)


def _hold_log(group: WriteContext, ref: PartitionRef, partition: Partition) -> None:
    """Register the move's consumer on the partition's log from its first retained record."""
    if partition.moving_to is not None:
        raise moves.MoveRefused(
            f"Partition {partition.partition_id} is moving to {partition.moving_to}"
        )
    bounds = changefeed.LogBounds(partition.first_seq, partition.last_seq)
    group.feed.unregister(ref, MOVE_CONSUMER)  # Left by an earlier try: start from this pin.
    group.feed.register(ref, MOVE_CONSUMER, max(0, partition.first_seq - 1), bounds)


def _check_no_transactions(group: WriteContext, partition: Partition) -> None:
    """Refuse to fence a partition holding transaction locks, or while this node holds the
    record of an unfinished transaction (which may be homed on this partition): a moved
    partition would lose them. The mover waits and tries again."""
    lo, hi = _bounds(txn.LOCK_PREFIX + partition.item_prefix, partition)
    pending = [
        (key, value)
        for kind, family, key, value in group.batch.ops
        if kind == PUT and family is Family.TRANSACTIONS and value is not None
    ]
    store = group.node.store
    if any(lo <= key < hi for key, _ in pending) or next(
        iter(store.walk(Family.TRANSACTIONS, lo, hi, forward=True)), None
    ):
        raise moves.MoveRefused(
            f"Partition {partition.partition_id} holds transaction locks; it moves once they "
            "are released"
        )
    records = store.walk(
        Family.TRANSACTIONS, txn.RECORD_PREFIX, bytes([txn.RECORD_PREFIX[0] + 1]), forward=True
    )
    staged = [(k, v) for k, v in pending if k.startswith(txn.RECORD_PREFIX)]
    for _, value in (*records, *staged):
        if Record.from_json(orjson.loads(value)).finished is None:
            raise moves.MoveRefused(
                f"A transaction is in flight on this node; partition {partition.partition_id} "
                "moves once it finishes"
            )


def _drop(group: WriteContext, ref: PartitionRef, partition: Partition) -> None:
    """Delete a partition's data and its feed from this node, in the group's batch."""
    batch = group.batch
    lo, hi = _bounds(partition.item_prefix, partition)
    if partition.ttl_attribute is not None:
        skip = len(partition.item_prefix)
        for key, value in group.node.store.walk(Family.ITEMS, lo, hi, forward=True):
            item = orjson.loads(item_json_of(value))
            changes = expiry.index_changes(partition, key[skip:], item, None, group.now)
            expiry.write_index_changes(batch, changes)
    batch.delete_range(Family.ITEMS, lo, hi)
    batch.delete_range(Family.ITEM_COLLECTIONS, lo, hi)
    for prefix, _ in partition.index_layout.values():
        batch.delete_range(Family.INDEX_ENTRIES, *_bounds(prefix, partition))
    index_move.drop_rows(batch, partition)
    group.put_partition(ref, None)
    group.feed.forget(ref)
    group.note_heard(ref, incoming=False)


def _bounds(prefix: bytes, partition: Partition) -> tuple[bytes, bytes]:
    """The keys under `prefix` of the partition's range (its end, or the prefix's end)."""
    if partition.end is not None:
        return prefix + partition.start, prefix + partition.end
    end = successor(prefix)
    assert end is not None, "table ids and index prefixes are never all 0xff"
    return prefix + partition.start, end


# The target's steps, in a write group ------------------------------------------------------------


def receive(
    group: WriteContext, target: ops.Target | None, payload: ops.MoveReceivePayload
) -> dict[str, Any]:
    """Run one step of a move on its target in the group's batch (`rpc.ops.MoveReceivePayload`)."""
    ref = (payload.table_id, payload.partition_id)
    partition = group.lookup(ref)
    step = payload.step
    if step == "abort":
        if partition is not None and partition.incoming_from is not None:
            logger.info("move of %s: the INCOMING copy is dropped", payload.partition_id)
            _drop(group, ref, partition)
        return {}
    if step == "create":
        return _create(group, ref, partition, payload)
    if partition is None or partition.incoming_from is None:
        if step == "activate" and partition is not None and partition.epoch == payload.epoch:
            return {}  # Served already: a retry, or the target's own check came first.
        raise StaleEpoch(f"No copy of partition {payload.partition_id} is moving to this node")
    group.note_heard(ref, incoming=True)
    staged = group.stage(ref)
    if step == "log":
        for text in payload.records or ():
            _append(group, staged, text)
    elif step == "items":
        for text in payload.items or ():
            _copy_item(group, staged, orjson.loads(text))
    elif step == "apply":
        for text in payload.records or ():
            _apply_record(group, staged, text)
    elif step == "drain":
        _drain(group, ref, staged, payload)
    else:
        if payload.epoch != staged.epoch:
            raise StaleEpoch(
                f"The copy of partition {staged.partition_id} is at epoch {staged.epoch}, "
                f"not {payload.epoch}"
            )
        staged.incoming_from = None
        group.feed.unregister(ref, MOVE_CONSUMER)
        group.note_heard(ref, incoming=False)
        if payload.balances is not None:
            group.note_carried(ref, payload.balances)
        staged = _take_settings(group, ref, staged, payload.settings or {})
    return _summary(staged)


def settings_of(table: TableDef, storage_id: str) -> dict[str, Any]:
    """The settings a target takes when it activates: those of the catalog row the switch wrote
    (or a later one), which holds every UpdateTable and UpdateTimeToLive recorded before it.
    A global index's partition (`storage_id` the index's id) takes the index's throughput only:
    TTL and the stream are the table's, and its entries expire or stream with the table's."""
    index = next((i for i in catalog.global_indexes(table) if i.table_id == storage_id), None)
    if index is not None:
        throughput = catalog.index_throughput_document(table, index)
        return {"throughput": throughput, "ttl": None, "stream_consumer": None}
    stream = table.stream
    return {
        "throughput": catalog.throughput_document(table),
        "ttl": catalog.ttl_document(table),
        "stream_consumer": None if stream is None or not stream.enabled else stream.consumer,
    }


def _take_settings(
    group: WriteContext, ref: PartitionRef, staged: Partition, settings: dict[str, Any]
) -> Partition:
    """Give the activated copy the catalog's settings where they are newer than those the drain
    brought, with the version checks of the nodes' own settings pushes: a push that reached the
    source after the drain and settled before the switch is in the switch's row, and the source
    no longer passes anything on. A stream's consumer the copy lacks (its registration reached
    the fenced source after the drain, or none ever reached the partition) is registered owing
    the copy's whole retained log, as the stream's first read of the shard would register it
    (`router/streams.py`): never past a record the stream still owes."""
    throughput = settings.get("throughput")
    if throughput is not None and version_of(staged.throughput) < version_of(throughput):
        staged.throughput = throughput
    ttl = settings.get("ttl")
    if ttl is not None:
        for changed, partition in expiry.update_ttl(
            group.batch, ref[0], ttl, [ref], group.lookup
        ).items():
            group.put_partition(changed, partition)
        staged = group.stage(ref)
    consumer = settings.get("stream_consumer")
    if consumer is not None and consumer not in group.feed.consumers(ref):
        bounds = changefeed.LogBounds(staged.first_seq, staged.last_seq)
        group.feed.register(ref, consumer, max(0, staged.first_seq - 1), bounds)
    return staged


def _create(
    group: WriteContext,
    ref: PartitionRef,
    existing: Partition | None,
    payload: ops.MoveReceivePayload,
) -> dict[str, Any]:
    assert payload.partition is not None, "a create names the partition"
    created = Partition.from_meta(payload.partition)
    if existing is not None:
        if existing.incoming_from is not None and existing.same_definition(created):
            return _summary(existing)
        raise ResourceInUse(
            f"Partition {created.partition_id} is on this node already, at epoch "
            f"{existing.epoch}{' (incoming)' if existing.incoming_from else ''}"
        )
    if group.feed.retired(ref) is not None:
        group.feed.forget(ref)  # The log it left when it moved or split away is past.
    group.put_partition(ref, created)
    group.note_created(ref)
    # Holds the copied log until the consumers' checkpoints arrive with the drain.
    bounds = changefeed.LogBounds(created.first_seq, created.last_seq)
    group.feed.register(ref, MOVE_CONSUMER, max(0, created.first_seq - 1), bounds)
    group.note_heard(ref, incoming=True)
    logger.info(
        "move of %s: an INCOMING copy at epoch %d from %s",
        created.partition_id,
        created.epoch,
        created.incoming_from,
    )
    return _summary(created)


def _next_record(staged: Partition, text: str) -> dict[str, Any] | None:
    """The record `text` if it is the copy's next one; None if it has it already."""
    record: dict[str, Any] = orjson.loads(text)
    seq = int(record["seq"])
    if seq <= staged.last_seq:
        return None
    if seq != staged.last_seq + 1:
        raise moves.MoveConflict(
            f"The copy of partition {staged.partition_id} holds records to {staged.last_seq}, "
            f"and was sent {seq}"
        )
    return record


def _append(group: WriteContext, staged: Partition, text: str) -> None:
    if _next_record(staged, text) is not None:
        group.append_record(staged, text.encode())


def _copy_item(group: WriteContext, staged: Partition, item: dict[str, Any]) -> None:
    key = staged.key_shape.key_of(item)
    items_key = staged.item_prefix + staged.storage_key(key)
    effect = group.replacing(staged, items_key, key, item, item_size_bytes(item))
    group.apply(group.batch, staged, items_key, effect, now=group.now, capped=False, logged=False)


def _apply_record(group: WriteContext, staged: Partition, text: str) -> None:
    record = _next_record(staged, text)
    if record is None:
        return
    if record.get("keys") is None:
        raise moves.MoveConflict(f"Partition {staged.partition_id}'s log ended while it moved")
    key = record["keys"]
    items_key = staged.item_prefix + staged.storage_key(key)
    new = record["new"]
    effect = group.replacing(
        staged, items_key, key, new, 0 if new is None else item_size_bytes(new)
    )
    if effect.kind is None or effect.kind.value != record["kind"]:
        raise moves.MoveConflict(
            f"The copy of partition {staged.partition_id} does not hold record "
            f"{record['seq']}'s old image"
        )
    group.apply(
        group.batch,
        staged,
        items_key,
        effect,
        by_service=bool(record.get("by_service")),
        now=float(record["at"]),
        capped=False,
        record_json=text.encode(),
    )


def _drain(
    group: WriteContext, ref: PartitionRef, staged: Partition, payload: ops.MoveReceivePayload
) -> None:
    if staged.last_seq != payload.seq:
        raise moves.MoveConflict(
            f"The copy of partition {staged.partition_id} holds records to {staged.last_seq}, "
            f"not {payload.seq}"
        )
    source = payload.partition or {}
    staged.throughput = source.get("throughput")
    staged.ttl = source.get("ttl")
    staged.ttl_backfill = source.get("ttl_backfill")
    staged.ttl_deleted = int(source.get("ttl_deleted", 0))
    bounds = changefeed.LogBounds(staged.first_seq, staged.last_seq)
    for consumer, seq in (payload.consumers or {}).items():
        if consumer == MOVE_CONSUMER:
            continue
        if seq + 1 < staged.first_seq:
            # Behind the source's retained log already: it re-registers, as it would there.
            logger.warning("move of %s: consumer %s is past its log", staged.partition_id, consumer)
            continue
        group.feed.register(ref, consumer, min(seq, staged.last_seq), bounds)
    for key_hex, value in payload.transactions or ():
        key = bytes.fromhex(key_hex)
        if group.batch.get(Family.TRANSACTIONS, key) is None:
            group.batch.put(Family.TRANSACTIONS, key, value.encode())
    if payload.index_sources is not None:
        index_move.take_rows(group.batch, staged, payload.index_sources)


def _summary(partition: Partition) -> dict[str, Any]:
    return {
        "epoch": partition.epoch,
        "first_seq": partition.first_seq,
        "last_seq": partition.last_seq,
        "items": partition.item_count,
        "bytes": partition.size_bytes,
    }


def moving(node: NodeState, table_id: str | None) -> list[dict[str, Any]]:
    """The partitions (of table `table_id`, or of every table) moving away from `node` (MOVING:
    to a target, once known to it; fenced or not) or moving to it (INCOMING: the copy's epoch and
    counts so far), for the partitions listing. A restarted source that has not settled its
    move yet knows no target before its fence."""
    found: list[dict[str, Any]] = []
    for ref, partition in list(node.partitions.items()):
        if table_id is not None and ref[0] != table_id:
            continue
        named = {"table_id": ref[0], "partition_id": ref[1], "epoch": partition.epoch}
        if partition.incoming_from is not None:
            found.append(
                {
                    **named,
                    "state": "INCOMING",
                    "from": partition.incoming_from,
                    "items": partition.item_count,
                    "bytes": partition.size_bytes,
                }
            )
        elif (
            partition.moving_to is not None
            or ref in node.moving_out
            or MOVE_CONSUMER in node.feeds.consumers(ref)
        ):
            found.append(
                {
                    **named,
                    "state": "MOVING",
                    "to": partition.moving_to or node.moving_out.get(ref),
                    "fenced": partition.moving_to is not None,
                }
            )
    return found


# The driver -------------------------------------------------------------------------------------


class Mover:
    """Moves partitions of one node to others on the move machine (`core.machines.move`) through
    the driver (`rpc.machines`), and settles moves left half-done, as source (its record, stepped
    RESTARTED) and as target (`core.moves.target_recovery`)."""

    def __init__(
        self,
        splitter: Splitter,
        node_id: str,
        *,
        check_seconds: float = limits.MOVE_CHECK_SECONDS,
        crash_points: CrashPoints | None = None,
    ) -> None:
        self.splitter = splitter
        self.node: NodeState = splitter.node
        self.node_id = node_id
        self.check_seconds = check_seconds
        handlers: dict[str, Handler[MoveRecord]] = {
            "create": self._create,
            "register": self._register,
            "pin": self._pin,
            "copy": self._copy_all,
            "fence": self._fence,
            "drain": self._drain,
            "switch": self._switch,
            "settle": self._settle,
            "activate": self._activate,
            "drop": self._drop,
            "unfence": self._unfence,
            "abort": self._abort,
        }
        self.driver = Driver(
            move_machine.MACHINE,
            handlers,
            self._persist,
            HoldPoints.from_env() if crash_points is None else crash_points,
            self._now,
        )
        # The pin's iterators, from the pin to the copy of the move that made them: they do not
        # outlive the process, and a move never resumes a copy (it rolls back).
        self._pinned: dict[PartitionRef, Pinned] = {}
        self._task = BackgroundTask("mover", self._run)

    async def received(self, step: str | None, done: asyncio.Future[Any]) -> Any:
        """The result of a step of a move on this node, its target, once committed: a crash point
        ("target-<step>") before its reply is sent."""
        result = await done
        await self.driver.crash_points.reached(move_machine.NAME, f"target-{step}")
        return result

    @staticmethod
    def _now() -> float:
        return asyncio.get_running_loop().time()

    def start(self) -> None:
        self._task.start()

    async def close(self) -> None:
        await self._task.close()

    async def _run(self) -> None:
        while True:
            try:
                await self.settle()
            except DynamoError as error:
                logger.warning("settling moves failed, retrying: %s", error.message)
            except Exception:
                logger.exception("settling moves failed on a bug")
            await asyncio.sleep(self.check_seconds)

    # One move -------------------------------------------------------------------------------------

    async def move(
        self, table_id: str, partition_id: str, target_node: str, target_address: str
    ) -> dict[str, Any]:
        """Move one partition of this node to `target_node`; return it as the catalog now
        records it, with how long the move and its fence took."""
        async with self.splitter.lock:
            self.node.moving_out[table_id, partition_id] = target_node
            try:
                return await self._move(table_id, partition_id, target_node, target_address)
            finally:
                self.node.moving_out.pop((table_id, partition_id), None)
                self._pinned.pop((table_id, partition_id), None)

    async def _move(
        self, table_id: str, partition_id: str, target_node: str, target_address: str
    ) -> dict[str, Any]:
        started = self._now()
        ref = (table_id, partition_id)
        partition = self.node.partitions.get(ref)
        if partition is None or not partition.serving:
            raise StaleEpoch(f"Partition {partition_id} of table {table_id} is not served here")
        if table_id in catalog.SYSTEM_TABLE_IDS:
            raise moves.MoveRefused(f"Partition {partition_id} of a system table never moves")
        if target_node == self.node_id:
            raise moves.MoveRefused(f"Partition {partition_id} is on node {target_node} already")
        if partition.move is not None:
            raise moves.MoveRefused(
                f"Partition {partition_id}'s last move is not decided yet; it is settled first"
            )
        if partition.split is not None:
            raise moves.MoveRefused(
                f"Partition {partition_id}'s split has not ended yet; it is settled first"
            )
        name = catalog.base_table_name(partition.table_name)
        table = await self.splitter.read_table(name)
        source = _serving_def(table, partition, self.node_id)
        logger.info(
            "move of %s to %s (%d bytes): creating its INCOMING copy",
            partition_id,
            target_node,
            partition.size_bytes,
        )
        record = MoveRecord(
            table_id=table_id,
            partition_id=partition_id,
            table_name=name,
            epoch=partition.epoch,
            source=source.to_json(),
            target_node=target_node,
            target_address=target_address,
            index=_is_index_partition(partition),
            started=started,
        )
        record, failure = await self.driver.drive(record, Event(machines.STARTED))
        if failure is not None:
            raise failure
        assert record.state is MoveState.DONE and record.moved is not None, record
        assert record.fenced_at is not None, "a done move was fenced"
        ended = self._now()
        self.node.move_stats.record(ended - started)
        fenced = ended - record.fenced_at
        logger.info(
            "move of %s to %s: done in %.3f s (clients refused for %.3f s)",
            partition_id,
            target_node,
            ended - started,
            fenced,
        )
        return {
            "partition": dict(record.moved),
            "from": self.node_id,
            "seconds": ended - started,
            "fenced_seconds": fenced,
            "items": record.items,
            "records": record.records,
        }

    async def _persist(self, record: MoveRecord) -> None:
        """Keep the move's record in the source partition's metadata (cleared once it ends)."""
        document = None if move_machine.MACHINE.finished(record) else record.to_json()
        payload = SourceStepPayload(
            record.table_id, record.partition_id, record.epoch, "record", record=document
        )
        await self.splitter.submit(MOVE_SOURCE, None, payload.to_json())

    # The move machine's effects ------------------------------------------------------------------

    async def _create(self, record: MoveRecord, effect: Effect) -> Event:
        """Drop any copy an earlier try left on the target, and create an empty INCOMING one at
        the next epoch."""
        target = self.splitter.client(record.target_address)
        ref = (record.table_id, record.partition_id)
        await self._receive(target, ref, "abort")
        partition = self._held(record)
        document = orjson.loads(partition.to_meta())
        document.update(
            epoch=record.epoch + 1,
            item_count=0,
            size_bytes=0,
            last_seq=partition.first_seq - 1,
            log_bytes=0,
            index_stats={},
            moving_to=None,
            incoming_from=self.node_id,
            move=None,
        )
        await self._receive(target, ref, "create", partition=document)
        return Event(effect.done)

    async def _register(self, record: MoveRecord, effect: Effect) -> Event:
        # An index partition's index_apply logs from the group after this one on: every entry
        # write the pin's iterators miss, one earlier in the pin's own group included.
        await self._source(record, "register")
        return Event(effect.done)

    async def _pin(self, record: MoveRecord, effect: Effect) -> Event:
        pinned: Pinned = (await self._source(record, "pin"))["pinned"]
        self._pinned[record.table_id, record.partition_id] = pinned
        logger.info(
            "move of %s: copying, pinned at seq %d",
            record.partition_id,
            pinned.partition.last_seq,
        )
        return Event(effect.done)

    async def _copy_all(self, record: MoveRecord, effect: Effect) -> Event:
        """Copy the pinned log and items, then catch up until few records are left."""
        ref = (record.table_id, record.partition_id)
        pinned = self._pinned.pop(ref, None)
        if pinned is None:
            raise moves.MoveConflict(f"Partition {record.partition_id}'s pin did not survive")
        target = self.splitter.client(record.target_address)
        items = await self._copy(target, ref, pinned)
        applied = pinned.partition.last_seq
        records = 0
        for _ in range(limits.MOVE_CATCH_UP_ROUNDS_MAX):
            current = self._held(record)
            if current.last_seq - applied <= limits.MOVE_FENCE_LAG_RECORDS_MAX:
                break
            caught = await self._catch_up(target, current, applied, current.last_seq)
            records += caught - applied
            applied = caught
        logger.info("move of %s: fencing at seq %d", record.partition_id, applied)
        return Event(effect.done, {"applied": applied, "records": records, "items": items})

    async def _fence(self, record: MoveRecord, effect: Effect) -> Event:
        reply = await self._source(record, "fence", record.target_node)
        return Event(effect.done, {"seq": int(reply["seq"])})

    async def _drain(self, record: MoveRecord, effect: Effect) -> Event:
        """Apply the records to the fence's seq, then hand over the source's settings, its
        consumers' checkpoints and its finished transaction records."""
        assert record.final_seq is not None, "a fenced move knows its final seq"
        ref = (record.table_id, record.partition_id)
        partition = self._held(record)
        target = self.splitter.client(record.target_address)
        caught = await self._catch_up(target, partition, record.applied, record.final_seq)
        index = record.index
        await self._receive(
            target,
            ref,
            "drain",
            seq=record.final_seq,
            partition=orjson.loads(partition.to_meta()),
            consumers=dict(self.node.feeds.consumers(ref)),
            transactions=[] if index else self._finished_transactions(),
            # Final: the fence refuses index_apply, the one writer of these rows.
            index_sources=index_move.source_rows(self.node.store, partition) if index else None,
        )
        logger.info(
            "move of %s: drained to seq %d, switching the catalog",
            record.partition_id,
            record.final_seq,
        )
        return Event(effect.done, {"applied": caught, "records": caught - record.applied})

    async def _switch(self, record: MoveRecord, effect: Effect) -> Event:
        source = PartitionDef.from_json(record.source)
        after = await self.splitter.change_table(
            record.table_name,
            lambda current: moves.switched(current, record.table_id, source, record.target_node),
        )
        return _switched(effect, after, record)

    async def _settle(self, record: MoveRecord, effect: Effect) -> Event:
        """The switch failed or its outcome is unknown: the catalog says whether it happened."""
        table = await self.splitter.read_table(record.table_name)
        action = moves.source_recovery(
            table, record.table_id, record.partition_id, record.epoch, record.target_node
        )
        logger.info("move of %s was undecided: %s", record.partition_id, action.value)
        if action is moves.SourceAction.ROLL_BACK:
            return Event(move_machine.NOT_SWITCHED)
        assert table is not None, "a switched move's table is in the catalog"
        return _switched(effect, table, record)

    async def _activate(self, record: MoveRecord, effect: Effect) -> Event:
        """Activate the target's copy with the switch row's settings (it also does so itself
        from the catalog)."""
        ref = (record.table_id, record.partition_id)
        await self._receive(
            self.splitter.client(record.target_address),
            ref,
            "activate",
            epoch=record.epoch + 1,
            # What its buckets hold now: the move gives it no fresh burst.
            balances=self.node.throughput.balances(ref),
            settings=None if record.settings is None else dict(record.settings),
        )
        return Event(effect.done)

    async def _drop(self, record: MoveRecord, effect: Effect) -> Event:
        await self._source(record, "drop")
        logger.info("move of %s: switched; this node's copy is dropped", record.partition_id)
        return Event(effect.done)

    async def _unfence(self, record: MoveRecord, effect: Effect) -> Event:
        logger.warning(
            "move of %s failed before the switch: rolling back (%s)",
            record.partition_id,
            record.error,
        )
        await self._source(record, "unfence")
        return Event(effect.done)

    async def _abort(self, record: MoveRecord, effect: Effect) -> Event:
        """Drop the target's copy (best effort: a copy left behind is dropped by its node once
        abandoned)."""
        target = self.splitter.client(record.target_address)
        await self._receive(target, (record.table_id, record.partition_id), "abort")
        logger.info("move of %s: rolled back", record.partition_id)
        return Event(effect.done)

    def _held(self, record: MoveRecord) -> Partition:
        """The source partition of `record` as this node holds it, which the move needs."""
        current = self.node.partitions.get((record.table_id, record.partition_id))
        if current is None or current.epoch != record.epoch:
            raise moves.MoveConflict(f"Partition {record.partition_id} changed while it moved")
        return current

    async def _source(self, record: MoveRecord, step: str, target: str = "") -> dict[str, Any]:
        payload = SourceStepPayload(
            record.table_id, record.partition_id, record.epoch, step, target
        )
        return await self.splitter.submit(MOVE_SOURCE, None, payload.to_json())

    async def _receive(
        self, target: NodeTransport, ref: PartitionRef, step: str, **fields: Any
    ) -> dict[str, Any]:
        payload = ops.MoveReceivePayload(ref[0], ref[1], step, **fields)
        reply: dict[str, Any] = await target.control(
            ops.MOVE_RECEIVE, payload.to_json(), limits.CONTROL_CALL_SECONDS_MAX
        )
        return reply

    async def _copy(self, target: NodeTransport, ref: PartitionRef, pinned: Pinned) -> int:
        """Send the pinned log, then the pinned items, in pages; the items sent."""
        while page := await self.splitter.offload(lambda: _page(pinned.log, json_of=bytes.decode)):
            await self._receive(target, ref, "log", records=page)
        items = 0
        while page := await self.splitter.offload(lambda: _page(pinned.items, json_of=_item_text)):
            await self._receive(target, ref, "items", items=page)
            items += len(page)
        return items

    async def _catch_up(
        self, target: NodeTransport, partition: Partition, after: int, last: int
    ) -> int:
        """Apply the source's records after seq `after` to `last` on the target; `last`."""
        store = self.node.store
        while after < last:
            lo = partition.log_prefix + seq_bytes(after + 1)
            hi = partition.log_prefix + seq_bytes(last + 1)

            def read(lo: bytes = lo, hi: bytes = hi) -> list[str]:
                return _page(store.walk(Family.CHANGE_LOG, lo, hi, forward=True), bytes.decode)

            page = await self.splitter.offload(read)
            if not page or orjson.loads(page[0])["seq"] != after + 1:
                raise moves.MoveConflict(
                    f"Partition {partition.partition_id}'s log was trimmed past seq {after} "
                    "while it moved"
                )
            await self._receive(
                target, (partition.table_id, partition.partition_id), "apply", records=page
            )
            after = int(orjson.loads(page[-1])["seq"])
        return after

    def _finished_transactions(self) -> list[list[str]]:
        """The finished transaction records this node holds (a ClientRequestToken's retry finds
        its record on the moved partition's new node)."""
        prefix = txn.RECORD_PREFIX
        walk = self.node.store.walk(
            Family.TRANSACTIONS, prefix, bytes([prefix[0] + 1]), forward=True
        )
        return [[key.hex(), value.decode()] for key, value in walk]

    # Settling what a restart or a failure left -------------------------------------------------

    async def settle(self) -> None:
        """Drive the moves this node was the source of and left half-done on from their records
        (RESTARTED), and activate or drop the copies moved to it, as the catalog says."""
        refs = [
            ref
            for ref, partition in self.node.partitions.items()
            if partition.move is not None or partition.incoming_from is not None
        ]
        if not refs:
            return
        async with self.splitter.lock:
            tables: dict[str, TableDef | None] = {}
            for ref in refs:
                partition = self.node.partitions.get(ref)
                if partition is None:
                    continue
                if partition.move is not None:
                    await self._resume(MoveRecord.from_json(partition.move))
                    continue
                if partition.incoming_from is None:
                    continue
                name = catalog.base_table_name(partition.table_name)
                if name not in tables:
                    tables[name] = await self.splitter.read_table(name)
                await self._settle_incoming(partition, tables[name])

    async def _resume(self, record: MoveRecord) -> None:
        logger.info("move of %s was left at %s: resuming", record.partition_id, record.state)
        record, failure = await self.driver.drive(record, Event(machines.RESTARTED))
        logger.info("move of %s: %s", record.partition_id, record.state)
        if failure is not None:
            logger.warning("move of %s, resumed: %s", record.partition_id, failure)

    async def _settle_incoming(self, partition: Partition, table: TableDef | None) -> None:
        ref = (partition.table_id, partition.partition_id)
        action = moves.target_recovery(
            table, partition.table_id, partition.partition_id, partition.epoch, self.node_id
        )
        heard = self.node.move_heard.setdefault(ref, self.node.clock())
        abandoned = self.node.clock() - heard > limits.MOVE_ABANDONED_SECONDS
        if action is moves.TargetAction.ACTIVATE:
            logger.info("move of %s: the catalog names this node: serving", partition.partition_id)
            assert table is not None, "the catalog names this node for it"
            await self._local(
                ref, "activate", epoch=partition.epoch, settings=settings_of(table, ref[0])
            )
        elif action is moves.TargetAction.DROP or abandoned:
            logger.info("move of %s: the copy here is not wanted: dropping", partition.partition_id)
            await self._local(ref, "abort")

    async def _local(self, ref: PartitionRef, step: str, **fields: Any) -> None:
        payload = ops.MoveReceivePayload(ref[0], ref[1], step, **fields)
        await self.splitter.submit(ops.MOVE_RECEIVE, None, payload.to_json())


def _switched(effect: Effect, table: TableDef, record: MoveRecord) -> Event:
    """The event of a switch the catalog row `table` records (written by it, or later)."""
    moved = moves.serving_partition(table, record.table_id, record.partition_id)
    assert moved is not None, "a switched partition serves"
    return Event(
        effect.done,
        {"settings": settings_of(table, record.table_id), "moved": moved.to_json()},
    )


def _serving_def(table: TableDef | None, partition: Partition, node_id: str) -> PartitionDef:
    """The partition as the catalog records it, which must be what this node holds."""
    current = moves.serving_partition(table, partition.table_id, partition.partition_id)
    if current is None or (current.epoch, current.node) != (partition.epoch, node_id):
        raise moves.MoveConflict(
            f"Partition {partition.partition_id} at epoch {partition.epoch} on {node_id} is not "
            "serving in the catalog"
        )
    return current


def _is_index_partition(partition: Partition) -> bool:
    """Whether a partition holds a global index's entries (`storagenode.split`'s test)."""
    return catalog.base_table_name(partition.table_name) != partition.table_name


def _item_text(value: bytes) -> str:
    return bytes(item_json_of(value)).decode()


def _page(rows: Iterator[tuple[bytes, bytes]], json_of: Any) -> list[str]:
    """The next page of `rows`' values as JSON text: at most MOVE_PAGE_ROWS_MAX rows, and past
    MOVE_PAGE_BYTES_MAX bytes no more."""
    page: list[str] = []
    size = 0
    for _, value in rows:
        page.append(json_of(value))
        size += len(value)
        if len(page) >= limits.MOVE_PAGE_ROWS_MAX or size >= limits.MOVE_PAGE_BYTES_MAX:
            break
    return page
