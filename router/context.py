"""The router's view of the cluster: a client per storage node, the node ring and the catalog cache.

Every handler gets one `RouterContext`. It answers three questions for them: which table a name
means (`table`, a typed `router.routing.Route`), where a key or a partition lives and how to call
it (`call_key`, `call_partition`), and how to change one table's catalog record safely
(`change_table`).

The catalog is the system table `__dynalab_catalog` (`core.catalog`): one item per table, keyed
by the table's name, holding its `TableDef` and the row's `version`, in one partition on one
storage node. It is read and written by the one catalog client every process uses
(`rpc.catalog_client.CatalogClient`, `catalog_client` here) with the ordinary data-plane
operations: `scan` to read it all, `get` to read one table, and `put`/`delete` conditional on the
row's version to change one, so routers, splitting nodes and the GSI replicator changing different
tables never contend; every row it reads or writes goes into this router's cache (`_observe`).
Where that partition lives is not inferred from this router's
`--nodes` list, which another router (or this one, restarted with one more node) may see
differently: it is recorded in a bootstrap record that every node holds (`locate_catalog`).

Routers are stateless: each keeps a copy of the catalog and re-reads it on a cache miss, when a
node refuses a request for a stale epoch (a partition split or moved, or the table was dropped
and created again), and in the background every `CATALOG_REFRESH_SECONDS`, so that a table
created or deleted through one router shows up in every other one. Concurrent refreshes share one
read, so a burst of stale replies costs one catalog scan, not one per request.

A router given a state directory keeps a copy of the last catalog it read there
(`router.catalog_copy`) and starts from it, so that a router starting while the catalog's node is
down still serves the partitions on the other nodes. Every call to the catalog's partition that
finds its node down answers one retryable ServiceUnavailable naming the catalog
(`CATALOG_UNAVAILABLE`). A read of the whole catalog that fails so first takes what it can from
the copies the other nodes keep (`core.catalog_copy`), at most once per `CATALOG_REFRESH_SECONDS`:
the newest copy, and from it only records newer than the cache's. That read still fails, so table
operations, which need the catalog itself, answer the 503; item operations on a table the copy
named are served (`table`), so a new router with no state directory serves too.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

from core import catalog, limits, table_arns
from core.catalog import CatalogDisagreement, CatalogLocation, PartitionDef, TableDef
from core.catalog_copy import CATALOG_COPY_PARTITION_ID, CatalogCopy, merged, newest
from core.errors import (
    ConditionalCheckFailed,
    DynamoError,
    OutcomeUnknown,
    ResourceNotFound,
    ServiceUnavailable,
    StaleEpoch,
    ThroughputExceeded,
)
from core.keycodec import encode_storage_key
from core.placement import HashRing
from core.retry import CATALOG_LOCATE
from core.values import AttributeValue
from router import catalog_copy
from router.metrics import RouterMetrics
from router.routing import Route
from router.settings import RouterSettings
from router.sources import Sources
from rpc import ops
from rpc.background import BackgroundTask
from rpc.catalog_client import (
    CATALOG_SCAN_PAGES_MAX,
    SYSTEM_EPOCH,
    CatalogClient,
    CatalogNodes,
    TableChange,
    bootstrap_record,
    system_target,
)
from rpc.client import NodeClient
from rpc.machines import CrashPoints, HoldPoints
from rpc.replicas import ReplicaCalls
from rpc.transport import FeedPage, NodeTransport

log = logging.getLogger("router.context")

# Item operations on a table that does not exist, or is not ready for them (still being created or
# already being deleted), fail with this message and no table name, as DynamoDB's data plane does.
TABLE_NOT_FOUND = "Requested resource not found"

_NAME = {"#n": "name"}


def _system_partition(partition_id: str, node: str) -> dict[str, Any]:
    return {"id": partition_id, "start": "", "end": None, "epoch": SYSTEM_EPOCH, "node": node}


class RouterContext:
    """Clients of the storage nodes, the node ring, and the cached catalog of one router process."""

    def __init__(
        self,
        nodes: Mapping[str, str],
        advertise: str,
        sources: Sources | None = None,
        *,
        connect: Callable[[str], NodeTransport] = NodeClient,
        state_dir: Path | None = None,
        settings: RouterSettings | None = None,
        crash_points: CrashPoints | None = None,
    ) -> None:
        """`sources` default to the system's (`Sources.system()`); tests pass seeded ones.

        `connect` makes the transport to one node from its address: gRPC's `NodeClient` by
        default; a simulation passes `rpc.local.LocalNetwork.connect`. `state_dir`, if given,
        holds this router's copy of the catalog (`router.catalog_copy`). `crash_points` are the
        drivers' of the machines a router runs (`rpc.machines`: a table's lifecycle, a
        transaction's coordination): by default those DYNALAB_HOLD_AT names.
        """
        if not nodes:
            raise ValueError("a router needs at least one storage node")
        self.advertise = advertise
        self.sources = Sources.system() if sources is None else sources
        # Read once by the router's entry point (`router.settings`); defaults elsewhere.
        self.settings = RouterSettings() if settings is None else settings
        self._connect = connect
        self.addresses: dict[str, str] = dict(nodes)  # Node id -> host:port, as configured.
        self.clients: dict[str, NodeTransport] = {
            node_id: connect(address) for node_id, address in nodes.items()
        }
        self.ring = HashRing(self.clients)
        # The leaders of replicated partitions last seen, and the loop that finds them.
        self.replicas = ReplicaCalls()
        # When this router last had a write to each replicated partition acknowledged.
        self._written: dict[tuple[str, str], float] = {}
        # Where the catalog lives, once read from (or, on a new cluster, written to) the nodes.
        self.location: CatalogLocation | None = None
        self._locating: asyncio.Lock | None = None
        # The cached catalog: typed records, and the route of each (`router.routing`), which the
        # data path reads. Both are replaced, never modified, when a table's row changes.
        self.records: dict[str, TableDef] = {}
        self.tables: dict[str, Route] = {}
        # How many times the cache has changed: a number that grows with every change installed.
        self.catalog_version = 0
        # Rows this router read or wrote itself, numbered in order, so that a scan that started
        # before such a read or write does not install an older row over it.
        self._observations = 0
        self._observed: dict[str, int] = {}
        self._refresh: asyncio.Future[None] | None = None
        self._refresher = BackgroundTask("catalog-refresh", self._refresh_forever)
        self._catalog_readable = True
        self._state_dir = state_dir
        # The cache version last written to the state directory's copy.
        self._copied_version = 0
        # The seq of the last node copy of the catalog taken, which a later one may not be below,
        # and when a copy was last found (`sources.clock`), to read them at most once a round.
        self._node_copy_seq = -1
        self._node_copies_read_at: float | None = None
        self.metrics = RouterMetrics()
        self.crash_points = HoldPoints.from_env() if crash_points is None else crash_points
        # The one catalog client (`rpc.catalog_client`): every row it reads or writes is
        # installed in the cache at once (`_observe`).
        self.catalog_nodes = CatalogNodes(self._catalog_client, self.replicas)
        self.catalog_client = CatalogClient(
            self.locate_catalog,
            self.catalog_nodes,
            rng=self.sources.rng,
            clock=self.sources.clock,
            observe=self._observe,
        )

    @property
    def catalog_node(self) -> str | None:
        """The node holding the catalog (a replicated one's first leader), once located."""
        return None if self.location is None else self.location.node

    @property
    def catalog_nodes_named(self) -> tuple[str, ...]:
        """Every node holding a replica of the catalog, once located."""
        return () if self.location is None else self.location.nodes

    def _catalog_client(self, location: CatalogLocation, node: str) -> NodeTransport:
        """The client of `node`, one of the catalog's: a node placed by a router whose node list
        differs from this one's is reached at the address the location records. The ring (where
        new partitions go) stays this router's own."""
        if node not in self.clients:
            address = location.address_of(node)
            if not address:
                raise ServiceUnavailable(f"Storage node {node} is not known to this router")
            log.warning(
                "the catalog's node %s at %s is not among this router's nodes", node, address
            )
            self.clients[node] = self._connect(address)
        return self.clients[node]

    # Lifecycle ----------------------------------------------------------------------------------

    async def start(self) -> None:
        """Start refreshing the catalog in the background; the first read begins at once.

        Startup does not wait for the catalog: a router may come up before its nodes do, and a
        request that arrives first reads the catalog itself on its cache miss. With a state
        directory, the cache starts as the copy kept there, until the first read replaces it.
        """
        if self._state_dir is not None and not self.records:
            copied = catalog_copy.load(self._state_dir)
            if copied:
                self._install(copied)
                self._copied_version = self.catalog_version
                log.info(
                    "starting from the catalog copy in %s: %d tables", self._state_dir, len(copied)
                )
        self._refresher.start()

    async def close(self) -> None:
        """Stop the background refresh and close every node client."""
        await self._refresher.close()
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
                await self._save_copy()
            await asyncio.sleep(limits.CATALOG_REFRESH_SECONDS)

    async def _save_copy(self) -> None:
        """Write the catalog just read to the state directory, if it changed since the last copy.

        Records are replaced, never modified, so the thread writing them sees a stable snapshot.
        """
        if self._state_dir is None or self._copied_version == self.catalog_version:
            return
        version = self.catalog_version
        try:
            await asyncio.to_thread(catalog_copy.save, self._state_dir, dict(self.records))
        except OSError as error:
            log.warning("cannot keep a copy of the catalog in %s: %s", self._state_dir, error)
            return
        self._copied_version = version

    # Where the catalog lives ---------------------------------------------------------------------

    async def locate_catalog(self) -> CatalogLocation:
        """Where the catalog lives, from the bootstrap record the nodes hold; found once.

        Each round reads the record from every node this router knows. When the nodes that hold
        one agree, it is adopted, copied to the nodes that lack it (a node added since, say), and
        the catalog partition is created where it names (idempotent), so it exists before any
        router writes to it. Only when every known node answered and none holds a record is this
        a new cluster: the catalog is placed on the ring owner of `CATALOG_PLACEMENT_KEY`, and
        that record is written, first-writer-wins, to every node in ascending id order. Two
        routers bootstrapping at once both pass first through the lowest node they share: the
        record that gets there first is the one both carry on from there. A router that meets a
        different record at a node first rewrites the nodes it wrote before (nodes the other
        router does not know) to that record, and starts the round again. A round that finds
        nodes disagreeing otherwise (another router still correcting itself) waits and reads
        again. A node that does not answer is left out of a round, but then a round that finds no
        record at all fails rather than starting a second catalog beside one the node may hold.
        """
        if self.location is not None:
            return self.location
        if self._locating is None:
            self._locating = asyncio.Lock()
        async with self._locating:
            if self.location is None:
                self.location = await self._locate()
                log.info(
                    "the catalog is partition %s on %s",
                    self.location.partition,
                    self.location.describe(),
                )
        return self.location

    async def _locate(self) -> CatalogLocation:
        disagreement: CatalogDisagreement | None = None
        started = self.sources.clock()
        for attempt in range(CATALOG_LOCATE.attempts_max):
            found, unreachable = await self._bootstrap_records()
            try:
                agreed = catalog.agreed_location(found)
            except CatalogDisagreement as error:
                log.warning("%s; reading again", error)
                disagreement = error
                # A wall clock may step back: the time spent is never taken as negative.
                elapsed = max(0.0, self.sources.clock() - started)
                pause = CATALOG_LOCATE.pause(attempt, elapsed, self.sources.rng.random())
                if pause is None:
                    break
                await asyncio.sleep(pause)
                continue
            if agreed is None:
                if unreachable:
                    raise ServiceUnavailable(
                        "Cannot locate the table catalog: no node that answered holds its "
                        f"bootstrap record, and {', '.join(unreachable)} did not answer"
                    )
                proposal = self._new_location()
                if await self._propose(proposal, sorted(found), own=True):
                    return await self._adopt(proposal)
                continue
            missing = sorted(node for node, location in found.items() if location is None)
            if await self._propose(agreed, missing):
                return await self._adopt(agreed)
        raise disagreement or ServiceUnavailable(
            "Cannot locate the table catalog: its bootstrap record kept changing"
        )

    async def _propose(
        self, location: CatalogLocation, nodes: list[str], *, own: bool = False
    ) -> bool:
        """Write `location` to `nodes` in order where they have no record; whether all hold it.

        `own` says `location` is this router's proposal for a new cluster, rather than a record
        found on other nodes being copied. On meeting another record False is returned, so the
        caller reads every node again; an own proposal is first taken back from the nodes written
        so far, by rewriting them to the record met (a record another router wrote is never
        rewritten). A node that does not answer stops an own proposal the same way (it must
        reach the lowest node first); a copy is then left for a later round.
        """
        written: list[str] = []
        for node in nodes:
            try:
                existing = await self._put_bootstrap(node, location, None)
            except (ServiceUnavailable, OutcomeUnknown) as error:
                # Unknown is as good as not written: the next round reads every node again.
                log.warning("could not write the catalog's bootstrap record to %s: %s", node, error)
                if own:
                    return False
                continue
            if existing is None or existing == location:
                written.append(node)
                continue
            log.info("node %s already names catalog %s", node, existing)
            if not own:
                return False
            for earlier in written:
                try:
                    await self._put_bootstrap(earlier, existing, location)
                except (ServiceUnavailable, OutcomeUnknown) as error:
                    log.warning("could not correct the bootstrap record of %s: %s", earlier, error)
            return False
        return True

    def _new_location(self) -> CatalogLocation:
        """Where a new cluster's catalog goes: the ring owner of `CATALOG_PLACEMENT_KEY`, and
        with a replication factor above 1 a replication group on that many nodes from it (as a
        table's first partition is placed: `HashRing.spread`), that one its first leader."""
        factor = min(self.settings.replication_factor, limits.REPLICATION_FACTOR_MAX)
        nodes = self.ring.spread(catalog.CATALOG_PLACEMENT_KEY, factor, 0)
        home = nodes[0]
        replicas = (
            tuple((node, self.clients[node].address) for node in nodes) if len(nodes) > 1 else ()
        )
        return CatalogLocation(home, self.clients[home].address, replicas=replicas)

    async def _adopt(self, location: CatalogLocation) -> CatalogLocation:
        """Create the catalog partition where `location` names (nothing where it exists)."""
        await self.catalog_nodes.create(
            location,
            self._system_table(catalog.CATALOG_TABLE_ID, catalog.CATALOG_TABLE_NAME),
            location.partition,
        )
        return location

    @staticmethod
    def _system_table(table_id: str, name: str) -> dict[str, Any]:
        return {"id": table_id, "name": name, "key_schema": catalog.SYSTEM_KEY_SCHEMA}

    async def _bootstrap_records(
        self,
    ) -> tuple[dict[str, CatalogLocation | None], list[str]]:
        """Every known node's bootstrap record (None: it has none), and the nodes not answering."""
        nodes = sorted(self.clients)
        replies = await asyncio.gather(
            *(self._get_bootstrap(node) for node in nodes), return_exceptions=True
        )
        found: dict[str, CatalogLocation | None] = {}
        unreachable: list[str] = []
        for node, reply in zip(nodes, replies, strict=True):
            if isinstance(reply, ServiceUnavailable):
                unreachable.append(node)
            elif isinstance(reply, BaseException):
                raise reply
            else:
                found[node] = reply
        return found, unreachable

    async def _get_bootstrap(self, node: str) -> CatalogLocation | None:
        return await bootstrap_record(self._client(node))

    async def _put_bootstrap(
        self, node: str, location: CatalogLocation, expected: CatalogLocation | None
    ) -> CatalogLocation | None:
        """Write the record to `node` if it holds `expected` (None: no record); on a conflict,
        return the record the node holds instead, else None."""
        try:
            await self.control(
                node,
                ops.CREATE_PARTITION,
                ops.CreatePartitionPayload(
                    self._system_table(catalog.BOOTSTRAP_TABLE_ID, catalog.BOOTSTRAP_TABLE_NAME),
                    _system_partition(catalog.BOOTSTRAP_PARTITION_ID, node),
                ).to_json(),
            )
            if expected is None:
                payload = ops.PutPayload(
                    location.to_item(),
                    condition="attribute_not_exists(#n)",
                    names=_NAME,
                    return_on_failure=True,
                )
            else:
                payload = ops.PutPayload(
                    location.to_item(),
                    condition="#cn = :n AND #ca = :a AND #cp = :p",
                    names={
                        "#cn": "catalog_node",
                        "#ca": "catalog_address",
                        "#cp": "catalog_partition",
                    },
                    values={
                        ":n": {"S": expected.node},
                        ":a": {"S": expected.address},
                        ":p": {"S": expected.partition},
                    },
                    return_on_failure=True,
                )
            target = system_target(catalog.BOOTSTRAP_TABLE_ID, catalog.BOOTSTRAP_PARTITION_ID)
            await self._client(node).call(
                ops.PUT, target, payload.to_json(), limits.NODE_CALL_SECONDS_MAX
            )
        except ConditionalCheckFailed as conflict:
            return None if conflict.item is None else CatalogLocation.from_item(conflict.item)
        return None

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
        """Scan the whole catalog, page after page, and install it in the cache; when its node
        does not answer, take what the nodes' copies add, and fail all the same."""
        try:
            await self._scan_and_install()
        except ServiceUnavailable:
            await self._take_node_copy()
            raise

    async def _scan_and_install(self) -> None:
        await self.locate_catalog()
        started = self._observations
        self._install_scan(await self.catalog_client.scan(), started)

    async def _take_node_copy(self) -> None:
        """Install the newest of the nodes' copies of the catalog, merged under the cache
        (`core.catalog_copy.merged`), unless a copy was found less than a refresh round ago or
        this one is older than a copy taken before. A read that found none is tried again on the
        next refresh, so a request does not fail for a read that failed just before it."""
        now = self.sources.clock()
        if (
            self._node_copies_read_at is not None
            and now - self._node_copies_read_at < limits.CATALOG_REFRESH_SECONDS
        ):
            return
        # Every node keeps a copy but a one-copy catalog's own node (a replicated catalog's
        # replicas keep one too, for when a majority of them is down).
        location = self.location
        nodes = sorted(
            node
            for node in self.clients
            if location is None or location.replicas or node != location.node
        )
        replies = await asyncio.gather(
            *(self._read_node_copy(node) for node in nodes), return_exceptions=True
        )
        copies: list[CatalogCopy] = []
        for node, reply in zip(nodes, replies, strict=True):
            if isinstance(reply, CatalogCopy):
                copies.append(reply)
            elif isinstance(reply, DynamoError):
                log.debug("no catalog copy from %s: %s", node, reply.message)
            elif isinstance(reply, BaseException):
                raise reply
        copy = newest(copies)
        if copy is None:
            return
        self._node_copies_read_at = now
        if copy.seq < self._node_copy_seq:
            return
        if self._node_copy_seq < 0:
            log.warning(
                "the catalog's node does not answer: serving from a node's copy of the catalog "
                "(seq %d, %d tables)",
                copy.seq,
                len(copy.records),
            )
        self._node_copy_seq = copy.seq
        self._install(merged(self.records, copy))

    async def _read_node_copy(self, node: str) -> CatalogCopy | None:
        """The copy of the catalog `node` keeps (None: it has none)."""
        target = system_target(catalog.CATALOG_COPY_TABLE_ID, CATALOG_COPY_PARTITION_ID, True)
        payload = ops.ScanPayload(page_bytes=limits.QUERY_PAGE_BYTES_MAX)
        items: list[dict[str, Any]] = []
        for _ in range(CATALOG_SCAN_PAGES_MAX):
            try:
                reply = await self.clients[node].call(
                    ops.SCAN, target, payload.to_json(), limits.CATALOG_COPY_READ_SECONDS_MAX
                )
            except StaleEpoch:
                return None  # The node holds no copy partition yet.
            items.extend(reply["items"])
            if reply["last_key"] is None:
                return CatalogCopy.of_items(items)
            payload.exclusive_start = reply["last_key"]
        return None

    def _install_scan(self, scanned: dict[str, TableDef], started: int) -> None:
        """Make a scan's records the cache, except the rows this router read or wrote itself
        since the scan began (a slow scan must not undo a newer change), and keep the cached
        records that did not change, so their partition maps stay cached."""
        records: dict[str, TableDef] = {}
        for name in scanned.keys() | self.records.keys():
            cached = self.records.get(name)
            if self._observed.get(name, -1) > started:
                chosen = cached
            else:
                chosen = scanned.get(name)
                if (
                    chosen is not None
                    and cached is not None
                    and (cached.id, cached.version) == (chosen.id, chosen.version)
                ):
                    chosen = cached
            if chosen is not None:
                records[name] = chosen
        self._install(records)

    def _observe(self, name: str, record: TableDef | None) -> None:
        """Install one row this router has just read or written (None: there is none); a record
        equal to the cached one keeps the cached object, so its partition map stays cached."""
        cached = self.records.get(name)
        if record is not None and cached is not None and cached == record:
            record = cached
        self._observations += 1
        self._observed[name] = self._observations
        records = dict(self.records)
        if record is None:
            records.pop(name, None)
        else:
            records[name] = record
        self._install(records)

    def _install(self, records: dict[str, TableDef]) -> None:
        if records.keys() == self.records.keys() and all(
            records[name] is self.records[name] for name in records
        ):
            return
        self.records = records
        # A table whose record is the same object keeps its route, and with it the partition
        # map and index routes already built; every other table gets a new one.
        routes = self.tables
        self.tables = {
            name: route
            if (route := routes.get(name)) is not None and route.record is record
            else Route.of_table(record)
            for name, record in records.items()
        }
        self.catalog_version += 1

    async def read_table(self, name: str) -> TableDef | None:
        """Read table `name`'s record from the catalog (None: no such table) and cache it."""
        return await self.catalog_client.read_table(name)

    async def change_table(self, name: str, change: TableChange) -> TableDef | None:
        """Apply `change` to table `name`'s newest record by compare-and-set
        (`rpc.catalog_client.CatalogClient.change_table`); return the record after it (None: the
        table is not in the catalog). Every row read or written meanwhile is cached."""
        return await self.catalog_client.change_table(name, change)

    async def table(self, name: str) -> Route:
        """The route of table `name` if it serves reads and writes; else ResourceNotFound.

        A miss re-reads the catalog once before failing: the table may have been created through
        another router since the last refresh. `name` may be the table's ARN, checked as the
        request was read (`router.requests.RequestReader.table_name`).
        """
        name = table_arns.table_name_of(name)
        table = self.tables.get(name)
        if table is None or not table.serving:
            try:
                await self.refresh()
            except ServiceUnavailable:
                # The catalog cannot be read; a node's copy may have named the table meanwhile.
                table = self.tables.get(name)
                if table is None or not table.serving:
                    raise
                return table
            table = self.tables.get(name)
            if table is None or not table.serving:
                raise ResourceNotFound(TABLE_NOT_FOUND)
        return table

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

    async def driver_call(
        self,
        partition: PartitionDef,
        table_id: str,
        op: str,
        body: dict[str, Any],
        timeout: float,
    ) -> dict[str, Any]:
        """A node's driver operation on one partition (a split): on its node, or at a
        replicated one's leader, which alone drives it (a replica refuses it as not the
        leader, naming the one it knows)."""

        def attempt(node: str, remaining: float) -> Awaitable[dict[str, Any]]:
            return self._client(node).control(op, body, remaining)

        return await self.replicas.call(partition, table_id, op, attempt, timeout)

    async def feed_call(
        self,
        partition: PartitionDef,
        op: str,
        table_id: str,
        body: dict[str, Any],
        timeout: float = limits.CONTROL_CALL_SECONDS_MAX,
    ) -> dict[str, Any]:
        """A change-feed consumer call (`rpc.ops.FEED_OPS`) about one partition, live or retired
        (the envelope carries no epoch): on its node, or at a replicated one's leader. Each may
        apply twice (a registration again changes nothing, a checkpoint never moves back), so
        it goes on to another replica after any failure."""
        target = ops.Target(table_id, partition.id)

        def attempt(node: str, remaining: float) -> Awaitable[dict[str, Any]]:
            return self._client(node).call(op, target, body, remaining)

        return await self.replicas.call(partition, table_id, op, attempt, timeout, retry_safe=True)

    async def feed_read(
        self,
        table_id: str,
        partition: PartitionDef,
        after_seq: int,
        *,
        max_records: int,
        timeout: float,
    ) -> FeedPage:
        """The records of a partition's change log after `after_seq` there are now (one read of
        a follow: how GetRecords reads a shard), from its node or a replicated one's leader,
        which alone serves its feed."""

        def attempt(node: str, remaining: float) -> Awaitable[FeedPage]:
            feed = self._client(node).feed()
            return feed.read(
                table_id, partition.id, after_seq, max_records=max_records, timeout=remaining
            )

        return await self.replicas.call(
            partition, table_id, "change log read", attempt, timeout, retry_safe=True
        )

    def _client(self, node_id: str) -> NodeTransport:
        client = self.clients.get(node_id)
        if client is None:
            # The catalog names a node this router was not started with: the routers of the
            # cluster disagree on its membership.
            raise ServiceUnavailable(f"Storage node {node_id} is not known to this router")
        return client

    async def _send(
        self,
        table: Route,
        partition: PartitionDef,
        op: str,
        body: dict[str, Any],
        consistent: bool,
        timeout: float = limits.NODE_CALL_SECONDS_MAX,
    ) -> dict[str, Any]:
        """Send `body` to one partition of a user table, as its map says it is now."""
        target = ops.Target(table.id, partition.id, partition.epoch, consistent)
        try:
            if not partition.replicas:
                return await self._client(partition.node).call(op, target, body, timeout)
            return await self._send_to_replicas(partition, op, target, body, timeout)
        except ThroughputExceeded:
            self.metrics.throttled(table.name, partition.id)
            raise

    async def _send_to_replicas(
        self,
        partition: PartitionDef,
        op: str,
        target: ops.Target,
        body: dict[str, Any],
        timeout: float,
    ) -> dict[str, Any]:
        """Send a request to a replicated partition (`rpc.replicas`): an eventually consistent
        read to its replicas in turn, as DynamoDB serves those from any replica, unless this
        router wrote to the partition a moment ago; the rest to its leader."""
        loop = asyncio.get_running_loop()
        key = (target.table_id, partition.id)
        anywhere = op in _EVENTUAL_READS and not target.consistent
        if (
            anywhere
            and loop.time() - self._written.get(key, -1e9) < limits.READ_YOUR_WRITES_SECONDS
        ):
            # Written through this router a moment ago: its leader has the write applied.
            anywhere = not self.replicas.knows_leader(*key)

        def attempt(node: str, remaining: float) -> Awaitable[dict[str, Any]]:
            return self._client(node).call(op, target, body, remaining)

        reply = await self.replicas.call(
            partition,
            target.table_id,
            op,
            attempt,
            timeout,
            anywhere=anywhere,
            retry_safe=op in _READS,
        )
        if op not in _READS:
            self._written[key] = loop.time()
        return reply

    async def _after_stale(self, table: Route, backoff: float) -> tuple[Route, float]:
        """The table's route after a stale-epoch refusal, and the next backoff.

        The catalog is re-read. If the table is gone or no longer serving, the request fails as on
        a missing table. A table dropped and created again under the same name (a new id) serves
        the request if its key schema is the same, since the request was checked against that
        schema; with another schema it fails as on a missing table. If the catalog has not caught
        up yet (a split still committing), wait before the next try.
        """
        await self.refresh()
        current = self.tables.get(table.name)
        if current is not None and table.index is not None:
            # A global index's partitions (a split of one, or the index or table gone).
            current = current.global_index(table.index)
            if current is not None and current.id != table.id:
                current = None  # Deleted and created again: another index.
        if current is None or not current.serving or current.key_shape != table.key_shape:
            raise ResourceNotFound(TABLE_NOT_FOUND)
        if current is table:
            await asyncio.sleep(backoff)
            backoff *= 2
        return current, backoff

    async def call_key(
        self,
        table: Route,
        partition_key: AttributeValue,
        sort_key: AttributeValue | None,
        op: str,
        body: dict[str, Any],
        *,
        consistent: bool = False,
    ) -> dict[str, Any]:
        """Send a data-plane request about one key to the partition that holds the key.

        The envelope names that partition and its epoch (`consistent`: a strongly consistent
        read). On a stale epoch the catalog is refreshed and the partition looked up again, a
        bounded number of times.
        """
        storage_key = encode_storage_key(partition_key, sort_key)
        backoff = limits.STALE_EPOCH_BACKOFF_SECONDS_MIN
        for _ in range(limits.STALE_EPOCH_ATTEMPTS_MAX):
            partition = table.partitions.lookup(storage_key)
            try:
                return await self._send(table, partition, op, body, consistent)
            except StaleEpoch as refused:
                last = refused
                table, backoff = await self._after_stale(table, backoff)
        log.warning("%s of %s given up after stale epochs, the last: %s", op, table.name, last)
        raise ServiceUnavailable(_STALE_GIVE_UP)

    async def call_partition(
        self,
        table: Route,
        partition: PartitionDef,
        op: str,
        body: dict[str, Any],
        *,
        consistent: bool = False,
        timeout: float = limits.NODE_CALL_SECONDS_MAX,
        follow: bool = True,
        start: bytes | None = None,
    ) -> dict[str, Any]:
        """Send a data-plane request (a scan page) to one partition of a table, with a deadline
        `timeout` seconds away. With `follow` False a stale epoch is raised once the catalog has
        been re-read, for a caller that must place its request again itself (a transaction's
        prepare, whose items may now be on two partitions).

        The envelope names the partition and its epoch, as `call_key`'s. On a stale epoch the
        catalog is refreshed and the request goes to the partition that now holds the old one's
        start bound (or `start`, a caller's cursor inside the partition, when given). After a split
        that partition covers less than the one asked for, so the reply carries the partition that
        answered as `reply["partition"]` (the very object asked about when no split intervened): a
        caller walking a table continues after that partition's end, never after the end of the
        one it asked for.
        """
        start = bytes.fromhex(partition.start) if start is None else start
        backoff = limits.STALE_EPOCH_BACKOFF_SECONDS_MIN
        for _ in range(limits.STALE_EPOCH_ATTEMPTS_MAX):
            try:
                reply = await self._send(table, partition, op, body, consistent, timeout)
            except StaleEpoch as refused:
                last = refused
                table, backoff = await self._after_stale(table, backoff)
                if not follow:
                    raise
                partition = table.partitions.lookup(start)
                continue
            reply["partition"] = partition
            return reply
        log.warning("%s of %s given up after stale epochs, the last: %s", op, table.name, last)
        raise ServiceUnavailable(_STALE_GIVE_UP)


# Reads, and those a replica that does not lead may serve when not strongly consistent.
_READS = frozenset({ops.GET, ops.QUERY, ops.SCAN, ops.TXN_GET})
_EVENTUAL_READS = frozenset({ops.GET, ops.QUERY, ops.SCAN})

_STALE_GIVE_UP = (
    "The partition map kept changing while this request was routed "
    f"({limits.STALE_EPOCH_ATTEMPTS_MAX} attempts); try again"
)
