"""The operations a storage node serves, and the JSON schema of each request and reply body.

Bodies are JSON objects (encoded with orjson). Items and keys inside them are DynamoDB JSON
(`{"pk": {"S": "a"}}`) already validated and normalised by the router with `core.values`, so a node
never re-validates values, but it does evaluate expressions itself (atomically with the write).
Expressions travel as text with their ExpressionAttributeNames (`names`) and
ExpressionAttributeValues (`values`); both router and node parse them through the core's cache.
Legacy parameters (Expected, AttributeUpdates, QueryFilter, ...) are translated to expressions by
the router, so nodes only ever see expressions.

Errors travel as `core.errors` type names (see `dynalab.rpc.codec`); `StaleEpoch` and
`PartitionNotFound`-style refusals are `StaleEpoch`, upon which the router refreshes its map and
retries.

## Table descriptor (as kept in the catalog; nodes receive the parts they need)

    {"name": str, "id": str (32 hex chars, new for every CreateTable),
     "status": "CREATING" | "ACTIVE" | "DELETING",
     "key_schema": {"hash": [name, "S"|"N"|"B"], "range": [name, type] | null},
     "attribute_definitions": [{"AttributeName": .., "AttributeType": ..}],   # wire form
     "billing_mode": "PROVISIONED" | "PAY_PER_REQUEST",
     "throughput": {"read": int, "write": int},        # zeros for PAY_PER_REQUEST
     "created": float (epoch seconds),
     "partitions": [PARTITION, ...]}                    # sorted by start

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

    create_partition {"table": {"id", "name", "key_schema"}, "partition": PARTITION}  -> {}
                     Idempotent: re-creating an existing partition with the same epoch is a no-op.
    drop_table       {"table_id": str}   -> {"partitions_dropped": int}   (items, logs and metadata)
    table_stats      {"table_id": str}
                     -> {"partitions": {partition id: {"items", "bytes", "last_seq": int}}}

## Data plane (streamed Exchange). Every body also has "table_id", "partition_id", "epoch".

    get     {"key": ITEM_KEY, "projection": str|null, "names": {}|null, "consistent": bool}
            -> {"item": ITEM|null, "read_bytes": int}
    put     {"item": ITEM, "condition": str|null, "names": {}|null, "values": {}|null,
             "return_values": "NONE"|"ALL_OLD", "return_on_failure": bool}
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
             "page_bytes": int}
            -> {"items": [ITEM, ...], "count": int, "scanned": int,
                "last_key": ITEM_KEY|null, "read_bytes": int}
            limit counts items read (before the filter); page_bytes (1 MB) is measured on items
            read, before the filter. last_key is set when the page stopped early for either bound.
    scan    {"exclusive_start": ITEM_KEY|null, "limit": int|null, "filter", "projection", "names",
             "values", "select", "page_bytes": int,
             "hash_start": int|null, "hash_end": int|null}   # restrict to hash64 in [start, end)
            -> same reply as query. Items come in storage-key order.

ITEM_KEY is an item holding only the key attributes. `read_bytes` is the total size of the items
read, for capacity accounting.
"""

CATALOG_PARTITION_ID = "catalog"

# Control-plane operations (unary Call).
CATALOG_GET = "catalog_get"
CATALOG_CAS = "catalog_cas"
CREATE_PARTITION = "create_partition"
DROP_TABLE = "drop_table"
TABLE_STATS = "table_stats"

# Data-plane operations (streamed Exchange).
GET = "get"
PUT = "put"
UPDATE = "update"
DELETE = "delete"
QUERY = "query"
SCAN = "scan"

CONTROL_OPS = frozenset({CATALOG_GET, CATALOG_CAS, CREATE_PARTITION, DROP_TABLE, TABLE_STATS})
DATA_OPS = frozenset({GET, PUT, UPDATE, DELETE, QUERY, SCAN})
