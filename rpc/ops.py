"""The operations a storage node serves, and the JSON schema of each request and reply body.

Bodies are JSON objects (encoded with orjson). Items and keys inside them are DynamoDB JSON
(`{"pk": {"S": "a"}}`) already validated and normalised by the router with `core.values`, so a node
never re-validates values, but it does evaluate expressions itself (atomically with the write).
Expressions travel as text with their ExpressionAttributeNames (`names`) and
ExpressionAttributeValues (`values`); both router and node parse them through the core's cache.
Legacy parameters (Expected, AttributeUpdates, QueryFilter, ...) are translated to expressions by
the router, so nodes only ever see expressions.

Errors travel as `core.errors` type names (see `rpc.codec`); `StaleEpoch` and
`PartitionNotFound`-style refusals are `StaleEpoch`, upon which the router refreshes its map and
retries.

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
     "indexes": [INDEX, ...], "ttl": {"attribute": str, "enabled": bool} | null,
     "version": int}                 # the version of the table's catalog row (see below)

Status UPDATING means an UpdateTable changed the throughput in the catalog and not every node has
confirmed it yet (see update_throughput, which a router sends again until every node has); the
table serves reads and writes meanwhile. The allowed status changes are `core.catalog`'s tables.

    PARTITION = {"id": str, "start": hex str, "end": hex str | null, "epoch": int, "node": node id,
                 "state": "SERVING" | "RETIRED", "parent": partition id | null,
                 "share": "n/d" (its fraction of the table's throughput)}
    INDEX = {"name", "key": [[name, type, "partition"|"sort"], ...],
             "projection": "ALL"|"KEYS_ONLY"|"INCLUDE", "non_key_attributes": [str],
             "status": "CREATING"|"BACKFILLING"|"ACTIVE"|"DELETING", "local": bool}

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

## Partition lifecycle (unary Call)

    create_partition {"table": {"id", "name", "key_schema"}, "partition": PARTITION,
                      "throughput": THROUGHPUT | null}  -> {}
                     Idempotent: re-creating an existing partition with the same epoch is a no-op.
                     Without "throughput" the partition is not metered (the node's own tests
                     create partitions so); routers always send it.
    drop_table       {"table_id": str}   -> {"partitions_dropped": int}   (items, logs and metadata)
    retire_partition {"table_id": str, "partition_id": str, "epoch": int,
                      "children": [partition id, ...] | null}
                     -> {"retired": bool}
                     After a split or a move: the node forgets the partition (its metadata), so
                     a request still naming it is refused with StaleEpoch. Items stay: a node
                     keys them by table, not partition, and the children hold them. Its change
                     log ends with an END record naming `children` (the partitions that continue
                     it: the two halves of a split, the same id for a move; absent: none named).
                     With registered change-feed consumers the log is kept until each of them
                     has checkpointed END (or unregistered); without, it is dropped at once.
                     Idempotent: a partition that is not there is not retired ("retired":
                     false); one at a newer epoch than the request's is refused with StaleEpoch.
    table_stats      {"table_id": str}
                     -> {"partitions": {partition id: {"items", "bytes", "last_seq": int}}}

## Throughput (unary Call)

    THROUGHPUT = {"billing_mode": "PROVISIONED" | "PAY_PER_REQUEST", "read": int, "write": int,
                  "partition_count": int, "version": int}
    The table's settings as the partitions' token buckets need them: the table's whole RCU/WCU
    (zeros for PAY_PER_REQUEST), the number of partitions they are divided across, and the table's
    throughput_version. Persisted in each partition's metadata, so a restarted node keeps them.

    update_throughput    {"table_id": str, "throughput": THROUGHPUT} -> {"partitions_updated": int}
                         Re-sizes the buckets of every partition of the table on this node,
                         keeping what they have banked (UpdateTable). A THROUGHPUT older than the
                         one a partition has (a lower version) is ignored, so a late retry never
                         undoes a newer change; the same version again is a no-op.
    partition_throughput {"table_id": str | null}   (null: every table on the node)
                         -> {"enforced": bool, "burst_seconds": float,
                             "partitions": [{"table_id", "table_name", "partition_id",
                                             "billing_mode", "partition_count", "version",
                                             "read": BUCKET, "write": BUCKET}, ...]}
                         BUCKET = {"rate_per_second": float, "balance": float,
                                   "consumed_units": float, "throttled_units": float,
                                   "admitted_requests": int, "throttled_requests": int}
                         Counters start at zero when the node starts. With enforcement off
                         (DYNALAB_THROTTLING=off) nothing is metered and "partitions" is empty.

## Change feed (the ChangeFeed service in proto/rpc/changefeed.proto; also unary Call)

Each partition's change log, in seq order (1, 2, ... without gaps). A record:

    CHANGE = {"seq": int, "kind": "INSERT" | "MODIFY" | "REMOVE" | "END", "keys": ITEM_KEY | null,
              "old": ITEM | null, "new": ITEM | null, "by_service": bool,
              "children": [partition id, ...]}            # "children": END records only
    by_service: the service itself made the change (TTL deletions, later), not a client.
    END: the last record of a retired partition's log (retire_partition).

Followers read with the streaming `Follow` (after a seq, or after a consumer's checkpoint);
delivery is at-least-once from that point and a follower dedupes by seq. A registered consumer
holds the log: a record is kept until every registered consumer has checkpointed past it, but a
log never holds more than the node's hard bound (`change_log_records_max`) of records. Reading
records that are gone fails with TrimmedDataAccessException (`core.errors.ChangeLogTrimmed`,
body {"first_retained_seq": int}): re-snapshot the partition and follow from that seq - 1. These
three writes go through the group commit, so an acknowledged checkpoint survives kill -9:

    register_consumer   {"table_id", "partition_id", "consumer": str (1-255 bytes),
                         "seq": int | null}               # null: the partition's last seq
                        -> {"seq": int, "first_seq": int, "last_seq": int}
                        Registers the consumer at `seq` (records after it are kept for it).
                        Registering again changes nothing and answers the checkpoint it has.
                        A seq whose next record is trimmed: TrimmedDataAccessException.
    checkpoint          {"table_id", "partition_id", "consumer", "seq": int}
                        -> {"seq": int, "first_seq": int, "last_seq": int}
                        The consumer has passed every record up to `seq`. A checkpoint never
                        moves back (an older seq is a no-op answered with the current one); an
                        unregistered consumer is ResourceNotFoundException; a seq past the
                        log's last is ValidationException.
    unregister_consumer {"table_id", "partition_id", "consumer"}
                        -> {"unregistered": bool, "first_seq": int, "last_seq": int}

For all three a partition neither live nor retired-and-kept on the node is StaleEpoch.

## Data plane (streamed Exchange). The envelope (`Target`) names the partition, epoch, consistency.

    get     {"key": ITEM_KEY, "projection": str|null, "names": {}|null, "consistent": bool}
            -> {"item": ITEM|null, "read_bytes": int}
    put     {"item": ITEM, "condition": str|null, "names": {}|null, "values": {}|null,
             "return_values": "NONE"|"ALL_OLD", "return_on_failure": bool,
             "item_bytes": int|null}   # the item's size as the router measured it (optional)
            -> {"attributes": ITEM|null, "old_bytes": int, "new_bytes": int}
    update  {"key": ITEM_KEY, "update": str|null, "condition": str|null, "names", "values",
             "return_values": "NONE"|"ALL_OLD"|"UPDATED_OLD"|"ALL_NEW"|"UPDATED_NEW",
             "return_on_failure": bool}
            -> {"attributes": ITEM|null, "old_bytes": int, "new_bytes": int}
    delete  {"key": ITEM_KEY, "condition": str|null, "names", "values",
             "return_values": "NONE"|"ALL_OLD", "return_on_failure": bool}
            -> {"attributes": ITEM|null, "old_bytes": int, "new_bytes": int}
            A failed condition raises ConditionalCheckFailedException whose body carries
            {"Item": old item} when return_on_failure is true and the item exists.
    query   {"hash_value": VALUE, "range": {"op": "="|"<"|"<="|">"|">="|"BETWEEN"|"begins_with",
                                            "values": [VALUE, ...]} | null,
             "forward": bool, "exclusive_start": ITEM_KEY|null, "limit": int|null,
             "filter": str|null, "projection": str|null, "names", "values",
             "select": "ALL_ATTRIBUTES"|"SPECIFIC_ATTRIBUTES"|"COUNT",
             "page_bytes": int, "consistent": bool}
            -> {"items": [ITEM, ...], "count": int, "scanned": int,
                "last_key": ITEM_KEY|null, "read_bytes": int}
            limit counts items read (before the filter); page_bytes (1 MB) is measured on items
            read, before the filter. last_key is set when the page stopped early for either bound.
    scan    {"exclusive_start": ITEM_KEY|null, "limit": int|null, "filter", "projection", "names",
             "values", "select", "page_bytes": int, "consistent": bool,
             "hash_start": int|null, "hash_end": int|null}   # restrict to hash64 in [start, end)
            -> same reply as query. Items come in storage-key order.

ITEM_KEY is an item holding only the key attributes. `read_bytes` is the total size of the items
read, for capacity accounting.

## Capacity

Nodes report sizes (`read_bytes`, `old_bytes`, `new_bytes`); the router turns them into the
ConsumedCapacity a client asked for with `core.capacity`. The node meters the same sizes with the
same functions against the partition's token buckets (`storagenode.throughput`), which is what
enforcement needs: a read is admitted on its minimum cost (`consistent` says which: eventually
consistent reads cost half) and charged its real cost once read; a write is admitted on an
estimate (put: `item_bytes`, else one unit) before it is applied and charged the larger of its old
and new size once applied, a failed condition the size of the existing item. Any data-plane
operation may fail with ProvisionedThroughputExceededException when the partition's bucket is
empty; nothing was read or written then, and the client may retry.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True, slots=True)
class Target:
    """Where a data-plane or change-feed request goes: the envelope fields of `node.proto`.

    A node checks them before it decodes the payload, so a request addressed to a partition it
    does not hold, or at another epoch, is refused with StaleEpoch without reading its body.
    `consistent` says a read is strongly consistent (it is metered at twice the cost); a write
    leaves it false. Change-feed requests carry no epoch (0): they name a partition live or
    retired-and-kept, whatever its epoch.
    """

    table_id: str
    partition_id: str
    epoch: int = 0
    consistent: bool = False


# The ring key under which earlier versions placed the catalog document; a new cluster still
# places its catalog partition on its owner (`core.catalog.CATALOG_PLACEMENT_KEY`).
CATALOG_PARTITION_ID = "catalog"

# Control-plane operations (unary Call).
CREATE_PARTITION = "create_partition"
DROP_TABLE = "drop_table"
RETIRE_PARTITION = "retire_partition"
TABLE_STATS = "table_stats"
UPDATE_THROUGHPUT = "update_throughput"
PARTITION_THROUGHPUT = "partition_throughput"

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

CONTROL_OPS = frozenset(
    {
        CREATE_PARTITION,
        DROP_TABLE,
        RETIRE_PARTITION,
        TABLE_STATS,
        UPDATE_THROUGHPUT,
        PARTITION_THROUGHPUT,
    }
)
DATA_OPS = frozenset({GET, PUT, UPDATE, DELETE, QUERY, SCAN})
FEED_OPS = frozenset({REGISTER_CONSUMER, CHECKPOINT, UNREGISTER_CONSUMER})
