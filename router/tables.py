"""Table operations: CreateTable, DescribeTable, UpdateTable, ListTables, DeleteTable,
DescribeLimits and DescribeEndpoints.

A table lives in the catalog, as one `core.catalog.TableDef` row (see `router.context`), and as
partitions on the storage nodes. Its life follows DynamoDB's statuses, whose rules and allowed
transitions are `core.catalog`'s; this module orchestrates them, each step a compare-and-set on
the table's row so that concurrent routers never lose each other's changes:

- CreateTable records the table as CREATING with its partitions (as many as its throughput needs,
  each placed on the node the ring picks for the partition's id, at epoch 1), creates the
  partitions on their nodes, then marks the table ACTIVE. It answers with status CREATING, as
  DynamoDB does, but only once the table is ACTIVE, so the next request can use it at once. If a
  node cannot create its partition, the table is taken out of the catalog again.
- DeleteTable marks the table DELETING, so item operations fail as on a missing table, drops its
  partitions on their nodes, then removes it from the catalog. If a node cannot be reached the
  table stays DELETING and the error is returned; calling DeleteTable again finishes the job.
- CreateTable, DeleteTable and UpdateTable's index and stream changes run on the table machine
  (`core/machines/table.py`) through the one driver; their effects are
  `router/table_lifecycle.py`'s, whose `TableReconciler` finishes, on any router, what a router
  that died left half done (every step is idempotent).
- UpdateTable changes the billing mode and provisioned throughput: it records the new settings
  with status UPDATING (and a new `throughput_version`), sends them to every node holding a
  partition (`update_throughput`, which re-sizes the partitions' token buckets), then marks the
  table ACTIVE. If a node cannot be reached the table stays UPDATING, still serving reads and
  writes, and the next DescribeTable sends the settings again; so a client waiting for ACTIVE, as
  SDK waiters do, waits until every node enforces the new throughput.
- OnDemandThroughput (an on-demand table's maximum request units) is a throughput setting: it
  reaches the nodes with the rest (`core.catalog.on_demand_updated` holds DynamoDB's rules).
- WarmThroughput is what the partitions serve at once: CreateTable makes the partitions a
  requested one needs, and UpdateTable records a raised one in the row for every router's
  reconciler to split the partitions to (`router.table_lifecycle.prewarm`).
- DeletionProtectionEnabled and TableClass (CreateTable, UpdateTable) live in the row alone: no
  node holds either. DeleteTable of a protected table is refused by the compare-and-set that
  would mark it DELETING (`core.catalog.deleting`), so a concurrent UpdateTable that lifts the
  protection and a DeleteTable are ordered by the row.

Every partition is created with the table's throughput settings and how many partitions share
them (`rpc.ops` THROUGHPUT), which the node persists with the partition.

Requests are read in DynamoDB's three passes with `router.requests.RequestReader`; the table
definition rules themselves are in `core.schema`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import uuid
import weakref
from bisect import bisect_right
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from core import catalog, gsi, indexes, limits, schema
from core.catalog import IndexDef, IndexStatus, StreamViewType, TableDef, TableStatus, Throughput
from core.errors import (
    INVALID_PARAMETERS,
    DynamoError,
    LimitExceeded,
    ValidationError,
)
from core.keys import KeyShape
from core.machines import table as table_machine
from core.machines.table import Flow, TableState
from core.token_bucket import BillingMode
from router import table_lifecycle
from router.protocol import request_region
from router.requests import RequestReader, read_table_name, table_name_checked
from router.routing import Route
from router.table_lifecycle import table_not_found
from router.tags import check_tags, read_tags, stream_arn, table_arn
from rpc import ops

if TYPE_CHECKING:
    from router.context import RouterContext
    from router.sources import Sources

log = logging.getLogger("router.tables")

ENDPOINT_CACHE_MINUTES = 1440  # DescribeEndpoints: DynamoDB tells clients to cache it for a day.

_THROUGHPUT_MEMBERS = ("ReadCapacityUnits", "WriteCapacityUnits")
_TABLE_CLASSES = tuple(table_class.value for table_class in catalog.TableClass)
# DynamoDB refuses a TableClass it does not know in these words, not as an enum's constraint
# violation (as captured against the service by a public catalogue of its answers, ack-api-quirks
# DDB-TABLE-442, for CreateTable and UpdateTable; CloudFormation linters quote the same words).
_INVALID_TABLE_CLASS = (
    "Invalid table-class parameter provided. Please try again with a valid table-class value: "
    f"[{', '.join(_TABLE_CLASSES)}]."
)
# UpdateTable with nothing to change; DynamoDB lists every member that would have been one, in
# this order (as captured against the service: ack-api-quirks DDB-TABLE-015, DDB-TABLE-442).
_UPDATE_MEMBERS_LISTED = (
    "ProvisionedThroughput",
    "BillingMode",
    "UpdateStreamEnabled",
    "GlobalSecondaryIndexUpdates",
    "SSESpecification",
    "ReplicaUpdates",
    "MultiAccountReplicaReady",
    "ReplicaTransitRoleArn",
    "MultiRegionConsistency",
    "DeletionProtectionEnabled",
    "OnDemandThroughput",
    "WarmThroughput",
    "TableClass",
)


def _nothing_to_update(given: tuple[str, ...] = ()) -> str:
    """DynamoDB's refusal of an UpdateTable that changes nothing. A member the request gave that
    changes nothing by itself (MultiRegionConsistency without ReplicaUpdates) is left out of the
    list, as DynamoDB leaves it out (as captured: ack-api-quirks DDB-TABLE-442,
    val_update_mrc_only)."""
    listed = [member for member in _UPDATE_MEMBERS_LISTED if member not in given]
    return f"At least one of {', '.join(listed[:-1])} or {listed[-1]} is required"


_NOTHING_TO_UPDATE = _nothing_to_update()
# An index Update's units past this bound on a table without that global index (dynalite's tests,
# run against DynamoDB).
_INDEX_UPDATE_BLOCKED = (
    "This operation cannot be performed with given input values. Please contact DynamoDB "
    "service team for more info: Action Blocked: IndexUpdate"
)
# The members of UpdateTable dynalab does not act on yet; each is refused rather than ignored.
_UPDATE_MEMBERS_UNSUPPORTED = (
    "SSESpecification",
    "ReplicaUpdates",
    "MultiRegionConsistency",
)


# Reading requests ------------------------------------------------------------------------------


def _read_units(reader: RequestReader, member: str) -> int | None:
    """A Long capacity-units member of ProvisionedThroughput: required, at least 1."""
    value = reader.body.get(member)
    if value is None:
        reader.violation(member, None, "Member must not be null")
        return None
    # A fractional JSON number is truncated by DynamoDB's deserialiser (Java's longValue()).
    value = int(value)
    if value < limits.PROVISIONED_UNITS_MIN:
        reader.violation(
            member,
            value,
            f"Member must have value greater than or equal to {limits.PROVISIONED_UNITS_MIN}",
        )
        return None
    return value


def _read_elements(
    reader: RequestReader,
    member: str,
    fields: tuple[tuple[str, tuple[str, ...] | None], ...],
    *,
    min_length: int | None = None,
    max_length: int | None = None,
) -> list[dict[str, str]]:
    """A required list of small structures of required strings (AttributeDefinitions, KeySchema).

    A field with an enum is a type; one without is an attribute name (1 to 255 characters).
    """
    elements = reader.array(member, required=True, min_length=min_length, max_length=max_length)
    parsed: list[dict[str, str]] = []
    for index, element in enumerate(elements or (), start=1):
        nested = reader.nested(element, f"{reader.where(member)}.{index}.member")
        values: dict[str, str] = {}
        for field, enum in fields:
            if enum is None:
                value = nested.string(
                    field,
                    required=True,
                    min_length=1,
                    max_length=limits.KEY_ATTRIBUTE_NAME_BYTES_MAX,
                )
            else:
                value = nested.string(field, required=True, enum=enum)
            if value is not None:
                values[field] = value
        parsed.append(values)
    return parsed


@dataclasses.dataclass
class _IndexReading:
    """One element of LocalSecondaryIndexes or GlobalSecondaryIndexes as read in the constraint
    pass (`throughput`: a global index's ProvisionedThroughput, None if absent)."""

    name: str | None
    key_schema: list[dict[str, str]]
    projection_type: str | None
    non_key_attributes: list[str] | None
    throughput: dict[str, int | None] | None = None
    # A global index's OnDemandThroughput and WarmThroughput members (None: absent or empty).
    on_demand: dict[str, int] | None = None
    warm: dict[str, int] | None = None

    def definition(self) -> indexes.IndexDefinition:
        """The element past its constraints (its projection is checked with its key schema)."""
        assert self.name is not None
        non_key = self.non_key_attributes
        return indexes.IndexDefinition(
            self.name,
            tuple((e["AttributeName"], e["KeyType"]) for e in self.key_schema),
            indexes.ProjectionRequest(
                self.projection_type, None if non_key is None else tuple(non_key)
            ),
        )

    def global_definition(self) -> gsi.GlobalIndexDefinition:
        """A GlobalSecondaryIndexes element past its constraints."""
        definition = self.definition()
        throughput = self.throughput
        return gsi.GlobalIndexDefinition(
            definition.name,
            definition.key_schema,
            definition.projection,
            None if throughput is None else {k: v for k, v in throughput.items() if v is not None},
            self.on_demand,
            self.warm,
        )


def _read_index_definitions(reader: RequestReader, member: str) -> list[_IndexReading]:
    """Each element of LocalSecondaryIndexes or GlobalSecondaryIndexes: IndexName, KeySchema,
    Projection and (global indexes only) ProvisionedThroughput, checked against their
    constraints (none when the member is absent)."""
    elements = reader.array(member)
    return [
        _read_index_definition(
            reader.nested(element, f"{reader.where(member)}.{position}.member"),
            member == "GlobalSecondaryIndexes",
        )
        for position, element in enumerate(elements or (), start=1)
    ]


def _read_index_definition(nested: RequestReader, global_index: bool) -> _IndexReading:
    """One index definition: IndexName, KeySchema, Projection and (a global index's)
    ProvisionedThroughput, checked against their constraints."""
    name = nested.name("IndexName", required=True)
    # A local index's KeySchema keeps its two elements at most; a global index's may have up to
    # four HASH and four RANGE elements (multi-attribute keys), which the service model no longer
    # bounds: `core.gsi.global_index_key` refuses more of either kind.
    key_schema = _read_elements(
        nested,
        "KeySchema",
        (("AttributeName", None), ("KeyType", schema.KEY_TYPES)),
        min_length=1,
        max_length=None if global_index else 2,
    )
    projection = nested.mapping("Projection", required=True)
    projection_type = non_key = None
    if projection is not None:
        inner = nested.nested(projection, nested.where("Projection"))
        projection_type = inner.string("ProjectionType", enum=indexes.PROJECTION_TYPES)
        non_key = inner.string_list(
            "NonKeyAttributes",
            min_length=1,
            max_length=limits.INDEX_NON_KEY_ATTRIBUTES_PER_INDEX_MAX,
            member_length=(1, limits.KEY_ATTRIBUTE_NAME_BYTES_MAX),
        )
    if not global_index:
        return _IndexReading(name, key_schema, projection_type, non_key)
    return _IndexReading(
        name,
        key_schema,
        projection_type,
        non_key,
        _read_throughput(nested),
        _read_on_demand(nested),
        _read_warm(nested),
    )


def _read_on_demand(reader: RequestReader) -> dict[str, int] | None:
    """OnDemandThroughput: the members given (Long, any value: their range is the operation's
    rule, checked against the billing mode first); None when absent or empty, which DynamoDB
    takes alike."""
    body = reader.mapping("OnDemandThroughput")
    if body is None:
        return None
    nested = reader.nested(body, reader.where("OnDemandThroughput"))
    given = {}
    for member in catalog.ON_DEMAND_MEMBERS:
        value = nested.integer(member)
        if value is not None:
            given[member] = value
    return given or None


def _read_warm(reader: RequestReader) -> dict[str, int] | None:
    """WarmThroughput: the members given (Long; their bounds are the operation's rule); None
    when absent or empty."""
    body = reader.mapping("WarmThroughput")
    if body is None:
        return None
    nested = reader.nested(body, reader.where("WarmThroughput"))
    given = {}
    for member in catalog.WARM_MEMBERS:
        value = nested.integer(member)
        if value is not None:
            given[member] = value
    return given or None


def _read_throughput(reader: RequestReader) -> dict[str, int | None] | None:
    """ProvisionedThroughput: both members, each required and at least 1 (None if absent)."""
    throughput_body = reader.mapping("ProvisionedThroughput")
    if throughput_body is None:
        return None
    nested = reader.nested(throughput_body, "provisionedThroughput")
    return {member: _read_units(nested, member) for member in _THROUGHPUT_MEMBERS}


# In the service model's order, which DynamoDB's enum messages follow.
STREAM_VIEW_TYPES = ("NEW_IMAGE", "OLD_IMAGE", "NEW_AND_OLD_IMAGES", "KEYS_ONLY")
_STREAM_VIEW_TYPE_REQUIRED = (
    INVALID_PARAMETERS + "StreamViewType is required when StreamEnabled is true"
)


def _read_stream_specification(reader: RequestReader) -> tuple[bool, str | None] | None:
    """StreamSpecification as (StreamEnabled, StreamViewType); None when absent. Its constraint
    violations are recorded in `reader`; a StreamEnabled true without a view type is checked by
    `_stream_view_type` after them."""
    specification = reader.mapping("StreamSpecification")
    if specification is None:
        return None
    nested = reader.nested(specification, reader.where("StreamSpecification"))
    enabled = nested.boolean("StreamEnabled")
    if enabled is None:
        nested.violation("StreamEnabled", None, "Member must not be null")
    view_type = nested.string("StreamViewType", enum=STREAM_VIEW_TYPES)
    return bool(enabled), view_type


def _stream_view_type(specification: tuple[bool, str | None] | None) -> StreamViewType | None:
    """The view type of a stream the specification enables; None when it enables none."""
    if specification is None or not specification[0]:
        return None
    if specification[1] is None:
        raise ValidationError(_STREAM_VIEW_TYPE_REQUIRED)
    return StreamViewType(specification[1])


def _check_table_class(table_class: str | None) -> None:
    """Refuse a TableClass DynamoDB does not have, once the request's constraints have passed
    (that it comes then, before the request's other rules, is a guess: no capture shows it beside
    another error)."""
    if table_class is not None and table_class not in _TABLE_CLASSES:
        raise ValidationError(_INVALID_TABLE_CLASS)


def _read_table_name(body: dict[str, Any]) -> str:
    """The TableName of DescribeTable or DeleteTable, checked in DynamoDB's order."""
    reader = RequestReader(body)
    name = read_table_name(reader)
    name = table_name_checked(name)
    reader.check()
    return name


def _read_create_table(body: dict[str, Any]) -> dict[str, Any]:
    """The catalog definition (name, key schema, billing) of a CreateTable request."""
    reader = RequestReader(body)
    name = read_table_name(reader)
    definitions = _read_elements(
        reader,
        "AttributeDefinitions",
        (("AttributeName", None), ("AttributeType", schema.KEY_ATTRIBUTE_TYPES)),
    )
    key_schema = _read_elements(
        reader,
        "KeySchema",
        (("AttributeName", None), ("KeyType", schema.KEY_TYPES)),
        min_length=1,
        max_length=2,
    )
    local_readings = _read_index_definitions(reader, "LocalSecondaryIndexes")
    billing_mode = reader.string("BillingMode", enum=schema.BILLING_MODES)
    throughput = _read_throughput(reader)
    on_demand = _read_on_demand(reader)
    global_readings = _read_index_definitions(reader, "GlobalSecondaryIndexes")
    stream = _read_stream_specification(reader)
    deletion_protection = reader.boolean("DeletionProtectionEnabled")
    tag_elements = read_tags(reader, required=False)
    table_class = reader.string("TableClass")
    warm = _read_warm(reader)
    name = table_name_checked(name)
    reader.check()
    _check_table_class(table_class)
    # In DynamoDB's words for tags, not its constraints' (an empty list is no error here).
    tags = check_tags(tag_elements)
    stream_view_type = _stream_view_type(stream)
    # Past reader.check(), every element holds its fields and every unit is at least 1.
    if reader.present("LocalSecondaryIndexes") and not local_readings:
        raise ValidationError(INVALID_PARAMETERS + "List of LocalSecondaryIndexes is empty")
    local_definitions = [reading.definition() for reading in local_readings]
    global_present = reader.present("GlobalSecondaryIndexes")
    global_definitions = [reading.global_definition() for reading in global_readings]
    key = schema.build_key_schema(
        definitions, key_schema, indexed=bool(local_definitions) or global_present
    )
    units = None if throughput is None else {k: v for k, v in throughput.items() if v is not None}
    billing = schema.build_throughput(billing_mode, units)
    maximums = catalog.on_demand_created(BillingMode(billing["billing_mode"]), on_demand)
    warm_throughput = catalog.warm_created(warm, request_region())
    attribute_types = {d["AttributeName"]: d["AttributeType"] for d in definitions}
    local = ()
    if local_definitions:
        local = indexes.local_indexes(
            KeyShape.from_key_schema(key), local_definitions, attribute_types
        )
    global_specs: tuple[gsi.GlobalIndexSpec, ...] = ()
    if global_present:
        global_specs = gsi.check_global_indexes(
            global_definitions,
            attribute_types,
            BillingMode(billing["billing_mode"]),
            [index.name for index in local],
            request_region(),
        )
    if local_definitions or global_present:
        schema.check_definitions_used(
            definitions,
            [
                *schema.key_names({"key_schema": key}),
                *(n for i in local for n in i.key_shape.names),
                *(n for spec in global_specs for n in spec.key_shape.names),
            ],
        )
        indexes.check_projected_attribute_count(
            [
                *(indexes.Projection(i.projection, i.non_key_attributes) for i in local),
                *(spec.projection for spec in global_specs),
            ]
        )
    return {
        "name": name,
        "key_schema": key,
        "attribute_definitions": definitions,
        "indexes": local,
        "tags": tags,
        "global_indexes": global_specs,
        "stream_view_type": stream_view_type,
        "deletion_protection": bool(deletion_protection),
        "table_class": None if table_class is None else catalog.TableClass(table_class),
        "on_demand": maximums,
        "warm": warm_throughput,
        **billing,
    }


# Describing tables -----------------------------------------------------------------------------


@dataclasses.dataclass
class _Stats:
    """ItemCount and TableSizeBytes of a table, and ItemCount and IndexSizeBytes of each of its
    local indexes by name, as its nodes report them."""

    items: int = 0
    size_bytes: int = 0
    indexes: dict[str, list[int]] = dataclasses.field(default_factory=dict)


def _local_index_descriptions(table: TableDef, stats: _Stats, arn: str) -> list[dict[str, Any]]:
    """DescribeTable's LocalSecondaryIndexes."""
    described = []
    for index in table.indexes:
        if not index.local:
            continue
        projection: dict[str, Any] = {"ProjectionType": index.projection}
        if index.non_key_attributes:
            projection["NonKeyAttributes"] = list(index.non_key_attributes)
        count, size_bytes = stats.indexes.get(index.name, [0, 0])
        described.append(
            {
                "IndexName": index.name,
                "KeySchema": [
                    {"AttributeName": attribute.name, "KeyType": kind}
                    for attribute, kind in zip(
                        index.key_shape.attributes, ("HASH", "RANGE"), strict=True
                    )
                ],
                "Projection": projection,
                "IndexSizeBytes": size_bytes,
                "ItemCount": count,
                "IndexArn": f"{arn}/index/{index.name}",
            }
        )
    return described


def _description(
    table: TableDef,
    stats: _Stats,
    now: float,
    status: TableStatus | None = None,
    on_demand: dict[str, int] | None = None,
) -> dict[str, Any]:
    """DynamoDB's TableDescription of a catalog record, as of wall-clock time `now` (with
    `status` instead of the record's own, and `on_demand` as its OnDemandThroughput, when
    given)."""
    changes = table.throughput_changes
    billing_summary: dict[str, Any] = {"BillingMode": table.billing_mode.value}
    if table.billing_mode == BillingMode.PAY_PER_REQUEST:
        billing_summary["LastUpdateToPayPerRequestDateTime"] = (
            changes.pay_per_request_since or table.created
        )
    provisioned: dict[str, Any] = {
        "NumberOfDecreasesToday": catalog.decreases_today(changes, now),
        "ReadCapacityUnits": table.throughput.read,
        "WriteCapacityUnits": table.throughput.write,
    }
    if changes.last_increase is not None:
        provisioned["LastIncreaseDateTime"] = changes.last_increase
    if changes.last_decrease is not None:
        provisioned["LastDecreaseDateTime"] = changes.last_decrease
    descriptor = table.to_json()
    arn = table_arn(table.name)
    description = {
        "TableName": table.name,
        "TableStatus": (status or table.status).value,
        "KeySchema": schema.key_schema_elements(descriptor),
        "AttributeDefinitions": descriptor["attribute_definitions"],
        "CreationDateTime": table.created,
        "ProvisionedThroughput": provisioned,
        "BillingModeSummary": billing_summary,
        "ItemCount": stats.items,
        "TableSizeBytes": stats.size_bytes,
        "TableArn": arn,
        "TableId": str(uuid.UUID(hex=table.id)),
        "DeletionProtectionEnabled": table.deletion_protection,
    }
    if on_demand is None and table.billing_mode == BillingMode.PAY_PER_REQUEST:
        on_demand = table.on_demand.described()
    if on_demand:
        description["OnDemandThroughput"] = on_demand
    warm = catalog.warm_throughput(table)
    warm_status = "ACTIVE" if catalog.warm_settled(table) else "UPDATING"
    if (status or table.status) is TableStatus.DELETING:
        warm_status = "DELETING"
    description["WarmThroughput"] = {
        "ReadUnitsPerSecond": warm.read,
        "WriteUnitsPerSecond": warm.write,
        "Status": warm_status,
    }
    if table.table_class is not None:
        summary: dict[str, Any] = {"TableClass": table.table_class.value}
        if table.table_class_updated is not None:
            summary["LastUpdateDateTime"] = table.table_class_updated
        description["TableClassSummary"] = summary
    local = _local_index_descriptions(table, stats, arn)
    if local:
        description["LocalSecondaryIndexes"] = local
    stream = table.stream
    if stream is not None:
        if stream.enabled:
            description["StreamSpecification"] = {
                "StreamEnabled": True,
                "StreamViewType": stream.view_type.value,
            }
        description["LatestStreamLabel"] = stream.label
        description["LatestStreamArn"] = stream_arn(table.name, stream.label)
    on_demand_table = table.billing_mode == BillingMode.PAY_PER_REQUEST
    global_described = [
        _global_index_description(
            index, stats.indexes.get(index.name, [0, 0]), arn, on_demand_table
        )
        for index in catalog.global_indexes(table)
    ]
    if global_described:
        description["GlobalSecondaryIndexes"] = global_described
    return description


_KEY_TYPES_OF_ROLES = {"partition": "HASH", "sort": "RANGE"}


def _global_index_description(
    index: IndexDef, counts: list[int], arn: str, on_demand_table: bool
) -> dict[str, Any]:
    """One element of DescribeTable's GlobalSecondaryIndexes (seed 001 G-25, 004 O-08).

    `Backfilling` is there only for an index added by UpdateTable (004 O-33): true while it
    copies the table (IndexStatus CREATING, O-17), false before and after (O-15). `counts` is
    the index's ItemCount and the bytes of its entries; IndexSizeBytes adds each entry's 100
    bytes of overhead, as DynamoDB sizes index items (001 G-34), as local indexes do. An index
    of an on-demand table shows its OnDemandThroughput when it has one (`on_demand_table`).
    """
    projection: dict[str, Any] = {"ProjectionType": index.projection}
    if index.non_key_attributes:
        projection["NonKeyAttributes"] = list(index.non_key_attributes)
    items, size_bytes = counts
    status = IndexStatus.CREATING if index.status == IndexStatus.BACKFILLING else index.status
    warm = catalog.index_warm_throughput(index)
    described: dict[str, Any] = {
        "IndexName": index.name,
        # As CreateTable or UpdateTable gave it: the partition key attributes, then the sort key
        # attributes, each in its order.
        "KeySchema": [
            {"AttributeName": attribute.name, "KeyType": _KEY_TYPES_OF_ROLES[attribute.role]}
            for attribute in index.key_shape.attributes
        ],
        "Projection": projection,
        "IndexStatus": status.value,
        "ProvisionedThroughput": {
            "NumberOfDecreasesToday": 0,
            "ReadCapacityUnits": index.throughput.read,
            "WriteCapacityUnits": index.throughput.write,
        },
        "IndexSizeBytes": size_bytes + limits.INDEX_ENTRY_OVERHEAD_BYTES * items,
        "ItemCount": items,
        "IndexArn": f"{arn}/index/{index.name}",
        # What the index's own partitions serve at once (or what was asked for, UPDATING until
        # they do), as a table's warm throughput is.
        "WarmThroughput": {
            "ReadUnitsPerSecond": warm.read,
            "WriteUnitsPerSecond": warm.write,
            "Status": "ACTIVE" if catalog.index_warm_settled(index) else "UPDATING",
        },
    }
    if on_demand_table and not index.on_demand.empty:
        described["OnDemandThroughput"] = index.on_demand.described()
    if index.online:
        described["Backfilling"] = index.backfilling
    return described


# The counts each table partition's node last reported to a router (by table and partition id),
# per router context: DescribeTable answers a silent node's share from them (see _table_stats).
_last_counts: weakref.WeakKeyDictionary[RouterContext, dict[tuple[str, str], dict[str, Any]]] = (
    weakref.WeakKeyDictionary()
)


async def _table_stats(ctx: RouterContext, table: TableDef) -> _Stats:
    """ItemCount, TableSizeBytes and each index's counts: the sums over the table's (and each
    global index's) partitions, as the nodes report them (`_partition_counts`)."""
    indexes = catalog.global_indexes(table)
    # The table's and every global index's partitions are asked at once, within one bounded wait.
    table_counts, *index_counts = await asyncio.gather(
        _partition_counts(
            ctx,
            table.id,
            {partition.id: partition.node for partition in table.partitions},
            table.name,
        ),
        *(
            _partition_counts(
                ctx,
                _index_table_id(index),
                {partition.id: partition.node for partition in index.partitions},
                index.name,
            )
            for index in indexes
        ),
    )
    stats = _Stats()
    for counts in table_counts.values():
        stats.items += counts["items"]
        stats.size_bytes += counts["bytes"]
        for index_name, (count, size_bytes) in counts.get("indexes", {}).items():
            totals = stats.indexes.setdefault(index_name, [0, 0])
            totals[0] += count
            totals[1] += size_bytes
    for index, reported in zip(indexes, index_counts, strict=True):
        totals = stats.indexes.setdefault(index.name, [0, 0])
        for counts in reported.values():
            totals[0] += counts["items"]
            totals[1] += counts["bytes"]
    return stats


def _index_table_id(index: IndexDef) -> str:
    assert index.table_id is not None, f"global index {index.name} has no storage id"
    return index.table_id


async def _partition_counts(
    ctx: RouterContext, table_id: str, partitions: dict[str, str], what: str
) -> dict[str, dict[str, Any]]:
    """The counts of each partition (id -> its node) of a table or a global index, by partition
    id, as the nodes report them.

    DynamoDB refreshes these about every six hours; dynalab asks the nodes, within a bounded wait.
    A partition whose node does not answer in time (it is logged) counts as that node last
    reported it to this router, since a description with an older count is more useful than no
    description, and DynamoDB's own counts are hours old; one never reported is left out.
    """
    known = _last_counts.setdefault(ctx, {})
    nodes = sorted(set(partitions.values()))
    payload = ops.TableStatsPayload(table_id).to_json()
    replies = await asyncio.gather(
        *(
            ctx.control(node, ops.TABLE_STATS, payload, limits.TABLE_STATS_SECONDS_MAX)
            for node in nodes
        ),
        return_exceptions=True,
    )
    for node, reply in zip(nodes, replies, strict=True):
        if isinstance(reply, DynamoError):
            log.warning("no statistics of %s from %s: %s", what, node, reply)
            continue
        if isinstance(reply, BaseException):
            raise reply
        # Only partitions in the catalog count: a node may still report a parent it has split.
        for partition_id, counts in reply["partitions"].items():
            if partition_id in partitions:
                known[(table_id, partition_id)] = counts
    for key in [key for key in known if key[0] == table_id and key[1] not in partitions]:
        del known[key]
    return {
        partition_id: known[(table_id, partition_id)]
        for partition_id in partitions
        if (table_id, partition_id) in known
    }


# Operations ------------------------------------------------------------------------------------


def _placement(
    ctx: RouterContext, factor: int | None = None
) -> Callable[[str, int], tuple[str, ...]]:
    """Where the partitions of a new table (or global index) go: spread over the nodes in turn
    (`HashRing.spread`), each on `factor` nodes, the cluster's replication factor by default."""
    if factor is None:
        factor = min(ctx.settings.replication_factor, limits.REPLICATION_FACTOR_MAX)
    ring = ctx.ring
    copies = max(1, factor)
    return lambda key, position: ring.spread(key, copies, position)


def _new_table(
    definition: dict[str, Any],
    sources: Sources,
    owner: Callable[[str], str],
    replicas_of: Callable[[str, int], tuple[str, ...]] | None = None,
) -> TableDef:
    """The CREATING record of a new table, with its id and creation time from `sources`, its
    partitions each on the node `owner` picks for its id, or on `replicas_of`'s (`_placement`)."""
    table_id = sources.new_id()
    billing_mode = BillingMode(definition["billing_mode"])
    table = catalog.created(
        name=definition["name"],
        table_id=table_id,
        key_shape=KeyShape.from_key_schema(definition["key_schema"]),
        attribute_definitions=[
            (d["AttributeName"], d["AttributeType"]) for d in definition["attribute_definitions"]
        ],
        billing_mode=billing_mode,
        throughput=Throughput(**definition["throughput"]),
        now=sources.clock(),
        owner=owner,
        indexes=definition["indexes"],
        tags=definition["tags"],
        stream_view_type=definition["stream_view_type"],
        deletion_protection=definition["deletion_protection"],
        table_class=definition["table_class"],
        on_demand=definition["on_demand"],
        warm=definition["warm"],
        replicas_of=replicas_of,
    )
    for spec in definition["global_indexes"]:
        index = spec.placed(sources.new_id(), billing_mode, owner, replicas_of)
        table = catalog.index_added(table, index)
    return table


async def create_table(ctx: RouterContext, body: dict[str, Any]) -> dict[str, Any]:
    """CreateTable: the table machine's create flow (`router/table_lifecycle.py`) from the row
    CREATING to ACTIVE; the reply describes the row as created, CREATING, as DynamoDB's does."""
    definition = _read_create_table(body)
    name = definition["name"]
    table = _new_table(definition, ctx.sources, ctx.ring.owner, _placement(ctx))
    record = table_machine.started(Flow.CREATE, name, table=table)
    change = table_lifecycle.created(name, table, lambda: len(ctx.tables))
    ended = await table_lifecycle.run(ctx, record, first=change)
    assert ended.table is not None
    return {"TableDescription": _description(ended.table, _Stats(), ctx.sources.clock())}


async def describe_table(ctx: RouterContext, body: dict[str, Any]) -> dict[str, Any]:
    name = _read_table_name(body)
    await ctx.refresh()
    table = ctx.records.get(name)
    if table is None:
        raise table_not_found(name)
    if table.status == TableStatus.UPDATING:
        table = await _finish_update(ctx, table, limits.TABLE_STATS_SECONDS_MAX)
    stats = await _table_stats(ctx, table)
    return {"Table": _description(table, stats, ctx.sources.clock())}


async def list_tables(ctx: RouterContext, body: dict[str, Any]) -> dict[str, Any]:
    reader = RequestReader(body)
    limit = reader.integer("Limit", minimum=1, maximum=limits.LIST_TABLES_LIMIT_MAX)
    exclusive_start = reader.name("ExclusiveStartTableName")
    reader.check()
    if limit is None:
        limit = limits.LIST_TABLES_LIMIT_MAX
    await ctx.refresh()
    names = sorted(ctx.tables)
    if exclusive_start is not None:
        names = names[bisect_right(names, exclusive_start) :]
    reply: dict[str, Any] = {"TableNames": names[:limit]}
    # As DynamoDB, LastEvaluatedTableName is there only when more names follow the page.
    if len(names) > limit:
        reply["LastEvaluatedTableName"] = names[limit - 1]
    return reply


_NOT_IN_DELETE_DESCRIPTION = ("KeySchema", "AttributeDefinitions", "CreationDateTime")


async def delete_table(ctx: RouterContext, body: dict[str, Any]) -> dict[str, Any]:
    """DeleteTable: the table machine's delete flow, from the row DELETING to no row; the reply
    describes the table as it goes, with the counts read once it was marked."""
    name = _read_table_name(body)
    seen: list[tuple[TableDef, _Stats]] = []

    async def marked(table: TableDef) -> None:
        seen.append((table, await _table_stats(ctx, table)))

    record = table_machine.started(Flow.DELETE, name)
    change = table_lifecycle.marked_deleting(name, ctx.sources.clock)
    ended = await table_lifecycle.run(ctx, record, first=change, marked=marked)
    table, stats = seen[-1]
    known = _last_counts.get(ctx, {})
    for key in [key for key in known if key[0] == table.id]:
        del known[key]
    assert ended.state == TableState.GONE, ended.state
    description = _description(table, stats, ctx.sources.clock())
    # DeleteTable describes what is going, not how it was defined: DynamoDB's TableDescription
    # here has no key schema, attribute definitions or creation time (API Reference, DeleteTable).
    for member in _NOT_IN_DELETE_DESCRIPTION:
        description.pop(member, None)
    return {"TableDescription": description}


# UpdateTable ------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _IndexUpdate:
    """UpdateTable's one GlobalSecondaryIndexUpdates action: Create (with the index as read and
    the request's AttributeDefinitions, None if absent), Delete of index `name`, or Update of its
    ProvisionedThroughput (`units`, None if absent)."""

    action: str  # "Create", "Delete" or "Update"
    name: str
    create: _IndexReading | None = None
    units: dict[str, int] | None = None
    on_demand: dict[str, int] | None = None  # An Update's OnDemandThroughput members, if any.
    warm: dict[str, int] | None = None  # An Update's WarmThroughput members, if any.


_INDEX_ACTIONS = ("Update", "Create", "Delete")


def _read_index_updates(reader: RequestReader) -> list[_IndexUpdate] | None:
    """GlobalSecondaryIndexUpdates, each element's action checked against its constraints (None
    when absent); DynamoDB's rules on the actions themselves once every constraint passed."""
    elements = reader.array("GlobalSecondaryIndexUpdates")
    if elements is None:
        return None
    where = reader.where("GlobalSecondaryIndexUpdates")
    read: list[_IndexUpdateReading] = []
    for position, element in enumerate(elements, start=1):
        nested = reader.nested(element, f"{where}.{position}.member")
        actions = [action for action in _INDEX_ACTIONS if nested.present(action)]
        name: str | None = None
        creating: _IndexReading | None = None
        units: dict[str, int | None] | None = None
        on_demand = warm = None
        warm_empty = False
        for action in actions:
            inner = nested.nested(nested.mapping(action) or {}, nested.where(action))
            if action == "Create":
                creating = _read_index_definition(inner, True)
                name = creating.name
            else:
                name = inner.name("IndexName", required=True)
                if action == "Update":
                    units = _read_throughput(inner)
                    on_demand = _read_on_demand(inner)
                    warm = _read_warm(inner)
                    warm_empty = warm is None and inner.present("WarmThroughput")
        read.append(
            _IndexUpdateReading(actions, name, creating, units, on_demand, warm, warm_empty)
        )
    reader.check()
    return _index_updates(read)


@dataclasses.dataclass(frozen=True, slots=True)
class _IndexUpdateReading:
    """One element of GlobalSecondaryIndexUpdates as read in the constraint pass."""

    actions: list[str]
    name: str | None
    creating: _IndexReading | None
    units: dict[str, int | None] | None
    on_demand: dict[str, int] | None
    warm: dict[str, int] | None
    warm_empty: bool  # An Update's WarmThroughput given without a member.


def _index_updates(read: list[_IndexUpdateReading]) -> list[_IndexUpdate]:
    """The actions of GlobalSecondaryIndexUpdates past their constraints, or DynamoDB's refusal."""
    if not read:
        # An empty list: the request's other members decide (`_read_update_table`).
        return []
    updates: list[_IndexUpdate] = []
    seen: set[str] = set()
    for reading in read:
        actions, name, units = reading.actions, reading.name, reading.units
        if not actions:
            raise ValidationError(
                INVALID_PARAMETERS + "One of GlobalSecondaryIndexUpdate.Update, "
                "GlobalSecondaryIndexUpdate.Create, GlobalSecondaryIndexUpdate.Delete must not "
                "be null"
            )
        if len(actions) > 1:
            raise ValidationError(
                INVALID_PARAMETERS + "Only one global secondary index action is allowed per "
                "GlobalSecondaryIndexUpdate object"
            )
        assert name is not None
        if name in seen:
            raise ValidationError(
                INVALID_PARAMETERS + "Only one global secondary index update per index is "
                f"allowed simultaneously. Index: {name}"
            )
        seen.add(name)
        if reading.warm_empty:
            # Before the table is looked up: DynamoDB answers so even for a missing table (as
            # captured against the service: ack-api-quirks DDB-TABLE-456).
            raise ValidationError(
                f"{INVALID_PARAMETERS}WarmThroughput must have at least one of "
                f"ReadUnitsPerSecond or WriteUnitsPerSecond specified for index: {name}"
            )
        # Past reader.check(), both units are there and at least 1. Their upper bound is
        # checked once the table is found (`_check_index_units`).
        given = None if units is None else {k: v for k, v in units.items() if v is not None}
        updates.append(
            _IndexUpdate(actions[0], name, reading.creating, given, reading.on_demand, reading.warm)
        )
    online = [update for update in updates if update.action != "Update"]
    if len(online) > 1:
        raise LimitExceeded(catalog.ONLINE_INDEX_LIMIT)
    if online and len(updates) > 1:
        raise ValidationError(
            INVALID_PARAMETERS + "GlobalSecondaryIndexUpdates mixing Update with Create or "
            "Delete is not supported by UpdateTable yet"
        )
    return updates


@dataclasses.dataclass(frozen=True, slots=True)
class _UpdateTableRequest:
    name: str
    billing_mode: str | None
    units: dict[str, int] | None
    stream: tuple[bool, str | None] | None  # StreamSpecification (StreamEnabled, StreamViewType)
    # GlobalSecondaryIndexUpdates: one Create or Delete, or Updates of one index each.
    index_updates: tuple[_IndexUpdate, ...] = ()
    definitions: list[dict[str, str]] | None = None  # AttributeDefinitions, if given.
    deletion_protection: bool | None = None  # DeletionProtectionEnabled, if given.
    table_class: catalog.TableClass | None = None
    on_demand: dict[str, int] | None = None  # OnDemandThroughput's members, if any is given.
    warm: dict[str, int] | None = None  # WarmThroughput's members, if any is given.

    @property
    def changes_throughput(self) -> bool:
        return self.billing_mode is not None or self.units is not None or bool(self.on_demand)

    @property
    def changes_settings(self) -> bool:
        """Whether it sets DeletionProtectionEnabled or TableClass (the record alone)."""
        return self.deletion_protection is not None or self.table_class is not None


def _read_update_table(body: dict[str, Any]) -> _UpdateTableRequest:
    """An UpdateTable request, checked in DynamoDB's order."""
    reader = RequestReader(body)
    name = read_table_name(reader)
    definitions = None
    if reader.present("AttributeDefinitions"):
        definitions = _read_elements(
            reader,
            "AttributeDefinitions",
            (("AttributeName", None), ("AttributeType", schema.KEY_ATTRIBUTE_TYPES)),
        )
    billing_mode = reader.string("BillingMode", enum=schema.BILLING_MODES)
    throughput = _read_throughput(reader)
    stream = _read_stream_specification(reader)
    table_class = reader.string("TableClass")
    deletion_protection = reader.boolean("DeletionProtectionEnabled")
    on_demand = _read_on_demand(reader)
    warm = _read_warm(reader)
    name = table_name_checked(name)
    reader.check()
    _check_table_class(table_class)
    index_updates = _read_index_updates(reader)
    present = [member for member in _UPDATE_MEMBERS_UNSUPPORTED if reader.present(member)]
    # An empty OnDemandThroughput changes nothing and counts as none (DynamoDB answers it with an
    # InternalFailure; the request's other members decide here). So does an empty
    # GlobalSecondaryIndexUpdates, refused as empty only beside another change (as captured
    # against the service: ack-api-quirks DDB-TABLE-359).
    nothing = (
        billing_mode is None
        and throughput is None
        and stream is None
        and not index_updates
        and table_class is None
        and deletion_protection is None
        and on_demand is None
        and warm is None
    )
    if nothing and not present:
        raise ValidationError(_NOTHING_TO_UPDATE)
    if nothing and present == ["MultiRegionConsistency"]:
        # Without ReplicaUpdates the consistency applies to nothing: DynamoDB counts the
        # request as changing nothing and names every member but this one.
        raise ValidationError(_nothing_to_update(("MultiRegionConsistency",)))
    if index_updates == []:
        raise ValidationError(INVALID_PARAMETERS + "List of GlobalSecondaryIndexUpdates is empty")
    if present:
        raise ValidationError(
            INVALID_PARAMETERS + f"{present[0]} is not supported by UpdateTable yet"
        )
    _stream_view_type(stream)
    settings = table_class is not None or deletion_protection is not None
    if index_updates is not None and (
        billing_mode is not None
        or throughput is not None
        or stream is not None
        or settings
        or on_demand is not None
        or warm is not None
    ):
        raise ValidationError(
            INVALID_PARAMETERS + "GlobalSecondaryIndexUpdates together with another change "
            "of the table is not supported by UpdateTable yet"
        )
    # Past reader.check(), both units are there and at least 1.
    units = None if throughput is None else {k: v for k, v in throughput.items() if v is not None}
    if units is not None:
        for member in _THROUGHPUT_MEMBERS:
            if units[member] > limits.PROVISIONED_UNITS_VALUE_MAX:
                raise ValidationError(f"Given value {units[member]} for {member} is out of bounds")
    if billing_mode == BillingMode.PAY_PER_REQUEST and units is not None:
        raise ValidationError(
            INVALID_PARAMETERS
            + "Neither ReadCapacityUnits nor WriteCapacityUnits can be specified when "
            "BillingMode is PAY_PER_REQUEST"
        )
    return _UpdateTableRequest(
        name,
        billing_mode,
        units,
        stream,
        tuple(index_updates or ()),
        definitions,
        deletion_protection,
        None if table_class is None else catalog.TableClass(table_class),
        on_demand,
        warm,
    )


async def _push_throughput(ctx: RouterContext, table: TableDef, timeout: float) -> None:
    """Send the table's throughput settings to every node holding one of its partitions, and
    each global index's to every node holding one of the index's."""
    body = ops.UpdateThroughputPayload(table.id, catalog.throughput_document(table)).to_json()
    if table.replicated:
        # Each partition's change is an entry of its group, proposed at its leader.
        route = Route.of_table(table)
        calls = [
            ctx.call_partition(route, partition, ops.UPDATE_THROUGHPUT, body, timeout=timeout)
            for partition in table.partitions
        ]
    else:
        calls = [ctx.control(node, ops.UPDATE_THROUGHPUT, body, timeout) for node in table.nodes()]
    for index in catalog.global_indexes(table):
        assert index.table_id is not None
        document = catalog.index_throughput_document(table, index)
        index_body = ops.UpdateThroughputPayload(index.table_id, document).to_json()
        index_route = Route.of_table(table).global_index(index.name)
        if index_route is not None and any(p.replicas for p in index.partitions):
            calls.extend(
                ctx.call_partition(
                    index_route, partition, ops.UPDATE_THROUGHPUT, index_body, timeout=timeout
                )
                for partition in index.partitions
            )
            continue
        nodes = sorted({partition.node for partition in index.partitions})
        calls.extend(
            ctx.control(node, ops.UPDATE_THROUGHPUT, index_body, timeout) for node in nodes
        )
    await table_lifecycle.all_calls(calls)


async def _finish_update(ctx: RouterContext, table: TableDef, timeout: float) -> TableDef:
    """Bring an UPDATING table's nodes up to its settings and mark it ACTIVE; return it.

    If a node does not confirm in time, the table is returned still UPDATING (and logged): the next
    DescribeTable tries again.
    """
    try:
        await _push_throughput(ctx, table, timeout)
    except DynamoError as error:
        log.warning(
            "table %s stays UPDATING: a node did not take its throughput: %s", table.name, error
        )
        return table
    change = table_lifecycle.activate(table.id, table.throughput_version)
    activated = await ctx.change_table(table.name, change)
    return table if activated is None else activated


def _check_index_units(table: TableDef, updates: tuple[_IndexUpdate, ...]) -> None:
    """Refuse an index Update's units past DynamoDB's bound, once the table is found: on a
    missing table DynamoDB answers ResourceNotFoundException whatever the units, and on a table
    without that global index it answers Action Blocked (dynalite's tests, run against the
    service, pin both and the table's own bound "Given value N for M is out of bounds", which an
    existing index's units get here too: that is a guess)."""
    indexes = {index.name for index in table.indexes if index.is_global}
    for update in updates:
        if update.units is None:
            continue
        for member in _THROUGHPUT_MEMBERS:
            if update.units[member] > limits.PROVISIONED_UNITS_VALUE_MAX:
                if update.name not in indexes:
                    raise ValidationError(_INDEX_UPDATE_BLOCKED)
                raise ValidationError(
                    f"Given value {update.units[member]} for {member} is out of bounds"
                )


async def _update_index_throughput(
    ctx: RouterContext, name: str, updates: tuple[_IndexUpdate, ...]
) -> dict[str, Any]:
    """UpdateTable's GlobalSecondaryIndexUpdates Update: the indexes' new ProvisionedThroughput,
    OnDemandThroughput and WarmThroughput in the catalog (`core.catalog.index_throughput_updated`).
    New units or maximums make the table UPDATING; they are pushed to the nodes of the table and
    its indexes, then the table is ACTIVE again. A raised warm throughput is recorded for the
    routers' reconcilers to split the index's partitions to. The reply describes the table as it
    starts: an index given new units or maximums UPDATING, at its old capacity and with its new
    maximums; one given a higher warm throughput still at its old one, its Status UPDATING (as
    DynamoDB's replies show them)."""
    region = request_region()
    before: list[TableDef] = []

    def update(current: TableDef | None) -> TableDef:
        if current is None:
            raise table_not_found(name)
        _check_index_units(current, updates)
        before.append(current)
        return catalog.index_throughput_updated(
            current,
            {update.name: update.units for update in updates},
            region,
            on_demand={u.name: u.on_demand for u in updates if u.on_demand},
            warm={u.name: u.warm for u in updates if u.warm},
        )

    table = await ctx.change_table(name, update)
    assert table is not None, f"UpdateTable of {name} found no table after updating it"
    old = before[-1]
    pushed = table.throughput_version != old.throughput_version
    if pushed:
        await _finish_update(ctx, table, limits.CONTROL_CALL_SECONDS_MAX)
    stats = await _table_stats(ctx, table)
    previous = {index.name: index for index in old.indexes}
    shown = dataclasses.replace(
        table,
        indexes=tuple(
            dataclasses.replace(
                index,
                throughput=previous[index.name].throughput,
                warm=catalog.index_warm_throughput(previous[index.name]),
            )
            if index.name in previous and index.is_global
            else index
            for index in table.indexes
        ),
    )
    status = TableStatus.UPDATING if pushed else None
    description = _description(shown, stats, ctx.sources.clock(), status)
    after = {index.name: index for index in table.indexes}
    for described in description.get("GlobalSecondaryIndexes", ()):
        index_name = described["IndexName"]
        was, now = previous.get(index_name), after.get(index_name)
        if was is None or now is None:
            continue
        if (was.throughput, was.on_demand) != (now.throughput, now.on_demand):
            described["IndexStatus"] = "UPDATING"
        if was.warm != now.warm:
            described["WarmThroughput"]["Status"] = "UPDATING"
    return {"TableDescription": description}


async def update_table(ctx: RouterContext, body: dict[str, Any]) -> dict[str, Any]:
    request = _read_update_table(body)
    if request.index_updates:
        first = request.index_updates[0]
        if first.action == "Create":
            return await _create_index(ctx, request.name, first, request.definitions)
        if first.action == "Delete":
            return await _delete_index(ctx, request.name, first.name)
        return await _update_index_throughput(ctx, request.name, request.index_updates)
    if request.warm is not None:
        if request.stream is not None or request.changes_throughput or request.changes_settings:
            raise ValidationError(
                INVALID_PARAMETERS + "WarmThroughput together with another change of the table "
                "is not supported by UpdateTable yet"
            )
        return await _update_warm(ctx, request.name, request.warm)
    if request.stream is not None and (request.changes_throughput or request.changes_settings):
        raise ValidationError(
            INVALID_PARAMETERS + "StreamSpecification cannot be updated together with the "
            "table's throughput, class or deletion protection by dynalab yet"
        )
    if request.stream is not None:
        return await _update_stream(ctx, request.name, _stream_view_type(request.stream))
    if not request.changes_throughput:
        return await _update_settings(ctx, request)
    name, units = request.name, request.units
    now = ctx.sources.clock()
    region = request_region()
    mode = None if request.billing_mode is None else BillingMode(request.billing_mode)
    unchanged: list[TableDef] = []
    before: list[TableDef] = []

    def update(current: TableDef | None) -> TableDef:
        if current is None:
            raise table_not_found(name)
        updated = catalog.throughput_updated(current, mode, units, now, region, request.on_demand)
        if updated is None:
            unchanged.append(current)
            return _with_settings(current, request, now)
        before.append(current)
        return _with_settings(updated, request, now)

    table = await ctx.change_table(name, update)
    assert table is not None, f"UpdateTable of {name} found no table after updating it"
    status = None
    if unchanged and unchanged[-1] is table:
        # DynamoDB answers a request that changes nothing as if it had started an update.
        status = TableStatus.UPDATING
    else:
        assert table.status == TableStatus.UPDATING, f"UpdateTable of {name} left {table.status}"
        await _finish_update(ctx, table, limits.CONTROL_CALL_SECONDS_MAX)
    stats = await _table_stats(ctx, table)
    shown = table
    if before and before[-1].billing_mode == table.billing_mode == BillingMode.PROVISIONED:
        # DynamoDB's reply describes the table as it starts UPDATING: still at its old capacity,
        # which DescribeTable shows changed once the update is done.
        shown = dataclasses.replace(
            table,
            throughput=before[-1].throughput,
            throughput_changes=before[-1].throughput_changes,
        )
    on_demand = None
    if request.on_demand and table.billing_mode == BillingMode.PAY_PER_REQUEST:
        # The reply shows the maximums as the request merged them, a -1 that removed one as -1;
        # DescribeTable afterwards leaves a removed one out (as DynamoDB's replies do).
        merged = {**table.on_demand.described(), **request.on_demand}
        on_demand = {m: merged[m] for m in catalog.ON_DEMAND_MEMBERS if m in merged}
    description = _description(shown, stats, ctx.sources.clock(), status, on_demand)
    return {"TableDescription": description}


async def _update_warm(ctx: RouterContext, name: str, requested: dict[str, int]) -> dict[str, Any]:
    """UpdateTable's WarmThroughput: the table's row asks for more (`core.catalog.warm_updated`)
    and the reply shows it UPDATING, as DynamoDB pre-warms a table asynchronously; every router's
    reconciler then splits the table's partitions until they serve it
    (`router.table_lifecycle.prewarm`), and
    WarmThroughput's Status turns ACTIVE. The table serves requests throughout."""
    region = request_region()

    def update(current: TableDef | None) -> TableDef:
        if current is None:
            raise table_not_found(name)
        return catalog.warm_updated(current, requested, region) or current

    table = await ctx.change_table(name, update)
    assert table is not None, f"UpdateTable of {name} found no table after updating it"
    stats = await _table_stats(ctx, table)
    return {"TableDescription": _description(table, stats, ctx.sources.clock())}


def _with_settings(table: TableDef, request: _UpdateTableRequest, now: float) -> TableDef:
    """`table` with the request's DeletionProtectionEnabled and TableClass, if it has either."""
    if not request.changes_settings:
        return table
    return catalog.settings_updated(
        table,
        deletion_protection=request.deletion_protection,
        table_class=request.table_class,
        now=now,
    )


async def _update_settings(ctx: RouterContext, request: _UpdateTableRequest) -> dict[str, Any]:
    """UpdateTable of DeletionProtectionEnabled and TableClass alone: the record changes at once
    (no node holds either); the reply describes the table as DynamoDB's does while it applies a
    table class, UPDATING when the class changes."""
    name = request.name
    now = ctx.sources.clock()
    before: list[TableDef] = []

    def update(current: TableDef | None) -> TableDef:
        if current is None:
            raise table_not_found(name)
        if current.status != TableStatus.ACTIVE:
            raise catalog.table_in_use(current)
        before.append(current)
        return _with_settings(current, request, now)

    table = await ctx.change_table(name, update)
    assert table is not None, f"UpdateTable of {name} found no table after updating it"
    stats = await _table_stats(ctx, table)
    class_changed = table.table_class_updated != before[-1].table_class_updated
    status = TableStatus.UPDATING if class_changed else None
    return {"TableDescription": _description(table, stats, ctx.sources.clock(), status)}


async def _update_stream(
    ctx: RouterContext, name: str, view_type: StreamViewType | None
) -> dict[str, Any]:
    """UpdateTable's StreamSpecification: enable a new stream (`view_type`) or disable the table's.

    Enabling registers the new stream's change-feed consumer on every partition first, at the
    partition's last seq (the stream holds the changes after it), and then records the stream; so
    once the catalog names the stream, every log holds what the stream owes. A partition that
    could not register fails the request (the consumers registered so far are let go again).
    Disabling closes the stream's shards (`_disable_stream`); its consumers stay registered, so
    it is read for the retention after (`TableReconciler` lets them go then).
    """
    now = ctx.sources.clock()
    await ctx.refresh()
    current = ctx.records.get(name)
    if current is None:
        raise table_not_found(name)
    if view_type is None:
        record = table_machine.started(
            Flow.DISABLE_STREAM, name, table=current, definition={"now": now}
        )
    else:
        # Refuse before registering anything: the change checks again on the row it writes.
        label = catalog.stream_label(now, current.stream)
        catalog.stream_enabled(current, view_type, label, now)
        record = table_machine.started(
            Flow.ENABLE_STREAM,
            name,
            table=current,
            definition={"label": label, "now": now},
            view_type=view_type.value,
        )
    ended = await table_lifecycle.run(ctx, record)
    assert ended.table is not None
    stats = await _table_stats(ctx, ended.table)
    return {"TableDescription": _description(ended.table, stats, ctx.sources.clock())}


async def _create_index(
    ctx: RouterContext,
    name: str,
    update: _IndexUpdate,
    definitions: list[dict[str, str]] | None,
) -> dict[str, Any]:
    """UpdateTable's GlobalSecondaryIndexUpdates Create: the index joins the catalog CREATING
    (with its partitions placed), its partitions are created on their nodes, and the GSI
    replicator, seeing it, backfills it and makes it ACTIVE (ARCHITECTURE.md, "Global secondary
    indexes and the replicator")."""
    reading = update.create
    assert reading is not None
    index_id = ctx.sources.new_id()
    region = request_region()

    def add(current: TableDef | None) -> TableDef:
        if current is None:
            raise table_not_found(name)
        # DynamoDB checks an existing name before the index's schema.
        if any(index.name == update.name for index in current.indexes):
            raise ValidationError(catalog.INDEX_EXISTS)
        if definitions is None:
            raise ValidationError(
                INVALID_PARAMETERS
                + f"AttributeDefinitions is not specified for index: {update.name}"
            )
        types = {d["AttributeName"]: d["AttributeType"] for d in definitions}
        types.update(dict(current.attribute_definitions))
        (spec,) = gsi.check_global_indexes(
            [reading.global_definition()], types, current.billing_mode, (), region
        )
        # An index of a replicated table is replicated as the table is.
        placement = _placement(ctx, None if current.replicated else 1)
        index = spec.placed(index_id, current.billing_mode, ctx.ring.owner, placement)
        return catalog.online_index_added(
            current, index, [(key, types[key]) for key in spec.key_shape.names]
        )

    record = table_machine.started(Flow.CREATE_INDEX, name, index_name=update.name)
    ended = await table_lifecycle.run(ctx, record, first=add)
    assert ended.table is not None
    stats = await _table_stats(ctx, ended.table)
    return {"TableDescription": _description(ended.table, stats, ctx.sources.clock())}


async def _delete_index(ctx: RouterContext, name: str, index_name: str) -> dict[str, Any]:
    """UpdateTable's GlobalSecondaryIndexUpdates Delete: the table machine's index deletion, the
    index DELETING in the catalog (the replicator stops keeping it), its partitions dropped, then
    out of the catalog. The reply describes it DELETING, as DynamoDB's does, with the counts
    read once it was marked."""
    seen: list[tuple[TableDef, _Stats]] = []

    async def marked(table: TableDef) -> None:
        seen.append((table, await _table_stats(ctx, table)))

    record = table_machine.started(Flow.DELETE_INDEX, name, index_name=index_name)
    change = table_lifecycle.index_marked_deleting(name, index_name)
    await table_lifecycle.run(ctx, record, first=change, marked=marked)
    table, stats = seen[-1]
    return {"TableDescription": _description(table, stats, ctx.sources.clock())}


async def describe_limits(ctx: RouterContext, body: dict[str, Any]) -> dict[str, Any]:
    """DescribeLimits: the account's and each table's provisioned throughput quotas."""
    return {
        "AccountMaxReadCapacityUnits": limits.PROVISIONED_UNITS_PER_ACCOUNT_MAX,
        "AccountMaxWriteCapacityUnits": limits.PROVISIONED_UNITS_PER_ACCOUNT_MAX,
        "TableMaxReadCapacityUnits": limits.PROVISIONED_UNITS_PER_TABLE_MAX,
        "TableMaxWriteCapacityUnits": limits.PROVISIONED_UNITS_PER_TABLE_MAX,
    }


async def describe_endpoints(ctx: RouterContext, body: dict[str, Any]) -> dict[str, Any]:
    return {
        "Endpoints": [{"Address": ctx.advertise, "CachePeriodInMinutes": ENDPOINT_CACHE_MINUTES}]
    }


OPERATIONS = {
    "CreateTable": create_table,
    "DescribeTable": describe_table,
    "UpdateTable": update_table,
    "ListTables": list_tables,
    "DeleteTable": delete_table,
    "DescribeLimits": describe_limits,
    "DescribeEndpoints": describe_endpoints,
}
