"""The leases system table, as the replicator reads and changes it (`core.gsi_leases`).

The table has one partition on the catalog's node, created by the first replicator that needs it
(`create_partition` is idempotent). Every change is a put conditioned on the row's version (or on
its absence), so of two replicators changing one row, one wins and the other reads again; rows
are deleted (`core.gsi_leases.collectable`) under the same condition.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from core import catalog, gsi_leases, limits
from core.catalog import CatalogLocation
from core.errors import ConditionalCheckFailed, ServiceUnavailable
from core.gsi_leases import Lease, LeaseKey, Member
from rpc import ops
from rpc.transport import NodeTransport

_SYSTEM_EPOCH = 1  # The system partitions never split or move.
# The leases table holds a row per followed partition and consumer, and one per replicator.
LEASE_SCAN_PAGES_MAX = 1_000

_TARGET = ops.Target(
    gsi_leases.LEASES_TABLE_ID, gsi_leases.LEASES_PARTITION_ID, _SYSTEM_EPOCH, True
)


def _client(clients: Mapping[str, NodeTransport], location: CatalogLocation) -> NodeTransport:
    client = clients.get(location.node)
    if client is None:
        raise ServiceUnavailable(f"The catalog's node {location.node} is not known here")
    return client


async def ensure_table(clients: Mapping[str, NodeTransport], location: CatalogLocation) -> None:
    """Create the leases table's partition on the catalog's node (nothing if it exists)."""
    payload = ops.CreatePartitionPayload(
        {
            "id": gsi_leases.LEASES_TABLE_ID,
            "name": gsi_leases.LEASES_TABLE_NAME,
            "key_schema": catalog.SYSTEM_KEY_SCHEMA,
        },
        {
            "id": gsi_leases.LEASES_PARTITION_ID,
            "start": "",
            "end": None,
            "epoch": _SYSTEM_EPOCH,
            "node": location.node,
        },
    )
    await _client(clients, location).control(
        ops.CREATE_PARTITION, payload.to_json(), limits.NODE_CALL_SECONDS_MAX
    )


async def read(
    clients: Mapping[str, NodeTransport], location: CatalogLocation
) -> tuple[dict[LeaseKey, Lease], dict[str, Member]]:
    """Every lease and member row."""
    client = _client(clients, location)
    payload = ops.ScanPayload(page_bytes=limits.QUERY_PAGE_BYTES_MAX)
    items: list[dict[str, Any]] = []
    for _ in range(LEASE_SCAN_PAGES_MAX):
        reply = await client.call(
            ops.SCAN, _TARGET, payload.to_json(), limits.NODE_CALL_SECONDS_MAX
        )
        items.extend(reply["items"])
        if reply["last_key"] is None:
            return gsi_leases.parse_rows(items)
        payload.exclusive_start = reply["last_key"]
    raise ServiceUnavailable("The leases table did not end within its page bound")


async def write(
    clients: Mapping[str, NodeTransport],
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
        await _client(clients, location).call(
            ops.PUT, _TARGET, put.to_json(), limits.NODE_CALL_SECONDS_MAX
        )
    except ConditionalCheckFailed:
        return False
    return True


async def delete(
    clients: Mapping[str, NodeTransport], location: CatalogLocation, name: str, version: int
) -> bool:
    """Delete row `name` if it is still at `version`; whether it was deleted."""
    payload = ops.DeletePayload(
        {"name": {"S": name}}, "#v = :v", {"#v": "version"}, {":v": {"N": str(version)}}
    )
    try:
        await _client(clients, location).call(
            ops.DELETE, _TARGET, payload.to_json(), limits.NODE_CALL_SECONDS_MAX
        )
    except ConditionalCheckFailed:
        return False
    return True
