"""The contract between routers and storage nodes: every operation a node serves, and one typed
payload per operation.

A request is a protobuf `Request` whose envelope (`Target`: the partition, its epoch, whether a
read is strongly consistent) a node checks before it decodes the body (ARCHITECTURE.md, "The RPC
contract"). The body is the operation's payload as a JSON object (orjson): each payload class
below documents its fields and its reply, and `from_json`/`to_json` are its only reading and
writing, so the field names on the wire are the attribute names. A node decodes a body once into
its class; a router builds the class and sends `to_json()`. The payloads are plain slotted
dataclasses, not frozen: one is built per request on both sides of the hop, and a frozen one costs
about four times as much to build (2.1 against 0.5 us for a put). Nothing changes a payload after
it is built, except a router's Query or Scan walk moving its own payload's cursor between pages.

Items, keys and attribute values inside payloads stay DynamoDB JSON (`{"pk": {"S": "a"}}`), already
validated and normalised by the router with `core.values`, so a node never re-validates values and
forwards them unchanged; it does evaluate expressions itself (atomically with a write).
Expressions travel as text with their ExpressionAttributeNames (`names`) and
ExpressionAttributeValues (`values`); both sides parse them through the core's cache. Legacy
parameters (Expected, AttributeUpdates, QueryFilter, ...) are translated to expressions by the
router, so nodes only ever see expressions. An optional field that is absent reads as its default,
so a body that omits it and one that sends null mean the same.

Errors travel as `core.errors` type names (see `rpc.codec`); a request for a partition the node
does not hold, or at another epoch, is refused with `StaleEpoch`, upon which the router refreshes
its map and retries.

Capacity: nodes report sizes (`read_bytes`, `old_bytes`, `new_bytes`); the router turns them into
the ConsumedCapacity a client asked for with `core.capacity`. The node meters the same sizes with
the same functions against the partition's token buckets (`storagenode.throughput`): a read is
admitted on its minimum cost (the envelope's `consistent` says which: eventually consistent reads
cost half) and charged its real cost once read; a write is admitted on an estimate (put:
`item_bytes`, else one unit) before it is applied and charged the larger of its old and new size
once applied, a failed condition the size of the existing item. Any data-plane operation may fail
with ProvisionedThroughputExceededException when the partition's bucket is empty; nothing was read
or written then, and the client may retry.

## Table descriptor (`core.catalog.TableDef.to_json()`; nodes receive the parts they need)

    {"name": str, "id": str (32 hex chars, new for every CreateTable),
     "status": "CREATING" | "ACTIVE" | "UPDATING" | "DELETING",
     "key_schema": {"hash": [name, "S"|"N"|"B"], "range": [name, type] | null},
     "attribute_definitions": [{"AttributeName": .., "AttributeType": ..}],   # wire form
     "billing_mode": "PROVISIONED" | "PAY_PER_REQUEST",
     "throughput": {"read": int, "write": int},        # zeros for PAY_PER_REQUEST
     "throughput_version": int,      # absent: 0; +1 for every UpdateTable of throughput or billing
     "throughput_changes": {"last_increase": float | null, "last_decrease": float | null,
                            "decreases_day": "YYYY-MM-DD" | null, "decreases": int,
                            "pay_per_request_since": float | null},   # absent: nothing changed
     "created": float (epoch seconds),
     "partitions": [PARTITION, ...],                    # the serving ones, sorted by start
     "retired_partitions": [PARTITION, ...],  # split parents some serving partition still names
     "indexes": [INDEX, ...], "ttl": {"attribute": str, "enabled": bool, "settled": bool,
                                       "changed": float | null, "version": int} | null,
     "version": int}                 # the version of the table's catalog row (see below)

Status UPDATING means an UpdateTable changed the throughput in the catalog and not every node has
confirmed it yet (see update_throughput, which a router sends again until every node has); the
table serves reads and writes meanwhile. The allowed status changes are `core.catalog`'s tables.

    PARTITION = {"id": str, "start": hex str, "end": hex str | null, "epoch": int, "node": node id,
                 "state": "SERVING" | "RETIRED", "parent": partition id | null,
                 "share": "n/d" (its fraction of the table's throughput)}
    INDEX = {"name", "key": [[name, type, "partition"|"sort"], ...],
             "projection": "ALL"|"KEYS_ONLY"|"INCLUDE", "non_key_attributes": [str],
             "status": "CREATING"|"BACKFILLING"|"ACTIVE"|"DELETING", "local": bool,
             # A global index only: its storage id, its partitions and its throughput.
             "table_id": str, "partitions": [PARTITION, ...], "throughput": {"read", "write"}}

A partition covers encoded storage keys k with bytes.fromhex(start) <= k < bytes.fromhex(end)
(end null: no upper bound), where k = core.keycodec.encode_storage_key(...) and starts with the
8-byte big-endian hash64 of the partition key. Initially ranges split the hash space evenly. A node
reads only id, start, end and epoch of the PARTITION it is sent.

## The catalog: an ordinary system table, found through a bootstrap record

The catalog is the system table `__dynalab_catalog` (id `core.catalog.CATALOG_TABLE_ID`, key
`name` S, one partition on one node, created without throughput so it is never throttled): one
item per table, `{"name": S, "version": N, "table": S (the descriptor above as JSON)}`. It is read
with `scan` (paged over `last_key`) and `get`, and changed only with the data-plane `put` and
`delete` under a condition: `attribute_not_exists(#n)` to create a row, `#v = :expected` (the row's
version) to replace or remove it, each write raising the version by one. A router, a node or the
replicator changing different tables therefore never contend.

Where it lives is recorded in the system table `__dynalab_bootstrap` (id
`core.catalog.BOOTSTRAP_TABLE_ID`), whose one partition every node holds: the item
`{"name": "catalog", "catalog_node": node id, "catalog_address": its address,
"catalog_partition": partition id}`, written with `attribute_not_exists(#n)` so the first writer
wins (see `router.context.locate_catalog`).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Self

from core.errors import ERROR_TYPES, DynamoError, InternalServerError, ValidationError


@dataclasses.dataclass(frozen=True, slots=True)
class Target:
    """Where a data-plane or change-feed request goes: the envelope fields of `node.proto`.

    A node checks them before it decodes the payload, so a request addressed to a partition it
    does not hold, or at another epoch, is refused with StaleEpoch without reading its body.
    `consistent` says a read is strongly consistent (it is metered at twice the cost); a write
    leaves it false. Change-feed requests carry no epoch (0): they name a partition live or
    retired-and-kept, whatever its epoch.

    `deadline` is the Unix time after which the node must not start the request (0: none). The
    transport sets it from the caller's timeout, so that a request a node reads late (it was
    paused, or the network held the request) is refused rather than applied after its caller was
    told it failed.
    """

    table_id: str
    partition_id: str
    epoch: int = 0
    consistent: bool = False
    deadline: float = 0.0


# The ring key under which earlier versions placed the catalog document; a new cluster still
# places its catalog partition on its owner (`core.catalog.CATALOG_PLACEMENT_KEY`).
CATALOG_PARTITION_ID = "catalog"

# Control-plane operations (unary Call).
CREATE_PARTITION = "create_partition"
DROP_TABLE = "drop_table"
RETIRE_PARTITION = "retire_partition"
TABLE_STATS = "table_stats"
UPDATE_THROUGHPUT = "update_throughput"
UPDATE_TTL = "update_ttl"
PARTITION_THROUGHPUT = "partition_throughput"
SPLIT_PARTITION = "split_partition"
MOVE_PARTITION = "move_partition"
MOVE_RECEIVE = "move_receive"
INDEX_PRESSURE = "index_pressure"
# Between storage nodes: a page of a partition replica's state, for a member copying it; a
# replicated partition's group membership, read or changed at its leader; and a replica dropped
# once its node is no longer a member (a replica move's).
RAFT_SNAPSHOT_READ = "raft_snapshot_read"
RAFT_MEMBERSHIP = "raft_membership"
DROP_REPLICA = "drop_replica"

# Change-feed consumers (the ChangeFeed service, or unary Call).
REGISTER_CONSUMER = "register_consumer"
CHECKPOINT = "checkpoint"
UNREGISTER_CONSUMER = "unregister_consumer"

# Data-plane operations (streamed Exchange).
GET = "get"
PUT = "put"
UPDATE = "update"
DELETE = "delete"
QUERY = "query"
SCAN = "scan"
INDEX_APPLY = "index_apply"
# Transactions (`rpc/transactions.py`): data-plane ops addressed to a partition...
TXN_RECORD = "txn_record"
TXN_PREPARE = "txn_prepare"
TXN_GET = "txn_get"
# ...and control-plane ops addressed to a node (or, for a replicated partition, to it:
# `ADDRESSABLE_CONTROL_OPS`).
TXN_APPLY = "txn_apply"
TXN_SWEEP = "txn_sweep"

CONTROL_OPS = frozenset(
    {
        CREATE_PARTITION,
        DROP_TABLE,
        RETIRE_PARTITION,
        TABLE_STATS,
        UPDATE_THROUGHPUT,
        UPDATE_TTL,
        PARTITION_THROUGHPUT,
        SPLIT_PARTITION,
        MOVE_PARTITION,
        MOVE_RECEIVE,
        INDEX_PRESSURE,
        RAFT_SNAPSHOT_READ,
        RAFT_MEMBERSHIP,
        DROP_REPLICA,
        TXN_APPLY,
        TXN_SWEEP,
    }
)
DATA_OPS = frozenset(
    {GET, PUT, UPDATE, DELETE, QUERY, SCAN, INDEX_APPLY, TXN_RECORD, TXN_PREPARE, TXN_GET}
)
# The item writes of clients: one sent and not answered may or may not have been applied. (An
# index_apply is idempotent; its sender retries it as unavailable.) A transaction's record and
# prepare are such writes too: their coordinator must know it does not know.
ITEM_WRITE_OPS = frozenset({PUT, UPDATE, DELETE, TXN_RECORD, TXN_PREPARE})
FEED_OPS = frozenset({REGISTER_CONSUMER, CHECKPOINT, UNREGISTER_CONSUMER})
# Control-plane writes that may also be addressed to one partition on the data plane (the
# envelope names it): then they change that partition alone, through its Raft group at its
# leader, as a replicated partition's settings and transaction state must change.
ADDRESSABLE_CONTROL_OPS = frozenset(
    {UPDATE_THROUGHPUT, UPDATE_TTL, TXN_APPLY, TXN_SWEEP, RAFT_MEMBERSHIP}
)


# Payloads ---------------------------------------------------------------------------------------
#
# DynamoDB JSON, as the router validated it: an item, a key (an item holding only the key
# attributes) or one attribute value.
Item = dict[str, Any]
AttributeValue = dict[str, Any]
# ExpressionAttributeNames and ExpressionAttributeValues of a payload's expressions.
Names = dict[str, str] | None
Values = dict[str, AttributeValue] | None
# The reply of put, update and delete: {"attributes": ITEM | null (the ReturnValues image),
# "old_bytes": int, "new_bytes": int} (the item's size before and after, 0 where there is none),
# and, where the write touches secondary indexes, "index_units" (local indexes, charged to the
# partition) and "global_index_units" (global indexes: what the replicator's writes will be
# charged to each index), each {index name: write units}, for ReturnConsumedCapacity INDEXES.
# A failed condition raises ConditionalCheckFailedException whose body carries {"Item": old item}
# when return_on_failure is true and the item exists.


@dataclasses.dataclass(slots=True)
class GetPayload:
    """get: read one item, or some of its attributes.

    Reply: {"item": ITEM | null, "read_bytes": int} (`read_bytes`: the whole stored item's size,
    whatever the projection keeps, 0 when there is none).
    """

    key: Item
    projection: str | None = None  # A ProjectionExpression; None: the whole item.
    names: Names = None

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> Self:
        return cls(body["key"], body.get("projection"), body.get("names"))

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "projection": self.projection, "names": self.names}


@dataclasses.dataclass(slots=True)
class PutPayload:
    """put: create or replace one item, under `condition` if there is one.

    `item_bytes` is the item's size as the router measured it, on which the write is admitted
    before it is applied (None: one unit). `return_values` is "NONE" or "ALL_OLD";
    `return_on_failure` asks for the existing item with a failed condition. Reply: see above.
    `global_indexes` (see `UpdatePayload`) are the table's global indexes to check the item's
    key attribute types against.
    """

    item: Item
    item_bytes: int | None = None
    condition: str | None = None
    names: Names = None
    values: Values = None
    return_values: str = "NONE"
    return_on_failure: bool = False
    global_indexes: list[dict[str, Any]] | None = None

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> Self:
        return cls(
            body["item"],
            body.get("item_bytes"),
            body.get("condition"),
            body.get("names"),
            body.get("values"),
            body.get("return_values") or "NONE",
            body.get("return_on_failure") is True,
            body.get("global_indexes"),
        )

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "item": self.item,
            "item_bytes": self.item_bytes,
            "condition": self.condition,
            "names": self.names,
            "values": self.values,
            "return_values": self.return_values,
            "return_on_failure": self.return_on_failure,
        }
        if self.global_indexes is not None:
            body["global_indexes"] = self.global_indexes
        return body


@dataclasses.dataclass(slots=True)
class UpdatePayload:
    """update: change (or create) the item of `key` with `update`, under `condition` if any.

    `return_values` is "NONE", "ALL_OLD", "UPDATED_OLD", "ALL_NEW" or "UPDATED_NEW". Reply: see
    above.

    `global_indexes`: the table's global indexes as the router's catalog has them now, each
    {"name", "key", "projection", "status"} (`core.catalog.IndexDef` JSON without storage), whose
    key attribute types the new image must match; the node checks these instead of the global
    indexes its partition was created with, so an index added by UpdateTable is enforced, and
    one deleted is not, without telling the nodes. None: the partition's own (older senders).
    """

    key: Item
    update: str | None = None  # An UpdateExpression; None: the item is created if absent.
    condition: str | None = None
    names: Names = None
    values: Values = None
    return_values: str = "NONE"
    return_on_failure: bool = False
    # The update came as legacy AttributeUpdates, whose type mismatches DynamoDB words its own way.
    legacy: bool = False
    global_indexes: list[dict[str, Any]] | None = None

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> Self:
        return cls(
            body["key"],
            body.get("update"),
            body.get("condition"),
            body.get("names"),
            body.get("values"),
            body.get("return_values") or "NONE",
            body.get("return_on_failure") is True,
            body.get("legacy") is True,
            body.get("global_indexes"),
        )

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "key": self.key,
            "update": self.update,
            "condition": self.condition,
            "names": self.names,
            "values": self.values,
            "return_values": self.return_values,
            "return_on_failure": self.return_on_failure,
        }
        if self.legacy:
            body["legacy"] = True
        if self.global_indexes is not None:
            body["global_indexes"] = self.global_indexes
        return body


@dataclasses.dataclass(slots=True)
class DeletePayload:
    """delete: remove the item of `key`, under `condition` if any.

    `return_values` is "NONE" or "ALL_OLD". Reply: see above. `global_indexes` (see
    `UpdatePayload`) are the table's global indexes whose entries the delete removes, for their
    capacity and back-pressure.
    """

    key: Item
    condition: str | None = None
    names: Names = None
    values: Values = None
    return_values: str = "NONE"
    return_on_failure: bool = False
    global_indexes: list[dict[str, Any]] | None = None

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> Self:
        return cls(
            body["key"],
            body.get("condition"),
            body.get("names"),
            body.get("values"),
            body.get("return_values") or "NONE",
            body.get("return_on_failure") is True,
            body.get("global_indexes"),
        )

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "key": self.key,
            "condition": self.condition,
            "names": self.names,
            "values": self.values,
            "return_values": self.return_values,
            "return_on_failure": self.return_on_failure,
        }
        if self.global_indexes is not None:
            body["global_indexes"] = self.global_indexes
        return body


# The reply of query and scan: {"items": [ITEM, ...], "count": int, "scanned": int,
# "last_key": ITEM_KEY | null, "read_bytes": int}. `limit` counts the items read (before the
# filter) and `page_bytes` (at most 1 MB) measures them, before the filter too; `last_key` is set
# whenever the page stopped early at either bound. `select` is "ALL_ATTRIBUTES",
# "SPECIFIC_ATTRIBUTES" or "COUNT" (no items in the reply, only the counts).
#
# With `index` (a local secondary index's name) the page reads that index's entries instead, in
# index key order, and `last_key` is an entry's key (index key and table key). With `fetch` too,
# each entry's item is read from the table and stands for the entry (the request needs attributes
# the index does not project); `read_bytes` then counts each fetched item rounded up to 4 KB on
# top of the entries' bytes, as the 1 MB page and the read units do (seed 000 L-18, L-34), and
# the reply's `fetched_bytes` says how much of `read_bytes` that is.


@dataclasses.dataclass(slots=True)
class QueryPayload:
    """query: one page of the item collection of `hash_value`, in sort-key order or reversed.

    `range` is the sort-key condition, {"op": "=" | "<" | "<=" | ">" | ">=" | "BETWEEN" |
    "begins_with", "values": [VALUE, ...]} (`core.expressions.RangeCondition.to_json()`), or
    None. On a global index with a multi-attribute key, `fixed` holds the values of the key
    attributes after the first that the Query fixes by equality, in key order (the other
    partition key attributes, then leading sort key attributes), and `range` applies to the key
    attribute after them. Reply: see above.
    """

    hash_value: AttributeValue
    range: dict[str, Any] | None = None
    forward: bool = True  # ScanIndexForward.
    exclusive_start: Item | None = None
    limit: int | None = None
    filter: str | None = None
    projection: str | None = None
    names: Names = None
    values: Values = None
    select: str = "ALL_ATTRIBUTES"
    page_bytes: int | None = None  # None: the node's bound (1 MB).
    index: str | None = None  # A local secondary index to read instead of the table.
    fetch: bool = False  # Read each index entry's item from the table.
    fixed: list[AttributeValue] = dataclasses.field(default_factory=list)

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> Self:
        return cls(
            body["hash_value"],
            body.get("range"),
            body.get("forward", True),
            body.get("exclusive_start"),
            body.get("limit"),
            body.get("filter"),
            body.get("projection"),
            body.get("names"),
            body.get("values"),
            body.get("select") or "ALL_ATTRIBUTES",
            body.get("page_bytes"),
            body.get("index"),
            body.get("fetch") is True,
            list(body.get("fixed") or ()),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "hash_value": self.hash_value,
            "fixed": self.fixed,
            "range": self.range,
            "forward": self.forward,
            "exclusive_start": self.exclusive_start,
            "limit": self.limit,
            "filter": self.filter,
            "projection": self.projection,
            "names": self.names,
            "values": self.values,
            "select": self.select,
            "page_bytes": self.page_bytes,
            "index": self.index,
            "fetch": self.fetch,
        }


@dataclasses.dataclass(slots=True)
class ScanPayload:
    """scan: one page of the partition's items in storage-key order.

    `hash_start` and `hash_end` restrict it to the items whose partition key's hash64 lies in
    [hash_start, hash_end) (a parallel scan's segment; None: unbounded). Reply: see above.
    """

    exclusive_start: Item | None = None
    limit: int | None = None
    filter: str | None = None
    projection: str | None = None
    names: Names = None
    values: Values = None
    select: str = "ALL_ATTRIBUTES"
    page_bytes: int | None = None  # None: the node's bound (1 MB).
    hash_start: int | None = None
    hash_end: int | None = None
    index: str | None = None  # A local secondary index to read instead of the table.
    fetch: bool = False  # Read each index entry's item from the table.

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> Self:
        return cls(
            body.get("exclusive_start"),
            body.get("limit"),
            body.get("filter"),
            body.get("projection"),
            body.get("names"),
            body.get("values"),
            body.get("select") or "ALL_ATTRIBUTES",
            body.get("page_bytes"),
            body.get("hash_start"),
            body.get("hash_end"),
            body.get("index"),
            body.get("fetch") is True,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "exclusive_start": self.exclusive_start,
            "limit": self.limit,
            "filter": self.filter,
            "projection": self.projection,
            "names": self.names,
            "values": self.values,
            "select": self.select,
            "page_bytes": self.page_bytes,
            "hash_start": self.hash_start,
            "hash_end": self.hash_end,
            "index": self.index,
            "fetch": self.fetch,
        }


@dataclasses.dataclass(slots=True)
class IndexApplyPart:
    """One base partition's projected changes in an index_apply (`IndexApplyPayload`).

    `source` is the base partition's id; `changes` are in seq order, each
    {"seq": int, "delete": ENTRY_KEY | null, "put": ENTRY | null}: the entry to remove (its key:
    the index key and the table key) and the entry to store, at most one of each per change (the
    GSI replicator's projection of the change). The index partition keeps, per source, the seq of
    the last change it applied, in the same batch as the entries: a change at or below it is
    skipped, so a replay after a crash changes nothing (exactly-once effect over at-least-once
    delivery). Its reply: {"applied": int (changes applied), "source_seq": int (the source's seq
    as now applied), "new_bytes": [int, ...] (each applied put's entry size), "units": float (the
    write units charged to the index partition: a put the larger of the entry it replaces and
    the new one, a delete the entry it removes, in 1 KB units, as `core.capacity` prices index
    writes)}.

    `backfill` marks the puts of an online index's copy of the source partition (each change's
    seq is then 0): they are applied whatever the source's stored seq, which they leave as it
    is. A copy is idempotent (a put of an item as it is at least as new as the feed position the
    copy started from; the feed's changes since then are applied after the copy, in order).

    `lease_epoch` is the sender's lease epoch on the source partition (`core.gsi_leases`; 0:
    none). The index partition keeps the highest it has seen per source, with the source's seq:
    a part under a lower one is refused whole with `LeaseFenced` (its sender lost the lease).
    A part without changes only raises the stored epoch (a new holder's fence).
    """

    source: str
    changes: list[dict[str, Any]]
    backfill: bool = False
    lease_epoch: int = 0

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> Self:
        return cls(
            body["source"],
            body["changes"],
            bool(body.get("backfill", False)),
            int(body.get("lease_epoch", 0)),
        )

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {"source": self.source, "changes": self.changes}
        if self.backfill:
            body["backfill"] = True
        if self.lease_epoch:
            body["lease_epoch"] = self.lease_epoch
        return body


@dataclasses.dataclass(slots=True)
class IndexApplyPayload:
    """index_apply: apply the projected changes of base partitions to a global index partition,
    one part per source and run (`IndexApplyPart`), in order, as one write of its group commit.

    The replicator sends one for every part waiting for that index partition, whatever follower
    made it, so that a busy table costs one call and one write per index partition, not one per
    base partition. Reply: {"parts": [PART_REPLY, ...], "units": float (the sum)}, a part's reply
    in the part's place: its `IndexApplyPart` reply, or {"error": {"type", "message"}} for a part
    refused on its own (`LeaseFenced`, or a `ValidationError` of a malformed change), which
    applies nothing of it and nothing else is refused for (`part_outcome` raises it again).
    Metered like an item write: a throttled payload applies nothing of any part, as a stale
    epoch does.
    """

    parts: list[IndexApplyPart]

    @classmethod
    def of(
        cls,
        source: str,
        changes: list[dict[str, Any]],
        backfill: bool = False,
        lease_epoch: int = 0,
    ) -> Self:
        """The payload of one part."""
        return cls([IndexApplyPart(source, changes, backfill, lease_epoch)])

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> Self:
        parts = body.get("parts")
        if not isinstance(parts, list) or not all(isinstance(part, dict) for part in parts):
            raise ValidationError("index_apply needs its parts as a list of objects")
        return cls([IndexApplyPart.from_json(part) for part in parts])

    def to_json(self) -> dict[str, Any]:
        return {"parts": [part.to_json() for part in self.parts]}


def part_refused(error: DynamoError) -> dict[str, Any]:
    """The reply of an index_apply part refused on its own (`IndexApplyPayload`)."""
    return {"error": {"type": error.type_name, "message": error.message or ""}}


def part_outcome(reply: dict[str, Any]) -> dict[str, Any]:
    """An index_apply part's reply; its refusal raised as the error it was."""
    refusal = reply.get("error")
    if refusal is None:
        return reply
    error_type = ERROR_TYPES.get(refusal["type"])
    if error_type is None:  # A version skew between services: a bug, not a guess.
        raise InternalServerError(f"Unknown error type {refusal['type']!r}: {refusal['message']}")
    raise error_type(refusal["message"])


@dataclasses.dataclass(slots=True)
class IndexPressurePayload:
    """index_pressure: the GSI replicator's note to a base partition's node that a partition of
    a global index of table `table_id` has no write capacity (`core.index_pressure`).

    `index` is the index's name, `partition_id` the index partition's id and `start`/`end` its
    storage keys (hex; end None: unbounded); `reasons` are the ThrottlingReasons its node gave
    when it refused the replicator's index_apply ([{"reason", "resource"}]), and the note holds
    `seconds` unless renewed. No reasons: the partition took the replicator's writes again, and
    the note is dropped. Soft state, kept in the node's memory and answered at once: {}.
    """

    table_id: str
    index: str
    partition_id: str
    start: str = ""
    end: str | None = None
    reasons: list[dict[str, str]] = dataclasses.field(default_factory=list)
    seconds: float = 0.0

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> Self:
        reasons = body.get("reasons") or []
        if not isinstance(reasons, list) or not all(
            isinstance(r, dict)
            and isinstance(r.get("reason"), str)
            and isinstance(r.get("resource"), str)
            for r in reasons
        ):
            raise ValidationError("index_pressure reasons must be a list of {reason, resource}")
        start, end = str(body.get("start") or ""), body.get("end")
        for bound in (start, end):
            try:
                bytes.fromhex("" if bound is None else str(bound))
            except ValueError:
                raise ValidationError(f"index_pressure bound {bound!r} is not hex") from None
        return cls(
            str(body["table_id"]),
            str(body["index"]),
            str(body["partition_id"]),
            start,
            None if end is None else str(end),
            [{"reason": r["reason"], "resource": r["resource"]} for r in reasons],
            float(body.get("seconds") or 0.0),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "table_id": self.table_id,
            "index": self.index,
            "partition_id": self.partition_id,
            "start": self.start,
            "end": self.end,
            "reasons": self.reasons,
            "seconds": self.seconds,
        }


ItemWritePayload = PutPayload | UpdatePayload | DeletePayload
PagePayload = QueryPayload | ScanPayload


# Control plane (unary Call): a node's partitions and their throughput. These name their table in
# their payload and travel without a target.
#
#     THROUGHPUT = {"billing_mode": "PROVISIONED" | "PAY_PER_REQUEST", "read": int, "write": int,
#                   "partition_count": int, "version": int, "max_read"?: int, "max_write"?: int}
#
# The table's settings as the partitions' token buckets need them: the table's whole RCU/WCU
# (zeros for PAY_PER_REQUEST), the number of partitions they are divided across, and the table's
# throughput_version; for an on-demand table with an OnDemandThroughput, its maximum read and
# write request units (divided across the partitions as provisioned units are). Persisted in each
# partition's metadata, so a restarted node keeps them.


@dataclasses.dataclass(slots=True)
class CreatePartitionPayload:
    """create_partition: create an empty partition. Reply: {}.

    `table` is {"id", "name", "key_schema"} of the table descriptor, `partition` its PARTITION.
    A global index's partition is created the same way with the index's id and, as
    `key_schema`, its entry key as a list `[[name, type, "partition"|"sort"], ...]` (the index
    key, then the table key attributes not already in it), inside `{"attributes": [...],
    "hashed": n}` when its first n > 1 attributes are hashed together (a multi-attribute index
    partition key: `core.keys.KeyShape.to_document`).
    Idempotent: re-creating an existing partition with the same epoch is a no-op. Without
    `throughput` the partition is not metered (the node's own tests create partitions so);
    routers always send it.
    """

    table: dict[str, Any]
    partition: dict[str, Any]
    throughput: dict[str, Any] | None = None
    # Change-feed consumers registered at seq 0 in the same batch as a new partition, so that
    # its log is held for them from its first record (the GSI replicator of a table with global
    # indexes). Re-creating an existing partition registers no one.
    consumers: list[str] | None = None

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> Self:
        return cls(body["table"], body["partition"], body.get("throughput"), body.get("consumers"))

    def to_json(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "partition": self.partition,
            "throughput": self.throughput,
            "consumers": self.consumers,
        }


@dataclasses.dataclass(slots=True)
class DropTablePayload:
    """drop_table: drop every partition of a table on this node, with its items, logs and
    metadata. Reply: {"partitions_dropped": int}."""

    table_id: str

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> Self:
        return cls(body["table_id"])

    def to_json(self) -> dict[str, Any]:
        return {"table_id": self.table_id}


@dataclasses.dataclass(slots=True)
class RetirePartitionPayload:
    """retire_partition: forget a partition after a split or a move. Reply: {"retired": bool}.

    The node forgets the partition (its metadata), so a request still naming it is refused with
    StaleEpoch. Items stay: a node keys them by table, not partition, and the children hold them.
    Its change log ends with an END record naming `children` (the partitions that continue it:
    the two halves of a split, the same id for a move; None: none named). With registered
    change-feed consumers the log is kept until each of them has checkpointed END (or
    unregistered); without, it is dropped at once. Idempotent: a partition that is not there is
    not retired ("retired": false); one at a newer epoch than the request's is refused with
    StaleEpoch.
    """

    table_id: str
    partition_id: str
    epoch: int
    children: list[str] | None = None

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> Self:
        return cls(body["table_id"], body["partition_id"], body["epoch"], body.get("children"))

    def to_json(self) -> dict[str, Any]:
        return {
            "table_id": self.table_id,
            "partition_id": self.partition_id,
            "epoch": self.epoch,
            "children": self.children,
        }


@dataclasses.dataclass(slots=True)
class SnapshotReadPayload:
    """raft_snapshot_read: the next page of this node's replica of a partition, for a member of
    its group that copies it (`storagenode/snapshots.py`): the rows of the replica's key ranges
    from range number `range` and key `key` (hex) on, up to about `bytes_max` bytes, if the
    replica here is whole and has applied at least `min_index`.

    Reply: {"rows": [[family, key hex, value hex], ...], "range": int, "key": hex, "applied":
    int}: the rows in order, where the next page starts (range == the number of ranges: none),
    and the index the replica had applied once it had read them.
    """

    group: str
    min_index: int
    range: int
    key: str
    bytes_max: int

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> Self:
        return cls(
            str(body["group"]),
            int(body["min_index"]),
            int(body["range"]),
            str(body["key"]),
            int(body["bytes_max"]),
        )


@dataclasses.dataclass(slots=True)
class TableStatsPayload:
    """table_stats: the sizes of a table's partitions on this node.

    Reply: {"partitions": {partition id: {"items": int, "bytes": int, "last_seq": int,
    "first_seq": int, "log_bytes": int, "ttl_deleted": int, "consumers": {name: seq}}}}: item
    count and bytes, the change log's seqs and the bytes of the records it retains, the items the
    TTL sweeper deleted, and each change-feed consumer's checkpoint (a consumer is behind by
    last_seq - its checkpoint).
    """

    table_id: str

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> Self:
        return cls(body["table_id"])

    def to_json(self) -> dict[str, Any]:
        return {"table_id": self.table_id}


@dataclasses.dataclass(slots=True)
class UpdateThroughputPayload:
    """update_throughput: new THROUGHPUT for every partition of a table on this node, or,
    addressed to one partition (a data-plane request), for that partition alone: the way to
    change a replicated partition's, whose change is an entry of its group's log, proposed at
    its leader and applied by every replica. A control-plane one changes only the partitions
    held in one copy, and refuses the change if the node holds a replicated one of the table.

    Reply: {"partitions_updated": int}. Re-sizes the buckets, keeping what they have banked
    (UpdateTable). A THROUGHPUT older than the one a partition has (a lower version) is ignored,
    so a late retry never undoes a newer change; the same version again is a no-op.
    """

    table_id: str
    throughput: dict[str, Any]

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> Self:
        return cls(body["table_id"], body["throughput"])

    def to_json(self) -> dict[str, Any]:
        return {"table_id": self.table_id, "throughput": self.throughput}


@dataclasses.dataclass(slots=True)
class UpdateTtlPayload:
    """update_ttl: a table's TTL setting for every partition of it on this node (UpdateTimeToLive),
    or, addressed to one partition, for that one alone, through its group at its leader (as
    update_throughput; a control-plane one refuses a replicated partition).

    TTL = {"attribute": str, "enabled": bool, "version": int} (`core.catalog.ttl_document`).
    Reply: {"partitions_updated": int}. Enabling makes the node index the attribute (the items it
    already holds in the background) and sweep expired items; disabling drops the index. A TTL
    older than a partition's (a lower version) is ignored; the same version again is a no-op.
    """

    table_id: str
    ttl: dict[str, Any]

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> Self:
        return cls(body["table_id"], body["ttl"])

    def to_json(self) -> dict[str, Any]:
        return {"table_id": self.table_id, "ttl": self.ttl}


@dataclasses.dataclass(slots=True)
class PartitionThroughputPayload:
    """partition_throughput: the token buckets of a table's partitions (None: every table's).

    Reply: {"enforced": bool, "burst_seconds": float,
            "partitions": [{"table_id", "table_name", "partition_id", "billing_mode",
                            "partition_count", "version", "read": BUCKET, "write": BUCKET}, ...],
            "splits": {"count", "seconds_sum", "buckets"},  # `rpc.partition_metrics`
            "moves": (the same for moves),
            "moving": [{"table_id", "partition_id", "epoch", "state": "MOVING", "to", "fenced"}
                       or {..., "state": "INCOMING", "from", "items", "bytes"}, ...],
            "replicas": [{"table_id", "table_name", "partition_id", "members": [node, ...],
                          "role", "leader", "term", "commit", "applied", "last",
                          "followers": {node: {"match", "lag"}}, "asleep"}, ...],
            "raft": {"elections", "leader_changes", "groups", "leaders",
                     "commit": {"count", "seconds_sum", "buckets"}}}
    with BUCKET = {"rate_per_second": float, "balance": float, "consumed_units": float,
    "throttled_units": float, "admitted_requests": int, "throttled_requests": int}. Counters start
    at zero when the node starts. With enforcement off (DYNALAB_THROTTLING=off) nothing is metered
    and "partitions" is empty; "moving" (`storagenode.move.moving`) is there either way. So are
    "replicas", one per replica of a partition shared with other nodes, as of the node's latest
    report (at most RAFT_STATUS_SECONDS old; `storagenode.replication.GroupStatus`: "role" is
    "leader", "follower", "candidate", "pre-candidate" or "copying"; "followers" is a leader's
    view, each member's matched index and the entries it lacks), and "raft", the node's counters
    (`rpc.partition_metrics.raft_families`).
    """

    table_id: str | None = None

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> Self:
        return cls(body.get("table_id"))

    def to_json(self) -> dict[str, Any]:
        return {"table_id": self.table_id}


@dataclasses.dataclass(slots=True)
class SplitPartitionPayload:
    """split_partition: the owner splits one of its partitions in place (`storagenode.split`).

    At `split_key` (a storage key, hex) if given, else at the key that halves its bytes. The
    node records the split in the catalog and installs the children before it answers.
    Reply: {"parent": PARTITION, "children": [PARTITION, PARTITION], "seconds": float,
    "install_seconds": float} (the whole split, and its install, which pauses the node's writes).
    StaleEpoch if the partition is not on the node; ValidationException if it cannot split
    there (outside it, too few items, inside an item collection of a table with a local index).
    """

    table_id: str
    partition_id: str
    split_key: str | None = None

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> Self:
        return cls(body["table_id"], body["partition_id"], body.get("split_key"))

    def to_json(self) -> dict[str, Any]:
        return {
            "table_id": self.table_id,
            "partition_id": self.partition_id,
            "split_key": self.split_key,
        }


@dataclasses.dataclass(slots=True)
class MovePartitionPayload:
    """move_partition: the owner moves one of its partitions to node `target_node` at
    `target_address` (`storagenode.move`), and answers once the catalog names the target.

    Reply: {"partition": PARTITION (as the catalog now records it), "from": node id,
    "seconds": float, "fenced_seconds": float (how long clients were refused), "items": int,
    "records": int (change-log records applied on the target after the copy)}.
    StaleEpoch if the partition is not on the node; ValidationException if it cannot move (to
    the node holding it, a system table's, or one with transactions in flight that did not
    finish while it waited).

    A replicated partition moves one replica: the one on `source_node` (its first replica's if
    None) moves to `target_node` by a change of its group's membership
    (`storagenode.replica_move`), asked of any of its replicas' nodes. Reply: {"partition":
    PARTITION (as the catalog now records it), "from": node id, "seconds": float, "steps":
    [step names taken]}.
    """

    table_id: str
    partition_id: str
    target_node: str
    target_address: str
    # A replicated partition: the node whose replica moves (None: its first replica's).
    source_node: str | None = None

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> Self:
        return cls(
            body["table_id"],
            body["partition_id"],
            body["target_node"],
            body["target_address"],
            body.get("source_node"),
        )

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(slots=True)
class RaftMembershipPayload:
    """raft_membership, addressed to a replicated partition: its group's membership, read or
    changed one step at a time at its leader (`core.machines.replica_move`); elsewhere
    NotPartitionLeader naming the leader known.

    `change` is "read", or one of "add-learner", "promote", "remove" (of `node`) and "transfer"
    (of the leadership, to `node`). A change already in effect (a learner already added, a
    member already removed) is answered as done without an entry; one that must wait (another
    change not committed yet, a new leader that has not committed in its term, a learner not
    caught up) is refused with ServiceUnavailable, to be asked again. A change is answered once
    its entry has applied at the leader, a transfer once it has begun. Reply: {"voters": [node],
    "learners": [node], "leader": node | null, "pending": bool (a change not committed yet)};
    and "lag": {node: entries} (each member's entries behind the leader's log).
    """

    change: str
    node: str | None = None

    CHANGES = ("read", "add-learner", "promote", "remove", "transfer")

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> Self:
        payload = cls(body["change"], body.get("node"))
        if payload.change not in cls.CHANGES:
            raise ValidationError(f"raft_membership's change is one of {', '.join(cls.CHANGES)}")
        if payload.change != "read" and not isinstance(payload.node, str):
            raise ValidationError(f"raft_membership's {payload.change} names a node")
        return payload

    def to_json(self) -> dict[str, Any]:
        return {"change": self.change, "node": self.node}


@dataclasses.dataclass(slots=True)
class DropReplicaPayload:
    """drop_replica: this node's replica of a replicated partition goes, rows, metadata and
    group, because its node is no longer a member of the group (a replica move switched it
    away: `core.machines.replica_move`; the caller knows it). Refused while this node leads the
    group. Reply: {"dropped": bool} (false: no such replica here)."""

    table_id: str
    partition_id: str

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> Self:
        return cls(body["table_id"], body["partition_id"])

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(slots=True)
class MoveReceivePayload:
    """move_receive: one step of a move on its target, from the source (`storagenode.move`).

    `step` is one of:
    - "create": an INCOMING copy from `partition` (a partition's metadata document, at the
      epoch the move gives it), refusing client requests; ResourceInUse if a copy is here;
    - "log": append `records` (the source's change-log records, JSON text, in seq order) as
      they are, from the copy's first seq: the log the source kept;
    - "items": store `items` (items as JSON text) without logging them (the bulk copy);
    - "apply": apply `records` written on the source since the copy, each stored as it is (a
      record at or below the copy's last seq changes nothing);
    - "drain": check the copy holds every record to `seq`; take `partition`'s settings (TTL,
      throughput, TTL cursor and deletions), the consumers' checkpoints `consumers` and the
      finished transaction records `transactions` ([[key hex, value text], ...]), and a global
      index partition's per-source rows `index_sources` ([[source hex, value hex], ...]);
    - "activate": serve the copy at `epoch` (the catalog names this node), its token buckets
      holding `balances` ({"read", "write"}: what the source's held; none: fresh buckets),
      taking `settings` ({"throughput", "ttl", "stream_consumer"}) of the catalog row the
      switch wrote where they are newer than the copy's (a push that reached the source after
      the drain);
    - "abort": drop an INCOMING copy (a served one is never dropped).
    Reply: {"epoch", "first_seq", "last_seq", "items", "bytes"} of the copy as it now is ({} after
    an abort, or an activate of a copy served already).
    """

    table_id: str
    partition_id: str
    step: str
    epoch: int = 0
    seq: int = 0
    partition: dict[str, Any] | None = None
    records: list[str] | None = None
    items: list[str] | None = None
    consumers: dict[str, int] | None = None
    transactions: list[list[str]] | None = None
    balances: dict[str, float] | None = None
    settings: dict[str, Any] | None = None
    index_sources: list[list[str]] | None = None

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> Self:
        if body.get("step") not in MOVE_STEPS:
            raise ValidationError(f"move_receive's step is one of {sorted(MOVE_STEPS)}")
        return cls(
            body["table_id"],
            body["partition_id"],
            body["step"],
            int(body.get("epoch", 0)),
            int(body.get("seq", 0)),
            body.get("partition"),
            body.get("records"),
            body.get("items"),
            body.get("consumers"),
            body.get("transactions"),
            body.get("balances"),
            body.get("settings"),
            body.get("index_sources"),
        )

    def to_json(self) -> dict[str, Any]:
        return {key: value for key, value in dataclasses.asdict(self).items() if value is not None}


MOVE_STEPS = frozenset({"create", "log", "items", "apply", "drain", "activate", "abort"})


# Change-feed consumers (the ChangeFeed service in proto/rpc/changefeed.proto; also unary Call,
# addressed by a target with no epoch). Each partition's change log is in seq order (1, 2, ...
# without gaps); a record:
#
#     CHANGE = {"seq": int, "kind": "INSERT" | "MODIFY" | "REMOVE" | "END",
#               "keys": ITEM_KEY | null, "old": ITEM | null, "new": ITEM | null,
#               "by_service": bool, "children": [partition id, ...],  # "children": END only
#               "at": float}   # commit time, epoch seconds (not in END)
#
# by_service: the service itself made the change (TTL deletions, later), not a client. END: the
# last record of a retired partition's log (retire_partition).
#
# Followers read with the streaming `Follow` (after a seq, or after a consumer's checkpoint);
# delivery is at-least-once from that point and a follower dedupes by seq. A registered consumer
# holds the log: a record is kept until every registered consumer has checkpointed past it, but a
# log never holds more than the node's hard bound (`change_log_records_max`) of records. Reading
# records that are gone fails with TrimmedDataAccessException (`core.errors.ChangeLogTrimmed`,
# body {"first_retained_seq": int}): re-snapshot the partition and follow from that seq - 1. The
# three consumer writes go through the group commit, so an acknowledged checkpoint survives
# kill -9. For all three a partition neither live nor retired-and-kept on the node is StaleEpoch;
# register_consumer and checkpoint reply {"seq": int, "first_seq": int, "last_seq": int}.


@dataclasses.dataclass(slots=True)
class RegisterConsumerPayload:
    """register_consumer: register `consumer` (1-255 bytes) at `seq` (None: the partition's last).

    Records after `seq` are kept for it. Registering again changes nothing and answers the
    checkpoint it has. A seq whose next record is trimmed: TrimmedDataAccessException.
    """

    consumer: str
    seq: int | None = None

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> Self:
        return cls(body["consumer"], body.get("seq"))

    def to_json(self) -> dict[str, Any]:
        return {"consumer": self.consumer, "seq": self.seq}


@dataclasses.dataclass(slots=True)
class CheckpointPayload:
    """checkpoint: `consumer` has passed every record up to `seq`.

    A checkpoint never moves back (an older seq is a no-op answered with the current one); an
    unregistered consumer is ResourceNotFoundException; a seq past the log's last is
    ValidationException.
    """

    consumer: str
    seq: int

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> Self:
        return cls(body["consumer"], body["seq"])

    def to_json(self) -> dict[str, Any]:
        return {"consumer": self.consumer, "seq": self.seq}


@dataclasses.dataclass(slots=True)
class UnregisterConsumerPayload:
    """unregister_consumer: forget `consumer`.

    Reply: {"unregistered": bool, "first_seq": int, "last_seq": int}.
    """

    consumer: str

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> Self:
        return cls(body["consumer"])

    def to_json(self) -> dict[str, Any]:
        return {"consumer": self.consumer}
