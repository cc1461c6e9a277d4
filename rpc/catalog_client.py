"""`CatalogClient`: how a router, a node and the GSI replicator all read and change the catalog.

The catalog is the system table `__dynalab_catalog` (`core.catalog`): one row per table, keyed by
the table's name, holding its `TableDef` and the row's `version` (the codec is
`core.catalog_copy.catalog_row` / `record_of_row`), in one partition: on one storage node, or,
in a replicated cluster, a replication group of its own, so that no single node holds the only
copy and the catalog answers while any minority of its replicas is down. Where that partition
lives is recorded in a bootstrap record every node holds (`bootstrap_record`, `locate`); a router
also creates it on a new cluster, which stays the router's own job
(`router.context.RouterContext.locate_catalog`). The client is handed how its process finds the
location (`locate`) and reaches a node (`connect`), and reads and writes the catalog with the
ordinary data-plane operations over the transport seam (`rpc.transport.NodeTransport`), so the
same code runs over gRPC and in the simulated network. A replicated catalog is called as any
replicated partition is (`CatalogNodes`, `rpc.replicas.ReplicaCalls`): at its leader, reads
strongly consistent there, so a process never reads a catalog older than one it was told of.

- `read_table`: one row (`get`, consistent);
- `scan`: every row, page after page, at most `CATALOG_SCAN_PAGES_MAX` pages;
- `change_table`: a change function applied to the newest row by compare-and-set on its version
  (created only if absent, replaced or removed only at the version read), under one retry policy
  (`core.retry.CATALOG_CHANGE`) whose pauses are drawn from the injected random source and whose
  deadline is measured on the injected clock.

A write whose reply is lost raises `OutcomeUnknown` at the transport (`rpc.transport.unanswered`).
Past its deadline the catalog's node will not apply it any more, so the row says what happened; the
client reads it back (`resolution`). (A replicated catalog's write planned by a leader that was
deposed may still be committed by the next one, but before that leader serves any strong read,
since it serves none before it has committed an entry of its own term; so the read back, strong
at the leader, is decisive there too.) The written record found means it was applied; the row still
at the version read, or the next version holding another writer's record, means it was not, and
the change is computed again on what is there. Anything else (the row changed twice since) cannot
tell, and raises OutcomeUnknown rather than apply a change twice or report failed a change that
was applied. Every call that finds the catalog's node (or a quorum of its replicas) unreachable
raises one ServiceUnavailable naming the catalog (`CATALOG_UNAVAILABLE`), which clients retry.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from core import catalog, limits
from core.catalog import CatalogLocation, TableDef
from core.catalog_copy import catalog_row, record_of_row
from core.errors import ConditionalCheckFailed, OutcomeUnknown, ServiceUnavailable, StaleEpoch
from core.retry import CATALOG_CHANGE, RetryPolicy
from rpc import ops, placement
from rpc.replicas import ReplicaCalls
from rpc.transport import NodeTransport

# A scan of the catalog reads at most this many pages: every page holds at least one table.
CATALOG_SCAN_PAGES_MAX = limits.TABLES_PER_REGION_MAX + 1
SYSTEM_EPOCH = 1  # The system partitions never split or move.
# What a call to the catalog's partition raises when its node does not answer: 503, which SDKs
# retry; a router goes on serving item operations from its cached catalog meanwhile.
CATALOG_UNAVAILABLE = (
    "The table catalog is unavailable ({where} does not answer); "
    "item operations on known tables go on, table operations can be retried later"
)
CATALOG_BUSY = "The table catalog is changing too often; try again later"

# A change of one table's record: given the current record (None: no such table), the new one,
# None to remove the table, or the current record itself for no change. It may raise to refuse.
TableChange = Callable[[TableDef | None], TableDef | None]
# Told of every row the client reads or writes: the table's name and its record (None: none).
Observer = Callable[[str, TableDef | None], None]


def unavailable(location: CatalogLocation) -> str:
    """`CATALOG_UNAVAILABLE` for the catalog at `location`."""
    where = (
        f"no quorum of its replicas on {', '.join(location.nodes)}"
        if location.replicas
        else f"its storage node {location.node}"
    )
    return CATALOG_UNAVAILABLE.format(where=where)


def system_target(table_id: str, partition_id: str, consistent: bool = False) -> ops.Target:
    """The envelope of a call to a system table's one partition."""
    return ops.Target(table_id, partition_id, SYSTEM_EPOCH, consistent)


async def bootstrap_record(transport: NodeTransport) -> CatalogLocation | None:
    """The catalog's location as one node records it (None: it holds no record)."""
    payload = ops.GetPayload({"name": {"S": catalog.BOOTSTRAP_RECORD_NAME}})
    target = system_target(catalog.BOOTSTRAP_TABLE_ID, catalog.BOOTSTRAP_PARTITION_ID, True)
    try:
        reply = await transport.call(
            ops.GET, target, payload.to_json(), limits.NODE_CALL_SECONDS_MAX
        )
    except StaleEpoch:
        return None  # The node has no bootstrap partition yet: it never held a record.
    item = reply["item"]
    return None if item is None else CatalogLocation.from_item(item)


async def locate(transports: Mapping[str, NodeTransport]) -> CatalogLocation | None:
    """The catalog's location as the reachable nodes (by id) record it; None before a router
    made one. Nodes that do not answer are left out; none answering is ServiceUnavailable, and
    nodes naming different locations `core.catalog.CatalogDisagreement`."""
    nodes = sorted(transports)
    replies = await asyncio.gather(
        *(bootstrap_record(transports[node]) for node in nodes), return_exceptions=True
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


# Reaches a node where the catalog is: the location (which records every replica's address)
# and the node's id.
Connect = Callable[[CatalogLocation, str], NodeTransport]
_SYSTEM_READS = frozenset({ops.GET, ops.SCAN, ops.QUERY})


class CatalogNodes:
    """How one process calls the system partitions that live where the catalog is (the
    catalog's own, and the GSI leases table's beside it): on the catalog's node, or at the
    leader of a replicated one, found as a router finds any partition's (`ReplicaCalls`)."""

    def __init__(self, connect: Connect, replicas: ReplicaCalls | None = None) -> None:
        self.connect = connect
        self.replicas = ReplicaCalls() if replicas is None else replicas

    async def call(
        self,
        location: CatalogLocation,
        table_id: str,
        partition_id: str,
        op: str,
        body: dict[str, Any],
        *,
        consistent: bool = True,
    ) -> dict[str, Any]:
        """One data-plane call to system partition `partition_id` of `table_id`; no node or
        quorum answering is ServiceUnavailable `CATALOG_UNAVAILABLE`. Reads may go on to another
        replica after any failure; a write only when it certainly was not applied."""
        target = system_target(table_id, partition_id, consistent and op in _SYSTEM_READS)

        def attempt(node: str, remaining: float) -> Awaitable[dict[str, Any]]:
            return self.connect(location, node).call(op, target, body, remaining)

        try:
            return await self.replicas.call(
                location.partition_of(partition_id),
                table_id,
                f"{op} of system table {table_id}",
                attempt,
                limits.NODE_CALL_SECONDS_MAX,
                retry_safe=op in _SYSTEM_READS,
            )
        except ServiceUnavailable as error:
            raise ServiceUnavailable(unavailable(location)) from error

    async def create(
        self, location: CatalogLocation, table: dict[str, Any], partition_id: str
    ) -> None:
        """Create system partition `partition_id` of `table` (its id, name and key schema) on
        every node of the catalog's (nothing where it exists). A replicated one is created once
        a quorum of its replicas holds it: the others are asked again the next time (each
        router asks as it locates the catalog), and until then the group commits without them."""
        partition = location.partition_of(partition_id)
        payload = ops.CreatePartitionPayload(table, partition.to_json()).to_json()
        nodes = partition.nodes

        async def create_on(node: str) -> dict[str, Any]:
            client = self.connect(location, node)
            return await client.control(
                ops.CREATE_PARTITION, payload, limits.CONTROL_CALL_SECONDS_MAX
            )

        replies = await asyncio.gather(*map(create_on, nodes), return_exceptions=True)
        failed: list[BaseException] = []
        for reply in replies:
            if isinstance(reply, ServiceUnavailable):
                failed.append(reply)
            elif isinstance(reply, BaseException):
                raise reply
        if not placement.stands(partition, len(failed)):
            raise ServiceUnavailable(unavailable(location)) from failed[0]


def resolution(
    current: TableDef | None, changed: TableDef | None, found: TableDef | None
) -> bool | None:
    """Whether a compare-and-set of table row `current` (None: absent) to `changed` (None:
    removed), whose outcome is unknown, was applied, judged from the row `found` after the
    write's deadline: True, False, or None when the row cannot tell.

    While a table keeps its id its versions only grow and its row, once removed, never returns;
    so a version is taken once, and the version after the one read holding another record means
    another writer won the race. A new table's id is fresh, and a table still being created
    cannot be deleted, so a creation's row absent or holding another version 1 was not written.
    """
    if found == changed:
        return True
    if current is None:
        if found is None or found.version == 1:
            return False
        # Our fresh id found at a later version: written, then changed by others.
        return True if changed is not None and found.id == changed.id else None
    if found is None or found.id != current.id:
        return None  # Removed since (and maybe created again): ours may have come first.
    if changed is None or found.version <= current.version + 1:
        return False
    return None


class CatalogClient:
    """Reads and changes the catalog for one process, with its own time and randomness."""

    def __init__(
        self,
        locate: Callable[[], Awaitable[CatalogLocation]],
        connect: Connect | CatalogNodes,
        *,
        rng: random.Random,
        clock: Callable[[], float],
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        policy: RetryPolicy = CATALOG_CHANGE,
        observe: Observer | None = None,
    ) -> None:
        """`locate` answers where the catalog is (raising ServiceUnavailable when it cannot
        tell); `connect` gives the transport to one of the nodes a location names (or is the
        process's `CatalogNodes`, shared with its other system calls). `rng` draws the
        pauses between attempts and `clock` (seconds, any monotonic origin) measures the
        policy's deadline. `observe` is told of every row read or written, so a cache can follow
        (`router.context.RouterContext` keeps one)."""
        self.locate = locate
        self.nodes = connect if isinstance(connect, CatalogNodes) else CatalogNodes(connect)
        self.rng = rng
        self.clock = clock
        self.sleep = sleep
        self.policy = policy
        self.observe = observe

    async def read_table(self, name: str) -> TableDef | None:
        """Table `name`'s newest record (None: no such table)."""
        location = await self.locate()
        record = await self._read(location, name)
        self._observed(name, record)
        return record

    async def scan(self) -> dict[str, TableDef]:
        """Every table's record, by name."""
        location = await self.locate()
        payload = ops.ScanPayload(page_bytes=limits.QUERY_PAGE_BYTES_MAX)
        records: dict[str, TableDef] = {}
        for _ in range(CATALOG_SCAN_PAGES_MAX):
            reply = await self._call(location, ops.SCAN, payload.to_json())
            for item in reply["items"]:
                record = record_of_row(item)
                records[record.name] = record
            if reply["last_key"] is None:
                return records
            payload.exclusive_start = reply["last_key"]
        raise ServiceUnavailable("The table catalog did not end within its page bound")

    async def change_table(self, name: str, change: TableChange) -> TableDef | None:
        """Apply `change` to table `name`'s newest record by compare-and-set; return the record
        after it (None: the table is not in the catalog).

        A change made by another writer in between makes the write fail; the change is then
        computed again on the newer record after a pause drawn from the policy, so racing writers
        do not collide in lockstep. Past the policy's attempts or deadline it is
        ServiceUnavailable; a write whose outcome the row cannot tell is OutcomeUnknown.
        """
        location = await self.locate()
        started = self.clock()
        for attempt in range(self.policy.attempts_max):
            current = await self.read_table(name)
            changed = change(current)
            if changed is current:
                return current
            if changed is not None:
                assert changed.name == name, f"a change of table {name} renamed it {changed.name}"
                changed = catalog.versioned(changed, 1 if current is None else current.version + 1)
            try:
                await self._write(location, name, current, changed)
            except ConditionalCheckFailed:
                pass  # Another writer changed the row since it was read.
            except OutcomeUnknown as unknown:
                found = await self._read_back(location, name, started, unknown)
                applied = resolution(current, changed, found)
                if applied is None:
                    raise OutcomeUnknown(
                        f"A change of table {name}'s catalog row may or may not have been "
                        "applied: its reply was lost and the row has changed since"
                    ) from unknown
                if applied:
                    self._observed(name, changed)
                    return changed
            else:
                self._observed(name, changed)
                return changed
            pause = self.policy.pause(attempt, self._elapsed(started), self.rng.random())
            if pause is None:
                break
            await self.sleep(pause)
        raise ServiceUnavailable(CATALOG_BUSY)

    async def _read_back(
        self, location: CatalogLocation, name: str, started: float, unknown: OutcomeUnknown
    ) -> TableDef | None:
        """The row after a write whose outcome is unknown, read again while the catalog's node
        does not answer, within the policy; past it the outcome stays unknown."""
        for attempt in range(self.policy.attempts_max):
            try:
                found = await self._read(location, name)
            except ServiceUnavailable:
                pause = self.policy.pause(attempt, self._elapsed(started), self.rng.random())
                if pause is None:
                    break
                await self.sleep(pause)
                continue
            self._observed(name, found)
            return found
        raise unknown

    async def _read(self, location: CatalogLocation, name: str) -> TableDef | None:
        payload = ops.GetPayload({"name": {"S": name}})
        reply = await self._call(location, ops.GET, payload.to_json())
        item = reply["item"]
        return None if item is None else record_of_row(item)

    async def _write(
        self,
        location: CatalogLocation,
        name: str,
        current: TableDef | None,
        changed: TableDef | None,
    ) -> None:
        """Write `changed` (None: delete) as table `name`'s row if it is still at `current`'s
        version (None: only if absent)."""
        condition, names, values = (
            ("attribute_not_exists(#n)", {"#n": "name"}, None)
            if current is None
            else ("#v = :v", {"#v": "version"}, {":v": {"N": str(current.version)}})
        )
        if changed is None:
            delete = ops.DeletePayload({"name": {"S": name}}, condition, names, values)
            await self._call(location, ops.DELETE, delete.to_json())
            return
        put = ops.PutPayload(catalog_row(changed), None, condition, names, values)
        await self._call(location, ops.PUT, put.to_json())

    async def _call(
        self, location: CatalogLocation, op: str, body: dict[str, Any]
    ) -> dict[str, Any]:
        """One call to the catalog's partition (reads strongly consistent): `CatalogNodes.call`."""
        return await self.nodes.call(
            location, catalog.CATALOG_TABLE_ID, location.partition, op, body
        )

    def _elapsed(self, started: float) -> float:
        """Seconds since `started`; a wall clock (a router's) may step back, never below 0."""
        return max(0.0, self.clock() - started)

    def _observed(self, name: str, record: TableDef | None) -> None:
        if self.observe is not None:
            self.observe(name, record)
