"""Every operation of `dynalab.rpc.ops`, executed against the node's LMDB store.

`StorageNode` is the node's core, with no asyncio and no gRPC: `read` answers a read operation in
one LMDB read transaction, and `apply_writes` applies a batch of write operations in one LMDB write
transaction (the group commit), returning each write's reply or typed error. Conditions and update
expressions are evaluated here, inside the write transaction, so a condition and the write it guards
are atomic: a single writer serialises all writes, and each write sees every earlier one.

Every item write appends its change-log record and updates its partition's metadata in the same
transaction, so the item, the log and the counters can never disagree, even after kill -9.

Every data-plane request passes its partition's token buckets (`storagenode.throughput`): a read
is admitted before it runs and charged its real size after; a write is admitted before its batch is
applied, so a throttled write never enters the transaction, and charged the larger of its old and
new item (or, when its condition fails, the existing item) once the transaction has measured them.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence
from typing import Any

import lmdb
import orjson

from core import expressions, limits
from core.capacity import item_write_units
from core.errors import (
    INVALID_PARAMETERS,
    ConditionalCheckFailed,
    DynamoError,
    InternalServerError,
    ResourceInUse,
    StaleEpoch,
    ThroughputExceeded,
    UnknownOperation,
    ValidationError,
)
from core.keycodec import successor
from core.size import item_size_bytes
from core.values import Item
from dynalab.rpc import ops
from storagenode import metrics
from storagenode.partition import PageRequest, Partition, query_bounds, read_page, scan_bounds
from storagenode.store import (
    CATALOG_KEY,
    SEQ_BYTES,
    Store,
    partition_meta_key,
    table_prefix,
)
from storagenode.throughput import NodeThroughput, version_of

logger = logging.getLogger(__name__)

READ_OPS = frozenset(
    {
        ops.GET,
        ops.QUERY,
        ops.SCAN,
        ops.CATALOG_GET,
        ops.TABLE_STATS,
        ops.PARTITION_THROUGHPUT,
    }
)
WRITE_OPS = frozenset(
    {
        ops.PUT,
        ops.UPDATE,
        ops.DELETE,
        ops.CATALOG_CAS,
        ops.CREATE_PARTITION,
        ops.DROP_TABLE,
        ops.UPDATE_THROUGHPUT,
    }
)
assert READ_OPS | WRITE_OPS == ops.CONTROL_OPS | ops.DATA_OPS
# The operations that spend a partition's read or write units.
METERED_READS = frozenset({ops.GET, ops.QUERY, ops.SCAN})
METERED_WRITES = frozenset({ops.PUT, ops.UPDATE, ops.DELETE})

PartitionKey = tuple[str, str]  # (table id, partition id)
WriteResult = dict[str, Any] | DynamoError


def _seq_bytes(seq: int) -> bytes:
    return seq.to_bytes(SEQ_BYTES, "big")


class StorageNode:
    """The partitions hosted by one node and the operations on them."""

    def __init__(
        self,
        store: Store,
        *,
        change_log_records_max: int = limits.CHANGE_LOG_RECORDS_MAX,
        throughput: NodeThroughput | None = None,
    ) -> None:
        self.store = store
        self.change_log_records_max = change_log_records_max
        # Token buckets per partition; by default as the environment says (DYNALAB_THROTTLING,
        # DYNALAB_BURST_SECONDS), on the monotonic clock. Tests pass one with a clock of their own.
        self.throughput = NodeThroughput.from_env() if throughput is None else throughput
        metrics.watch(self.throughput)
        # Replaced or updated only by the writer after each commit, so a reader on another thread
        # always sees the metadata of committed data.
        self.partitions: dict[PartitionKey, Partition] = {}
        for meta in store.load_partition_metas():
            partition = Partition.from_meta(meta)
            self.partitions[partition.table_id, partition.partition_id] = partition
            self.throughput.track(
                (partition.table_id, partition.partition_id),
                partition.table_name,
                partition.throughput,
            )
        self._readers: dict[str, Callable[[lmdb.Transaction, dict[str, Any]], dict[str, Any]]] = {
            ops.GET: self._get,
            ops.QUERY: self._query,
            ops.SCAN: self._scan,
            ops.CATALOG_GET: self._catalog_get,
            ops.TABLE_STATS: self._table_stats,
            ops.PARTITION_THROUGHPUT: self._partition_throughput,
        }

    # Reads ---------------------------------------------------------------------------------------

    def read(self, op: str, body: dict[str, Any]) -> dict[str, Any]:
        """Answer one read operation from a consistent snapshot."""
        reader = self._readers.get(op)
        if reader is None:
            raise UnknownOperation(f"{op!r} is not a storage node read operation")
        key = self._metered(op, body, METERED_READS)
        if key is None:
            with self.store.begin_read() as txn:
                return reader(txn, body)
        consistent = body.get("consistent") is True
        charged = self.throughput.admit_read(key, consistent)
        read_bytes: int | None = None
        try:
            with self.store.begin_read() as txn:
                reply = reader(txn, body)
            read_bytes = reply["read_bytes"]
            return reply
        finally:
            if charged:
                self.throughput.settle_read(key, consistent, read_bytes, charged)

    def _metered(
        self, op: str, body: dict[str, Any], metered_ops: frozenset[str]
    ) -> PartitionKey | None:
        """The partition a data-plane request spends units of; None if it spends none.

        A request for a partition this node does not hold at that epoch is not metered: it is
        refused as stale, and the router retries it where the partition is now.
        """
        if op not in metered_ops or not self.throughput.enforced:
            return None
        key = (body["table_id"], body["partition_id"])
        partition = self.partitions.get(key)
        if partition is None or partition.epoch != body.get("epoch"):
            return None
        return key

    def _partition(self, body: dict[str, Any]) -> Partition:
        partition = self.partitions.get((body["table_id"], body["partition_id"]))
        if partition is None:
            raise StaleEpoch(
                f"Partition {body['partition_id']} of table {body['table_id']} is not on this node"
            )
        partition.check_epoch(body["epoch"])
        return partition

    def _get(self, txn: lmdb.Transaction, body: dict[str, Any]) -> dict[str, Any]:
        partition = self._partition(body)
        storage_key = partition.storage_key(partition.key_of(body["key"]))
        raw = txn.get(partition.item_prefix + storage_key, db=self.store.items)
        if raw is None:
            return {"item": None, "read_bytes": 0}
        item = orjson.loads(raw)
        read_bytes = item_size_bytes(item)
        if body.get("projection") is not None:
            item = expressions.projection(body["projection"], body.get("names")).apply(item)
        return {"item": item, "read_bytes": read_bytes}

    def _query(self, txn: lmdb.Transaction, body: dict[str, Any]) -> dict[str, Any]:
        partition = self._partition(body)
        hash_value = body["hash_value"]
        partition.key_of({partition.hash_name: hash_value}, hash_only=True)
        forward = body.get("forward", True)
        range_condition = body.get("range")
        if range_condition is not None and partition.range_name is None:
            raise ValidationError("Query key condition not supported: the table has no sort key")
        start = body.get("exclusive_start")
        if start is not None and start.get(partition.hash_name) != hash_value:
            raise ValidationError("The provided starting key is invalid: it is not in the query")
        lo, hi = query_bounds(partition, hash_value, range_condition, start, forward=forward)
        key_matches = None
        if range_condition is not None:
            assert partition.range_name is not None
            key_matches = _sort_key_matcher(
                expressions.RangeCondition(range_condition["op"], range_condition["values"]),
                partition.range_name,
            )
        rows = self.store.walk(txn, *self._item_range(partition, lo, hi), forward=forward)
        page = PageRequest.from_body(body, limits.QUERY_PAGE_BYTES_MAX)
        return read_page(rows, page, partition, key_matches)

    def _scan(self, txn: lmdb.Transaction, body: dict[str, Any]) -> dict[str, Any]:
        partition = self._partition(body)
        lo, hi = scan_bounds(
            partition, body.get("exclusive_start"), body.get("hash_start"), body.get("hash_end")
        )
        rows = self.store.walk(txn, *self._item_range(partition, lo, hi), forward=True)
        return read_page(rows, PageRequest.from_body(body, limits.QUERY_PAGE_BYTES_MAX), partition)

    @staticmethod
    def _item_range(
        partition: Partition, lo: bytes, hi: bytes | None
    ) -> tuple[bytes, bytes | None]:
        """Storage-key bounds as `items` keys: prefixed by the table id, never past the table."""
        prefix = partition.item_prefix
        return prefix + lo, (successor(prefix) if hi is None else prefix + hi)

    def _catalog_get(self, txn: lmdb.Transaction, body: dict[str, Any]) -> dict[str, Any]:
        raw = txn.get(CATALOG_KEY, db=self.store.catalog)
        return {"version": 0, "tables": {}} if raw is None else orjson.loads(raw)

    def _table_stats(self, txn: lmdb.Transaction, body: dict[str, Any]) -> dict[str, Any]:
        table_id = body["table_id"]
        return {
            "partitions": {
                partition.partition_id: {
                    "items": partition.item_count,
                    "bytes": partition.size_bytes,
                    "last_seq": partition.last_seq,
                }
                for partition in list(self.partitions.values())
                if partition.table_id == table_id
            }
        }

    def _partition_throughput(self, txn: lmdb.Transaction, body: dict[str, Any]) -> dict[str, Any]:
        return self.throughput.report(body.get("table_id"))

    def changes(
        self, table_id: str, partition_id: str, after_seq: int, limit: int
    ) -> list[dict[str, Any]]:
        """Up to `limit` change-log records of a partition with seq > after_seq, oldest first."""
        partition = self.partitions.get((table_id, partition_id))
        if partition is None:
            raise StaleEpoch(f"Partition {partition_id} of table {table_id} is not on this node")
        prefix = partition.log_prefix
        records: list[dict[str, Any]] = []
        with self.store.begin_read() as txn:
            cursor = txn.cursor(db=self.store.changelog)
            if not cursor.set_range(prefix + _seq_bytes(after_seq + 1)):
                return records
            for key, value in cursor.iternext():
                if not key.startswith(prefix) or len(records) >= limit:
                    break
                records.append(orjson.loads(value))
        return records

    # Writes --------------------------------------------------------------------------------------

    def apply_writes(self, writes: Sequence[tuple[str, dict[str, Any]]]) -> list[WriteResult]:
        """Apply writes in order in one synced transaction; return each one's reply or error.

        A write refused with a typed error (a failed condition, a stale epoch) changes nothing and
        the others go ahead. A write that fails with anything else is a bug: the transaction is
        rolled back and the batch is applied again without it, so one bad request cannot take its
        neighbours down with it. A storage failure (LMDB error, including a full map) fails the
        whole batch.
        """
        results: list[WriteResult | None] = [None] * len(writes)
        charged = self._admit_writes(writes, results)
        # Units each applied write consumed, known once its transaction has measured it.
        consumed = [0.0] * len(writes)
        pending = [index for index, result in enumerate(results) if result is None]
        while pending:
            txn = self.store.begin_write()
            batch = _WriteBatch(self, txn)
            current: int | None = None
            try:
                for index in pending:
                    current = index
                    op, body = writes[index]
                    batch.units = 0.0
                    try:
                        results[index] = batch.apply(op, body)
                        consumed[index] = batch.units
                    except ConditionalCheckFailed as error:
                        # A failed condition still consumes, sized by the existing item.
                        results[index] = error
                        consumed[index] = batch.units
                    except DynamoError as error:
                        results[index] = error
                        consumed[index] = 0.0
                current = None
                batch.finish()
                txn.commit()
            except Exception as error:
                txn.abort()
                if current is None or isinstance(error, lmdb.Error):
                    logger.exception("group commit of %d writes failed", len(pending))
                    for index in pending:
                        results[index] = InternalServerError(f"The node could not commit: {error}")
                        consumed[index] = 0.0
                    break
                logger.exception(
                    "write %r failed; applying its batch without it", writes[current][0]
                )
                results[current] = InternalServerError(f"The node failed on this write: {error!r}")
                consumed[current] = 0.0
                pending.remove(current)
                continue
            self._install(batch.dirty)
            break
        self._settle_writes(writes, charged, consumed)
        assert all(result is not None for result in results)
        return results  # type: ignore[return-value]

    def _admit_writes(
        self, writes: Sequence[tuple[str, dict[str, Any]]], results: list[WriteResult | None]
    ) -> list[float]:
        """Admit each item write on its estimate before any is applied; refuse the throttled.

        Returns the units charged per write (0 for a write that is not metered). A throttled
        write gets its ProvisionedThroughputExceededException in `results` and is never applied.
        The size a put will write is known (the router measured it); an update's or a delete's is
        known only inside the transaction, so they are admitted on one unit and charged the rest.
        """
        charged = [0.0] * len(writes)
        if not self.throughput.enforced:
            return charged
        for index, (op, body) in enumerate(writes):
            key = self._metered(op, body, METERED_WRITES)
            if key is None:
                continue
            estimate_bytes = body.get("item_bytes") if op == ops.PUT else None
            try:
                charged[index] = self.throughput.admit_write(key, estimate_bytes)
            except ThroughputExceeded as error:
                results[index] = error
        return charged

    def _settle_writes(
        self,
        writes: Sequence[tuple[str, dict[str, Any]]],
        charged: list[float],
        consumed: list[float],
    ) -> None:
        """Charge each admitted write what it consumed (refund what was not applied)."""
        for index, units in enumerate(charged):
            if units:
                body = writes[index][1]
                key = (body["table_id"], body["partition_id"])
                self.throughput.settle_write(key, consumed[index], units)

    def _install(self, dirty: dict[PartitionKey, Partition | None]) -> None:
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


class _WriteBatch:
    """The writes of one LMDB write transaction, with copies of the partition metadata they touch.

    Metadata changes go to copies that become visible only after the commit, so a rolled-back batch
    leaves the node's view untouched.
    """

    def __init__(self, node: StorageNode, txn: lmdb.Transaction) -> None:
        self.node = node
        self.store = node.store
        self.txn = txn
        self.dirty: dict[PartitionKey, Partition | None] = {}
        # The write units the item write being applied consumes (`core.capacity`), set once its
        # old item is measured and again once its new one is.
        self.units = 0.0
        self._appliers: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
            ops.PUT: self.put,
            ops.UPDATE: self.update,
            ops.DELETE: self.delete,
            ops.CATALOG_CAS: self.catalog_cas,
            ops.CREATE_PARTITION: self.create_partition,
            ops.DROP_TABLE: self.drop_table,
            ops.UPDATE_THROUGHPUT: self.update_throughput,
        }

    def apply(self, op: str, body: dict[str, Any]) -> dict[str, Any]:
        applier = self._appliers.get(op)
        if applier is None:
            raise UnknownOperation(f"{op!r} is not a storage node write operation")
        return applier(body)

    def _lookup(self, key: PartitionKey) -> Partition | None:
        if key in self.dirty:
            return self.dirty[key]
        return self.node.partitions.get(key)

    def _writable(self, body: dict[str, Any]) -> Partition:
        key = (body["table_id"], body["partition_id"])
        partition = self._lookup(key)
        if partition is None:
            raise StaleEpoch(
                f"Partition {body['partition_id']} of table {body['table_id']} is not on this node"
            )
        partition.check_epoch(body["epoch"])
        if key not in self.dirty:
            partition = dataclasses.replace(partition)
            self.dirty[key] = partition
        return partition

    def _load(self, items_key: bytes) -> Item | None:
        raw = self.txn.get(items_key, db=self.store.items)
        return None if raw is None else orjson.loads(raw)

    def _measure_old(self, old: Item | None) -> int:
        """The size of the item before a write, which is also what a failed condition consumes."""
        old_bytes = 0 if old is None else item_size_bytes(old)
        self.units = item_write_units(old_bytes, None)
        return old_bytes

    @staticmethod
    def _check_condition(body: dict[str, Any], old: Item | None) -> None:
        text = body.get("condition")
        if text is None:
            return
        if not expressions.condition(text, body.get("names"), body.get("values")).evaluate(old):
            # ReturnValuesOnConditionCheckFailure=ALL_OLD returns the item as it was, if any.
            raise ConditionalCheckFailed(item=old if body.get("return_on_failure") else None)

    def _record(
        self,
        partition: Partition,
        items_key: bytes,
        key: Item,
        old: Item | None,
        new: Item | None,
        old_bytes: int,
        new_bytes: int,
    ) -> None:
        """Store the new image and append its change-log record.

        Like DynamoDB Streams, a write that leaves the item exactly as it was writes no record.
        """
        if new == old:
            return
        if new is None:
            self.txn.delete(items_key, db=self.store.items)
            kind = "REMOVE"
            partition.item_count -= 1
        else:
            self.txn.put(items_key, orjson.dumps(new), db=self.store.items)
            kind = "INSERT" if old is None else "MODIFY"
            if old is None:
                partition.item_count += 1
        partition.size_bytes += new_bytes - old_bytes
        partition.last_seq += 1
        record = {"seq": partition.last_seq, "kind": kind, "keys": key, "old": old, "new": new}
        self.txn.put(
            partition.log_prefix + _seq_bytes(partition.last_seq),
            orjson.dumps(record),
            db=self.store.changelog,
        )

    def put(self, body: dict[str, Any]) -> dict[str, Any]:
        partition = self._writable(body)
        item = body["item"]
        key = partition.key_of(item)
        items_key = partition.item_prefix + partition.storage_key(key)
        old = self._load(items_key)
        old_bytes = self._measure_old(old)
        self._check_condition(body, old)
        new_bytes = item_size_bytes(item)
        if new_bytes > limits.ITEM_SIZE_BYTES_MAX:
            raise ValidationError("Item size has exceeded the maximum allowed size")
        self.units = item_write_units(old_bytes, new_bytes)
        self._record(partition, items_key, key, old, item, old_bytes, new_bytes)
        return {
            "attributes": old if body.get("return_values") == "ALL_OLD" else None,
            "old_bytes": old_bytes,
            "new_bytes": new_bytes,
        }

    def update(self, body: dict[str, Any]) -> dict[str, Any]:
        partition = self._writable(body)
        key = partition.key_of(body["key"])
        update: expressions.Update | None = None
        if body.get("update") is not None:
            update = expressions.update(body["update"], body.get("names"), body.get("values"))
            for name in (partition.hash_name, partition.range_name):
                if name in update.top_level_attributes:
                    raise ValidationError(
                        INVALID_PARAMETERS
                        + f"Cannot update attribute {name}. This attribute is part of the key"
                    )
        items_key = partition.item_prefix + partition.storage_key(key)
        old = self._load(items_key)
        old_bytes = self._measure_old(old)
        self._check_condition(body, old)
        # UpdateItem on a missing item creates it from its key, then applies the update.
        base = dict(key) if old is None else old
        new = base if update is None else update.apply(base)
        new_bytes = item_size_bytes(new)
        if new_bytes > limits.ITEM_SIZE_BYTES_MAX:
            raise ValidationError("Item size to update has exceeded the maximum allowed size")
        self.units = item_write_units(old_bytes, new_bytes)
        self._record(partition, items_key, key, old, new, old_bytes, new_bytes)
        return {
            "attributes": _update_return_values(body.get("return_values"), update, old, new),
            "old_bytes": old_bytes,
            "new_bytes": new_bytes,
        }

    def delete(self, body: dict[str, Any]) -> dict[str, Any]:
        partition = self._writable(body)
        key = partition.key_of(body["key"])
        items_key = partition.item_prefix + partition.storage_key(key)
        old = self._load(items_key)
        old_bytes = self._measure_old(old)
        self._check_condition(body, old)
        self._record(partition, items_key, key, old, None, old_bytes, 0)
        return {
            "attributes": old if body.get("return_values") == "ALL_OLD" else None,
            "old_bytes": old_bytes,
            "new_bytes": 0,
        }

    def catalog_cas(self, body: dict[str, Any]) -> dict[str, Any]:
        raw = self.txn.get(CATALOG_KEY, db=self.store.catalog)
        version = 0 if raw is None else orjson.loads(raw)["version"]
        expected = body["expected_version"]
        if expected != version:
            raise ConditionalCheckFailed(f"The catalog is at version {version}, not {expected}")
        document = {"version": version + 1, "tables": body["tables"]}
        self.txn.put(CATALOG_KEY, orjson.dumps(document), db=self.store.catalog)
        return {"version": version + 1}

    def create_partition(self, body: dict[str, Any]) -> dict[str, Any]:
        created = Partition.create(body["table"], body["partition"], body.get("throughput"))
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
        self.dirty[key] = created
        return {}

    def update_throughput(self, body: dict[str, Any]) -> dict[str, Any]:
        """New throughput settings for every partition of a table on this node (UpdateTable)."""
        table_id, throughput = body["table_id"], body["throughput"]
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

    def drop_table(self, body: dict[str, Any]) -> dict[str, Any]:
        table_id = body["table_id"]
        prefix = table_prefix(table_id)
        keys = {key for key in (*self.node.partitions, *self.dirty) if key[0] == table_id}
        dropped = 0
        for key in keys:
            partition = self._lookup(key)
            if partition is None:
                continue
            log = partition.log_prefix
            self.store.delete_range(self.txn, self.store.changelog, log, successor(log))
            self.dirty[key] = None
            dropped += 1
        self.store.delete_range(self.txn, self.store.items, prefix, successor(prefix))
        return {"partitions_dropped": dropped}

    def finish(self) -> None:
        """Persist the touched partitions' metadata and trim their change logs to the bound."""
        for (table_id, partition_id), partition in self.dirty.items():
            meta_key = partition_meta_key(table_id, partition_id)
            if partition is None:
                self.txn.delete(meta_key, db=self.store.partitions)
                continue
            excess = partition.last_seq - partition.first_seq + 1 - self.node.change_log_records_max
            if excess > 0:
                log = partition.log_prefix
                self.store.delete_range(
                    self.txn,
                    self.store.changelog,
                    log + _seq_bytes(partition.first_seq),
                    log + _seq_bytes(partition.first_seq + excess),
                )
                partition.first_seq += excess
            self.txn.put(meta_key, partition.to_meta(), db=self.store.partitions)


def _sort_key_matcher(
    condition: expressions.RangeCondition, range_name: str
) -> Callable[[Item], bool]:
    def matches(item: Item) -> bool:
        return condition.matches(item[range_name])

    return matches


def _update_return_values(
    return_values: str | None, update: expressions.Update | None, old: Item | None, new: Item
) -> Item | None:
    """UpdateItem's Attributes for its ReturnValues; None when there is nothing to return."""
    return_values = return_values or "NONE"
    if update is not None:
        return update.returned_attributes(old, new, return_values)
    # Without an UpdateExpression nothing is updated: only the whole images can be returned.
    return {"ALL_OLD": old, "ALL_NEW": new}.get(return_values)
