"""Reading the cluster catalog, as the replicator needs it: every table's record, read-only.

The catalog is the system table `__dynalab_catalog` on one storage node, found through the
bootstrap record every node holds (`core.catalog`, ARCHITECTURE.md "Catalog, placement and
epochs"). The replicator never creates or changes either: it asks the nodes it knows for the
bootstrap record, and scans the catalog partition it names, page after page. A cluster whose
catalog does not exist yet (no router has started) has no tables to replicate.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

import orjson

from core import catalog, limits
from core.catalog import CatalogLocation, TableDef
from core.errors import ServiceUnavailable, StaleEpoch
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
