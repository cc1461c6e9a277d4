"""The cluster catalog, as the replicator needs it: every table's record, and one change.

The catalog is the system table `__dynalab_catalog` on one storage node, found through the
bootstrap record every node holds (`core.catalog`, ARCHITECTURE.md "Catalog, placement and
epochs"). The replicator never creates either: it asks the nodes it knows for the bootstrap
record, and scans the catalog partition it names, page after page. A cluster whose catalog does
not exist yet (no router has started) has no tables to replicate. The one change it makes is an
online index's progress (BACKFILLING, each source partition copied, ACTIVE), by the same
compare-and-set on the row's version as the routers' changes.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Mapping
from typing import Any

import orjson

from core import catalog, limits
from core.catalog import CatalogLocation, TableDef
from core.errors import ConditionalCheckFailed, ServiceUnavailable, StaleEpoch
from rpc import ops
from rpc.transport import NodeTransport

_SYSTEM_EPOCH = 1  # The system partitions never split or move.
# Every page of the catalog holds at least one table.
CATALOG_SCAN_PAGES_MAX = limits.TABLES_PER_REGION_MAX + 1


def _system_target(table_id: str, partition_id: str) -> ops.Target:
    return ops.Target(table_id, partition_id, _SYSTEM_EPOCH, True)


async def _bootstrap_record(client: NodeTransport) -> CatalogLocation | None:
    payload = ops.GetPayload({"name": {"S": catalog.BOOTSTRAP_RECORD_NAME}})
    target = _system_target(catalog.BOOTSTRAP_TABLE_ID, catalog.BOOTSTRAP_PARTITION_ID)
    try:
        reply = await client.call(ops.GET, target, payload.to_json(), limits.NODE_CALL_SECONDS_MAX)
    except StaleEpoch:
        return None  # The node has no bootstrap partition yet.
    item = reply["item"]
    return None if item is None else CatalogLocation.from_item(item)


async def locate(clients: Mapping[str, NodeTransport]) -> CatalogLocation | None:
    """The catalog's location as the reachable nodes record it; None before a router made one."""
    nodes = sorted(clients)
    replies = await asyncio.gather(
        *(_bootstrap_record(clients[node]) for node in nodes), return_exceptions=True
    )
    found: dict[str, CatalogLocation | None] = {}
    for node, reply in zip(nodes, replies, strict=True):
        if isinstance(reply, ServiceUnavailable):
            continue
        if isinstance(reply, BaseException):
            raise reply
        found[node] = reply
    if not found:
        raise ServiceUnavailable("No storage node answered for the catalog's location")
    return catalog.agreed_location(found)


async def read_tables(
    clients: Mapping[str, NodeTransport], location: CatalogLocation
) -> dict[str, TableDef]:
    """Every table's record, by name, scanned from the catalog partition at `location`."""
    client = clients.get(location.node)
    if client is None:
        raise ServiceUnavailable(f"The catalog's node {location.node} is not known here")
    target = _system_target(catalog.CATALOG_TABLE_ID, location.partition)
    payload = ops.ScanPayload(page_bytes=limits.QUERY_PAGE_BYTES_MAX)
    tables: dict[str, TableDef] = {}
    for _ in range(CATALOG_SCAN_PAGES_MAX):
        reply = await client.call(ops.SCAN, target, payload.to_json(), limits.NODE_CALL_SECONDS_MAX)
        for item in reply["items"]:
            record = TableDef.from_json(orjson.loads(item["table"]["S"]))
            tables[record.name] = record
        if reply["last_key"] is None:
            return tables
        payload.exclusive_start = reply["last_key"]
    raise ServiceUnavailable("The table catalog did not end within its page bound")


# Changing a table's record: the replicator moves an online index through its backfill. ----------

TableChange = Callable[[TableDef], TableDef]


def _row(table: TableDef) -> dict[str, Any]:
    """The catalog system table's item for a table record (as the routers write it)."""
    return {
        "name": {"S": table.name},
        "version": {"N": str(table.version)},
        "table": {"S": orjson.dumps(table.to_json()).decode()},
    }


async def change_table(
    clients: Mapping[str, NodeTransport],
    location: CatalogLocation,
    name: str,
    change: TableChange,
) -> TableDef | None:
    """Apply `change` to table `name`'s newest record by compare-and-set, as a router changes a
    table (the row written only at the version read; on a conflict, read again and recompute);
    return the record after it, None if the table is gone. A change that returns the record it
    was given writes nothing."""
    client = clients.get(location.node)
    if client is None:
        raise ServiceUnavailable(f"The catalog's node {location.node} is not known here")
    target = ops.Target(catalog.CATALOG_TABLE_ID, location.partition, _SYSTEM_EPOCH, True)
    for _ in range(limits.CATALOG_CAS_ATTEMPTS_MAX):
        reply = await client.call(
            ops.GET,
            target,
            ops.GetPayload({"name": {"S": name}}).to_json(),
            limits.NODE_CALL_SECONDS_MAX,
        )
        if reply["item"] is None:
            return None
        current = TableDef.from_json(orjson.loads(reply["item"]["table"]["S"]))
        changed = change(current)
        if changed is current:
            return current
        changed = catalog.versioned(changed, current.version + 1)
        put = ops.PutPayload(
            _row(changed), None, "#v = :v", {"#v": "version"}, {":v": {"N": str(current.version)}}
        )
        try:
            await client.call(ops.PUT, target, put.to_json(), limits.NODE_CALL_SECONDS_MAX)
        except ConditionalCheckFailed:
            await asyncio.sleep(random.uniform(0, limits.CATALOG_CAS_BACKOFF_SECONDS_MAX))
            continue
        return changed
    raise ServiceUnavailable("The table catalog is changing too often; try again later")


async def read_table(
    clients: Mapping[str, NodeTransport], location: CatalogLocation, name: str
) -> TableDef | None:
    """Table `name`'s newest record (None: gone): after an index partition refused a write as
    stale, the catalog says where its range went."""
    return await change_table(clients, location, name, lambda table: table)
