"""The handlers of a node's reads: items, queries and scans, and the node's statistics.

A read runs on the event loop against the committed state of the store (`StorageNode.read`
admits and charges it), never inside a write group: it sees what the last commit installed.
Each handler reads the node through `storagenode.writes.NodeState`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import orjson

from core import expressions, limits
from core.errors import ValidationError
from core.indexes import index_entry
from core.keycodec import successor
from core.keys import KeyShape
from core.values import Item
from rpc import ops
from rpc.ops import Target
from rpc.transactions import TxnGetPayload
from storagenode import move
from storagenode import transactions as txn
from storagenode.layout import Family, item_json_of, item_size_of
from storagenode.partition import PageRequest, Partition, query_bounds, read_page, scan_bounds
from storagenode.store import NodeStore
from storagenode.writes import NodeState, addressed


def _partition(node: NodeState, target: Target | None) -> Partition:
    assert target is not None, "a data-plane request names its partition"
    return addressed(node.partitions.get((target.table_id, target.partition_id)), target)


def get(node: NodeState, target: Target | None, payload: ops.GetPayload) -> dict[str, Any]:
    partition = _partition(node, target)
    storage_key = partition.storage_key(partition.key_shape.check_key(payload.key))
    raw = node.store.get(Family.ITEMS, partition.item_prefix + storage_key)
    if raw is None:
        return {"item": None, "read_bytes": 0}
    item = orjson.loads(item_json_of(raw))
    read_bytes = item_size_of(raw)
    if payload.projection is not None:
        item = expressions.projection(payload.projection, payload.names).apply(item)
    return {"item": item, "read_bytes": read_bytes}


def query(node: NodeState, target: Target | None, payload: ops.QueryPayload) -> dict[str, Any]:
    partition = _partition(node, target)
    source = _Source.of(node.store, partition, payload.index, payload.fetch)
    shape = source.shape
    hash_value = payload.hash_value
    forward = payload.forward
    range_condition = payload.range
    fixed = payload.fixed
    equal = [hash_value, *fixed]
    if not shape.hashed <= len(equal) < len(shape.attributes) + (range_condition is None):
        raise ValidationError("Query key condition not supported: it does not fit the key")
    # The key attribute the range condition applies to: the sort key, or on a multi-attribute
    # global index key the one after those the Query fixes.
    sort = shape.attributes[len(equal)] if len(equal) < len(shape.attributes) else None
    if range_condition is not None and (sort is None or sort.role != "sort"):
        raise ValidationError("Query key condition not supported: the table has no sort key")
    start = payload.exclusive_start
    if start is not None and any(
        start.get(attribute.name) != value
        for attribute, value in zip(shape.attributes, equal, strict=False)
    ):
        raise ValidationError("The provided starting key is invalid: it is not in the query")
    lo, hi = query_bounds(
        partition, hash_value, range_condition, start, forward=forward, shape=shape, fixed=fixed
    )
    key_matches = None
    if range_condition is not None:
        assert sort is not None
        key_matches = _sort_key_matcher(
            expressions.RangeCondition(range_condition["op"], range_condition["values"]),
            sort.name,
        )
    rows = node.store.walk(source.family, *source.range(lo, hi), forward=forward)
    page = PageRequest.of(payload, limits.QUERY_PAGE_BYTES_MAX)
    return read_page(rows, page, partition, key_matches, shape=shape, fetch=source.fetch)


def scan(node: NodeState, target: Target | None, payload: ops.ScanPayload) -> dict[str, Any]:
    partition = _partition(node, target)
    source = _Source.of(node.store, partition, payload.index, payload.fetch)
    lo, hi = scan_bounds(
        partition, payload.exclusive_start, payload.hash_start, payload.hash_end, source.shape
    )
    rows = node.store.walk(source.family, *source.range(lo, hi), forward=True)
    page = PageRequest.of(payload, limits.QUERY_PAGE_BYTES_MAX)
    return read_page(rows, page, partition, shape=source.shape, fetch=source.fetch)


def table_stats(
    node: NodeState, target: Target | None, payload: ops.TableStatsPayload
) -> dict[str, Any]:
    table_id = payload.table_id
    partitions = {}
    feeds = node.feeds
    for partition in list(node.partitions.values()):
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


def partition_throughput(
    node: NodeState, target: Target | None, payload: ops.PartitionThroughputPayload
) -> dict[str, Any]:
    replicas, raft = node.raft_report(payload.table_id)
    return {
        **node.throughput.report(payload.table_id),
        "splits": node.split_stats.to_json(),
        "moves": node.move_stats.to_json(),
        "moving": move.moving(node, payload.table_id),
        "replicas": replicas,
        "raft": raft,
    }


def txn_get(node: NodeState, target: Target | None, payload: TxnGetPayload) -> dict[str, Any]:
    partition = _partition(node, target)
    ref = (partition.table_id, partition.partition_id)

    def last_seq_now() -> int:
        current = node.partitions.get(ref)
        return partition.last_seq if current is None else current.last_seq

    return txn.get(node.store, partition, payload, node.admit_transaction_read, last_seq_now)


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
