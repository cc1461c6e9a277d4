"""The leases system table, as the replicator reads and changes it (`core.gsi_leases`).

The table has one partition beside the catalog: on the catalog's node or, when the catalog is a
replication group, a group on the same nodes, called at its leader
(`rpc.catalog_client.CatalogNodes`). The first replicator that needs it creates it
(`create_partition` is idempotent). Every change is a put conditioned on the row's version (or on
its absence), so of two replicators changing one row, one wins and the other reads again; rows
are deleted (`core.gsi_leases.collectable`) under the same condition.
"""

from __future__ import annotations

from typing import Any

from core import catalog, gsi_leases, limits
from core.catalog import CatalogLocation
from core.errors import ConditionalCheckFailed, ServiceUnavailable
from core.gsi_leases import Lease, LeaseKey, Member
from rpc import ops
from rpc.catalog_client import CatalogNodes

# The leases table holds a row per followed partition and consumer, and one per replicator.
LEASE_SCAN_PAGES_MAX = 1_000


async def _call(
    nodes: CatalogNodes, location: CatalogLocation, op: str, body: dict[str, Any]
) -> dict[str, Any]:
    return await nodes.call(
        location, gsi_leases.LEASES_TABLE_ID, gsi_leases.LEASES_PARTITION_ID, op, body
    )


async def ensure_table(nodes: CatalogNodes, location: CatalogLocation) -> None:
    """Create the leases table's partition where the catalog is (nothing if it exists)."""
    table = {
        "id": gsi_leases.LEASES_TABLE_ID,
        "name": gsi_leases.LEASES_TABLE_NAME,
        "key_schema": catalog.SYSTEM_KEY_SCHEMA,
    }
    await nodes.create(location, table, gsi_leases.LEASES_PARTITION_ID)


async def read(
    nodes: CatalogNodes, location: CatalogLocation
) -> tuple[dict[LeaseKey, Lease], dict[str, Member]]:
    """Every lease and member row."""
    payload = ops.ScanPayload(page_bytes=limits.QUERY_PAGE_BYTES_MAX)
    items: list[dict[str, Any]] = []
    for _ in range(LEASE_SCAN_PAGES_MAX):
        reply = await _call(nodes, location, ops.SCAN, payload.to_json())
        items.extend(reply["items"])
        if reply["last_key"] is None:
            return gsi_leases.parse_rows(items)
        payload.exclusive_start = reply["last_key"]
    raise ServiceUnavailable("The leases table did not end within its page bound")


async def write(
    nodes: CatalogNodes,
    location: CatalogLocation,
    row: dict[str, Any],
    previous_version: int | None,
) -> bool:
    """Put `row` if the stored row is at `previous_version` (None: if there is none); whether
    it was written."""
    if previous_version is None:
        put = ops.PutPayload(row, None, "attribute_not_exists(#n)", {"#n": "name"})
    else:
        put = ops.PutPayload(
            row, None, "#v = :v", {"#v": "version"}, {":v": {"N": str(previous_version)}}
        )
    try:
        await _call(nodes, location, ops.PUT, put.to_json())
    except ConditionalCheckFailed:
        return False
    return True


async def delete(nodes: CatalogNodes, location: CatalogLocation, name: str, version: int) -> bool:
    """Delete row `name` if it is still at `version`; whether it was deleted."""
    payload = ops.DeletePayload(
        {"name": {"S": name}}, "#v = :v", {"#v": "version"}, {":v": {"N": str(version)}}
    )
    try:
        await _call(nodes, location, ops.DELETE, payload.to_json())
    except ConditionalCheckFailed:
        return False
    return True
