"""Time To Live operations: UpdateTimeToLive and DescribeTimeToLive.

A table's TTL setting is part of its catalog record (`core.catalog.TtlDef`), changed like any
other setting: UpdateTimeToLive applies `core.catalog.ttl_updated` to the record by
compare-and-set (which raises DynamoDB's refusals: enabling twice, disabling what is not enabled,
another attribute than the active one, a second change within the hour), so the table's TTL is
ENABLING or DISABLING; then it sends the setting to every node holding one of the table's
partitions (`update_ttl`: the nodes start or stop indexing and sweeping) and, once every node has
it, records it as settled: ENABLED or DISABLED. If a node does not answer, the status stays
ENABLING or DISABLING and the next DescribeTimeToLive sends the setting again, the way an UPDATING
table's throughput is pushed again by DescribeTable.

The hour between changes is DynamoDB's (`limits.TTL_CHANGE_INTERVAL_SECONDS`); a router started
with DYNALAB_TTL_CHANGE_INTERVAL_SECONDS uses that many seconds instead, for experiments and tests.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from core import catalog, limits, schema, table_arns
from core.catalog import TableDef, TtlStatus
from core.errors import DynamoError, ResourceNotFound
from router.requests import RequestReader
from router.routing import Route
from rpc import ops

if TYPE_CHECKING:
    from router.context import RouterContext

log = logging.getLogger("router.ttl")


def _table_not_found(name: str) -> ResourceNotFound:
    return ResourceNotFound(f"Requested resource not found: Table: {name} not found")


def _table_name(reader: RequestReader) -> str:
    """TableName: a table's name, or its ARN (`core.table_arns`), as the table's name.

    A name is held to the TableArn shape's length only, as these operations always have (the
    pattern and the table name's own length are checked by DescribeTimeToLive after it)."""
    value = reader.body.get("TableName")
    if value is not None and table_arns.is_arn(value):
        reader.check_table_arn("TableName", value)
        return table_arns.table_name_of(value)
    name = reader.string(
        "TableName", required=True, min_length=1, max_length=limits.TABLE_ARN_CHARS_MAX
    )
    return name or ""


def _read_update(body: dict[str, Any]) -> tuple[str, bool, str]:
    """(table name, Enabled, AttributeName) of an UpdateTimeToLive request."""
    reader = RequestReader(body)
    name = _table_name(reader)
    specification = reader.mapping("TimeToLiveSpecification", required=True)
    enabled: bool | None = None
    attribute: str | None = None
    if specification is not None:
        nested = reader.nested(specification, "timeToLiveSpecification")
        enabled = nested.boolean("Enabled")
        if enabled is None:
            nested.violation("Enabled", None, "Member must not be null")
        attribute = nested.string(
            "AttributeName",
            required=True,
            min_length=1,
            max_length=limits.KEY_ATTRIBUTE_NAME_BYTES_MAX,
        )
    reader.check()
    assert enabled is not None and attribute is not None
    return name, enabled, attribute


async def _push(ctx: RouterContext, table: TableDef, timeout: float) -> TableDef:
    """Send the table's TTL setting to every node holding a partition, and record it settled once
    all have it; return the record. If a node does not answer in time the record is returned as
    it was (ENABLING or DISABLING), and logged."""
    document = catalog.ttl_document(table)
    assert document is not None and table.ttl is not None
    body = ops.UpdateTtlPayload(table.id, document).to_json()
    failures = []
    if table.replicated:
        # Each partition's setting is an entry of its group, proposed at its leader.
        route = Route.of_table(table)
        for partition in table.partitions:
            try:
                await ctx.call_partition(route, partition, ops.UPDATE_TTL, body, timeout=timeout)
            except DynamoError as error:
                failures.append(f"{partition.id}: {error}")
    for node in () if table.replicated else table.nodes():
        try:
            await ctx.control(node, ops.UPDATE_TTL, body, timeout)
        except DynamoError as error:
            failures.append(f"{node}: {error}")
    if failures:
        log.warning("TTL of table %s not settled: %s", table.name, "; ".join(failures))
        return table
    version = table.ttl.version

    def settle(current: TableDef | None) -> TableDef | None:
        if current is None or current.id != table.id:
            return current
        return catalog.ttl_settled(current, version)

    return await ctx.change_table(table.name, settle) or table


async def update_time_to_live(ctx: RouterContext, body: dict[str, Any]) -> dict[str, Any]:
    name, enabled, attribute = _read_update(body)
    now = ctx.sources.clock()
    interval = ctx.settings.ttl_change_interval_seconds

    def update(current: TableDef | None) -> TableDef:
        if current is None:
            raise _table_not_found(name)
        return catalog.ttl_updated(current, enabled, attribute, now, interval)

    table = await ctx.change_table(name, update)
    assert table is not None, f"UpdateTimeToLive of {name} found no table after changing it"
    await _push(ctx, table, limits.CONTROL_CALL_SECONDS_MAX)
    return {"TimeToLiveSpecification": {"Enabled": enabled, "AttributeName": attribute}}


async def describe_time_to_live(ctx: RouterContext, body: dict[str, Any]) -> dict[str, Any]:
    reader = RequestReader(body)
    name = _table_name(reader)
    reader.check()
    # The name's length is checked before the table is looked up, as DescribeTable checks it.
    schema.check_table_name(name)
    table = await ctx.read_table(name)
    if table is None:
        raise _table_not_found(name)
    if table.ttl is not None and not table.ttl.settled:
        table = await _push(ctx, table, limits.TABLE_STATS_SECONDS_MAX)
    ttl = table.ttl
    if ttl is None or ttl.status == TtlStatus.DISABLED:
        return {"TimeToLiveDescription": {"TimeToLiveStatus": TtlStatus.DISABLED.value}}
    return {
        "TimeToLiveDescription": {
            "TimeToLiveStatus": ttl.status.value,
            "AttributeName": ttl.attribute,
        }
    }


OPERATIONS = {
    "UpdateTimeToLive": update_time_to_live,
    "DescribeTimeToLive": describe_time_to_live,
}
