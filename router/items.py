"""The item operations: PutItem, GetItem, UpdateItem, DeleteItem, BatchGetItem and BatchWriteItem.

Each handler reads its request in DynamoDB's three passes (`router.requests`), translates legacy
parameters (Expected, AttributeUpdates, AttributesToGet) into expressions
(`core.expressions.legacy`) so that nodes only ever see expressions, checks every expression and
placeholder, and only then looks up the table, checks the key against its schema and sends one
request to the partition that holds the key (`RouterContext.call_key`). The node evaluates the
condition and applies the write atomically, and answers with the item image ReturnValues asks for.

The batch operations check every request they carry before any is sent, so an invalid batch
writes nothing, and then fan out to the nodes concurrently, each call under the context's per-call
deadline. A key whose node is unavailable or throttled is handed back as unprocessed
(UnprocessedKeys, UnprocessedItems) for the client to retry, as DynamoDB does, rather than failing
the whole batch; only a batch of which every request was throttled fails, with
ProvisionedThroughputExceededException.

ReturnConsumedCapacity (TOTAL or INDEXES) adds ConsumedCapacity to the reply, computed here with
`core.capacity` from the sizes the nodes report: GetItem's item (read_bytes), and a write's item
before and after (old_bytes, new_bytes); batches report one entry per table, each item rounded on
its own. The nodes meter the same sizes against their partitions' token buckets.
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
from typing import Any

from core import expressions, indexes, limits, schema, table_arns, values
from core.capacity import (
    ConsumedCapacity,
    ReturnConsumedCapacity,
    UnitKind,
    item_write_units,
    read_consistency,
    read_units,
)
from core.catalog import IndexStatus
from core.errors import (
    KEY_MISMATCH,
    ServiceUnavailable,
    ThroughputExceeded,
    ValidationError,
    WriteOutcomeUnknown,
)
from core.expressions import legacy
from core.keys import KeyAttributeError
from core.size import check_item_size, item_size_bytes
from router.context import RouterContext
from router.requests import (
    CONDITIONAL_OPERATORS,
    NAME_PATTERN,
    RETURN_ITEM_COLLECTION_METRICS,
    RETURN_VALUES,
    RETURN_VALUES_OLD_ONLY,
    RETURN_VALUES_ON_FAILURE,
    RequestReader,
    check_conditional_operator,
    check_key_paths,
    check_return_values,
    key_identity,
    read_common,
)
from router.routing import Route
from rpc import ops

Item = dict[str, Any]

_DUPLICATE_KEYS = "Provided list of item keys contains duplicates"
# BatchWriteItem's answer to an entry with neither or both of PutRequest and DeleteRequest.
_ONE_REQUEST = (
    "Supplied AttributeValue has more than one datatypes set, must contain exactly one of the "
    "supported datatypes"
)
# Errors that leave one key of a batch unprocessed instead of failing the batch: the key's node
# cannot be reached in time, or its partition is over its throughput.
_RETRYABLE = (ServiceUnavailable, ThroughputExceeded)


# Expressions -----------------------------------------------------------------------------------


@dataclasses.dataclass
class _Expressions:
    """A write's or read's expressions as a node gets them: texts plus one names/values pair."""

    condition: str | None = None
    update: str | None = None
    projection: str | None = None
    names: dict[str, str] | None = None
    values: dict[str, Any] | None = None


def _merge(translations: list[legacy.Translation | None]) -> tuple[dict[str, str], dict[str, Any]]:
    """The names and values of legacy translations, whose placeholder prefixes never collide."""
    names: dict[str, str] = {}
    merged_values: dict[str, Any] = {}
    for translation in translations:
        if translation is not None:
            names.update(translation.names)
            merged_values.update(translation.values)
    return names, merged_values


def _write_expressions(
    body: dict[str, Any],
    *,
    update_text: str | None = None,
    attribute_updates: dict[str, Any] | None = None,
) -> _Expressions:
    """Check a write's ConditionExpression (or Expected) and UpdateExpression (or AttributeUpdates).

    `legacy.check_parameter_mix` has run, so the request uses either expressions, with its own
    ExpressionAttributeNames/Values, or legacy parameters, which bring generated placeholders.
    """
    expected = body.get("Expected")
    condition_text = body.get("ConditionExpression")
    conditional_operator = body.get("ConditionalOperator")
    check_conditional_operator(conditional_operator, expected)
    names = body.get("ExpressionAttributeNames")
    raw_values = body.get("ExpressionAttributeValues")
    if expected is not None or attribute_updates is not None:
        condition_translation = (
            legacy.expected_condition(expected, conditional_operator)
            if expected is not None
            else None
        )
        update_translation = (
            legacy.update_expression(attribute_updates) if attribute_updates is not None else None
        )
        legacy_names, legacy_values = _merge([condition_translation, update_translation])
        result = _Expressions(
            condition=None if condition_translation is None else condition_translation.expression,
            update=None if update_translation is None else update_translation.expression,
            names=legacy_names or None,
            values=legacy_values or None,
        )
        # The translations are checked like client expressions, which they now are.
        if result.condition is not None:
            expressions.condition(result.condition, result.names, result.values)
        if result.update is not None:
            expressions.update(result.update, result.names, result.values)
        return result
    normalised = expressions.check_attribute_maps(names, raw_values) or None
    compiled: list[Any] = []
    if update_text is not None:
        compiled.append(expressions.update(update_text, names, normalised))
    if condition_text is not None:
        compiled.append(expressions.condition(condition_text, names, normalised))
    expressions.check_unused(names, raw_values, *compiled)
    return _Expressions(
        condition=condition_text, update=update_text, names=names, values=normalised
    )


def _read_expressions(
    projection_text: str | None, attributes_to_get: list[str] | None, names: dict[str, str] | None
) -> _Expressions:
    """Check a read's ProjectionExpression, or translate its AttributesToGet into one."""
    if attributes_to_get is not None:
        translation = legacy.projection_expression(attributes_to_get)
        expressions.projection(translation.expression, translation.names)
        return _Expressions(projection=translation.expression, names=translation.names)
    expressions.check_attribute_maps(names, None)
    compiled = [] if projection_text is None else [expressions.projection(projection_text, names)]
    expressions.check_unused(names, None, *compiled)
    return _Expressions(projection=projection_text, names=names)


def _read_write_members(reader: RequestReader) -> tuple[str | None, str | None]:
    """The members PutItem, UpdateItem and DeleteItem share; returns (ReturnValues, on failure)."""
    reader.mapping("Expected")
    reader.string("ConditionalOperator", enum=CONDITIONAL_OPERATORS)
    return_values = reader.string("ReturnValues", enum=RETURN_VALUES)
    read_common(reader)
    reader.string("ReturnItemCollectionMetrics", enum=RETURN_ITEM_COLLECTION_METRICS)
    reader.string("ConditionExpression")
    reader.string_map("ExpressionAttributeNames")
    reader.attribute_map("ExpressionAttributeValues")
    on_failure = reader.string("ReturnValuesOnConditionCheckFailure", enum=RETURN_VALUES_ON_FAILURE)
    return return_values, on_failure


def _write_reply(
    reply: dict[str, Any], table_name: str, body: dict[str, Any], collection_key: Item
) -> dict[str, Any]:
    """A single write's answer: the ReturnValues image, when there is one, ConsumedCapacity
    (with its local index writes), and ItemCollectionMetrics of `collection_key` (the item's
    partition key) when asked for on a table with local indexes."""
    attributes = reply.get("attributes")
    result: dict[str, Any] = {"Attributes": attributes} if attributes else {}
    mode = capacity_mode(body)
    if mode is not ReturnConsumedCapacity.NONE:
        capacity = ConsumedCapacity()
        _add_write_units(capacity, table_name, reply)
        result["ConsumedCapacity"] = capacity.render(table_name, mode)
    metrics = _collection_metrics(reply, body, collection_key)
    if metrics is not None:
        result["ItemCollectionMetrics"] = metrics
    return result


def _add_write_units(capacity: ConsumedCapacity, table_name: str, reply: dict[str, Any]) -> None:
    """A write's units on the table, its local indexes' (which the table's throughput pays, but
    ConsumedCapacity lists apart) and its global indexes' (which each index's own throughput
    pays when the replicator writes them; seed 001 G-30)."""
    capacity.add_table(table_name, _write_units(reply), UnitKind.WRITE)
    for index_name, units in reply.get("index_units", {}).items():
        capacity.add_local_index(table_name, index_name, units, UnitKind.WRITE)
    for index_name, units in reply.get("global_index_units", {}).items():
        capacity.add_global_index(table_name, index_name, units, UnitKind.WRITE)


def _check_index_keys(item: Item, table: Route) -> None:
    """Refuse a put whose item gives an index key attribute a wrong type or an empty value
    before anything is sent, so that a BatchWriteItem holding one is refused whole, as DynamoDB
    refuses it (the node checks every write again, an update's new image included)."""
    if table.record.indexes:
        indexes.check_index_keys(item, table.record.indexes)


def _global_key_schemas(table: Route) -> list[dict[str, Any]]:
    """The table's global indexes as the node checks a write against them
    (`rpc.ops.UpdatePayload.global_indexes`): the catalog's, not the partition's, so an index
    added by UpdateTable is enforced, charged and held back for, and a deleted one no longer is.
    An online index carries its storage id and flag: it is followed under a consumer of its own
    (`core.gsi.consumer_of`), whose lag holds writes back once the index is ACTIVE."""
    return [
        {
            "name": index.name,
            "key": [[a.name, a.type, a.role] for a in index.key_shape.attributes],
            "projection": index.projection,
            "status": index.status.value,
            **(
                {"non_key_attributes": list(index.non_key_attributes)}
                if index.non_key_attributes
                else {}
            ),
            **({"table_id": index.table_id, "online": True} if index.online else {}),
        }
        for index in table.record.indexes
        if not index.local and index.status != IndexStatus.DELETING
    ]


def _collection_key(table: Route, partition_key: dict[str, Any]) -> Item:
    """The item collection a write on `table` belongs to: its partition key."""
    return {table.key_shape.partition_key.name: partition_key}


def _collection_metrics(
    reply: dict[str, Any], body: dict[str, Any], collection_key: Item
) -> dict[str, Any] | None:
    """ItemCollectionMetrics for ReturnItemCollectionMetrics SIZE, on a table with local indexes
    (the node reports its collection's size only there); None otherwise."""
    size_bytes = reply.get("collection_bytes")
    if body.get("ReturnItemCollectionMetrics") != "SIZE" or size_bytes is None:
        return None
    return {
        "ItemCollectionKey": collection_key,
        "SizeEstimateRangeGB": indexes.size_estimate_range_gb(size_bytes),
    }


def _get_payload(key: Item, compiled: _Expressions) -> ops.GetPayload:
    """The node request of one GetItem, or of one key of a BatchGetItem."""
    return ops.GetPayload(key, compiled.projection, compiled.names)


def _validated_key(raw: dict[str, Any]) -> Item:
    return values.validate_item(raw, where="Key")


def capacity_mode(body: dict[str, Any]) -> ReturnConsumedCapacity:
    """The request's ReturnConsumedCapacity, whose enum the reader has checked (NONE if absent)."""
    mode = body.get("ReturnConsumedCapacity")
    return ReturnConsumedCapacity.NONE if mode is None else ReturnConsumedCapacity(mode)


def add_capacity(
    reply: dict[str, Any],
    table_name: str,
    mode: ReturnConsumedCapacity,
    units: float,
    kind: UnitKind,
) -> dict[str, Any]:
    """`reply` with the ConsumedCapacity of a single-table request, if the client asked for it."""
    if mode is not ReturnConsumedCapacity.NONE:
        capacity = ConsumedCapacity()
        capacity.add_table(table_name, units, kind)
        reply["ConsumedCapacity"] = capacity.render(table_name, mode)
    return reply


def _write_units(reply: dict[str, Any]) -> float:
    """A write's units: the larger of the item before and after it (`core.capacity`)."""
    return item_write_units(reply["old_bytes"], reply["new_bytes"])


# Single-item operations ------------------------------------------------------------------------


async def put_item(ctx: RouterContext, body: dict[str, Any]) -> dict[str, Any]:
    """PutItem: create or replace one item, optionally under a condition."""
    reader = RequestReader(body)
    table_name = reader.table_name(required=True)
    raw_item = reader.attribute_map("Item", required=True)
    return_values, on_failure = _read_write_members(reader)
    reader.check()
    assert table_name is not None and raw_item is not None

    legacy.check_parameter_mix("PutItem", body)
    item = values.validate_item(raw_item)
    chosen = check_return_values(return_values, RETURN_VALUES_OLD_ONLY)
    item_bytes = check_item_size(item)
    compiled = _write_expressions(body)
    table = await ctx.table(table_name)
    _, partition_key, sort_key = schema.extract_key(item, table.key_shape)
    _check_index_keys(item, table)
    payload = ops.PutPayload(
        item,
        item_bytes,
        compiled.condition,
        compiled.names,
        compiled.values,
        chosen,
        on_failure == "ALL_OLD",
        _global_key_schemas(table),
    )
    reply = await ctx.call_key(table, partition_key, sort_key, ops.PUT, payload.to_json())
    return _write_reply(
        reply, table_name, body, {table.key_shape.partition_key.name: partition_key}
    )


async def update_item(ctx: RouterContext, body: dict[str, Any]) -> dict[str, Any]:
    """UpdateItem: change (or create) one item, optionally under a condition."""
    reader = RequestReader(body)
    table_name = reader.table_name(required=True)
    raw_key = reader.attribute_map("Key", required=True)
    attribute_updates = reader.mapping("AttributeUpdates")
    return_values, on_failure = _read_write_members(reader)
    update_text = reader.string("UpdateExpression")
    reader.check()
    assert table_name is not None and raw_key is not None

    legacy.check_parameter_mix("UpdateItem", body)
    key = _validated_key(raw_key)
    chosen = check_return_values(return_values, RETURN_VALUES)
    compiled = _write_expressions(
        body, update_text=update_text, attribute_updates=attribute_updates
    )
    table = await ctx.table(table_name)
    partition_key, sort_key = schema.validate_key(key, table.key_shape)
    payload = ops.UpdatePayload(
        key,
        compiled.update,
        compiled.condition,
        compiled.names,
        compiled.values,
        chosen,
        on_failure == "ALL_OLD",
        legacy=attribute_updates is not None,
        global_indexes=_global_key_schemas(table),
    )
    reply = await ctx.call_key(table, partition_key, sort_key, ops.UPDATE, payload.to_json())
    return _write_reply(
        reply, table_name, body, {table.key_shape.partition_key.name: partition_key}
    )


async def delete_item(ctx: RouterContext, body: dict[str, Any]) -> dict[str, Any]:
    """DeleteItem: remove one item, optionally under a condition."""
    reader = RequestReader(body)
    table_name = reader.table_name(required=True)
    raw_key = reader.attribute_map("Key", required=True)
    return_values, on_failure = _read_write_members(reader)
    reader.check()
    assert table_name is not None and raw_key is not None

    legacy.check_parameter_mix("DeleteItem", body)
    key = _validated_key(raw_key)
    chosen = check_return_values(return_values, RETURN_VALUES_OLD_ONLY)
    compiled = _write_expressions(body)
    table = await ctx.table(table_name)
    partition_key, sort_key = schema.validate_key(key, table.key_shape)
    payload = ops.DeletePayload(
        key,
        compiled.condition,
        compiled.names,
        compiled.values,
        chosen,
        on_failure == "ALL_OLD",
        _global_key_schemas(table),
    )
    reply = await ctx.call_key(table, partition_key, sort_key, ops.DELETE, payload.to_json())
    return _write_reply(
        reply, table_name, body, {table.key_shape.partition_key.name: partition_key}
    )


async def get_item(ctx: RouterContext, body: dict[str, Any]) -> dict[str, Any]:
    """GetItem: read one item, or some of its attributes."""
    reader = RequestReader(body)
    table_name = reader.table_name(required=True)
    raw_key = reader.attribute_map("Key", required=True)
    attributes_to_get = reader.string_list(
        "AttributesToGet", min_length=1, max_length=limits.ATTRIBUTES_TO_GET_NAMES_MAX
    )
    consistent = reader.boolean("ConsistentRead")
    read_common(reader)
    projection_text = reader.string("ProjectionExpression")
    names = reader.string_map("ExpressionAttributeNames")
    reader.check()
    assert table_name is not None and raw_key is not None

    legacy.check_parameter_mix("GetItem", body)
    key = _validated_key(raw_key)
    compiled = _read_expressions(projection_text, attributes_to_get, names)
    table = await ctx.table(table_name)
    partition_key, sort_key = schema.validate_key(key, table.key_shape)
    if compiled.projection is not None:
        check_key_paths(
            table.key_shape.names, expressions.projection(compiled.projection, compiled.names)
        )
    reply = await ctx.call_key(
        table,
        partition_key,
        sort_key,
        ops.GET,
        _get_payload(key, compiled).to_json(),
        consistent=consistent is True,
    )
    item = reply.get("item")
    # A projection that matches none of an existing item's attributes still returns Item: {}.
    result = {} if item is None else {"Item": item}
    units = read_units(reply["read_bytes"], read_consistency(consistent is True))
    return add_capacity(result, table_name, capacity_mode(body), units, UnitKind.READ)


# Batches ---------------------------------------------------------------------------------------


def _read_request_items(
    reader: RequestReader, *, tables_max: int, requests_max: int | None = None
) -> dict[str, Any]:
    """RequestItems: a map of table name to that table's requests, with the map's constraints.

    DynamoDB states a map's key and value constraints once for the whole map, not per entry.
    """
    request_items = reader.mapping(
        "RequestItems", required=True, min_length=1, max_length=tables_max
    )
    if request_items is None:
        return {}
    # A key may be a table's ARN (the TableArn shape), checked as a TableName's ARN is.
    arns = [name for name in request_items if table_arns.is_arn(name)]
    for arn in arns:
        reader.check_table_arn("RequestItems", arn)
    if not all(_is_table_name(name) for name in request_items if name not in arns):
        reader.violation(
            "RequestItems",
            request_items,
            "Map keys must satisfy constraint: ["
            f"Member must have length less than or equal to {limits.TABLE_NAME_CHARS_MAX}, "
            f"Member must have length greater than or equal to {limits.TABLE_NAME_CHARS_MIN}, "
            f"Member must satisfy regular expression pattern: {NAME_PATTERN}]",
        )
    if requests_max is not None and not all(
        1 <= len(requests) <= requests_max for requests in request_items.values()
    ):
        reader.violation(
            "RequestItems",
            request_items,
            "Map value must satisfy constraint: [Member must have length less than or equal to "
            f"{requests_max}, Member must have length greater than or equal to 1]",
        )
    return request_items


def _is_table_name(name: str) -> bool:
    return (
        limits.TABLE_NAME_CHARS_MIN <= len(name) <= limits.TABLE_NAME_CHARS_MAX
        and re.fullmatch(NAME_PATTERN, name) is not None
    )


def _check_duplicates(keys: list[Item]) -> None:
    seen: set[tuple[Any, ...]] = set()
    for key in keys:
        identity = key_identity(key)
        if identity in seen:
            raise ValidationError(_DUPLICATE_KEYS)
        seen.add(identity)


@dataclasses.dataclass(frozen=True)
class _Call:
    """One node request of a batch, prepared before any is sent."""

    table: Route
    partition_key: dict[str, Any]
    sort_key: dict[str, Any] | None
    op: str
    payload: ops.GetPayload | ops.PutPayload | ops.DeletePayload
    consistent: bool = False  # A strongly consistent read.


async def _fan_out(
    ctx: RouterContext, calls: list[_Call]
) -> list[dict[str, Any] | ServiceUnavailable | ThroughputExceeded]:
    """Send a batch's requests concurrently; each gives its reply or, if retryable, its error.

    Each call is bounded by the context's per-call deadline (a read a node does not answer in
    time is ServiceUnavailable). Any other error fails the batch once every call has finished, so
    no call is left running unobserved; among them OutcomeUnknown, a write sent and not answered,
    and WriteOutcomeUnknown, one its leader took and lost track of, which `UnprocessedItems`
    would wrongly report as not applied.
    """
    results = await asyncio.gather(
        *(
            ctx.call_key(
                call.table,
                call.partition_key,
                call.sort_key,
                call.op,
                call.payload.to_json(),
                consistent=call.consistent,
            )
            for call in calls
        ),
        return_exceptions=True,
    )
    outcomes: list[dict[str, Any] | ServiceUnavailable | ThroughputExceeded] = []
    for result in results:
        if isinstance(result, WriteOutcomeUnknown):
            raise result  # Its leader may yet commit it: never reported as unprocessed.
        if isinstance(result, BaseException) and not isinstance(result, _RETRYABLE):
            raise result
        outcomes.append(result)
    return outcomes


def _fail_if_all_throttled(
    results: list[dict[str, Any] | ServiceUnavailable | ThroughputExceeded],
) -> None:
    """DynamoDB fails a batch of which no request could be served for lack of throughput."""
    if results and all(isinstance(result, ThroughputExceeded) for result in results):
        first = results[0]
        assert isinstance(first, ThroughputExceeded)
        raise first


@dataclasses.dataclass
class _TableReads:
    """One table's part of a BatchGetItem: its members as read, then its keys and projection."""

    name: str
    request: dict[str, Any]
    raw_keys: list[Any]
    attributes_to_get: list[str] | None
    consistent: bool
    projection_text: str | None
    names: dict[str, str] | None
    keys: list[Item] = dataclasses.field(default_factory=list)
    compiled: _Expressions = dataclasses.field(default_factory=_Expressions)


def _read_table_reads(reader: RequestReader, name: str, table_request: Any) -> _TableReads:
    nested = reader.nested(table_request, f"{reader.where('RequestItems')}.{name}.member")
    raw_keys = nested.array(
        "Keys", required=True, min_length=1, max_length=limits.BATCH_GET_ITEMS_MAX
    )
    for raw_key in raw_keys or ():
        nested.nested(raw_key, nested.where("Keys"))
    return _TableReads(
        name=name,
        request=table_request,
        raw_keys=raw_keys or [],
        attributes_to_get=nested.string_list(
            "AttributesToGet", min_length=1, max_length=limits.ATTRIBUTES_TO_GET_NAMES_MAX
        ),
        consistent=nested.boolean("ConsistentRead") is True,
        projection_text=nested.string("ProjectionExpression"),
        names=nested.string_map("ExpressionAttributeNames"),
    )


async def batch_get_item(ctx: RouterContext, body: dict[str, Any]) -> dict[str, Any]:
    """BatchGetItem: up to 100 items from one or more tables, read concurrently."""
    reader = RequestReader(body)
    request_items = _read_request_items(reader, tables_max=limits.BATCH_GET_ITEMS_MAX)
    read_common(reader)
    reads = [_read_table_reads(reader, name, part) for name, part in request_items.items()]
    reader.check()

    total = 0
    # A table named once by its name and once by its ARN is one table, so its keys are checked
    # for duplicates together, as BatchWriteItem's are (DynamoDB's reference says only that "each
    # table name or ARN can be used only once"; treating the two as one table is a guess).
    keys_by_table: dict[str, list[Item]] = {}
    for read in reads:
        legacy.check_parameter_mix("BatchGetItem", read.request)
        read.keys = [_validated_key(raw_key) for raw_key in read.raw_keys]
        same_table = keys_by_table.setdefault(table_arns.table_name_of(read.name), [])
        same_table.extend(read.keys)
        _check_duplicates(same_table)
        total += len(read.keys)
        if total > limits.BATCH_GET_ITEMS_MAX:
            raise ValidationError("Too many items requested for the BatchGetItem call")
        read.compiled = _read_expressions(read.projection_text, read.attributes_to_get, read.names)

    tables = {read.name: await ctx.table(read.name) for read in reads}
    calls: list[_Call] = []
    for read in reads:
        table = tables[read.name]
        for key in read.keys:
            partition_key, sort_key = schema.validate_key(key, table.key_shape)
            payload = _get_payload(key, read.compiled)
            calls.append(_Call(table, partition_key, sort_key, ops.GET, payload, read.consistent))
    results = await _fan_out(ctx, calls)
    _fail_if_all_throttled(results)

    responses: dict[str, list[Item]] = {read.name: [] for read in reads}
    unprocessed: dict[str, dict[str, Any]] = {}
    capacity = ConsumedCapacity()
    reply_bytes = 0
    outcomes = iter(results)
    for read in reads:
        capacity.add_table(read.name, 0.0, UnitKind.READ)
        for key in read.keys:
            result = next(outcomes)
            if isinstance(result, dict):
                # Each item rounded on its own, as DynamoDB meters a batch.
                units = read_units(result["read_bytes"], read_consistency(read.consistent))
                capacity.add_table(read.name, units, UnitKind.READ)
                item = result.get("item")
                if item is None:
                    continue
                # DynamoDB returns at most 16 MB; what does not fit is left for the next call.
                reply_bytes += item_size_bytes(item)
                if reply_bytes <= limits.BATCH_GET_BYTES_MAX:
                    responses[read.name].append(item)
                    continue
            entry = unprocessed.setdefault(read.name, _unprocessed_template(read.request))
            entry["Keys"].append(key)
    reply: dict[str, Any] = {"Responses": responses, "UnprocessedKeys": unprocessed}
    consumed = capacity.render_all(capacity_mode(body))
    if consumed is not None:
        reply["ConsumedCapacity"] = consumed
    return reply


def _unprocessed_template(table_request: dict[str, Any]) -> dict[str, Any]:
    """A table's UnprocessedKeys entry: its keys to retry with the parameters they came with."""
    entry: dict[str, Any] = {"Keys": []}
    for member in (
        "AttributesToGet",
        "ConsistentRead",
        "ProjectionExpression",
        "ExpressionAttributeNames",
    ):
        if table_request.get(member) is not None:
            entry[member] = table_request[member]
    return entry


@dataclasses.dataclass
class _Write:
    """One PutRequest or DeleteRequest of a BatchWriteItem, validated."""

    table: str
    entry: dict[str, Any]
    item: Item | None = None
    key: Item | None = None
    item_bytes: int = 0


def _read_write_request(reader: RequestReader, entry: Any, where: str) -> None:
    """Shape-check one WriteRequest: {PutRequest: {Item}} or {DeleteRequest: {Key}}."""
    nested = reader.nested(entry, where)
    put = nested.mapping("PutRequest")
    if put is not None:
        nested.nested(put, nested.where("PutRequest")).attribute_map("Item", required=True)
    delete = nested.mapping("DeleteRequest")
    if delete is not None:
        nested.nested(delete, nested.where("DeleteRequest")).attribute_map("Key", required=True)


async def batch_write_item(ctx: RouterContext, body: dict[str, Any]) -> dict[str, Any]:
    """BatchWriteItem: up to 25 puts and deletes over one or more tables, applied concurrently."""
    reader = RequestReader(body)
    request_items = _read_request_items(
        reader,
        tables_max=limits.BATCH_WRITE_ITEMS_MAX,
        requests_max=limits.BATCH_WRITE_ITEMS_MAX,
    )
    read_common(reader)
    reader.string("ReturnItemCollectionMetrics", enum=RETURN_ITEM_COLLECTION_METRICS)
    for name, requests in request_items.items():
        where = f"{reader.where('RequestItems')}.{name}.member"
        for index, entry in enumerate(requests, start=1):
            _read_write_request(reader, entry, f"{where}.{index}.member")
    reader.check()

    if sum(len(requests) for requests in request_items.values()) > limits.BATCH_WRITE_ITEMS_MAX:
        raise ValidationError("Too many items requested for the BatchWriteItem call")
    writes: list[_Write] = []
    for name, requests in request_items.items():
        for entry in requests:
            put, delete = entry.get("PutRequest"), entry.get("DeleteRequest")
            if (put is None) == (delete is None):
                raise ValidationError(_ONE_REQUEST)
            if put is not None:
                item = values.validate_item(put["Item"])
                writes.append(_Write(name, entry, item=item, item_bytes=check_item_size(item)))
            else:
                writes.append(_Write(name, entry, key=_validated_key(delete["Key"])))

    tables = {name: await ctx.table(name) for name in request_items}
    calls: list[_Call] = []
    # Keyed by table, not by spelling: a table named by its name and by its ARN is one table.
    keys_by_table: dict[str, list[Item]] = {}
    for write in writes:
        table = tables[write.table]
        try:
            if write.item is not None:
                key, partition_key, sort_key = schema.extract_key(write.item, table.key_shape)
                _check_index_keys(write.item, table)
                payload: ops.PutPayload | ops.DeletePayload = ops.PutPayload(
                    write.item, write.item_bytes, global_indexes=_global_key_schemas(table)
                )
                op = ops.PUT
            else:
                assert write.key is not None
                partition_key, sort_key = schema.validate_key(write.key, table.key_shape)
                key = write.key
                payload = ops.DeletePayload(write.key, global_indexes=_global_key_schemas(table))
                op = ops.DELETE
        except KeyAttributeError:
            # BatchWriteItem reports an item's missing or mistyped key attribute as a mismatch.
            raise ValidationError(KEY_MISMATCH) from None
        keys_by_table.setdefault(table_arns.table_name_of(write.table), []).append(key)
        calls.append(_Call(table, partition_key, sort_key, op, payload))
    for keys in keys_by_table.values():
        _check_duplicates(keys)

    results = await _fan_out(ctx, calls)
    _fail_if_all_throttled(results)
    unprocessed: dict[str, list[dict[str, Any]]] = {}
    capacity = ConsumedCapacity()
    for name in request_items:
        capacity.add_table(name, 0.0, UnitKind.WRITE)
    collection_metrics: dict[str, list[dict[str, Any]]] = {}
    for write, call, result in zip(writes, calls, results, strict=True):
        if isinstance(result, dict):
            _add_write_units(capacity, write.table, result)
            collection_key = _collection_key(call.table, call.partition_key)
            metrics = _collection_metrics(result, body, collection_key)
            if metrics is not None:
                collection_metrics.setdefault(write.table, []).append(metrics)
        else:
            unprocessed.setdefault(write.table, []).append(write.entry)
    reply: dict[str, Any] = {"UnprocessedItems": unprocessed}
    consumed = capacity.render_all(capacity_mode(body))
    if consumed is not None:
        reply["ConsumedCapacity"] = consumed
    if collection_metrics:
        reply["ItemCollectionMetrics"] = collection_metrics
    return reply


OPERATIONS = {
    "PutItem": put_item,
    "GetItem": get_item,
    "UpdateItem": update_item,
    "DeleteItem": delete_item,
    "BatchGetItem": batch_get_item,
    "BatchWriteItem": batch_write_item,
}
