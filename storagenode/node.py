"""Every operation of `rpc.ops`, executed against the node's store.

`StorageNode` has no asyncio and no gRPC: `read` answers a read operation from the store, and
`apply_writes` runs a group of write operations as one synced write batch (the group commit),
returning each write's reply or typed error. Each request's JSON body is decoded once into its
typed payload (`rpc.ops`) before it runs, and the handlers read that. An item write is planned,
then applied: the node reads the item as it stands (through the batch's overlay, so each write
sees every earlier one of its group), `core.writes.plan` decides the effect (condition, update,
size, ReturnValues, units), and `replica.apply` stores it with its change-log record and the
partition's counters. A single writer thread serialises the groups, so a condition and the write
it guards are atomic.

A write that fails, with a typed error or a bug, fails alone: nothing of it reaches the batch and
its neighbours commit. Only a failure of the commit itself (the disk) fails the whole group.

Every data-plane request passes its partition's token buckets (`storagenode.throughput`): a read
is admitted before it runs and charged its real size after; a write is admitted before its batch is
planned, so a throttled write never enters the batch, and charged the larger of its old and
new item (or, when its condition fails, the existing item) once its plan has measured them.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from typing import Any, TypeVar, assert_never

import orjson

from core import expressions, heat, limits
from core.capacity import item_write_units, write_units
from core.catalog import IndexDef, IndexStatus
from core.errors import (
    GSI_THROTTLED,
    ConditionalCheckFailed,
    DynamoError,
    InternalServerError,
    LeaseFenced,
    ResourceInUse,
    ServiceUnavailable,
    StaleEpoch,
    ThroughputExceeded,
    TransactionConflict,
    UnknownOperation,
    ValidationError,
)
from core.gsi import consumer_of
from core.indexes import check_index_keys, entry_changes, index_entry
from core.keycodec import successor
from core.keys import KeyShape
from core.size import item_size_bytes
from core.transactions import CONFLICT_MESSAGE, Vote, throttled
from core.values import Item
from core.writes import (
    DeleteRequest,
    PutRequest,
    UpdateRequest,
    WriteEffect,
    WriteRequest,
    plan,
)
from rpc import ops
from rpc.ops import Target
from rpc.partition_metrics import Durations
from rpc.transactions import (
    TxnApplyPayload,
    TxnGetPayload,
    TxnPreparePayload,
    TxnRecordPayload,
    TxnSweepPayload,
)
from storagenode import changefeed, environment, expiry, index_move, metrics, move, replica, split
from storagenode import transactions as txn
from storagenode.layout import (
    Family,
    encode_item,
    index_source_bytes,
    index_source_key,
    index_source_of,
    item_json_of,
    item_size_of,
    partition_meta_key,
    seq_bytes,
    table_prefix,
)
from storagenode.partition import PageRequest, Partition, query_bounds, read_page, scan_bounds
from storagenode.store import DataCorruption, NodeStore, WriteBatchView
from storagenode.throughput import NodeThroughput, version_of

logger = logging.getLogger(__name__)

READ_OPS = frozenset(
    {
        ops.GET,
        ops.QUERY,
        ops.SCAN,
        ops.TABLE_STATS,
        ops.PARTITION_THROUGHPUT,
        ops.TXN_GET,
    }
)
WRITE_OPS = frozenset(
    {
        ops.PUT,
        ops.UPDATE,
        ops.DELETE,
        ops.INDEX_APPLY,
        ops.CREATE_PARTITION,
        ops.DROP_TABLE,
        ops.RETIRE_PARTITION,
        ops.UPDATE_THROUGHPUT,
        ops.UPDATE_TTL,
        ops.REGISTER_CONSUMER,
        ops.CHECKPOINT,
        ops.UNREGISTER_CONSUMER,
        ops.TXN_RECORD,
        ops.TXN_PREPARE,
        ops.TXN_APPLY,
        ops.TXN_SWEEP,
        ops.MOVE_RECEIVE,
    }
)
# Writes the node makes itself, never sent over the wire: the TTL sweeper's (`expiry.py`) and
# the splitter's (`split.py`).
INTERNAL_WRITE_OPS = frozenset(
    {expiry.TTL_EXPIRE, expiry.TTL_BACKFILL, split.SPLIT_INSTALL, split.SPLIT_PIN, move.MOVE_SOURCE}
)
# The writes a node still takes when its disk is down to its reserve (StorageNode
# _keep_disk_reserve): those that free space or let the change log be trimmed; and, below a
# quarter of the reserve, dropping tables alone.
_ALWAYS_ALLOWED_OPS = frozenset({ops.DROP_TABLE})
_SPACE_FREEING_OPS = _ALWAYS_ALLOWED_OPS | {
    ops.DELETE,
    ops.CHECKPOINT,
    ops.UNREGISTER_CONSUMER,
    expiry.TTL_EXPIRE,
    move.MOVE_SOURCE,  # A move's source fences, then drops the partition.
}
# Operations that take more than one step on the event loop: the splitter's (`split.py`) and
# the mover's (`move.py`).
SPLITTER_OPS = frozenset({ops.SPLIT_PARTITION, ops.MOVE_PARTITION})
assert READ_OPS | WRITE_OPS | SPLITTER_OPS == ops.CONTROL_OPS | ops.DATA_OPS | ops.FEED_OPS
# The operations that spend a partition's read or write units.
METERED_READS = frozenset({ops.GET, ops.QUERY, ops.SCAN})
METERED_WRITES = frozenset({ops.PUT, ops.UPDATE, ops.DELETE, ops.INDEX_APPLY})

PartitionRef = tuple[str, str]  # (table id, partition id)
WriteResult = dict[str, Any] | DynamoError
# A write: its op, the partition it is addressed to (None: a control-plane write), its JSON body.
Write = tuple[str, Target | None, dict[str, Any]]
# A read's handler, given its target and its JSON body.
Reader = Callable[[Target | None, dict[str, Any]], dict[str, Any]]
Payload = TypeVar("Payload")
ControlWritePayload = (
    ops.CreatePartitionPayload
    | ops.DropTablePayload
    | ops.RetirePartitionPayload
    | ops.UpdateThroughputPayload
    | ops.UpdateTtlPayload
)
FeedWritePayload = (
    ops.RegisterConsumerPayload | ops.CheckpointPayload | ops.UnregisterConsumerPayload
)
TxnWritePayload = TxnRecordPayload | TxnPreparePayload | TxnApplyPayload | TxnSweepPayload
WritePayload = (
    ops.ItemWritePayload
    | ops.IndexApplyPayload
    | ControlWritePayload
    | FeedWritePayload
    | TxnWritePayload
    | expiry.ExpirePayload
    | expiry.BackfillPayload
    | split.InstallPayload
    | split.PinPayload
    | move.SourceStepPayload
    | ops.MoveReceivePayload
)
# How each write's JSON body decodes into its payload (`rpc.ops`), once, before its group runs.
WRITE_PAYLOADS: dict[str, Callable[[dict[str, Any]], WritePayload]] = {
    ops.PUT: ops.PutPayload.from_json,
    ops.UPDATE: ops.UpdatePayload.from_json,
    ops.DELETE: ops.DeletePayload.from_json,
    ops.INDEX_APPLY: ops.IndexApplyPayload.from_json,
    ops.CREATE_PARTITION: ops.CreatePartitionPayload.from_json,
    ops.DROP_TABLE: ops.DropTablePayload.from_json,
    ops.RETIRE_PARTITION: ops.RetirePartitionPayload.from_json,
    ops.UPDATE_THROUGHPUT: ops.UpdateThroughputPayload.from_json,
    ops.UPDATE_TTL: ops.UpdateTtlPayload.from_json,
    ops.REGISTER_CONSUMER: ops.RegisterConsumerPayload.from_json,
    ops.CHECKPOINT: ops.CheckpointPayload.from_json,
    ops.UNREGISTER_CONSUMER: ops.UnregisterConsumerPayload.from_json,
    ops.TXN_RECORD: TxnRecordPayload.from_json,
    ops.TXN_PREPARE: TxnPreparePayload.from_json,
    ops.TXN_APPLY: TxnApplyPayload.from_json,
    ops.TXN_SWEEP: TxnSweepPayload.from_json,
    expiry.TTL_EXPIRE: expiry.ExpirePayload.from_json,
    expiry.TTL_BACKFILL: expiry.BackfillPayload.from_json,
    split.SPLIT_INSTALL: split.InstallPayload.from_json,
    split.SPLIT_PIN: split.PinPayload.from_json,
    move.MOVE_SOURCE: move.SourceStepPayload.from_json,
    ops.MOVE_RECEIVE: ops.MoveReceivePayload.from_json,
}
assert WRITE_PAYLOADS.keys() == WRITE_OPS | INTERNAL_WRITE_OPS


ITEM_COLLECTION_BYTES_MAX_ENV = "DYNALAB_ITEM_COLLECTION_BYTES_MAX"
GSI_LAG_RECORDS_MAX_ENV = "DYNALAB_GSI_LAG_RECORDS_MAX"


def gsi_lag_records_max_from_env() -> int:
    """The back-pressure bound from DYNALAB_GSI_LAG_RECORDS_MAX (change records, at least 1), or
    `limits.GSI_LAG_RECORDS_MAX`; experiments set it low to reach it quickly."""
    return environment.positive_int(GSI_LAG_RECORDS_MAX_ENV, limits.GSI_LAG_RECORDS_MAX, "record")


def collection_bytes_max_from_env() -> int:
    """The item collection cap from DYNALAB_ITEM_COLLECTION_BYTES_MAX (bytes, at least 1), or
    DynamoDB's 10 GB when it is not set; experiments set it low to reach the cap quickly."""
    return environment.positive_int(
        ITEM_COLLECTION_BYTES_MAX_ENV, limits.ITEM_COLLECTION_BYTES_MAX, "byte"
    )


def _decoding(
    decode: Callable[[dict[str, Any]], Payload],
    handler: Callable[[Target | None, Payload], dict[str, Any]],
) -> Reader:
    """A reader that decodes its JSON body once into its payload and hands `handler` that."""

    def read(target: Target | None, body: dict[str, Any]) -> dict[str, Any]:
        return handler(target, decode(body))

    return read


def _refusal(op: str, error: Exception) -> DynamoError:
    """What a write that failed alone answers; called while its exception is being handled.

    A typed error is its refusal; anything else is a bug, logged and answered InternalServerError.
    """
    if isinstance(error, DynamoError):
        return error
    logger.exception("write %r failed; its group goes on without it", op)
    return InternalServerError(f"The node failed on this write: {error!r}")


def _addressed(partition: Partition | None, target: Target) -> Partition:
    """The partition a request is addressed to, refused with StaleEpoch if it is not here or at
    another epoch."""
    if partition is None:
        raise StaleEpoch(
            f"Partition {target.partition_id} of table {target.table_id} is not on this node"
        )
    partition.check_epoch(target.epoch)
    return partition


class StorageNode:
    """The partitions hosted by one node and the operations on them."""

    def __init__(
        self,
        store: NodeStore,
        *,
        change_log_records_max: int = limits.CHANGE_LOG_RECORDS_MAX,
        change_log_bytes_max: int = limits.CHANGE_LOG_BYTES_MAX,
        throughput: NodeThroughput | None = None,
        clock: Callable[[], float] = time.time,
        item_collection_bytes_max: int | None = None,
        gsi_lag_records_max: int | None = None,
    ) -> None:
        self.store = store
        # Back-pressure of global indexes on base writes (`limits.GSI_LAG_RECORDS_MAX`).
        self.gsi_lag_records_max = (
            gsi_lag_records_max_from_env() if gsi_lag_records_max is None else gsi_lag_records_max
        )
        # Unix time: TTL compares items' expiry times with it, and requests' deadlines are
        # checked against it.
        self.clock = clock
        self.change_log_records_max = change_log_records_max
        self.change_log_bytes_max = change_log_bytes_max
        # The cap on an item collection of a table with local indexes; by default as the
        # environment says (DYNALAB_ITEM_COLLECTION_BYTES_MAX), else DynamoDB's 10 GB.
        self.item_collection_bytes_max = (
            collection_bytes_max_from_env()
            if item_collection_bytes_max is None
            else item_collection_bytes_max
        )
        # Token buckets per partition; by default as the environment says (DYNALAB_THROTTLING,
        # DYNALAB_BURST_SECONDS), on the monotonic clock. Tests pass one with a clock of their own.
        self.throughput = NodeThroughput.from_env() if throughput is None else throughput
        metrics.watch(self.throughput)
        # The splits this node made (`split.Splitter`), reported with its throughput.
        self.split_stats = Durations()
        metrics.watch_splits(self.split_stats)
        # The partitions this node moved away (`move.Mover`), reported with its splits; and when
        # each copy moving to it last heard from its source (node clock), to drop abandoned ones.
        self.move_stats = Durations()
        metrics.watch_moves(self.move_stats)
        self.move_heard: dict[PartitionRef, float] = {}
        # The partitions this node's mover is moving away now, with their target node.
        self.moving_out: dict[PartitionRef, str] = {}
        # The keys of the newest throttled reads per partition: what a read-heat split balances.
        self.read_heat: heat.ThrottledKeys[PartitionRef] = heat.ThrottledKeys()
        # Replaced or updated only by the writer after each commit, so a reader on another thread
        # always sees the metadata of committed data.
        self.partitions: dict[PartitionRef, Partition] = {}
        # Change-feed consumers and retired logs, replaced whole by the writer after each commit.
        self.feeds = changefeed.FeedState.load(store)
        # Called on the writer thread after each commit with the partitions whose change feed it
        # moved (the server wakes their followers); it must not block.
        self.on_commit: Callable[[Collection[PartitionRef]], None] | None = None
        for meta in store.load_partition_metas():
            partition = Partition.from_meta(meta)
            if "log_bytes" not in meta:
                # Written before logs were bounded in bytes: measured once, kept from then on.
                sizes = self.log_sizes(
                    partition.log_prefix, partition.first_seq, partition.last_seq
                )
                partition.log_bytes = sum(size for _, size in sizes)
            self.partitions[partition.table_id, partition.partition_id] = partition
            self.throughput.track(
                (partition.table_id, partition.partition_id),
                partition.table_name,
                partition.throughput,
            )
        self._readers: dict[str, Reader] = {
            ops.GET: _decoding(ops.GetPayload.from_json, self._get),
            ops.QUERY: _decoding(ops.QueryPayload.from_json, self._query),
            ops.SCAN: _decoding(ops.ScanPayload.from_json, self._scan),
            ops.TABLE_STATS: _decoding(ops.TableStatsPayload.from_json, self._table_stats),
            ops.PARTITION_THROUGHPUT: _decoding(
                ops.PartitionThroughputPayload.from_json, self._partition_throughput
            ),
            ops.TXN_GET: _decoding(TxnGetPayload.from_json, self._txn_get),
        }

    def log_sizes(self, log: bytes, first_seq: int, last_seq: int) -> Iterator[tuple[int, int]]:
        """(seq, bytes) of the committed change-log records first_seq..last_seq under the log
        prefix `log`, oldest first, read lazily (retention reads only as far as it trims)."""
        rows = self.store.walk(
            Family.CHANGE_LOG,
            log + seq_bytes(first_seq),
            log + seq_bytes(last_seq + 1),
            forward=True,
        )
        for key, value in rows:
            yield int.from_bytes(key[len(log) :], "big"), len(value)

    # Reads ---------------------------------------------------------------------------------------

    def check_target(self, op: str, target: Target | None) -> None:
        """Refuse a data-plane request addressed to a partition this node does not hold, or to
        another epoch of it, with StaleEpoch: from the envelope alone, before its body is decoded.

        A write is checked again in its group, against the partitions as the group sees them.
        """
        if op not in ops.DATA_OPS:
            return
        if target is None:
            raise ValidationError(f"A {op} request names no partition")
        self._partition(target)

    def read(self, op: str, target: Target | None, body: dict[str, Any]) -> dict[str, Any]:
        """Answer one read operation from the committed state of the store.

        A data-plane read names its partition in `target`; a control-plane read passes None.
        """
        reader = self._readers.get(op)
        if reader is None:
            raise UnknownOperation(f"{op!r} is not a storage node read operation")
        if target is not None and 0 < target.deadline < (now := self.clock()):
            raise _expired(op, target, now)
        key = self._metered(op, target, METERED_READS)
        if key is None:
            return _located(reader, target, body)
        assert target is not None
        consistent = target.consistent
        try:
            charged = self.throughput.admit_read(key, consistent)
        except ThroughputExceeded:
            self._note_read_heat(key, op, body)
            raise
        read_bytes: int | None = None
        try:
            reply = _located(reader, target, body)
            read_bytes = reply["read_bytes"]
            return reply
        finally:
            if charged:
                self.throughput.settle_read(key, consistent, read_bytes, charged)

    def _note_read_heat(self, ref: PartitionRef, op: str, body: dict[str, Any]) -> None:
        """Note the storage key a throttled read asked for (a Query: its item collection's
        start); a Scan, which reads a range, notes nothing."""
        partition = self.partitions.get(ref)
        if partition is None:
            return
        shape = partition.key_shape
        try:
            if op == ops.GET:
                key = shape.storage_key(body["key"])
            elif op == ops.QUERY:
                key = shape.storage_key_of([body["hash_value"]])
            else:
                return
        except (DynamoError, KeyError, TypeError):
            return  # A body the read itself would refuse: no sample.
        self.read_heat.note(ref, key)

    def _metered(
        self, op: str, target: Target | None, metered_ops: frozenset[str]
    ) -> PartitionRef | None:
        """The partition a data-plane request spends units of; None if it spends none.

        A request for a partition this node does not hold at that epoch is not metered: it is
        refused as stale, and the router retries it where the partition is now.
        """
        if op not in metered_ops or not self.throughput.enforced or target is None:
            return None
        key = (target.table_id, target.partition_id)
        partition = self.partitions.get(key)
        if partition is None or partition.epoch != target.epoch:
            return None
        return key

    def _partition(self, target: Target | None) -> Partition:
        assert target is not None, "a data-plane request names its partition"
        return _addressed(self.partitions.get((target.table_id, target.partition_id)), target)

    def _get(self, target: Target | None, payload: ops.GetPayload) -> dict[str, Any]:
        partition = self._partition(target)
        storage_key = partition.storage_key(partition.key_shape.check_key(payload.key))
        raw = self.store.get(Family.ITEMS, partition.item_prefix + storage_key)
        if raw is None:
            return {"item": None, "read_bytes": 0}
        item = orjson.loads(item_json_of(raw))
        read_bytes = item_size_of(raw)
        if payload.projection is not None:
            item = expressions.projection(payload.projection, payload.names).apply(item)
        return {"item": item, "read_bytes": read_bytes}

    def _query(self, target: Target | None, payload: ops.QueryPayload) -> dict[str, Any]:
        partition = self._partition(target)
        source = _Source.of(self.store, partition, payload.index, payload.fetch)
        shape = source.shape
        hash_value = payload.hash_value
        forward = payload.forward
        range_condition = payload.range
        sort = shape.sort_key
        if range_condition is not None and sort is None:
            raise ValidationError("Query key condition not supported: the table has no sort key")
        start = payload.exclusive_start
        if start is not None and start.get(shape.partition_key.name) != hash_value:
            raise ValidationError("The provided starting key is invalid: it is not in the query")
        lo, hi = query_bounds(
            partition, hash_value, range_condition, start, forward=forward, shape=shape
        )
        key_matches = None
        if range_condition is not None:
            assert sort is not None
            key_matches = _sort_key_matcher(
                expressions.RangeCondition(range_condition["op"], range_condition["values"]),
                sort.name,
            )
        rows = self.store.walk(source.family, *source.range(lo, hi), forward=forward)
        page = PageRequest.of(payload, limits.QUERY_PAGE_BYTES_MAX)
        return read_page(rows, page, partition, key_matches, shape=shape, fetch=source.fetch)

    def _scan(self, target: Target | None, payload: ops.ScanPayload) -> dict[str, Any]:
        partition = self._partition(target)
        source = _Source.of(self.store, partition, payload.index, payload.fetch)
        lo, hi = scan_bounds(
            partition, payload.exclusive_start, payload.hash_start, payload.hash_end, source.shape
        )
        rows = self.store.walk(source.family, *source.range(lo, hi), forward=True)
        page = PageRequest.of(payload, limits.QUERY_PAGE_BYTES_MAX)
        return read_page(rows, page, partition, shape=source.shape, fetch=source.fetch)

    def _table_stats(self, target: Target | None, payload: ops.TableStatsPayload) -> dict[str, Any]:
        table_id = payload.table_id
        partitions = {}
        feeds = self.feeds
        for partition in list(self.partitions.values()):
            if partition.table_id != table_id or partition.incoming_from is not None:
                continue  # A copy moving here is counted where it moves from.
            stats: dict[str, Any] = {
                "items": partition.item_count,
                "bytes": partition.size_bytes,
                "last_seq": partition.last_seq,
                "first_seq": partition.first_seq,
                "log_bytes": partition.log_bytes,
                "ttl_deleted": partition.ttl_deleted,
                "consumers": dict(feeds.consumers((table_id, partition.partition_id))),
            }
            if partition.index_stats:
                stats["indexes"] = partition.index_stats
            partitions[partition.partition_id] = stats
        return {"partitions": partitions}

    def _partition_throughput(
        self, target: Target | None, payload: ops.PartitionThroughputPayload
    ) -> dict[str, Any]:
        return {
            **self.throughput.report(payload.table_id),
            "splits": self.split_stats.to_json(),
            "moves": self.move_stats.to_json(),
            "moving": move.moving(self, payload.table_id),
        }

    def _txn_get(self, target: Target | None, payload: TxnGetPayload) -> dict[str, Any]:
        partition = self._partition(target)
        ref = (partition.table_id, partition.partition_id)

        def last_seq_now() -> int:
            current = self.partitions.get(ref)
            return partition.last_seq if current is None else current.last_seq

        return txn.get(self.store, partition, payload, self.admit_transaction_read, last_seq_now)

    def admit_transaction(self, ref: PartitionRef, units: float) -> Vote | None:
        """Charge a transaction's prepare `units` of partition `ref`'s write capacity; None
        when admitted, else the vote of a throttled participant."""
        if self.throughput.try_charge(ref, units, read=False):
            return None
        return throttled(self.throughput.on_demand(ref))

    def admit_transaction_read(self, ref: PartitionRef, units: float) -> Vote | None:
        """Charge a TransactGetItems `units` of partition `ref`'s read capacity, as above."""
        if self.throughput.try_charge(ref, units, read=True):
            return None
        return throttled(self.throughput.on_demand(ref))

    def changes(
        self, table_id: str, partition_id: str, after_seq: int, limit: int
    ) -> list[dict[str, Any]]:
        """Up to `limit` of the change-log records a partition still holds with seq > after_seq,
        oldest first: the feed's own read, from where the log now starts if it was trimmed past
        `after_seq` (a view for tools and tests, which need no re-snapshot error).

        The partition may be live or retired with its log kept for its consumers.
        """
        bounds = self.feed_bounds(table_id, partition_id)
        start = max(after_seq, bounds.first_seq - 1)
        batch = changefeed.read_batch(
            self.store, table_id, partition_id, bounds, start, records_max=limit
        )
        return batch.records

    def feed_bounds(self, table_id: str, partition_id: str) -> changefeed.LogBounds:
        """The committed bounds of a partition's change log, live or retired and kept."""
        ref = (table_id, partition_id)
        partition = self.partitions.get(ref)
        if partition is not None:
            return changefeed.LogBounds(partition.first_seq, partition.last_seq)
        retired = self.feeds.retired.get(ref)
        if retired is not None:
            return retired.bounds()
        raise StaleEpoch(f"Partition {partition_id} of table {table_id} is not on this node")

    def read_feed(
        self,
        table_id: str,
        partition_id: str,
        after_seq: int,
        records_max: int = limits.CHANGE_FEED_BATCH_RECORDS_MAX,
    ) -> changefeed.FeedBatch:
        """A batch of a partition's change feed after `after_seq` (`changefeed.read_batch`)."""
        bounds = self.feed_bounds(table_id, partition_id)
        return changefeed.read_batch(
            self.store,
            table_id,
            partition_id,
            bounds,
            after_seq,
            records_max=max(1, min(records_max, limits.CHANGE_FEED_BATCH_RECORDS_MAX)),
        )

    def consumer_checkpoint(self, table_id: str, partition_id: str, consumer: str) -> int | None:
        """A registered consumer's committed checkpoint; None if it is not registered."""
        return self.feeds.consumers((table_id, partition_id)).get(consumer)

    # Writes --------------------------------------------------------------------------------------

    def apply_writes(self, writes: Sequence[Write]) -> list[WriteResult]:
        """Run writes in order as one synced batch; return each one's reply or error.

        A write refused with a typed error (a failed condition, a stale epoch, a validation
        error) changes nothing and the others go ahead. A write that fails with anything else is
        a bug: it is logged and answered InternalServerError, and it too changes nothing, because
        nothing of a write reaches the batch before the write has been planned and encoded. A
        failure of the commit (the disk) fails every write of the group that had not failed.
        """
        results: list[WriteResult | None] = [None] * len(writes)
        self._refuse_expired(writes, results)
        self._keep_disk_reserve(writes, results)
        payloads = _decode_writes(writes, results)
        charged = self._admit_writes(writes, payloads, results)
        # Units each write consumed, known once it has been planned (0 for one not applied).
        consumed = [0.0] * len(writes)
        group = _WriteGroup(self, self.store.batch())
        for index, (op, target, _) in enumerate(writes):
            payload = payloads[index]
            if results[index] is not None or payload is None:
                continue
            try:
                results[index], consumed[index] = group.write(op, target, payload)
            except Exception as error:
                results[index] = _refusal(op, error)
        try:
            group.finish()
            self.store.commit(group.batch)
        except Exception as error:
            logger.exception("group commit of %d writes failed", len(writes))
            for index, result in enumerate(results):
                # A failed condition was decided against writes that are now lost as well.
                if isinstance(result, dict | ConditionalCheckFailed):
                    results[index] = InternalServerError(f"The node could not commit: {error}")
                    consumed[index] = 0.0
        else:
            # Feeds first: a reader that finds a retired partition gone finds its kept log.
            self.feeds = group.feed.install()
            for parent, children in group.splits:
                self.throughput.split(parent, children)  # Before the children are tracked.
            self._install(group.dirty)
            for ref, balances in group.carried:
                self.throughput.carry(ref, balances)  # Once the moved partition is tracked.
            if self.on_commit is not None:
                self.on_commit(group.dirty.keys() | group.feed.touched)
        self._settle_writes(writes, charged, consumed)
        assert all(result is not None for result in results)
        return results  # type: ignore[return-value]

    def _refuse_expired(self, writes: Sequence[Write], results: list[WriteResult | None]) -> None:
        """Refuse the writes whose deadline has passed, before anything of them is planned.

        Their callers have stopped waiting (or will, within RPC_DEADLINE_GRACE_SECONDS), so
        applying them now would apply a write its client was told had failed: they fail here,
        not applied, as ServiceUnavailable, which SDKs retry.
        """
        now = self.clock()
        for index, (op, target, _) in enumerate(writes):
            if target is not None and 0 < target.deadline < now:
                results[index] = _expired(op, target, now)

    def _keep_disk_reserve(
        self, writes: Sequence[Write], results: list[WriteResult | None]
    ) -> None:
        """Refuse the writes the disk's free space cannot take, keeping its reserve.

        Below `disk_reserve_bytes` of free space only what frees space goes on (deletes, TTL
        expiry, change-feed checkpoints that let the log be trimmed, dropped tables); below a
        quarter of it only dropped tables. Refused writes fail as ServiceUnavailable, not
        applied, and SDKs retry them; reads are untouched. One free-space query per group.
        """
        if self.store.read_only:
            for index in range(len(writes)):
                results[index] = results[index] or ServiceUnavailable(
                    "The storage node started read-only because its disk was full: it serves "
                    "reads and refuses writes until it is restarted with free space"
                )
            return
        reserve = self.store.disk_reserve_bytes
        free = self.store.free_bytes()
        if free >= reserve:
            return
        floor = reserve * limits.DISK_DELETE_RESERVE_SHARE_MIN
        allowed = _ALWAYS_ALLOWED_OPS if free < floor else _SPACE_FREEING_OPS
        for index, (op, _, _) in enumerate(writes):
            if results[index] is None and op not in allowed:
                results[index] = ServiceUnavailable(
                    f"The storage node's disk is full ({free // limits.MIB} MiB free, "
                    f"{reserve // limits.MIB} MiB kept in reserve): writes that add data are "
                    "refused until space is freed; deletes go on"
                )

    def _admit_writes(
        self,
        writes: Sequence[Write],
        payloads: Sequence[WritePayload | None],
        results: list[WriteResult | None],
    ) -> list[float]:
        """Admit each item write on its estimate before any is planned; refuse the throttled.

        Returns the units charged per write (0 for a write that is not metered). A throttled
        write gets its ProvisionedThroughputExceededException in `results` and is never applied.
        The size a put will write is known (the router measured it); an update's or a delete's is
        known only once planned, so they are admitted on one unit and charged the rest.
        """
        charged = [0.0] * len(writes)
        if not self.throughput.enforced:
            return charged
        for index, (op, target, _) in enumerate(writes):
            payload = payloads[index]
            key = self._metered(op, target, METERED_WRITES)
            if key is None or payload is None:
                continue
            estimate_bytes = payload.item_bytes if isinstance(payload, ops.PutPayload) else None
            try:
                charged[index] = self.throughput.admit_write(key, estimate_bytes)
            except ThroughputExceeded as error:
                results[index] = error
        return charged

    def _settle_writes(
        self,
        writes: Sequence[Write],
        charged: list[float],
        consumed: list[float],
    ) -> None:
        """Charge each admitted write what it consumed (refund what was not applied)."""
        for index, units in enumerate(charged):
            if units:
                target = writes[index][1]
                assert target is not None, "only addressed writes are metered"
                key = (target.table_id, target.partition_id)
                self.throughput.settle_write(key, consumed[index], units)

    def _install(self, dirty: dict[PartitionRef, Partition | None]) -> None:
        """Make a committed batch's partition metadata visible to readers, and meter it."""
        for key, partition in dirty.items():
            if partition is None:
                self.throughput.forget(key)
            else:
                self.throughput.track(key, partition.table_name, partition.throughput)
        if all(key in self.partitions for key in dirty) and all(dirty.values()):
            # Same keys: assign in place, which readers iterating a snapshot list tolerate.
            self.partitions.update(dirty)  # type: ignore[arg-type]
            return
        partitions = dict(self.partitions)
        for key, partition in dirty.items():
            if partition is None:
                partitions.pop(key, None)
            else:
                partitions[key] = partition
        self.partitions = partitions


def _where(target: Target) -> str:
    return f"partition {target.partition_id} of table {target.table_id}"


def _located(reader: Reader, target: Target | None, body: dict[str, Any]) -> dict[str, Any]:
    """`reader`'s reply; damaged data it meets is reported with the partition it was reading."""
    try:
        return reader(target, body)
    except DataCorruption as error:
        raise error.within("the node's metadata" if target is None else _where(target)) from None


def _expired(op: str, target: Target, now: float) -> ServiceUnavailable:
    late = now - target.deadline
    return ServiceUnavailable(
        f"The {op} reached partition {target.partition_id} {late:.3f} s after its deadline; "
        "it was not applied"
    )


def _decode_writes(
    writes: Sequence[Write], results: list[WriteResult | None]
) -> list[WritePayload | None]:
    """Each write's body decoded once into its payload; None for a write that cannot be (its
    refusal is put in `results`: it fails alone, like any write)."""
    payloads: list[WritePayload | None] = [None] * len(writes)
    for index, (op, _, body) in enumerate(writes):
        try:
            decode = WRITE_PAYLOADS.get(op)
            if decode is None:
                raise UnknownOperation(f"{op!r} is not a storage node write operation")
            payloads[index] = decode(body)
        except Exception as error:
            results[index] = _refusal(op, error)
    return payloads


class _WriteGroup:
    """The writes of one group commit: a write batch, and copies of the metadata they touch.

    Metadata changes go to copies that become visible only after the commit, so a failed commit
    leaves the node's view untouched.
    """

    def __init__(self, node: StorageNode, batch: WriteBatchView) -> None:
        self.node = node
        self.batch = batch
        self.dirty: dict[PartitionRef, Partition | None] = {}
        self.feed = changefeed.FeedChanges(node.feeds, batch)
        self.now = node.clock()
        # (seq, bytes) of the change-log records this group appended, per partition, and the
        # partitions created in it (whose log starts in this group), for retention in `finish`.
        self.appended: dict[PartitionRef, list[tuple[int, int]]] = {}
        self.created: set[PartitionRef] = set()
        # The splits installed in this group, whose children's buckets share the parent's.
        self.splits: list[split.SplitMeters] = []
        # The partitions moved here that this group activated, with their source's balances.
        self.carried: list[tuple[PartitionRef, dict[str, float]]] = []

    def write(
        self, op: str, target: Target | None, payload: WritePayload
    ) -> tuple[WriteResult, float]:
        """Run one write against the batch: its reply or refusal, and the units it consumed."""
        match payload:
            case ops.PutPayload() | ops.UpdatePayload() | ops.DeletePayload():
                assert target is not None, "an item write names its partition"
                return self.item_write(target, payload)
            case ops.CreatePartitionPayload():
                return self.create_partition(payload), 0.0
            case ops.DropTablePayload():
                return self.drop_table(payload), 0.0
            case ops.RetirePartitionPayload():
                return self.retire_partition(payload), 0.0
            case ops.UpdateThroughputPayload():
                return self.update_throughput(payload), 0.0
            case ops.UpdateTtlPayload():
                return self.update_ttl(payload), 0.0
            case expiry.ExpirePayload():
                return self.ttl_expire(payload), 0.0
            case expiry.BackfillPayload():
                return self.ttl_backfill(payload), 0.0
            case split.InstallPayload():
                return split.install(self, payload), 0.0
            case split.PinPayload():
                return split.pin(self.node, payload), 0.0
            case move.SourceStepPayload():
                return move.source_step(self, payload), 0.0
            case ops.MoveReceivePayload():
                return move.receive(self, payload), 0.0
            case TxnApplyPayload():
                return txn.apply(self.txn_group(), payload), 0.0
            case TxnSweepPayload():
                return txn.sweep(self.node.store, self.batch, self.now), 0.0
        if target is None:
            raise ValidationError(f"A {op} request names no partition")
        match payload:
            case ops.IndexApplyPayload():
                reply = self.index_apply(target, payload)
                return reply, reply["units"]
            case ops.RegisterConsumerPayload():
                return self.register_consumer(target, payload), 0.0
            case ops.CheckpointPayload():
                return self.checkpoint(target, payload), 0.0
            case ops.UnregisterConsumerPayload():
                return self.unregister_consumer(target, payload), 0.0
            case TxnRecordPayload():
                _addressed(self._lookup((target.table_id, target.partition_id)), target)
                return txn.record(self.txn_group(), payload), 0.0
            case TxnPreparePayload():
                _addressed(self._lookup((target.table_id, target.partition_id)), target)
                return txn.prepare(self.txn_group(), target, payload), 0.0
        assert_never(payload)

    def txn_group(self) -> txn.Group:
        """This group as the transaction operations see it (`storagenode/transactions.py`)."""
        return txn.Group(
            self.batch,
            self.now,
            self._lookup,
            self._staged,
            self.apply,
            _write_request,
            self.node.admit_transaction,
            self.node.item_collection_bytes_max,
            self.holder,
        )

    def holder(self, table_id: str, items_key: bytes) -> PartitionRef | None:
        """The partition of table `table_id` on this node, as this group sees it, whose range
        holds the item stored under `items_key`; None when no partition here does."""
        for ref in {*self.node.partitions, *self.dirty}:
            partition = self._lookup(ref)
            if ref[0] != table_id or partition is None:
                continue
            prefix = partition.item_prefix
            if items_key.startswith(prefix) and partition.holds(items_key[len(prefix) :]):
                return ref
        return None

    def _lookup(self, key: PartitionRef) -> Partition | None:
        if key in self.dirty:
            return self.dirty[key]
        return self.node.partitions.get(key)

    def lookup(self, key: PartitionRef) -> Partition | None:
        """A partition's metadata as this group sees it (None: not on this node)."""
        return self._lookup(key)

    def item_write(
        self, target: Target, payload: ops.ItemWritePayload
    ) -> tuple[WriteResult, float]:
        """Plan a put, update or delete against the item as this group sees it, then apply it."""
        partition = _addressed(self._lookup((target.table_id, target.partition_id)), target)
        request = _write_request(payload, partition)
        key = request.item if isinstance(request, PutRequest) else request.key
        items_key = partition.item_prefix + partition.storage_key(key)
        try:
            if txn.locked(self.batch, items_key):
                # A prepared item takes no other write until its transaction is decided.
                raise TransactionConflict(CONFLICT_MESSAGE)
            raw = self.batch.get(Family.ITEMS, items_key)
        except DataCorruption as error:
            raise error.within(_where(target)) from None
        old = None if raw is None else orjson.loads(item_json_of(raw))
        old_bytes = 0 if raw is None else item_size_of(raw)
        effect = plan(request, old, partition.key_shape, old_bytes=old_bytes)
        if effect.condition_failed:
            return effect.failure(), effect.units
        if isinstance(request, UpdateRequest) and effect.new is not None:
            # An update may give an index key attribute a wrong type or an empty value.
            check_index_keys(effect.new, partition.key_checked_indexes(payload.global_indexes))
        ref = (partition.table_id, partition.partition_id)
        # Global index writes are made later by the GSI replicator and charged to each index's
        # own throughput (`index_apply`); the write reports what they cost, for ConsumedCapacity.
        global_indexes = partition.named_global_indexes(payload.global_indexes)
        global_units = {
            c.index.name: c.units
            for c in entry_changes(effect.old, effect.new, global_indexes, partition.key_shape)
            if c.units
        }
        if global_units:
            self._hold_back_for_indexes(
                partition, [index for index in global_indexes if index.name in global_units]
            )
        staged = partition if ref in self.dirty else partition.staged()
        applied = self.apply(self.batch, staged, items_key, effect, now=self.now)
        self.dirty[ref] = staged
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
        return reply, effect.units + sum(index_units.values())

    def _hold_back_for_indexes(self, partition: Partition, indexes: list[IndexDef]) -> None:
        """Refuse a write that would change `indexes` of a partition whose replicator consumer
        for one of them is more than `gsi_lag_records_max` change records behind (back-pressure:
        DynamoDB throttles base writes for an index that cannot keep up, seed 001/004). An index
        added online counts once it is ACTIVE: while it is copied, its consumer stays where the
        copy began, and the writes during a backfill must go on."""
        consumers = {
            consumer_of(index)
            for index in indexes
            if not index.online or index.status is IndexStatus.ACTIVE
        }
        for consumer in sorted(consumers):
            checkpoint = self.node.consumer_checkpoint(
                partition.table_id, partition.partition_id, consumer
            )
            if checkpoint is None:
                continue
            if partition.last_seq - checkpoint > self.node.gsi_lag_records_max:
                raise ThroughputExceeded(GSI_THROTTLED)

    def index_apply(self, target: Target, payload: ops.IndexApplyPayload) -> dict[str, Any]:
        """Apply a base partition's projected changes to a global index partition (`rpc.ops`).

        Changes at or below the seq this partition last applied from that source are skipped;
        the new seq is stored in the same batch as the entries. Every entry key is checked and
        every entry encoded before the batch is touched, so a refused payload changes nothing.
        While the partition is being moved away (its log held by the move's consumer), each
        entry write is also appended to its change log, which the move's catch-up carries to
        the target (`storagenode.index_move`); otherwise an index partition logs nothing.
        """
        ref = (target.table_id, target.partition_id)
        partition = _addressed(self._lookup(ref), target)
        shape = partition.key_shape
        source_key = index_source_key(partition.table_id, partition.partition_id, payload.source)
        stored = self.batch.get(Family.INDEX_SOURCES, source_key)
        applied_seq, fence = (0, 0) if stored is None else index_source_of(stored)
        if payload.lease_epoch < fence:
            raise LeaseFenced(
                f"Source {payload.source} is leased under epoch {fence} here, "
                f"not {payload.lease_epoch}"
            )
        fenced_at = fence
        fence = max(fence, payload.lease_epoch)
        writes: list[tuple[bytes, Item, Item | None, int]] = []
        new_bytes: list[int] = []
        applied = 0
        for change in payload.changes:
            seq = int(change["seq"])
            if payload.backfill:
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
                self.batch.put(
                    Family.INDEX_SOURCES, source_key, index_source_bytes(applied_seq, fence)
                )
            return {"applied": 0, "source_seq": applied_seq, "new_bytes": [], "units": 0.0}
        staged = partition if ref in self.dirty else partition.staged()
        units = 0.0
        logged = move.MOVE_CONSUMER in self.feed.consumers(ref)
        for items_key, key, entry, size in writes:
            old = self.batch.get(Family.ITEMS, items_key)
            old_bytes = None if old is None else item_size_of(old)
            if entry is None:
                units += 0.0 if old_bytes is None else write_units(old_bytes)
            else:
                units += item_write_units(old_bytes, size)
            if logged:
                index_move.apply_logged(self, staged, items_key, key, old, entry, size)
                continue
            if old is not None:
                staged.item_count -= 1
                staged.size_bytes -= item_size_of(old)
            # Deleting an entry costs its size (above); deleting one that is not there, nothing.
            if entry is None:
                self.batch.delete(Family.ITEMS, items_key)
            else:
                self.batch.put(Family.ITEMS, items_key, encode_item(orjson.dumps(entry), size))
                staged.item_count += 1
                staged.size_bytes += size
        if not payload.backfill or fence > fenced_at:
            # A copy leaves the source's seq where it is (`applied_seq` did not move).
            self.batch.put(Family.INDEX_SOURCES, source_key, index_source_bytes(applied_seq, fence))
        self.dirty[ref] = staged
        return {
            "applied": applied,
            "source_seq": applied_seq,
            "new_bytes": new_bytes,
            "units": units,
        }

    def stage(self, ref: PartitionRef) -> Partition:
        """The group's private copy of a partition's metadata, which must be on this node."""
        staged = self._staged(ref)
        assert staged is not None, f"partition {ref[1]} is on this node"
        return staged

    def _staged(self, ref: PartitionRef) -> Partition | None:
        """The group's private copy of a partition's metadata, made on first use."""
        partition = self._lookup(ref)
        if partition is None or ref in self.dirty:
            return partition
        staged = partition.staged()
        self.dirty[ref] = staged
        return staged

    def update_ttl(self, payload: ops.UpdateTtlPayload) -> dict[str, Any]:
        """A table's TTL setting on every partition of it here (UpdateTimeToLive)."""
        refs = [key for key in {*self.node.partitions, *self.dirty} if key[0] == payload.table_id]
        changed = expiry.update_ttl(self.batch, payload.table_id, payload.ttl, refs, self._lookup)
        self.dirty.update(changed)
        return {"partitions_updated": sum(1 for ref in refs if self._lookup(ref) is not None)}

    def ttl_expire(self, payload: expiry.ExpirePayload) -> dict[str, Any]:
        """The sweeper's deletes on one partition: never metered (TTL deletes are free)."""
        partition = self._lookup((payload.table_id, payload.partition_id))
        if partition is None or not partition.serving:
            return {"deleted": 0}  # Moving: its log is final, or not yet its own.
        partition = self.stage((payload.table_id, payload.partition_id))
        deleted = expiry.expire(self.batch, partition, payload.keys, self.now, self.apply)
        return {"deleted": deleted}

    def ttl_backfill(self, payload: expiry.BackfillPayload) -> dict[str, Any]:
        """One bounded step of indexing the items a partition held when TTL was enabled."""
        partition = self._lookup((payload.table_id, payload.partition_id))
        if partition is None or not partition.serving:
            return {"done": True}  # Moving: a later sweep indexes it where it serves.
        partition = self.stage((payload.table_id, payload.partition_id))
        return {"done": expiry.backfill(self.node.store, self.batch, partition, self.now)}

    def apply(
        self,
        batch: WriteBatchView,
        partition: Partition,
        items_key: bytes,
        effect: WriteEffect,
        *,
        by_service: bool = False,
        now: float,
        capped: bool = True,
        logged: bool = True,
        record_json: bytes | None = None,
    ) -> replica.Applied:
        """`replica.apply` with the node's item collection cap (`capped` False: a transaction's
        commit, whose prepare checked it), noting the size of the change-log record it appended,
        which `finish` needs to keep the log within its bytes bound."""
        applied = replica.apply(
            batch,
            partition,
            items_key,
            effect,
            by_service=by_service,
            now=now,
            collection_bytes_max=self.node.item_collection_bytes_max if capped else None,
            logged=logged,
            record_json=record_json,
        )
        if applied.record_bytes:
            ref = (partition.table_id, partition.partition_id)
            self.appended.setdefault(ref, []).append((partition.last_seq, applied.record_bytes))
        return applied

    def create_partition(self, payload: ops.CreatePartitionPayload) -> dict[str, Any]:
        created = Partition.create(payload.table, payload.partition, payload.throughput)
        key = (created.table_id, created.partition_id)
        existing = self._lookup(key)
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
        if self.feed.retired(key) is not None:
            # The partition comes back to this node (a move back) while its retired log still
            # waits for consumers: its new log starts again at seq 1, so the old one, and the
            # consumers that were reading it, go. They find the partition where it moved to.
            logger.warning("partition %s returns; its retired change log is dropped", key)
            self.feed.forget(key)
        self.dirty[key] = created
        for consumer in payload.consumers or ():
            self.feed.register(key, consumer, 0, changefeed.LogBounds(1, 0))
        self.created.add(key)
        return {}

    def update_throughput(self, payload: ops.UpdateThroughputPayload) -> dict[str, Any]:
        """New throughput settings for every partition of a table on this node (UpdateTable)."""
        table_id, throughput = payload.table_id, payload.throughput
        version = version_of(throughput)
        updated = 0
        for key in {key for key in (*self.node.partitions, *self.dirty) if key[0] == table_id}:
            partition = self._lookup(key)
            # A late retry of an older change must not undo a newer one.
            if partition is None or version_of(partition.throughput) > version:
                continue
            if partition.throughput != throughput:
                self.dirty[key] = dataclasses.replace(partition, throughput=throughput)
            updated += 1
        return {"partitions_updated": updated}

    def drop_table(self, payload: ops.DropTablePayload) -> dict[str, Any]:
        table_id = payload.table_id
        prefix = table_prefix(table_id)
        keys = {key for key in (*self.node.partitions, *self.dirty) if key[0] == table_id}
        dropped = [key for key in keys if self._lookup(key) is not None]
        for key in dropped:
            self.dirty[key] = None
        # Every change-log key starts with the table id: this drops retired logs as well.
        self.batch.delete_range(Family.CHANGE_LOG, prefix, _end_of(prefix))
        self.feed.forget_table(table_id)
        self.batch.delete_range(Family.ITEMS, prefix, _end_of(prefix))
        self.batch.delete_range(Family.INDEX_SOURCES, prefix, _end_of(prefix))
        self.batch.delete_range(Family.TTL_INDEX, prefix, _end_of(prefix))
        # Index entry and item collection keys start with the table id too.
        self.batch.delete_range(Family.INDEX_ENTRIES, prefix, _end_of(prefix))
        self.batch.delete_range(Family.ITEM_COLLECTIONS, prefix, _end_of(prefix))
        return {"partitions_dropped": len(dropped)}

    def retire_partition(self, payload: ops.RetirePartitionPayload) -> dict[str, Any]:
        """Forget a split or moved partition's metadata; its items stay (`rpc.ops`).

        Its change log ends with an END record naming the children. If consumers are registered,
        the log stays (a `changefeed.RetiredLog`) until each has read to END; if not, it goes now.
        """
        key = (payload.table_id, payload.partition_id)
        partition = self._lookup(key)
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
        self.dirty[key] = None
        if not self.feed.consumers(key):
            self.feed.forget(key)
            return {"retired": True}
        end_seq = partition.last_seq + 1
        record = orjson.dumps(changefeed.end_record(end_seq, children))
        self.batch.put(Family.CHANGE_LOG, partition.log_prefix + seq_bytes(end_seq), record)
        self.feed.retire(changefeed.RetiredLog(*key, partition.first_seq, end_seq, tuple(children)))
        self.feed.trim_retired(key, self.node.change_log_records_max)
        return {"retired": True}

    def _feed_bounds(self, target: Target) -> tuple[PartitionRef, changefeed.LogBounds]:
        """A partition's log bounds as this group sees them (live, or retired and kept)."""
        key = (target.table_id, target.partition_id)
        partition = self._lookup(key)
        if partition is not None:
            return key, changefeed.LogBounds(partition.first_seq, partition.last_seq)
        retired = self.feed.retired(key)
        if retired is not None:
            return key, retired.bounds()
        raise StaleEpoch(
            f"Partition {target.partition_id} of table {target.table_id} is not on this node"
        )

    def _feed_moved(self, key: PartitionRef) -> dict[str, Any]:
        """Trim a partition's log once a consumer has moved; its bounds as they will be."""
        partition = self._lookup(key)
        if partition is not None:
            staged = partition if key in self.dirty else partition.staged()
            self.dirty[key] = staged  # finish() trims and persists it.
            keep = changefeed.first_retained_seq(
                staged.first_seq,
                staged.last_seq,
                self.node.change_log_records_max,
                self.feed.consumers(key).values(),
            )
            return {"first_seq": keep, "last_seq": staged.last_seq}
        self.feed.trim_retired(key, self.node.change_log_records_max)
        retired = self.feed.retired(key)
        if retired is None:  # Every consumer has read to END: the log is gone.
            return {"first_seq": 0, "last_seq": 0}
        return {"first_seq": retired.first_seq, "last_seq": retired.end_seq}

    def register_consumer(
        self, target: Target, payload: ops.RegisterConsumerPayload
    ) -> dict[str, Any]:
        key, bounds = self._feed_bounds(target)
        seq = self.feed.register(key, payload.consumer, payload.seq, bounds)
        return {"seq": seq, **self._feed_moved(key)}

    def checkpoint(self, target: Target, payload: ops.CheckpointPayload) -> dict[str, Any]:
        key, bounds = self._feed_bounds(target)
        seq = self.feed.checkpoint(key, payload.consumer, payload.seq, bounds)
        return {"seq": seq, **self._feed_moved(key)}

    def unregister_consumer(
        self, target: Target, payload: ops.UnregisterConsumerPayload
    ) -> dict[str, Any]:
        key, _ = self._feed_bounds(target)
        unregistered = self.feed.unregister(key, payload.consumer)
        return {"unregistered": unregistered, **self._feed_moved(key)}

    def _log_sizes(self, key: PartitionRef, partition: Partition) -> Iterator[tuple[int, int]]:
        """(seq, bytes) of every record of a partition's log as this group sees it, oldest first:
        the committed ones from the store, then those this group appended."""
        committed = None if key in self.created else self.node.partitions.get(key)
        if committed is not None:
            yield from self.node.log_sizes(
                partition.log_prefix, partition.first_seq, committed.last_seq
            )
        yield from self.appended.get(key, ())

    def finish(self) -> None:
        """Persist the touched partitions' metadata and trim their change logs.

        A log is trimmed below the oldest record some registered consumer has not passed, and
        always to the hard bounds of `change_log_records_max` records and `change_log_bytes_max`
        bytes (`changefeed`).
        """
        for key, partition in self.dirty.items():
            meta_key = partition_meta_key(*key)
            if partition is None:
                self.batch.delete(Family.PARTITIONS, meta_key)
                continue
            keep = changefeed.first_retained_seq(
                partition.first_seq,
                partition.last_seq,
                self.node.change_log_records_max,
                self.feed.consumers(key).values(),
            )
            if keep > partition.first_seq or partition.log_bytes > self.node.change_log_bytes_max:
                keep, partition.log_bytes = changefeed.first_retained_within_bytes(
                    keep,
                    partition.last_seq,
                    partition.log_bytes,
                    self.node.change_log_bytes_max,
                    self._log_sizes(key, partition),
                )
            if keep > partition.first_seq:
                log = partition.log_prefix
                self.batch.delete_range(
                    Family.CHANGE_LOG, log + seq_bytes(partition.first_seq), log + seq_bytes(keep)
                )
                partition.first_seq = keep
            self.batch.put(Family.PARTITIONS, meta_key, partition.to_meta())


def _write_request(payload: ops.ItemWritePayload, partition: Partition) -> WriteRequest:
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


@dataclasses.dataclass(frozen=True, slots=True)
class _Source:
    """What a Query or Scan reads: the table's items, or a local index's entries (with, when
    `fetch` is set, each entry's item read from the table)."""

    family: Family
    prefix: bytes
    shape: KeyShape
    fetch: Callable[[Item], tuple[Item | None, int]] | None = None

    @classmethod
    def of(
        cls, store: NodeStore, partition: Partition, index_name: str | None, fetch: bool
    ) -> _Source:
        if index_name is None:
            return cls(Family.ITEMS, partition.item_prefix, partition.key_shape)
        layout = partition.index_layout.get(index_name)
        if layout is None:
            raise ValidationError(f"The table does not have the specified index: {index_name}")
        prefix, shape = layout
        index = next(index for index in partition.local_indexes if index.name == index_name)
        table_shape = partition.key_shape

        def fetched(entry: Item) -> tuple[Item | None, int]:
            items_key = partition.item_prefix + table_shape.storage_key(table_shape.key_of(entry))
            raw = store.get(Family.ITEMS, items_key)
            if raw is None:
                return None, 0
            item = orjson.loads(item_json_of(raw))
            current = index_entry(item, index, table_shape)
            if current is None or shape.key_of(current) != shape.key_of(entry):
                return None, 0
            return item, item_size_of(raw)

        return cls(Family.INDEX_ENTRIES, prefix, shape, fetched if fetch else None)

    def range(self, lo: bytes, hi: bytes | None) -> tuple[bytes, bytes]:
        """Storage-key bounds as keys of the source's family, never past the table or index."""
        return self.prefix + lo, (_end_of(self.prefix) if hi is None else self.prefix + hi)


def _end_of(prefix: bytes) -> bytes:
    """The exclusive end of every key that starts with `prefix` (a table id or a log prefix)."""
    end = successor(prefix)
    assert end is not None, "table ids and change-log prefixes are never all 0xff"
    return end


def _sort_key_matcher(
    condition: expressions.RangeCondition, sort_name: str
) -> Callable[[Item], bool]:
    def matches(item: Item) -> bool:
        return condition.matches(item[sort_name])

    return matches
