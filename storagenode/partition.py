"""A partition replica's metadata and the pure rules of its keys, epochs, bounds and pages.

Nothing here touches the store or the network: a `Partition` knows its table's key shape
(`core.keys.KeyShape`), its key range and epoch, and turns a key into its storage key;
`query_bounds`/`scan_bounds` turn a request into the tightest storage-key range to walk;
`read_page` turns a walk into a Query/Scan reply with DynamoDB's paging rules. `node.py` feeds
them the store's iterators.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from core import expressions, limits, planted
from core.catalog import IndexDef
from core.errors import StaleEpoch
from core.indexes import entry_shape
from core.keycodec import HASH_BYTES, HASH_SPACE, encode_key_prefix, successor
from core.keys import KeyShape
from core.values import AttributeValue, Item
from rpc.ops import PagePayload
from storagenode.layout import (
    change_log_prefix,
    index_prefix,
    item_json_of,
    item_size_of,
    table_prefix,
)

# Range-condition operators whose first value is a lower bound on the sort key.
_LOWER_BOUNDED = frozenset({"=", ">=", ">", "BETWEEN"})


class GlobalIndexCache:
    """The global indexes routers last named in writes to each table, parsed once.

    Every put, update and delete payload names the table's global indexes as the router's
    catalog has them (`rpc.ops.UpdatePayload.global_indexes`); parsing them into `IndexDef`s on
    every write cost tens of microseconds per index. The cache keeps, per table, the encoded list
    and its parse: a write naming the same indexes (every write until an UpdateTable changes
    them) gets the same `IndexDef`s back, and one naming others (an index added, deleted or made
    ACTIVE) replaces the entry, so the check of a new index's key schema is never skipped. At most
    `NODE_INDEX_CACHE_TABLES_MAX` tables; past that it starts empty again.
    """

    def __init__(self) -> None:
        self._by_table: dict[str, tuple[bytes, tuple[IndexDef, ...]]] = {}

    def parsed(self, table_id: str, named: Iterable[dict[str, Any]]) -> tuple[IndexDef, ...]:
        named = list(named)
        encoded = orjson.dumps(named)
        cached = self._by_table.get(table_id)
        if cached is not None and cached[0] == encoded:
            return cached[1]
        indexes = tuple(IndexDef.from_json(index) for index in named)
        if len(self._by_table) >= limits.NODE_INDEX_CACHE_TABLES_MAX:
            self._by_table.clear()
        self._by_table[table_id] = (encoded, indexes)
        return indexes


# One per process: entries are keyed by what the router sent, so nodes sharing a process (the
# simulations) share them safely.
GLOBAL_INDEXES = GlobalIndexCache()


@dataclass(slots=True)
class Partition:
    """One partition replica's metadata, as persisted in the `partitions` column family."""

    table_id: str
    table_name: str
    partition_id: str
    start: bytes  # Inclusive lower bound on storage keys.
    end: bytes | None  # Exclusive upper bound; None is unbounded.
    epoch: int
    key_shape: KeyShape
    item_count: int = 0
    size_bytes: int = 0
    last_seq: int = 0  # The seq of the newest change-log record; 0 before the first write.
    first_seq: int = 1  # The seq of the oldest change-log record still retained.
    log_bytes: int = 0  # The bytes of the retained change-log records (first_seq to last_seq).
    # The table's throughput settings its token buckets follow (`rpc.ops` THROUGHPUT);
    # None for a partition created without them, which is metered as on-demand.
    throughput: dict[str, Any] | None = None
    # The table's TTL setting (`rpc.ops` TTL: attribute, enabled, version); None: never set.
    ttl: dict[str, Any] | None = None
    # Where indexing the items that were here when TTL was enabled resumes (a storage key, hex);
    # None once every item is indexed (`expiry.py`).
    ttl_backfill: str | None = None
    ttl_deleted: int = 0  # Items the TTL sweeper deleted, committed with the deletes.
    # The table's secondary indexes, local and global, as CreateTable defined them: every write
    # is checked against their key types, and the local ones are maintained here.
    indexes: tuple[IndexDef, ...] = ()
    # Per local index: [entries, bytes] of this partition (bytes with each entry's overhead).
    index_stats: dict[str, list[int]] = field(default_factory=dict)
    # A move (`storagenode/move.py`): on the source, the node it is fenced for (clients are
    # refused); on the target, the node its INCOMING copy comes from (clients are refused).
    moving_to: str | None = None
    incoming_from: str | None = None
    # On a move's source, the move machine's record (`core.machines.move.MoveRecord` as JSON),
    # from before its first effect until it has ended: what a restart drives on.
    move: dict[str, Any] | None = None
    # On a splitting partition, the split machine's record (`core.machines.split.SplitRecord` as
    # JSON), from before its first effect until it has ended: what a restart drives on.
    split: dict[str, Any] | None = None
    # The nodes holding a replica of this partition, this one among them, each a member of its
    # Raft group (`storagenode/replication.py`); empty: this node's copy alone.
    replicas: tuple[str, ...] = ()
    item_prefix: bytes = field(init=False, repr=False)
    log_prefix: bytes = field(init=False, repr=False)
    local_indexes: tuple[IndexDef, ...] = field(init=False, repr=False)
    global_indexes: tuple[IndexDef, ...] = field(init=False, repr=False)
    # Per local index: its `index_entries` key prefix and the key shape of its entries.
    index_layout: dict[str, tuple[bytes, KeyShape]] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.item_prefix = table_prefix(self.table_id)
        self.log_prefix = change_log_prefix(self.table_id, self.partition_id)
        self.local_indexes = tuple(index for index in self.indexes if index.local)
        self.global_indexes = tuple(index for index in self.indexes if not index.local)
        self.index_layout = {
            index.name: (
                index_prefix(self.table_id, index.name),
                entry_shape(index, self.key_shape),
            )
            for index in self.local_indexes
        }

    def staged(self) -> Partition:
        """A shallow copy for a write group to change (`StorageNode.dirty`): the same fields,
        the derived ones copied rather than worked out again, as `dataclasses.replace` would."""
        copy = object.__new__(Partition)
        for name in Partition.__slots__:
            setattr(copy, name, getattr(self, name))
        return copy

    def collection_key(self, partition_value: AttributeValue) -> bytes:
        """The `item_collections` key of one partition key value's collection."""
        return self.item_prefix + self.key_shape.storage_key_of([partition_value])

    @classmethod
    def create(
        cls,
        table: dict[str, Any],
        partition: dict[str, Any],
        throughput: dict[str, Any] | None = None,
    ) -> Partition:
        """A new, empty partition from create_partition's `table`, `partition` and `throughput`."""
        end = partition.get("end")
        return cls(
            table_id=table["id"],
            table_name=table["name"],
            partition_id=partition["id"],
            start=bytes.fromhex(partition["start"]),
            end=None if end is None else bytes.fromhex(end),
            epoch=int(partition["epoch"]),
            key_shape=shape_from_document(table["key_schema"]),
            throughput=throughput,
            indexes=tuple(IndexDef.from_json(index) for index in table.get("indexes", ())),
            replicas=tuple(partition.get("replicas") or ()),
        )

    @classmethod
    def from_meta(cls, meta: dict[str, Any]) -> Partition:
        fields = dict(meta)
        key_schema = fields.pop("key_schema")
        return cls(
            **{
                **fields,
                "start": bytes.fromhex(meta["start"]),
                "end": None if meta["end"] is None else bytes.fromhex(meta["end"]),
                "key_shape": shape_from_document(key_schema),
                "indexes": tuple(IndexDef.from_json(index) for index in meta.get("indexes", ())),
                "index_stats": dict(meta.get("index_stats", {})),
                "replicas": tuple(meta.get("replicas") or ()),
            }
        )

    def to_meta(self) -> bytes:
        return orjson.dumps(
            {
                "table_id": self.table_id,
                "table_name": self.table_name,
                "partition_id": self.partition_id,
                "start": self.start.hex(),
                "end": None if self.end is None else self.end.hex(),
                "epoch": self.epoch,
                "key_schema": shape_document(self.key_shape),
                "item_count": self.item_count,
                "size_bytes": self.size_bytes,
                "last_seq": self.last_seq,
                "first_seq": self.first_seq,
                "log_bytes": self.log_bytes,
                "throughput": self.throughput,
                "ttl": self.ttl,
                "ttl_backfill": self.ttl_backfill,
                "ttl_deleted": self.ttl_deleted,
                "indexes": [index.to_json() for index in self.indexes],
                "index_stats": self.index_stats,
                "moving_to": self.moving_to,
                "incoming_from": self.incoming_from,
                "move": self.move,
                "split": self.split,
                **({"replicas": list(self.replicas)} if self.replicas else {}),
            }
        )

    @property
    def ttl_attribute(self) -> str | None:
        """The attribute TTL indexes and sweeps on this partition; None while TTL is off."""
        ttl = self.ttl
        return ttl["attribute"] if ttl is not None and ttl["enabled"] else None

    @property
    def serving(self) -> bool:
        """Whether it takes client requests and the node's own writes (not moving, not
        incoming)."""
        return self.moving_to is None and self.incoming_from is None

    def same_definition(self, other: Partition) -> bool:
        """Whether `other` describes this same partition (create_partition's idempotence)."""
        return (
            self.epoch == other.epoch
            and self.start == other.start
            and self.end == other.end
            and self.key_shape == other.key_shape
            and self.indexes == other.indexes
        )

    def check_epoch(self, epoch: int) -> None:
        """Refuse a request made with another epoch's partition map.

        An older epoch means the caller's map is stale (a split or move happened); a newer one
        means this replica is behind the map. Either way the caller must refresh and retry.
        """
        if epoch != self.epoch:
            raise StaleEpoch(
                f"Partition {self.partition_id} is at epoch {self.epoch}, the request at {epoch}"
            )
        # A partition being moved refuses before anything is planned, so a refused write was
        # not applied and its retry (on the catalog's next epoch) applies it once.
        if self.moving_to is not None and not planted.on("lost-in-a-move"):
            raise StaleEpoch(f"Partition {self.partition_id} is moving to {self.moving_to}")
        if self.incoming_from is not None:
            raise StaleEpoch(
                f"Partition {self.partition_id} is being moved here from {self.incoming_from}"
            )

    def named_global_indexes(
        self, global_indexes: Iterable[dict[str, Any]] | None
    ) -> tuple[IndexDef, ...]:
        """The global indexes a write is checked, charged and held back for: those a router named
        (`rpc.ops.UpdatePayload`: its catalog's, so those added or deleted since the partition
        was created too), else this partition's own (None: a sender that names none)."""
        if global_indexes is None:
            return self.global_indexes
        return GLOBAL_INDEXES.parsed(self.table_id, global_indexes)

    def key_checked_indexes(
        self, global_indexes: Iterable[dict[str, Any]] | None
    ) -> tuple[IndexDef, ...]:
        """The indexes whose key attribute types a written item must match: this partition's
        local indexes and the global ones `named_global_indexes` gives."""
        return (*self.local_indexes, *self.named_global_indexes(global_indexes))

    def storage_key(self, key: Item) -> bytes:
        """The storage key of an item's key, which must fall in this partition's range."""
        encoded = self.key_shape.storage_key(key)
        if not self.holds(encoded):
            raise StaleEpoch(f"The key is outside partition {self.partition_id} at its epoch")
        return encoded

    def holds(self, storage_key: bytes) -> bool:
        """Whether a storage key falls in this partition's range."""
        return self.start <= storage_key and (self.end is None or storage_key < self.end)

    def clamp(self, lo: bytes, hi: bytes | None) -> tuple[bytes, bytes | None]:
        """The intersection of [lo, hi) with this partition's range."""
        return max(lo, self.start), _min_end(hi, self.end)


def shape_from_document(document: Any) -> KeyShape:
    """A partition's key shape from create_partition's `key_schema`: a table's
    `{"hash", "range"}`, or `KeyShape.to_document`'s form of any key shape (a global index
    entry's key: the index key, then the table key attributes not already in it)."""
    if isinstance(document, list) or "attributes" in document:
        return KeyShape.from_document(document)
    return KeyShape.from_key_schema(document)


def shape_document(shape: KeyShape) -> list[list[str]] | dict[str, Any]:
    """The JSON form of a key shape, as partition metadata keeps it (`shape_from_document`)."""
    return shape.to_document()


def _min_end(a: bytes | None, b: bytes | None) -> bytes | None:
    if a is None:
        return b
    if b is None:
        return a
    return min(a, b)


def _just_after(key: bytes) -> bytes:
    """The smallest byte string greater than `key`: an exclusive bound just past it."""
    return key + b"\x00"


def _start_key(partition: Partition, shape: KeyShape, exclusive_start: Item) -> bytes:
    """The storage key of an ExclusiveStartKey of the table's or an index's `shape`, which must
    fall in this partition's range."""
    encoded = shape.storage_key(shape.check_key(exclusive_start))
    if not partition.holds(encoded):
        raise StaleEpoch(f"The key is outside partition {partition.partition_id} at its epoch")
    return encoded


def query_bounds(
    partition: Partition,
    hash_value: AttributeValue,
    range_condition: dict[str, Any] | None,
    exclusive_start: Item | None,
    *,
    forward: bool,
    shape: KeyShape | None = None,
    fixed: Sequence[AttributeValue] = (),
) -> tuple[bytes, bytes | None]:
    """The tightest storage-key range [lo, hi) that holds a Query's items on this partition.

    The item collection of one partition key is a contiguous run of storage keys (the encoded
    partition key is a prefix of each), and a sort-key condition narrows it further because the sort
    key is encoded order-preservingly. The condition itself is still checked on every item read.
    `shape` is a local index's entry shape when the Query reads that index. `fixed` are the values
    of the key attributes after the first that the Query fixes by equality (a multi-attribute
    global index key's): they are part of the prefix, and the condition applies to the next one.
    """
    shape = partition.key_shape if shape is None else shape
    equal = [hash_value, *fixed]
    collection = shape.storage_key_of(equal)
    lo: bytes = collection
    hi = successor(collection)
    if range_condition is not None:
        op, values = range_condition["op"], range_condition["values"]
        if op == "begins_with":
            # Every sort key that begins with the value encodes to bytes that begin with this.
            lo = collection + encode_key_prefix(values[0])
            hi = successor(lo)
        elif op in _LOWER_BOUNDED:
            lo = shape.storage_key_of([*equal, values[0]])
        if op == "<":
            hi = shape.storage_key_of([*equal, values[0]])
        elif op in ("=", "<=", "BETWEEN"):
            # Every key whose sort key equals the bound starts with these bytes: an index entry's
            # key goes on with the table key after them (the encoding is self-delimiting).
            hi = successor(shape.storage_key_of([*equal, values[-1]]))
    if exclusive_start is not None:
        start_key = _start_key(partition, shape, exclusive_start)
        if forward:
            lo = max(lo, _just_after(start_key))
        else:
            hi = _min_end(hi, start_key)
    return partition.clamp(lo, hi)


def scan_bounds(
    partition: Partition,
    exclusive_start: Item | None,
    hash_start: int | None,
    hash_end: int | None,
    shape: KeyShape | None = None,
) -> tuple[bytes, bytes | None]:
    """The storage-key range [lo, hi) a Scan walks: the partition, cut to [hash_start, hash_end).

    `shape` is a local index's entry shape when the Scan reads that index."""
    lo = b"" if hash_start is None else hash_start.to_bytes(HASH_BYTES, "big")
    hi = None
    if hash_end is not None and hash_end < HASH_SPACE:
        hi = hash_end.to_bytes(HASH_BYTES, "big")
    if exclusive_start is not None:
        start_key = _start_key(
            partition, partition.key_shape if shape is None else shape, exclusive_start
        )
        lo = max(lo, _just_after(start_key))
    return partition.clamp(lo, hi)


@dataclass(slots=True)
class PageRequest:
    """The paging and shaping parameters shared by query and scan payloads."""

    limit: int | None
    page_bytes: int
    filter: expressions.Condition | None
    projection: expressions.Projection | None
    count_only: bool

    @classmethod
    def of(cls, payload: PagePayload, page_bytes_max: int) -> PageRequest:
        """The page a query or scan payload asks for, its byte bound at most `page_bytes_max`,
        its filter and projection compiled."""
        names, values = payload.names, payload.values
        filter_text, projection_text = payload.filter, payload.projection
        return cls(
            limit=payload.limit,
            page_bytes=min(int(payload.page_bytes or page_bytes_max), page_bytes_max),
            filter=None
            if filter_text is None
            else expressions.condition(filter_text, names, values, kind="FilterExpression"),
            projection=None
            if projection_text is None
            else expressions.projection(projection_text, names),
            count_only=payload.select == "COUNT",
        )


def read_page(
    rows: Iterable[tuple[bytes, bytes]],
    request: PageRequest,
    partition: Partition,
    key_matches: Callable[[Item], bool] | None = None,
    *,
    shape: KeyShape | None = None,
    fetch: Callable[[Item], tuple[Item | None, int]] | None = None,
) -> dict[str, Any]:
    """A Query/Scan reply from rows in walk order, following DynamoDB's paging rules.

    `limit` counts items read and `page_bytes` measures them before the filter ("Query and Scan read
    at most 1 MB"); the item that reaches the byte bound is still returned, so every page makes
    progress. `key_matches` is the sort-key condition: the rows that satisfy it are contiguous, so
    the first failure after a match ends the walk. `last_key` is set whenever a bound stopped the
    page, without looking ahead: like DynamoDB, a page that ends on the last item at its limit
    still names it, and the next page is empty.

    Rows of a local index are its entries, keyed by `shape`. `fetch` gives an entry's item from
    the table and its size, or None when the item no longer has that entry (it changed after the
    walk's view was taken; the entry is then skipped, as the index now lacks it too); each fetched
    item counts rounded up to 4 KB on top of its entry (seed 000 L-34).
    """
    shape = partition.key_shape if shape is None else shape
    items: list[Item] = []
    count = scanned = read_bytes = fetched_bytes = 0
    matched = False
    last_key = None
    # A page that only counts, with no condition to evaluate, never needs an item decoded.
    decode = (
        not request.count_only
        or request.filter is not None
        or key_matches is not None
        or fetch is not None
    )
    for _, value in rows:
        row: Item | None = orjson.loads(item_json_of(value)) if decode else None
        if key_matches is not None:
            assert row is not None  # decode is set whenever there is a key condition
            if not key_matches(row):
                if matched:
                    break
                continue
        matched = True
        item = row
        row_bytes = item_size_of(value)
        if fetch is not None:
            assert row is not None
            item, item_bytes = fetch(row)
            if item is None:
                continue
            rounded = -(-item_bytes // limits.READ_UNIT_BYTES) * limits.READ_UNIT_BYTES
            fetched_bytes += rounded
            row_bytes += rounded
        scanned += 1
        read_bytes += row_bytes
        if request.filter is None or request.filter.evaluate(item):
            count += 1
            if not request.count_only:
                assert item is not None  # decode is set whenever items are returned
                items.append(item if request.projection is None else request.projection.apply(item))
        if (request.limit is not None and scanned >= request.limit) or (
            read_bytes >= request.page_bytes
        ):
            stored = orjson.loads(item_json_of(value)) if row is None else row
            last_key = shape.key_of(stored)
            break
    reply: dict[str, Any] = {
        "items": items,
        "count": count,
        "scanned": scanned,
        "last_key": last_key,
        "read_bytes": read_bytes,
    }
    if fetch is not None:
        reply["fetched_bytes"] = fetched_bytes
    return reply
