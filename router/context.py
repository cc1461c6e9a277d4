"""The router's view of the cluster: a client per storage node, the node ring and the catalog cache.

Every handler gets one `RouterContext`. It answers three questions for them: which table a name
means (`table`), where a key or a partition lives and how to call it (`call_key`,
`call_partition`), and how to change the catalog safely (`change_catalog`).

The catalog (tables, key schemas, partition maps; see `rpc.ops`) lives on the storage node
that the ring picks for the well-known catalog partition. Routers are stateless: each keeps a copy
and re-reads it on a cache miss, when a node refuses a request for a stale epoch (a partition split
or moved, or the table was dropped and created again), and in the background every
`CATALOG_REFRESH_SECONDS`, so that a table created or deleted through one router shows up in every
other one. Concurrent refreshes share one read, so a burst of stale replies costs one catalog read,
not one per request.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping
from typing import Any

from core import limits
from core.errors import (
    ConditionalCheckFailed,
    DynamoError,
    ResourceNotFound,
    ServiceUnavailable,
    StaleEpoch,
)
from core.keycodec import encode_storage_key
from core.placement import HashRing, PartitionMap
from core.values import AttributeValue
from router.sources import Sources
from rpc import ops
from rpc.client import NodeClient
from rpc.transport import NodeTransport

log = logging.getLogger("router.context")

Table = dict[str, Any]
Partition = Mapping[str, Any]
Catalog = dict[str, Table]

# Item operations on a table that does not exist, or is not ready for them (still being created or
# already being deleted), fail with this message and no table name, as DynamoDB's data plane does.
TABLE_NOT_FOUND = "Requested resource not found"
# Statuses in which a table serves reads and writes (an UPDATING table still does in DynamoDB).
SERVING_STATUSES = frozenset({"ACTIVE", "UPDATING"})


class RouterContext:
    """Clients of the storage nodes, the node ring, and the cached catalog of one router process."""

    def __init__(
        self,
        nodes: Mapping[str, str],
        advertise: str,
        sources: Sources | None = None,
        *,
        connect: Callable[[str], NodeTransport] = NodeClient,
    ) -> None:
        """`sources` default to the system's (`Sources.system()`); tests pass seeded ones.

        `connect` makes the transport to one node from its address: gRPC's `NodeClient` by
        default; a simulation passes `rpc.local.LocalNetwork.connect`.
        """
        if not nodes:
            raise ValueError("a router needs at least one storage node")
        self.advertise = advertise
        self.sources = Sources.system() if sources is None else sources
        self.clients: dict[str, NodeTransport] = {
            node_id: connect(address) for node_id, address in nodes.items()
        }
        self.ring = HashRing(self.clients)
        self.catalog_node = self.ring.owner(ops.CATALOG_PARTITION_ID)
        self.catalog_version = -1
        self.tables: Catalog = {}
        # Partition maps per table id, with the partition list each was built from: a table
        # descriptor is replaced (never modified) when its partitions change, so an identity check
        # on the list tells whether the map is current.
        self._maps: dict[str, tuple[list[Partition], PartitionMap]] = {}
        self._refresh: asyncio.Future[None] | None = None
        self._refresher: asyncio.Task[None] | None = None
        self._catalog_readable = True

    # Lifecycle ----------------------------------------------------------------------------------

    async def start(self) -> None:
        """Start refreshing the catalog in the background; the first read begins at once.

        Startup does not wait for the catalog: a router may come up before its nodes do, and a
        request that arrives first reads the catalog itself on its cache miss.
        """
        if self._refresher is None:
            self._refresher = asyncio.create_task(self._refresh_forever(), name="catalog-refresh")

    async def close(self) -> None:
        """Stop the background refresh and close every node client."""
        if self._refresher is not None:
            self._refresher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._refresher
            self._refresher = None
        await asyncio.gather(*(client.close() for client in self.clients.values()))

    async def _refresh_forever(self) -> None:
        while True:
            try:
                await self.refresh()
            except DynamoError as error:
                if self._catalog_readable:
                    log.warning("cannot read the catalog from %s: %s", self.catalog_node, error)
                self._catalog_readable = False
            except Exception:
                # A bug must not stop the refresh for good: log it and try again next round.
                log.exception("catalog refresh failed")
            else:
                if not self._catalog_readable:
                    log.info("catalog readable again from %s", self.catalog_node)
                self._catalog_readable = True
            await asyncio.sleep(limits.CATALOG_REFRESH_SECONDS)

    # The catalog --------------------------------------------------------------------------------

    async def refresh(self) -> None:
        """Re-read the catalog; callers arriving while a read is in flight share that read.

        The shared read is shielded, so a caller that is cancelled (its client hung up) does not
        cancel it for the others.
        """
        pending = self._refresh
        if pending is None or pending.done():
            pending = asyncio.ensure_future(self._read_and_install())
            pending.add_done_callback(self._refresh_finished)
            self._refresh = pending
        await asyncio.shield(pending)

    def _refresh_finished(self, future: asyncio.Future[None]) -> None:
        if self._refresh is future:
            self._refresh = None
        if not future.cancelled():
            # Every waiter gets the exception; this only marks it retrieved when none is left.
            future.exception()

    async def _read_and_install(self) -> None:
        await self.read_catalog()

    async def read_catalog(self) -> tuple[int, Catalog]:
        """Read the newest catalog from its node, install it in the cache and return it."""
        reply = await self.control(self.catalog_node, ops.CATALOG_GET, {})
        version: int = reply["version"]
        tables: Catalog = reply["tables"]
        self.install_catalog(version, tables)
        return version, tables

    def install_catalog(self, version: int, tables: Catalog) -> None:
        """Make `tables` (catalog version `version`) the cached catalog, unless it is older.

        A reply that was overtaken by a newer one (a slow background read finishing after a
        compare-and-set) is ignored. Descriptors equal to the cached ones are kept, so their
        partition maps stay cached.
        """
        if version <= self.catalog_version:
            return
        previous = self.tables
        fresh: Catalog = {}
        for name, table in tables.items():
            cached = previous.get(name)
            fresh[name] = cached if cached == table else table
        self.tables = fresh
        self.catalog_version = version
        live = {table["id"] for table in fresh.values()}
        for table_id in self._maps.keys() - live:
            del self._maps[table_id]

    async def change_catalog(self, change: Callable[[Catalog], Catalog | None]) -> Catalog:
        """Apply `change` to the newest catalog by compare-and-set and return the catalog after it.

        `change` gets the current tables and returns the new ones (without modifying its argument),
        or None for no change; it may raise (ResourceInUse, ResourceNotFound, ...) to refuse. When
        another router or a node changed the catalog in between, the change is computed again on
        the newer catalog, a bounded number of times.
        """
        for _ in range(limits.CATALOG_CAS_ATTEMPTS_MAX):
            version, tables = await self.read_catalog()
            changed = change(tables)
            if changed is None:
                return tables
            try:
                reply = await self.control(
                    self.catalog_node,
                    ops.CATALOG_CAS,
                    {"expected_version": version, "tables": changed},
                )
            except ConditionalCheckFailed:
                pause = self.sources.rng.uniform(0, limits.CATALOG_CAS_BACKOFF_SECONDS_MAX)
                await asyncio.sleep(pause)
                continue
            self.install_catalog(reply["version"], changed)
            return changed
        raise ServiceUnavailable("The table catalog is changing too often; try again later")

    async def table(self, name: str) -> Table:
        """The descriptor of table `name` if it serves reads and writes; else ResourceNotFound.

        A miss re-reads the catalog once before failing: the table may have been created through
        another router since the last refresh.
        """
        table = self.tables.get(name)
        if table is None or table["status"] not in SERVING_STATUSES:
            await self.refresh()
            table = self.tables.get(name)
            if table is None or table["status"] not in SERVING_STATUSES:
                raise ResourceNotFound(TABLE_NOT_FOUND)
        return table

    def partition_map(self, table: Table) -> PartitionMap:
        """The (cached) PartitionMap of a table descriptor."""
        partitions: list[Partition] = table["partitions"]
        cached = self._maps.get(table["id"])
        if cached is not None and cached[0] is partitions:
            return cached[1]
        partition_map = PartitionMap(partitions)
        self._maps[table["id"]] = (partitions, partition_map)
        return partition_map

    # Calling nodes ------------------------------------------------------------------------------

    async def control(
        self,
        node_id: str,
        op: str,
        body: dict[str, Any],
        timeout: float = limits.CONTROL_CALL_SECONDS_MAX,
    ) -> dict[str, Any]:
        """A control-plane call (`rpc.ops.CONTROL_OPS`) to one node, with a deadline."""
        return await self._client(node_id).control(op, body, timeout)

    def _client(self, node_id: str) -> NodeTransport:
        client = self.clients.get(node_id)
        if client is None:
            # The catalog names a node this router was not started with: the routers of the
            # cluster disagree on its membership.
            raise ServiceUnavailable(f"Storage node {node_id} is not known to this router")
        return client

    async def _send(
        self, table: Table, partition: Partition, op: str, body: dict[str, Any]
    ) -> dict[str, Any]:
        body["table_id"] = table["id"]
        body["partition_id"] = partition["id"]
        body["epoch"] = partition["epoch"]
        return await self._client(partition["node"]).call(op, body, limits.NODE_CALL_SECONDS_MAX)

    async def _after_stale(self, table: Table, backoff: float) -> tuple[Table, float]:
        """The table's descriptor after a stale-epoch refusal, and the next backoff.

        The catalog is re-read. If the table is gone or no longer serving, the request fails as on
        a missing table. A table dropped and created again under the same name (a new id) serves
        the request if its key schema is the same, since the request was checked against that
        schema; with another schema it fails as on a missing table. If the catalog has not caught
        up yet (a split still committing), wait before the next try.
        """
        await self.refresh()
        current = self.tables.get(table["name"])
        if (
            current is None
            or current["status"] not in SERVING_STATUSES
            or current["key_schema"] != table["key_schema"]
        ):
            raise ResourceNotFound(TABLE_NOT_FOUND)
        if current is table:
            await asyncio.sleep(backoff)
            backoff *= 2
        return current, backoff

    async def call_key(
        self,
        table: Table,
        partition_key: AttributeValue,
        sort_key: AttributeValue | None,
        op: str,
        body: dict[str, Any],
    ) -> dict[str, Any]:
        """Send a data-plane request about one key to the partition that holds the key.

        Adds `table_id`, `partition_id` and `epoch` to `body`. On a stale epoch the catalog is
        refreshed and the partition looked up again, a bounded number of times.
        """
        storage_key = encode_storage_key(partition_key, sort_key)
        backoff = limits.STALE_EPOCH_BACKOFF_SECONDS_MIN
        for _ in range(limits.STALE_EPOCH_ATTEMPTS_MAX):
            partition = self.partition_map(table).lookup(storage_key)
            try:
                return await self._send(table, partition, op, body)
            except StaleEpoch:
                table, backoff = await self._after_stale(table, backoff)
        raise ServiceUnavailable(_STALE_GIVE_UP)

    async def call_partition(
        self, table: Table, partition: Partition, op: str, body: dict[str, Any]
    ) -> dict[str, Any]:
        """Send a data-plane request (a scan page) to one partition of a table.

        Adds `table_id`, `partition_id` and `epoch` to `body`. On a stale epoch the catalog is
        refreshed and the request goes to the partition that now holds the old one's start bound.
        After a split that partition covers less than the one asked for, so the reply carries the
        partition that answered as `reply["partition"]`: a caller walking a table continues after
        that partition's end, never after the end of the one it asked for.
        """
        start = bytes.fromhex(partition["start"])
        backoff = limits.STALE_EPOCH_BACKOFF_SECONDS_MIN
        for _ in range(limits.STALE_EPOCH_ATTEMPTS_MAX):
            try:
                reply = await self._send(table, partition, op, body)
            except StaleEpoch:
                table, backoff = await self._after_stale(table, backoff)
                partition = self.partition_map(table).lookup(start)
                continue
            reply["partition"] = partition
            return reply
        raise ServiceUnavailable(_STALE_GIVE_UP)


_STALE_GIVE_UP = (
    "The partition map kept changing while this request was routed "
    f"({limits.STALE_EPOCH_ATTEMPTS_MAX} attempts); try again"
)
