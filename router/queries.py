"""Query and Scan: reading pages of items, walking a table's partitions in storage-key order.

A table's items are ordered by their storage key `(hash64(pk), pk, sk)` (`core.keycodec`), and its
partitions tile that order. Both operations read one page per call, as DynamoDB does: at most
`Limit` items and at most 1 MB of them, both counted on the items read *before* the filter, with a
`LastEvaluatedKey` (the key of the last item read) whenever the page stopped at one of those bounds
and more items may follow (never for a Query of a table without a sort key, which reads one item
at most and cannot be restarted). A page may span partitions: when a partition is exhausted and
the page still has room, the walk goes on into the next one with what is left of both bounds.

- Scan walks the whole table, or with Segment/TotalSegments one slice of the hash space
  (`core.placement.segment_hash_range`), so that the segments together read every item once.
- Query reads one item collection (one partition key), in sort-key order or reversed
  (ScanIndexForward). A collection usually lies in one partition, but a partition that is a single
  collection splits at a sort key (DESIGN.md, "Splits"), so the walk is the same as Scan's.

ReturnConsumedCapacity reports the read units of every partition the page read, each rounded on
its own (`core.capacity.query_read_units`): DynamoDB meters a request per partition it searched.
The node charges the same units to that partition's read bucket.

A call resumes from its ExclusiveStartKey: the partition holding that key's storage key reads on
from just after it. When a split changes the partition map under a walk, the router context sends
the request to the partition that now holds the walk's cursor, and the walk continues after the
partition that actually answered, so no item is read twice or skipped.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from core import expressions, indexes, keycodec, limits, values
from core.capacity import (
    ConsumedCapacity,
    ReturnConsumedCapacity,
    UnitKind,
    query_read_units,
    read_consistency,
)
from core.catalog import IndexDef, IndexStatus, PartitionDef
from core.errors import (
    INVALID_PARAMETERS,
    DynamoError,
    ResourceNotFound,
    ServiceUnavailable,
    ValidationError,
)
from core.expressions import legacy
from core.keys import KeyShape
from core.placement import segment_hash_range
from core.size import check_key_value
from router.context import TABLE_NOT_FOUND, RouterContext
from router.items import add_capacity, capacity_mode
from router.requests import (
    CONDITIONAL_OPERATORS,
    SELECT_VALUES,
    RequestReader,
    check_conditional_operator,
    check_index,
    check_key_paths,
    read_common,
    select_mode,
)
from router.routing import Route
from rpc import ops

Item = dict[str, Any]

_STARTING_KEY_INVALID = "The provided starting key is invalid"


# Walking partitions ----------------------------------------------------------------------------


@dataclasses.dataclass
class _Page:
    """What one Query or Scan call has read so far, over however many partitions."""

    items: list[Item] = dataclasses.field(default_factory=list)
    count: int = 0
    scanned: int = 0
    read_bytes: int = 0
    last_key: Item | None = None
    read_units: float = 0.0
    # Of `read_units`, what reading items from the table for an index's entries cost (a fetch).
    fetched_units: float = 0.0


@dataclasses.dataclass(frozen=True)
class _Walk:
    """One page's walk: the node operation, its payload and the key range to cover.

    `request` is the node request, whose paging (exclusive_start, limit, page_bytes) the walk
    sets before each step; `low` and `high` bound the storage keys [low, high) the walk may visit
    (high None: no bound).
    """

    op: str
    request: ops.PagePayload
    low: bytes
    high: bytes | None
    forward: bool
    limit: int | None
    consistent: bool = False
    # The key shape of what the walk reads: a local index's entries, or (None) the table's items.
    shape: KeyShape | None = None


def _partition_below(partitions: list[PartitionDef], bound: bytes | None) -> PartitionDef:
    """The partition holding the greatest keys below `bound` (None: the last partition)."""
    if bound is None:
        return partitions[-1]
    chosen = partitions[0]
    for partition in partitions[1:]:
        if bytes.fromhex(partition.start) >= bound:
            break
        chosen = partition
    return chosen


async def _current(ctx: RouterContext, table: Route) -> Route:
    """The table's current route (or, for a global index's, the index's as the table now has
    it), failing as on a missing table if it was dropped meanwhile."""
    current: Route | None = await ctx.table(table.name)
    if current is not None and table.index is not None:
        current = current.global_index(table.index)
    if current is None or current.id != table.id:
        raise ResourceNotFound(TABLE_NOT_FOUND)
    return current


async def _walk(
    ctx: RouterContext,
    table: Route,
    walk: _Walk,
    start: Item | None,
) -> _Page:
    """Read one page over [walk.low, walk.high), resuming after the key `start` if given.

    Each step asks the partition holding the cursor for what is left of the page. The step ends
    the page when the node stopped at a bound (it names its last key) or when the walk's range is
    covered; otherwise the cursor moves past the partition that answered.
    """
    page = _Page()
    # The cursor: a storage key (forward: where to go on from; backward: an exclusive upper
    # bound) and the key item to read after, None to read from the partition's edge.
    shape = table.key_shape if walk.shape is None else walk.shape
    position = (
        shape.storage_key(start) if start is not None else (walk.low if walk.forward else walk.high)
    )
    after = start
    redirects = 0
    while True:
        partitions = table.partitions.partitions
        if walk.forward or after is not None:
            assert position is not None
            partition = table.partitions.lookup(position)
            # Ask about the part of the partition from the cursor on: if a split overtakes the
            # request, the context resends it to the partition that holds the cursor.
            resend_at: bytes | None = position
        else:
            partition, resend_at = _partition_below(partitions, position), None
        # The walk's own payload, whose paging moves with the cursor; each step sends its JSON.
        payload = walk.request
        payload.exclusive_start = after
        payload.limit = None if walk.limit is None else walk.limit - page.scanned
        payload.page_bytes = limits.QUERY_PAGE_BYTES_MAX - page.read_bytes
        reply = await ctx.call_partition(
            table,
            partition,
            walk.op,
            payload.to_json(),
            consistent=walk.consistent,
            start=resend_at,
        )
        # The partition that answered: the one asked about, or the one the context resent the
        # request to after a split.
        answered: PartitionDef = reply["partition"]
        if answered is not partition:
            table = await _current(ctx, table)
            if not walk.forward and after is None and not _reaches(answered, position):
                # A backward step was resent to the lowest child of a split partition, which does
                # not hold the keys just below the cursor: look the cursor up again.
                redirects += 1
                if redirects > limits.STALE_EPOCH_ATTEMPTS_MAX:
                    raise ServiceUnavailable("The partition map kept changing during this page")
                continue
        page.items.extend(reply["items"])
        page.count += reply["count"]
        page.scanned += reply["scanned"]
        page.read_bytes += reply["read_bytes"]
        consistency = read_consistency(walk.consistent)
        # A fetched item counts rounded up to 4 KB on its own (`rpc.ops`): what is left is the
        # entries' bytes, rounded once.
        fetched_bytes = reply.get("fetched_bytes", 0)
        fetched_units = fetched_bytes // limits.READ_UNIT_BYTES * consistency.value
        page.read_units += (
            query_read_units(reply["read_bytes"] - fetched_bytes, consistency) + fetched_units
        )
        page.fetched_units += fetched_units
        if reply["last_key"] is not None:
            page.last_key = reply["last_key"]
            return page
        edge = answered.end if walk.forward else answered.start
        if edge is None:
            return page  # Forward past the last partition: the walk's range is covered.
        if walk.forward:
            covered = walk.high is not None and bytes.fromhex(edge) >= walk.high
        else:
            covered = bytes.fromhex(edge) <= walk.low
        if covered:
            return page
        # A node names its last key whenever a bound stops its page (rpc.ops), so a
        # partition read to its end left room in the page.
        assert (walk.limit is None or page.scanned < walk.limit) and (
            page.read_bytes < limits.QUERY_PAGE_BYTES_MAX
        ), f"partition {answered.id} reached a page bound without naming its last key"
        position, after = bytes.fromhex(edge), None


def _reaches(partition: PartitionDef, bound: bytes | None) -> bool:
    """Whether `partition` holds the keys just below the exclusive upper bound `bound`."""
    end = partition.end
    if end is None:
        return True
    return bound is not None and bytes.fromhex(end) >= bound


def _reply(
    page: _Page, select: str, table_name: str, body: dict[str, Any], index: IndexDef | None
) -> dict[str, Any]:
    reply: dict[str, Any] = {"Count": page.count, "ScannedCount": page.scanned}
    if select != "COUNT":
        reply["Items"] = page.items
    if page.last_key is not None:
        reply["LastEvaluatedKey"] = page.last_key
    mode = capacity_mode(body)
    if index is None or mode is ReturnConsumedCapacity.NONE:
        return add_capacity(reply, table_name, mode, page.read_units, UnitKind.READ)
    capacity = ConsumedCapacity()
    if not index.local:
        # A global index's reads are its own, not the table's (seed 001 G-21).
        capacity.add_global_index(table_name, index.name, page.read_units, UnitKind.READ)
        reply["ConsumedCapacity"] = capacity.render(table_name, mode)
        return reply
    # A local index's reads come out of the table's throughput; ConsumedCapacity shows the
    # index's entries under LocalSecondaryIndexes and the items fetched for them under Table.
    capacity.add_table(table_name, page.fetched_units, UnitKind.READ)
    capacity.add_local_index(
        table_name, index.name, page.read_units - page.fetched_units, UnitKind.READ
    )
    reply["ConsumedCapacity"] = capacity.render(table_name, mode)
    return reply


@dataclasses.dataclass(frozen=True)
class _Read:
    """What a Query or Scan reads: the table, a local index in the table's partitions, or a
    global index in partitions of its own.

    `walked` is the route the walk goes over (a global index's: its id and partitions), `shape`
    the key of what it reads (None: the table's items) and `local` the local index the node reads
    entries of.
    """

    index: IndexDef | None
    walked: Route
    shape: KeyShape | None
    local: IndexDef | None


def _what_to_read(table: Route, index_name: str | None, select: str, consistent: bool) -> _Read:
    """The table or index an IndexName names, refusing what a global index cannot answer."""
    index = check_index(index_name, table)
    if index is None:
        return _Read(None, table, None, None)
    if index.local:
        return _Read(index, table, indexes.entry_shape(index, table.key_shape), index)
    _check_global_read(index, select, consistent)
    walked = table.global_index(index.name)
    assert walked is not None, "an ACTIVE global index has its storage id"
    return _Read(index, walked, walked.key_shape, None)


def _check_global_read(index: IndexDef, select: str, consistent: bool) -> None:
    """A global index answers only eventually consistent reads (seed 001 G-26), and returns only
    what it projects: it cannot fetch from the table (G-11). An index is read only once ACTIVE
    (seed 004 O-20); one being deleted is no longer the table's (O-09)."""
    if index.status == IndexStatus.DELETING:
        raise ValidationError(f"The table does not have the specified index: {index.name}")
    if index.status != IndexStatus.ACTIVE:
        raise ValidationError("Cannot read from backfilling global secondary index")
    if consistent:
        raise ValidationError("Consistent reads are not supported on global secondary indexes")
    if select == "ALL_ATTRIBUTES" and index.projection != "ALL":
        raise ValidationError(
            INVALID_PARAMETERS + "Select type ALL_ATTRIBUTES is not supported for global "
            f"secondary index {index.name} because its projection type is not ALL"
        )


def _index_select(table: Route, index_name: str | None, select: str, body: dict[str, Any]) -> str:
    """The Select of a read of a global index: without Select and without a projection,
    DynamoDB returns what the index projects (ALL_PROJECTED_ATTRIBUTES), not ALL_ATTRIBUTES."""
    index = check_index(index_name, table)
    if index is None or index.local:
        return select
    implicit = all(body.get(member) is None for member in _SELECTING_MEMBERS)
    return "ALL_PROJECTED_ATTRIBUTES" if implicit else select


# The members that choose what a read returns; without any, an index read returns its projection.
_SELECTING_MEMBERS = ("Select", "ProjectionExpression", "AttributesToGet")


def _needs_fetch(index: IndexDef, table: Route, select: str, compiled: _Expressions) -> bool:
    """Whether reading `index` must fetch each entry's item from the table: the request returns
    all attributes or names one the index does not project, in its projection or its filter
    (seed 000 L-16, L-17; a filter reads the item's attributes like a projection does)."""
    if index.projection == "ALL":
        return False
    if select == "ALL_ATTRIBUTES":
        return True
    names: set[str] = set()
    if compiled.projection is not None and select == "SPECIFIC_ATTRIBUTES":
        names |= compiled.projection.top_level_attributes
    if compiled.filter is not None:
        names |= compiled.filter.top_level_attributes
    return not indexes.projected(index, table.key_shape, names)


def _checked_starting_key(key: Item, shape: KeyShape) -> Item:
    """An ExclusiveStartKey of what a Query or Scan reads (`shape`: the table's key, or an
    index's entry key, which holds the index's key and the table's: what its LastEvaluatedKey
    holds), checked against it."""
    try:
        return shape.check_key(key)
    except DynamoError as error:
        raise ValidationError(f"{_STARTING_KEY_INVALID}: {error.message}") from None


# Reading requests ------------------------------------------------------------------------------


@dataclasses.dataclass
class _Reading:
    """The filter, projection and paging members a Query and a Scan share, as read."""

    attributes_to_get: list[str] | None
    conditional_operator: str | None
    exclusive_start: Item | None
    projection: str | None
    filter: str | None
    names: dict[str, str] | None
    values: dict[str, Any] | None


def _read_tail(
    reader: RequestReader, attributes_to_get: list[str] | None, conditional_operator: str | None
) -> _Reading:
    """Read the expression members both operations end with; the legacy ones were read before."""
    return _Reading(
        attributes_to_get=attributes_to_get,
        conditional_operator=conditional_operator,
        exclusive_start=reader.attribute_map("ExclusiveStartKey"),
        projection=reader.string("ProjectionExpression"),
        filter=reader.string("FilterExpression"),
        names=reader.string_map("ExpressionAttributeNames"),
        values=reader.attribute_map("ExpressionAttributeValues"),
    )


def _starting_key(raw: Item | None) -> Item | None:
    """ExclusiveStartKey with its values validated ("The provided starting key is invalid: ...")."""
    if raw is None:
        return None
    try:
        return values.validate_item(raw, where="ExclusiveStartKey")
    except ValidationError as error:
        raise ValidationError(f"{_STARTING_KEY_INVALID}: {error.message}") from None


@dataclasses.dataclass
class _Expressions:
    """A request's filter and projection as the node gets them, and what the router checked."""

    filter: expressions.Condition | None
    projection: expressions.Projection | None
    names: dict[str, str] | None
    values: dict[str, Any] | None

    def parsed(self) -> tuple[expressions.Condition | expressions.Projection, ...]:
        """The expressions the request has, for `expressions.check_unused`."""
        return tuple(c for c in (self.filter, self.projection) if c is not None)


def _filter_and_projection(
    operation: str,
    reading: _Reading,
    legacy_filter: Any,
    values_normalised: dict[str, Any],
) -> _Expressions:
    """Compile FilterExpression and ProjectionExpression, or translate QueryFilter/ScanFilter and
    AttributesToGet into them (the two kinds never mix: `legacy.check_parameter_mix`)."""
    names = reading.names
    expression_values: dict[str, Any] | None = values_normalised or None
    filter_text, projection_text = reading.filter, reading.projection
    if legacy_filter is not None or reading.attributes_to_get is not None:
        names, expression_values = {}, {}
        if legacy_filter is not None:
            parameter = "QueryFilter" if operation == "Query" else "ScanFilter"
            translated = legacy.filter_condition(
                legacy_filter, reading.conditional_operator, parameter=parameter
            )
            if translated is not None:
                filter_text = translated.expression
                names.update(translated.names)
                expression_values.update(translated.values)
        if reading.attributes_to_get is not None:
            translated = legacy.projection_expression(reading.attributes_to_get)
            projection_text = translated.expression
            names.update(translated.names)
        names = names or None
        expression_values = expression_values or None
    compiled_filter = (
        None
        if filter_text is None
        else expressions.condition(filter_text, names, expression_values, kind="FilterExpression")
    )
    compiled_projection = (
        None if projection_text is None else expressions.projection(projection_text, names)
    )
    return _Expressions(compiled_filter, compiled_projection, names, expression_values)


# Scan ------------------------------------------------------------------------------------------


async def scan(ctx: RouterContext, body: dict[str, Any]) -> dict[str, Any]:
    """Scan: one page of a table (or of one parallel-scan segment) in storage-key order."""
    reader = RequestReader(body)
    # Members are read in the order DynamoDB lists their constraint violations.
    limit = reader.integer("Limit", minimum=1)
    total_segments = reader.integer(
        "TotalSegments", minimum=1, maximum=limits.SCAN_TOTAL_SEGMENTS_MAX
    )
    read_common(reader)
    attributes_to_get = reader.string_list(
        "AttributesToGet", min_length=1, max_length=limits.ATTRIBUTES_TO_GET_NAMES_MAX
    )
    select = reader.string("Select", enum=SELECT_VALUES)
    table_name = reader.table_name(required=True)
    segment = reader.integer("Segment", minimum=0, maximum=limits.SCAN_TOTAL_SEGMENTS_MAX - 1)
    scan_filter = reader.mapping("ScanFilter")
    conditional_operator = reader.string("ConditionalOperator", enum=CONDITIONAL_OPERATORS)
    index_name = reader.name("IndexName")
    consistent = reader.boolean("ConsistentRead") is True
    reading = _read_tail(reader, attributes_to_get, conditional_operator)
    reader.check()
    assert table_name is not None

    legacy.check_parameter_mix("Scan", body)
    check_conditional_operator(conditional_operator, scan_filter)
    exclusive_start = _starting_key(reading.exclusive_start)
    if segment is not None and total_segments is None:
        raise ValidationError(
            "The TotalSegments parameter is required but was not present in the request when "
            "Segment parameter is present"
        )
    if total_segments is not None and segment is None:
        raise ValidationError(
            "The Segment parameter is required but was not present in the request when "
            "parameter TotalSegments is present"
        )
    hash_range: tuple[int, int | None] | None = None
    if segment is not None and total_segments is not None:
        hash_range = segment_hash_range(segment, total_segments)
    values_normalised = expressions.check_attribute_maps(reading.names, reading.values)
    compiled = _filter_and_projection("Scan", reading, scan_filter, values_normalised)
    expressions.check_unused(reading.names, reading.values, *compiled.parsed())
    select = select_mode(
        select,
        projection=reading.projection is not None,
        attributes_to_get=attributes_to_get is not None,
        index_name=index_name,
    )

    table = await ctx.table(table_name)
    select = _index_select(table, index_name, select, body)
    read = _what_to_read(table, index_name, select, consistent)
    index, shape, local = read.index, read.shape, read.local
    check_key_paths(table.key_shape.names, compiled.filter, compiled.projection)
    low, high = b"", None
    hash_start: int | None = None
    hash_end: int | None = None
    if hash_range is not None:
        hash_start, hash_end = hash_range
        low = hash_start.to_bytes(keycodec.HASH_BYTES, "big")
        high = None if hash_end is None else hash_end.to_bytes(keycodec.HASH_BYTES, "big")
    request = ops.ScanPayload(
        filter=None if compiled.filter is None else compiled.filter.text,
        projection=None if compiled.projection is None else compiled.projection.text,
        names=compiled.names,
        values=compiled.values,
        select=select,
        hash_start=hash_start,
        hash_end=hash_end,
        index=None if local is None else local.name,
        fetch=local is not None and _needs_fetch(local, table, select, compiled),
    )
    if exclusive_start is not None:
        start_shape = table.key_shape if shape is None else shape
        start = _checked_starting_key(exclusive_start, start_shape)
        start_hash = start_shape.placement_hash(
            [start[attribute.name] for attribute in start_shape.partition_attributes]
        )
        if hash_range is not None and not _in_segment(start_hash, hash_range):
            raise ValidationError(
                f"{_STARTING_KEY_INVALID}: Invalid ExclusiveStartKey. Please use "
                f"ExclusiveStartKey with correct Segment. TotalSegments: {total_segments} "
                f"Segment: {segment}"
            )
    walk = _Walk(
        op=ops.SCAN,
        request=request,
        low=low,
        high=high,
        forward=True,
        limit=limit,
        consistent=consistent,
        shape=shape,
    )
    page = await _walk(ctx, read.walked, walk, exclusive_start)
    return _reply(page, select, table_name, body, index)


def _key_condition(
    key_shape: KeyShape,
    form: expressions.KeyConditionForm | None,
    translation: legacy.Translation | None,
) -> tuple[expressions.KeyCondition, tuple[Any, ...]]:
    """A Query's key condition held against `key_shape`, from its KeyConditionExpression's
    checked `form` or KeyConditions' `translation`, and the expressions whose placeholders count
    as used (a translation's are its own, not the request's)."""
    sort = key_shape.sort_key
    multi_attribute = len(key_shape.attributes) > 1 + (sort is not None)
    if translation is not None:
        if multi_attribute:
            condition = expressions.index_key_condition(
                translation.expression, translation.names, translation.values, key_shape
            )
        else:
            condition = expressions.key_condition(
                translation.expression,
                translation.names,
                translation.values,
                key_shape.partition_key.name,
                None if sort is None else sort.name,
                hash_type=key_shape.partition_key.type,
                range_type=None if sort is None else sort.type,
            )
        return condition, ()
    assert form is not None
    if multi_attribute:
        condition = expressions.index_key_condition_of(form, key_shape)
    else:
        condition = expressions.key_condition_of(
            form,
            key_shape.partition_key.name,
            None if sort is None else sort.name,
            hash_type=key_shape.partition_key.type,
            range_type=None if sort is None else sort.type,
        )
    return condition, (condition,)


def _check_key_conditions_name_the_key(key_conditions: dict[str, Any], key_shape: KeyShape) -> None:
    """Refuse KeyConditions that leave out a key attribute they must name, as the key condition's
    own check would (`core.expressions.keycondition`), before their operators are looked at: the
    partition key attributes, and a sort key when there are as many conditions as key attributes."""
    names = [attribute.name for attribute in key_shape.attributes]
    if len(key_conditions) > len(names):
        return  # more conditions than key attributes: "Query key condition not supported"
    if len(names) > 1 + (key_shape.sort_key is not None):
        needed = names[: key_shape.hashed]
    else:
        needed = names[: len(key_conditions)]
    for name in needed:
        if name not in key_conditions:
            raise ValidationError(f"Query condition missed key schema element: {name}")


def _in_segment(key_hash: int, hash_range: tuple[int, int | None]) -> bool:
    start, end = hash_range
    return start <= key_hash and (end is None or key_hash < end)


# Query -----------------------------------------------------------------------------------------


async def query(ctx: RouterContext, body: dict[str, Any]) -> dict[str, Any]:
    """Query: one page of one item collection, in sort-key order or reversed."""
    reader = RequestReader(body)
    # Members are read in the order DynamoDB lists their constraint violations.
    limit = reader.integer("Limit", minimum=1)
    query_filter = reader.mapping("QueryFilter")
    key_conditions = reader.mapping("KeyConditions")
    read_common(reader)
    attributes_to_get = reader.string_list(
        "AttributesToGet", min_length=1, max_length=limits.ATTRIBUTES_TO_GET_NAMES_MAX
    )
    table_name = reader.table_name(required=True)
    select = reader.string("Select", enum=SELECT_VALUES)
    index_name = reader.name("IndexName")
    conditional_operator = reader.string("ConditionalOperator", enum=CONDITIONAL_OPERATORS)
    consistent = reader.boolean("ConsistentRead") is True
    forward = reader.boolean("ScanIndexForward")
    key_condition_text = reader.string("KeyConditionExpression")
    reading = _read_tail(reader, attributes_to_get, conditional_operator)
    reader.check()
    assert table_name is not None

    legacy.check_parameter_mix("Query", body)
    check_conditional_operator(conditional_operator, query_filter)
    if key_conditions is None and key_condition_text is None:
        raise ValidationError(
            "Either the KeyConditions or KeyConditionExpression parameter must be specified in "
            "the request."
        )
    values_normalised = expressions.check_attribute_maps(reading.names, reading.values)
    form = None
    if key_condition_text is not None:
        # The key condition is checked against the key schema once the table is known, but its
        # syntax comes first, before the filter's and before the table is looked up.
        parsed = expressions.parse_cached("condition", key_condition_text)
        if isinstance(parsed, str):
            raise ValidationError(f"Invalid KeyConditionExpression: {parsed}")
        form = expressions.check_key_condition_form(
            key_condition_text, reading.names, values_normalised
        )
    compiled = _filter_and_projection("Query", reading, query_filter, values_normalised)
    # KeyConditions may come with a FilterExpression or ProjectionExpression; its translation has
    # placeholders of its own, so it is compiled apart from the request's.
    key_translation = None
    if key_condition_text is None:
        assert key_conditions is not None
        key_translation = legacy.key_condition_expression(key_conditions)
    # DynamoDB reads the starting key after the key conditions.
    exclusive_start = _starting_key(reading.exclusive_start)
    select = select_mode(
        select,
        projection=reading.projection is not None,
        attributes_to_get=attributes_to_get is not None,
        index_name=index_name,
    )

    table = await ctx.table(table_name)
    select = _index_select(table, index_name, select, body)
    read = _what_to_read(table, index_name, select, consistent)
    index, shape, local = read.index, read.shape, read.local
    # The key the condition is held against: the table's, or the index's own (a local index's:
    # the table's partition key and its sort key; a global index's: its partition key and sort
    # key attributes, up to four of each).
    key_shape = table.key_shape if index is None else index.key_shape
    walked_shape = table.key_shape if shape is None else shape
    # A query of a table without a sort key names one item: it reads one at most and has no page
    # to resume, so it takes no ExclusiveStartKey and gives no LastEvaluatedKey (DynamoDB's).
    one_item = index is None and len(table.key_shape.attributes) == 1
    start: dict[str, Any] | None = None
    if key_conditions is not None and key_condition_text is None:
        # KeyConditions that leave out a key attribute, then the starting key, then operators
        # the key order cannot serve: DynamoDB's order for the legacy form.
        _check_key_conditions_name_the_key(key_conditions, key_shape)
        if exclusive_start is not None:
            start = _checked_starting_key(exclusive_start, walked_shape)
        legacy.check_key_operators(key_conditions)
    key_condition, used = _key_condition(key_shape, form, key_translation)
    expressions.check_unused(
        reading.names,
        reading.values,
        *used,
        *compiled.parsed(),
    )
    equal = [key_condition.hash_value, *key_condition.fixed]
    for attribute, value in zip(key_shape.attributes, equal, strict=False):
        check_key_value(attribute.name, value, attribute.role, expected_type=attribute.type)
    if exclusive_start is not None:
        if start is None:
            start = _checked_starting_key(exclusive_start, walked_shape)
        if one_item:
            raise ValidationError("The query can return at most one row and cannot be restarted")
        if any(
            not values.equal(start[attribute.name], value)
            for attribute, value in zip(key_shape.attributes, equal, strict=False)
        ):
            raise ValidationError(
                "The provided starting key is outside query boundaries based on provided conditions"
            )
        if key_condition.range is not None:
            assert key_condition.range_key is not None
            if not key_condition.range.matches(start[key_condition.range_key]):
                raise ValidationError(
                    "The provided starting key does not match the range key predicate"
                )
    check_key_paths(table.key_shape.names, compiled.filter, compiled.projection)
    if compiled.filter is not None:
        # DynamoDB serves key conditions from the key order; a filter on a key attribute would be
        # a key condition in disguise, and it refuses it.
        for name in key_shape.names:
            if name in compiled.filter.top_level_attributes:
                what = "QueryFilter" if query_filter is not None else "Filter Expression"
                raise ValidationError(
                    f"{what} can only contain non-primary key attributes: Primary key "
                    f"attribute: {name}"
                )
    collection = walked_shape.storage_key_of(equal[: walked_shape.hashed])
    request = ops.QueryPayload(
        key_condition.hash_value,
        fixed=list(key_condition.fixed),
        range=None if key_condition.range is None else key_condition.range.to_json(),
        forward=forward is not False,
        filter=None if compiled.filter is None else compiled.filter.text,
        projection=None if compiled.projection is None else compiled.projection.text,
        names=compiled.names,
        values=compiled.values,
        select=select,
        index=None if local is None else local.name,
        fetch=local is not None and _needs_fetch(local, table, select, compiled),
    )
    walk = _Walk(
        op=ops.QUERY,
        request=request,
        low=collection,
        high=keycodec.successor(collection),
        forward=forward is not False,
        limit=limit,
        consistent=consistent,
        shape=shape,
    )
    page = await _walk(ctx, read.walked, walk, exclusive_start)
    if one_item:
        page.last_key = None  # even when Limit stopped it
    return _reply(page, select, table_name, body, index)


OPERATIONS = {"Query": query, "Scan": scan}
