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

## Table descriptor (as kept in the catalog; nodes receive the parts they need)

    {"name": str, "id": str (32 hex chars, new for every CreateTable),
     "status": "CREATING" | "ACTIVE" | "DELETING",
     "key_schema": {"hash": [name, "S"|"N"|"B"], "range": [name, type] | null},
     "attribute_definitions": [{"AttributeName": .., "AttributeType": ..}],   # wire form
     "billing_mode": "PROVISIONED" | "PAY_PER_REQUEST",
     "throughput": {"read": int, "write": int},        # zeros for PAY_PER_REQUEST
     "throughput_version": int,      # absent: 0; +1 for every UpdateTable of throughput or billing
     "throughput_changes": {"last_increase": float | null, "last_decrease": float | null,
                            "decreases_day": "YYYY-MM-DD" | null, "decreases": int,
                            "pay_per_request_since": float | null},   # absent: nothing changed
     "created": float (epoch seconds),
     "partitions": [PARTITION, ...]}                    # sorted by start

Status UPDATING means an UpdateTable changed the throughput in the catalog and not every node has
confirmed it yet (see update_throughput, which a router sends again until every node has); the
table serves reads and writes meanwhile.

    PARTITION = {"id": str, "start": hex str, "end": hex str | null, "epoch": int, "node": node id}

A partition covers encoded storage keys k with bytes.fromhex(start) <= k < bytes.fromhex(end)
(end null: no upper bound), where k = core.keycodec.encode_storage_key(...) and starts with the
8-byte big-endian hash64 of the partition key. Initially ranges split the hash space evenly.

## Catalog (the one well-known document, stored on the node the ring picks for CATALOG_PARTITION_ID)

    catalog_get   {}                                  -> {"version": int, "tables": {name: TABLE}}
    catalog_cas   {"expected_version": int, "tables": {name: TABLE}}
                                                      -> {"version": int}
                  error ConditionalCheckFailedException when the stored version differs.

## Partition lifecycle (unary Call)

    create_partition {"table": {"id", "name", "key_schema"}, "partition": PARTITION,
                      "throughput": THROUGHPUT | null}  -> {}
                     Idempotent: re-creating an existing partition with the same epoch is a no-op.
                     Without "throughput" the partition is not metered (the node's own tests
                     create partitions so); routers always send it.
    drop_table       {"table_id": str}   -> {"partitions_dropped": int}   (items, logs and metadata)
    retire_partition {"table_id": str, "partition_id": str, "epoch": int}
                     -> {"retired": bool}
                     After a split: the node forgets the partition (its metadata and change log),
                     so a request still naming it is refused with StaleEpoch. Items stay: a node
                     keys them by table, not partition, and the children hold them. Idempotent:
                     a partition that is not there is not retired ("retired": false); one at a
                     newer epoch than the request's is refused with StaleEpoch.
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

## Data plane (streamed Exchange). Every body also has "table_id", "partition_id", "epoch".

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

CATALOG_PARTITION_ID = "catalog"

# Control-plane operations (unary Call).
CATALOG_GET = "catalog_get"
CATALOG_CAS = "catalog_cas"
CREATE_PARTITION = "create_partition"
DROP_TABLE = "drop_table"
RETIRE_PARTITION = "retire_partition"
TABLE_STATS = "table_stats"
UPDATE_THROUGHPUT = "update_throughput"
PARTITION_THROUGHPUT = "partition_throughput"

# Data-plane operations (streamed Exchange).
GET = "get"
PUT = "put"
UPDATE = "update"
DELETE = "delete"
QUERY = "query"
SCAN = "scan"

CONTROL_OPS = frozenset(
    {
        CATALOG_GET,
        CATALOG_CAS,
        CREATE_PARTITION,
        DROP_TABLE,
        RETIRE_PARTITION,
        TABLE_STATS,
        UPDATE_THROUGHPUT,
        PARTITION_THROUGHPUT,
    }
)
DATA_OPS = frozenset({GET, PUT, UPDATE, DELETE, QUERY, SCAN})
