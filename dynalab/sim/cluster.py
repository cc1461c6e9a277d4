"""A whole cluster in one process, driven from one seed, on a loop whose clock is virtual.

`SimCluster(seed)` builds 3 `StorageNode`s on `MemoryStore`s and 1-2 `RouterContext`s that reach
them through one `rpc.local.LocalNetwork` (seeded faults: drop, delay, duplicate, cut). Tests call
the router's handlers directly (`router.items.put_item(ctx, body)`, ...): each returns DynamoDB's
reply body or raises a `core.errors.DynamoError`, as `router.protocol` would turn into HTTP.

`run(seed, scenario)` runs `scenario(cluster)` on a `VirtualTimeLoop`: an event loop whose clock
jumps to the next timer whenever nothing is ready, so sleeps, timeouts and backoffs cost no real
time and every interleaving is decided by the program and the seed alone. With the network's and
the routers' randomness drawn from the same seed, a failing seed replays exactly: the tests print
their seed and name it in their assertion messages, and a failing one prints the pytest command
that runs that seed alone.

Each node's change feed is served on the network too (`storagenode.feed_service.FeedService`
behind `rpc.local.LocalFeed`), so the GSI replicator (`start_replicator`) and the Streams API run
here through the same seam as over gRPC.

With `replication_factor` above 1 the routers place each new table's partitions, and the
catalog, on that many nodes, and every node runs as a node process does with peers: its real
write loop (`storagenode.commit.GroupCommitter`, its rounds inline, its Raft ticks on the virtual
clock), joined to the others by an `rpc.raft_local.LocalRaftNetwork` that drops, duplicates and
delays from the seed (`raft_faults`); every request reaches it as its server hands it over (a
write to the loop, a strong read at a leader without its lease through a read-index round), and
a replica behind a compacted log copies its partition from a member across the network. The
nodes are then named node-1, node-2, ... (a member id is the name's number).
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import random
import selectors
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypeVar

from core import keycodec, limits
from core.catalog import TableDef
from core.errors import DynamoError, ServiceUnavailable
from gsi_replicator.replicator import Replicator
from router import items, queries, tables
from router.context import RouterContext
from router.settings import RouterSettings
from router.sources import Sources
from rpc import ops
from rpc.local import Faults, LocalNetwork
from rpc.ops import Target
from rpc.raft_local import LocalRaftNetwork
from storagenode import commit
from storagenode.commit import GroupCommitter
from storagenode.feed_service import FeedService
from storagenode.memory_store import MemoryStore
from storagenode.move import Mover
from storagenode.node import WRITE_OPS, StorageNode
from storagenode.operations import OPERATIONS, Kind
from storagenode.replica_move import ReplicaMover
from storagenode.split import Splitter
from storagenode.sweeper import TtlSweeper
from storagenode.throughput import NodeThroughput

T = TypeVar("T")
DRIVER_OPS = frozenset(
    name for name, operation in OPERATIONS.items() if operation.kind is Kind.DRIVER
)
START_TIME = 1_800_000_000.0  # The routers' wall clock at the start of every simulation.


class _VirtualSelector(selectors.DefaultSelector):  # type: ignore[misc,valid-type]
    """Polls without blocking; a wait the loop asks for advances its virtual clock instead."""

    def __init__(self, loop: VirtualTimeLoop) -> None:
        super().__init__()
        self._loop = loop

    def select(self, timeout: float | None = None) -> list[Any]:
        events = super().select(0)
        if not events:
            if timeout is None:
                raise RuntimeError("simulation deadlock: nothing is ready and no timer is set")
            self._loop.now += timeout
        return events  # type: ignore[no-any-return]


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """An event loop on virtual time: idle waits take no real time, and replay exactly."""

    def __init__(self) -> None:
        self.now = 0.0
        super().__init__(_VirtualSelector(self))

    def time(self) -> float:
        return self.now


def _loop_time() -> float:
    return asyncio.get_running_loop().time()


def virtual_unix_time() -> float:
    """Unix time on the running virtual-time loop: the clock of request deadlines in the sim."""
    return START_TIME + asyncio.get_running_loop().time()


def run(
    seed: int,
    scenario: Callable[[SimCluster], Awaitable[T]],
    *,
    replay: str | None = None,
    **options: Any,
) -> T:
    """Run `scenario` on a fresh cluster built from `seed`, on a fresh virtual-time loop; if it
    fails, print the one command that replays that seed (`replay`, or under pytest the test's
    own)."""
    print(f"sim seed {seed}")
    loop = VirtualTimeLoop()
    try:

        async def main() -> T:
            cluster = SimCluster(seed, **options)
            try:
                return await scenario(cluster)
            finally:
                await cluster.close()

        return loop.run_until_complete(main())
    except BaseException:
        test = os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" ", 1)[0]
        if replay is None and test:
            replay = f"python -m pytest -q '{test}'"
        if replay is not None:
            print(f"sim seed {seed} failed; replay it with: {replay}")
        raise
    finally:
        loop.close()


@dataclasses.dataclass(frozen=True)
class _Drivers:
    """A node's multi-step drivers, as its driver operations' handlers take them."""

    splitter: Splitter
    mover: Mover
    replica_mover: ReplicaMover


class SimCluster:
    """Storage nodes on memory stores and routers, joined by one seeded in-process network.

    With `split_bytes`, each node runs its background drivers as a node process does (the
    splitter's recovery and its size and heat checks, splitting past `split_bytes`; the mover's
    settling); without, they run only when a test calls them.
    """

    def __init__(
        self,
        seed: int,
        *,
        nodes: int = 3,
        routers: int = 2,
        split_bytes: int | None = None,
        replication_factor: int = 1,
        raft_faults: Faults | None = None,
    ) -> None:
        """`raft_faults` (replicated clusters): the drop, duplicate and delay rates of the
        messages between the nodes' Raft groups (`drop_request`, `duplicate`, `delay_seconds_max`
        are read)."""
        self.seed = seed
        self.split_bytes = split_bytes
        self.replication_factor = replication_factor
        # The driver operations (splits, moves) each node runs for its callers, by node.
        self._driving: dict[str, set[asyncio.Future[Any]]] = {}
        self.rng = rng = random.Random(seed)
        self.network = LocalNetwork(random.Random(rng.getrandbits(64)), clock=virtual_unix_time)
        # Between the nodes' Raft groups, when partitions are replicated; and each node's write
        # loop, by node.
        self.members = list(range(1, nodes + 1))
        self.raft: LocalRaftNetwork | None = None
        if replication_factor > 1:
            given = Faults() if raft_faults is None else raft_faults
            self.raft = LocalRaftNetwork(
                rng.getrandbits(64),
                drop_rate=given.drop_request,
                duplicate_rate=given.duplicate,
                delay_seconds_max=given.delay_seconds_max,
            )
        self.committers: dict[str, GroupCommitter] = {}
        self.stores: dict[str, MemoryStore] = {}
        self.nodes: dict[str, StorageNode] = {}
        self.splitters: dict[str, Splitter] = {}
        self.movers: dict[str, Mover] = {}
        self.replica_movers: dict[str, ReplicaMover] = {}
        self.addresses: dict[str, str] = {}
        for number in self.members:
            self.add_node(f"node-{number}" if self.raft is not None else f"node{number}")
        self.routers: list[RouterContext] = []
        for _ in range(routers):
            self.add_router()
        # The GSI replicator processes running, by name: each its replicator and polling task.
        self.replicators: dict[str, tuple[Replicator, asyncio.Task[None]]] = {}
        self._replicators_started = 0

    def add_node(self, node_id: str) -> None:
        """Start one more storage node, on an empty memory store."""
        address = f"local-{node_id}"
        store = MemoryStore()
        self.addresses[node_id] = address
        self.stores[node_id] = store
        self.serve(node_id, self._node(node_id))
        self._start_drivers(node_id)

    def _node(self, node_id: str) -> StorageNode:
        """A node process over `node_id`'s store; in a replicated cluster a member of its
        partitions' groups with its write loop running."""
        store = self.stores[node_id]
        if self.raft is None:
            return StorageNode(
                store, throughput=NodeThroughput(enforced=False), clock=virtual_unix_time
            )
        member = int(node_id.split("-")[1])
        node = StorageNode(
            store,
            throughput=NodeThroughput(enforced=False),
            clock=virtual_unix_time,
            member=member,
            peers=[peer for peer in self.members if peer != member],
            timeouts=random.Random(self.rng.getrandbits(64)),
            monotonic=_loop_time,
        )
        raft = self.raft

        async def inline(work: Callable[..., T], *args: Any) -> T:
            return work(*args)

        def send(to: int, batch: Any) -> None:
            transport.send(to, batch)

        async def read_page(source: int, body: dict[str, Any]) -> dict[str, Any]:
            """A page of a member's replica, as its server answers `raft_snapshot_read`."""
            await asyncio.sleep(self.rng.uniform(0.001, 0.01))
            source_id = f"node-{source}"
            if (
                source_id not in self.committers
                or not raft.reachable(member, source)
                or not raft.reachable(source, member)
            ):
                raise ServiceUnavailable(f"{source_id} cannot be reached from {node_id}")
            reply: dict[str, Any] = self.nodes[source_id].read(ops.RAFT_SNAPSHOT_READ, None, body)
            return reply

        committer = GroupCommitter(
            node, send=send, monotonic=_loop_time, offload=inline, read_page=read_page
        )
        transport = raft.join(member, committer.deliver)
        committer.start()
        self.committers[node_id] = committer
        return node

    async def _stop_loop(self, node_id: str) -> None:
        """A replicated node's write loop and Raft membership end where they are (kill -9)."""
        committer = self.committers.pop(node_id, None)
        if committer is None:
            return
        assert self.raft is not None
        self.raft.leave(int(node_id.split("-")[1]))
        task = committer._task
        if task is not None:
            task.cancel()
            await asyncio.gather(task, *committer.cancel_page_reads(), return_exceptions=True)

    def _start_drivers(self, node_id: str) -> None:
        """The node's splitter and mover, new (nothing they held survives a restart), running
        in the background if the cluster's nodes do."""
        node = self.nodes[node_id]
        self.splitters[node_id] = self.splitter(node, node_id)
        self.movers[node_id] = Mover(self.splitters[node_id], node_id)
        self.replica_movers[node_id] = ReplicaMover(
            self.splitters[node_id], node_id, self.addresses.get
        )
        if self.split_bytes is not None:
            self.splitters[node_id].start()
            self.movers[node_id].start()

    async def _stop_drivers(self, node_id: str) -> None:
        """The node's drivers stop where they are, and the splits and moves it was running
        for its callers with them."""
        for task in self._driving.pop(node_id, set()):
            task.cancel()
        await self.movers[node_id].close()
        await self.replica_movers[node_id].close()
        await self.splitters[node_id].close()

    def serve(self, node_id: str, node: StorageNode) -> None:
        """Put `node` on the network at `node_id`'s address, its change feed served in-process
        (`storagenode.feed_service`, its reads inline); a node there before is replaced, and the
        follows it served end as a stopped node's do."""

        committer = self.committers.get(node_id)

        async def submit(op: str, target: Target, body: dict[str, Any]) -> dict[str, Any]:
            if committer is not None:
                return await committer.submit(op, target, body)
            [result] = node.apply_writes([(op, target, body)])
            if isinstance(result, DynamoError):
                raise result
            return result

        async def serve(
            op: str, target: Target | None, body: dict[str, Any], is_write: bool
        ) -> dict[str, Any]:
            """A request as a replicated node's server hands it over: a write to its loop."""
            assert committer is not None
            if is_write:
                return await committer.submit(op, target, body)
            return await commit.read(node, committer, op, target, body)

        async def inline(work: Callable[[], T]) -> T:
            return work()

        async def drive(op: str, body: dict[str, Any]) -> dict[str, Any]:
            """A split or a move asked of the node, run as its server runs one: the handler on
            the node's drivers, in a task that ends with the node (`kill_node`)."""
            task = asyncio.current_task()
            assert task is not None, "the network runs each in a task of its own"
            running = self._driving.setdefault(node_id, set())
            running.add(task)
            try:
                operation = OPERATIONS[op]
                handler: Any = operation.handler
                drivers = _Drivers(
                    self.splitters[node_id],
                    self.movers[node_id],
                    self.replica_movers[node_id],
                )
                reply: dict[str, Any] = await handler(drivers, operation.payload.from_json(body))
                return reply
            finally:
                running.discard(task)

        feed = FeedService(node, submit, offload=inline)
        self.network.register(
            self.addresses[node_id],
            node,
            WRITE_OPS,
            feed,
            driver_ops=DRIVER_OPS,
            drive=drive,
            serve=None if committer is None else serve,
        )
        self.nodes[node_id] = node

    async def kill_node(self, node_id: str) -> None:
        """The node's process dies (kill -9): it is cut off the network and its drivers stop
        where they are; what it committed stays in its store, for `restart_node`."""
        self.network.cut(self.addresses[node_id])
        await self._stop_loop(node_id)
        await self._stop_drivers(node_id)

    def isolate(self, node_id: str) -> None:
        """Cut the node off: no call reaches it, and in a replicated cluster no Raft message
        passes between it and any other node, either way (a pause or a partition)."""
        self.network.cut(self.addresses[node_id])
        if self.raft is not None:
            member = int(node_id.split("-")[1])
            for peer in self.members:
                if peer != member:
                    self.raft.cut(member, peer)

    def rejoin(self, node_id: str) -> None:
        """Undo `isolate` (and `kill_node`'s cut): the node is reachable again."""
        self.network.heal(self.addresses[node_id])
        if self.raft is not None:
            self.raft.heal(int(node_id.split("-")[1]))

    async def restart_node(self, node_id: str) -> None:
        """Restart a node, as after kill -9: a new `StorageNode` over the same store (what it
        committed), with a new splitter and mover (what it held in memory is gone)."""
        await self._stop_loop(node_id)
        self.serve(node_id, self._node(node_id))
        await self._stop_drivers(node_id)
        self._start_drivers(node_id)

    def add_router(self, node_ids: Iterable[str] | None = None) -> RouterContext:
        """Start one more router, knowing `node_ids` (default: every node), as its --nodes."""
        known = self.addresses if node_ids is None else {n: self.addresses[n] for n in node_ids}
        name = f"router{len(self.routers) + 1}"
        router = RouterContext(
            known,
            name,
            Sources.seeded(self.rng.getrandbits(64), START_TIME),
            connect=self.network.connector(name),
            settings=RouterSettings(replication_factor=self.replication_factor),
        )
        self.routers.append(router)
        return router

    def splitter(self, node: StorageNode, node_id: str = "") -> Splitter:
        """A node's splitter, its internal writes applied in place, its catalog calls on the
        network (under its faults) as node `node_id`'s, on virtual time; its size trigger off
        unless the cluster's nodes split past `split_bytes` or a test calls it."""

        committer = self.committers.get(node_id)

        async def submit(op: str, target: Target | None, body: dict[str, Any]) -> dict[str, Any]:
            if committer is not None:
                return await committer.submit(op, target, body)
            [result] = node.apply_writes([(op, target, body)])
            if isinstance(result, DynamoError):
                raise result
            return result

        async def inline(work: Callable[[], T]) -> T:
            return work()

        # Seeded apart from the cluster's own source, so the routers' seeds stay as they were.
        rng = random.Random(f"splitter {self.seed} {len(self.splitters)}")
        return Splitter(
            node,
            submit,
            self.network.connector(node_id),
            split_bytes=1 << 62 if self.split_bytes is None else self.split_bytes,
            offload=inline,
            clock=_loop_time,
            rng=rng,
        )

    def ttl_sweeper(self, node_id: str) -> TtlSweeper:
        """A TTL sweeper of the node (not started: a test calls `sweep`), its writes applied in
        place and its walks of the expiry index inline."""
        node = self.nodes[node_id]

        async def submit(op: str, target: Target | None, body: dict[str, Any]) -> dict[str, Any]:
            [result] = node.apply_writes([(op, target, body)])
            if isinstance(result, DynamoError):
                raise result
            return result

        async def inline(work: Callable[[], T]) -> T:
            return work()

        return TtlSweeper(node, submit, monotonic=_loop_time, offload=inline)

    def start_replicator(self) -> Replicator:
        """Start one more GSI replicator process (a new lease owner, as every restart is, its
        catalog pauses drawn from the seed), calling the nodes over the network: it polls the
        catalog, takes leases and follows the partitions' feeds as `gsi_replicator` does, on the
        virtual clock."""
        self._replicators_started += 1
        name = f"replicator{self._replicators_started}"
        replicator = Replicator(
            self.addresses,
            connect=self.network.connector(name),
            clock=virtual_unix_time,
            owner=name,
            monotonic=_loop_time,
            rng=random.Random(self.rng.getrandbits(64)),
        )
        task = asyncio.ensure_future(self._poll_forever(replicator))
        self.replicators[name] = (replicator, task)
        return replicator

    @staticmethod
    async def _poll_forever(replicator: Replicator) -> None:
        """`Replicator.run`'s loop without its graceful close: a kill leaves the leases held."""
        while True:
            await replicator.poll()
            await asyncio.sleep(limits.GSI_CATALOG_POLL_SECONDS)

    async def kill_replicator(self, name: str) -> None:
        """The replicator process dies (kill -9): its polling and its followers stop where they
        are, its leases stay held until they expire, its calls in flight are lost."""
        replicator, task = self.replicators.pop(name)
        tasks = [task, *replicator.followers.values(), *replicator.index_writes.senders()]
        for running in tasks:
            running.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for client in replicator.clients.values():
            await client.close()

    async def stop_replicator(self, name: str) -> None:
        """The replicator process stops gracefully: it releases its leases."""
        replicator, task = self.replicators.pop(name)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await replicator.close()

    async def close(self) -> None:
        for name in list(self.replicators):
            await self.kill_replicator(name)
        for router in self.routers:
            await router.close()
        for node_id in self.nodes:
            await self._stop_drivers(node_id)
        for node_id in list(self.committers):
            await self._stop_loop(node_id)
        if self.raft is not None:
            self.raft.close()

    def faults(self, faults: Faults | None = None) -> None:
        """Put `faults` in force on the network (None: none)."""
        self.network.faults = Faults() if faults is None else faults

    # Shorthand for the handlers --------------------------------------------------------------

    async def create_table(
        self, name: str, *, sort: bool = True, router: int = 0, lsi: str | None = None
    ) -> dict[str, Any]:
        """An on-demand table keyed by pk (S) and, with `sort`, sk (N); with `lsi`, a local
        index "by" + that attribute's name capitalised (its sort key, S), projecting ALL."""
        key_schema = [{"AttributeName": "pk", "KeyType": "HASH"}]
        definitions = [{"AttributeName": "pk", "AttributeType": "S"}]
        if sort:
            key_schema.append({"AttributeName": "sk", "KeyType": "RANGE"})
            definitions.append({"AttributeName": "sk", "AttributeType": "N"})
        body: dict[str, Any] = {
            "TableName": name,
            "KeySchema": key_schema,
            "AttributeDefinitions": definitions,
            "BillingMode": "PAY_PER_REQUEST",
        }
        if lsi is not None:
            definitions.append({"AttributeName": lsi, "AttributeType": "S"})
            body["LocalSecondaryIndexes"] = [
                {
                    "IndexName": "by" + lsi[0].upper() + lsi[1:],
                    "KeySchema": [
                        {"AttributeName": "pk", "KeyType": "HASH"},
                        {"AttributeName": lsi, "KeyType": "RANGE"},
                    ],
                    "Projection": {"ProjectionType": "ALL"},
                }
            ]
        return await tables.create_table(self.routers[router], body)

    async def create_indexed(self, name: str) -> TableDef:
        """An on-demand table keyed by pk (S) with a global index byG keyed by g (S) and n (N),
        projecting ALL; its catalog record."""
        await tables.create_table(
            self.routers[0],
            {
                "TableName": name,
                "KeySchema": [{"AttributeName": "pk", "KeyType": "HASH"}],
                "AttributeDefinitions": [
                    {"AttributeName": "pk", "AttributeType": "S"},
                    {"AttributeName": "g", "AttributeType": "S"},
                    {"AttributeName": "n", "AttributeType": "N"},
                ],
                "BillingMode": "PAY_PER_REQUEST",
                "GlobalSecondaryIndexes": [
                    {
                        "IndexName": "byG",
                        "KeySchema": [
                            {"AttributeName": "g", "KeyType": "HASH"},
                            {"AttributeName": "n", "KeyType": "RANGE"},
                        ],
                        "Projection": {"ProjectionType": "ALL"},
                    }
                ],
            },
        )
        table = await self.routers[0].read_table(name)
        assert table is not None, f"seed {self.seed}: {name} was not created"
        return table

    async def put(self, name: str, item: dict[str, Any], router: int = 0, **extra: Any) -> None:
        await items.put_item(self.routers[router], {"TableName": name, "Item": item, **extra})

    async def read_all(
        self,
        handler: Callable[..., Awaitable[dict[str, Any]]],
        request: dict[str, Any],
        router: int = 0,
    ) -> list[dict[str, Any]]:
        """Every item of a Query or Scan, page after page, each page resuming the last."""
        found: list[dict[str, Any]] = []
        request = dict(request)
        for _ in range(10_000):
            page = await handler(self.routers[router], dict(request))
            found.extend(page["Items"])
            if "LastEvaluatedKey" not in page:
                return found
            request["ExclusiveStartKey"] = page["LastEvaluatedKey"]
        raise AssertionError(f"seed {self.seed}: the pages never ended")

    async def scan_all(self, name: str, router: int = 0, **request: Any) -> list[dict[str, Any]]:
        return await self.read_all(queries.scan, {"TableName": name, **request}, router)

    # Splitting a partition on its node ------------------------------------------------------

    async def split(
        self, name: str, at: bytes | None = None, router: int = 0
    ) -> tuple[dict[str, Any], ...]:
        """Have the owner of the partition of table `name` holding storage key `at` split it
        there (`storagenode.split.Splitter`; `at` None: the first partition, where it halves):
        of a replicated partition, its leader (waited for while an election runs).

        Router `router` only finds the partition. Returns the (parent, low child, high child)
        partitions as the catalog describes them.
        """
        table = await self.routers[router].read_table(name)
        assert table is not None, f"seed {self.seed}: no table {name} to split"
        parent = next(p for p in table.partitions if at is None or p.holds(at))
        owner = parent.node
        if parent.replicas:
            ref = (table.id, parent.id)
            for _ in range(200):
                leaders = [
                    n for n in parent.replicas if n in self.committers and self.nodes[n].leads(ref)
                ]
                if leaders:
                    owner = leaders[0]
                    break
                await asyncio.sleep(0.1)
        reply = await self.splitters[owner].split(table.id, parent.id, at)
        low, high = reply["children"]
        return reply["parent"], low, high

    async def move(self, name: str, partition_id: str, target: str) -> dict[str, Any]:
        """Have the owner of partition `partition_id` of table `name` move it to node `target`
        (`storagenode.move.Mover`); its reply."""
        table = await self.routers[0].read_table(name)
        assert table is not None, f"seed {self.seed}: no table {name}"
        source = table.partition(partition_id).node
        return await self.movers[source].move(
            table.id, partition_id, target, self.addresses[target]
        )


def storage_key(item: dict[str, Any]) -> bytes:
    return keycodec.encode_storage_key(item["pk"], item.get("sk"))
