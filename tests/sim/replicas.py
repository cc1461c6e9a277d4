"""Storage nodes that share partitions as Raft groups, in one process, on virtual time.

`Replicas(seed)` runs `StorageNode`s named node-1..node-N, each with its real write loop
(`storagenode.commit.GroupCommitter`, its rounds inline on the loop, its ticks on the loop's
virtual clock) and joined by a `rpc.raft_local.LocalRaftNetwork` that drops, duplicates and delays
from the seed. A node killed (`kill`) leaves the network and loses everything but its store (a
`MemoryStore`: its disk); `restart` starts a new node over that store. `write` sends a write to a
node the way a router does: at the leader, following `NotPartitionLeader` to the node it names.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from core import limits
from core.errors import DynamoError, NotPartitionLeader, ServiceUnavailable
from dynalab.sim.cluster import START_TIME
from rpc import ops
from rpc.ops import Target
from rpc.raft_local import LocalRaftNetwork, LocalRaftTransport
from storagenode import commit
from storagenode.commit import GroupCommitter
from storagenode.layout import Family
from storagenode.memory_store import MemoryStore
from storagenode.node import StorageNode
from storagenode.throughput import NodeThroughput

T = TypeVar("T")

# The families every replica holds identical: all but the node's own (its Raft log and state,
# where terms and indexes differ by when each member heard what).
REPLICATED = (
    Family.ITEMS,
    Family.CHANGE_LOG,
    Family.PARTITIONS,
    Family.CHECKPOINTS,
    Family.INDEX_ENTRIES,
    Family.ITEM_COLLECTIONS,
    Family.TTL_INDEX,
)


def name(member: int) -> str:
    return f"node-{member}"


class Replicas:
    def __init__(
        self,
        seed: int,
        members: int = 3,
        *,
        drop_rate: float = 0.0,
        duplicate_rate: float = 0.0,
        delay_seconds_max: float = 0.0,
        compact_entries: int = limits.RAFT_LOG_COMPACT_ENTRIES,
        kept_entries: int = limits.RAFT_LOG_KEPT_ENTRIES,
        page_bytes: int | None = None,
        throttling: bool = False,
    ) -> None:
        self.seed = seed
        # Whether the nodes meter their partitions with token buckets (on the loop's clock).
        self.throttling = throttling
        self.compact_entries = compact_entries
        self.kept_entries = kept_entries
        # Pages of replicas copied between members (`storagenode/snapshots.py`) of at most this
        # many bytes, so that small partitions take several; and how many each member read.
        self.page_bytes = page_bytes
        self.pages_read: dict[int, int] = {}
        self.rng = random.Random(seed)
        self.members = list(range(1, members + 1))
        self.network = LocalRaftNetwork(
            self.rng.getrandbits(64),
            drop_rate=drop_rate,
            duplicate_rate=duplicate_rate,
            delay_seconds_max=delay_seconds_max,
        )
        self.stores = {member: MemoryStore() for member in self.members}
        self.nodes: dict[int, StorageNode] = {}
        self.committers: dict[int, GroupCommitter] = {}
        self.transports: dict[int, LocalRaftTransport] = {}
        # Each node's requests not yet answered, failed when it is killed.
        self.outstanding: dict[int, set[asyncio.Future[Any]]] = {}
        for member in self.members:
            self.start(member)

    def start(self, member: int) -> None:
        loop = asyncio.get_running_loop()
        node = StorageNode(
            self.stores[member],
            throughput=NodeThroughput(enforced=self.throttling, clock=loop.time),
            clock=lambda: START_TIME + loop.time(),
            member=member,
            peers=[peer for peer in self.members if peer != member],
            timeouts=random.Random(self.rng.getrandbits(64)),
            monotonic=loop.time,
            raft_log_compact_entries=self.compact_entries,
            raft_log_kept_entries=self.kept_entries,
        )

        async def inline(work: Callable[..., T], *args: Any) -> T:
            return work(*args)

        def send(to: int, batch: Any) -> None:
            self.transports[member].send(to, batch)

        async def read_page(source: int, body: dict[str, Any]) -> dict[str, Any]:
            return await self.read_page(member, source, body)

        committer = GroupCommitter(
            node, send=send, monotonic=loop.time, offload=inline, read_page=read_page
        )
        self.transports[member] = self.network.join(member, committer.deliver)
        committer.start()
        self.nodes[member] = node
        self.committers[member] = committer

    async def kill(self, member: int) -> None:
        """kill -9: off the network, its loop gone mid-way; its store stays."""
        self.network.leave(member)
        committer = self.committers.pop(member)
        del self.nodes[member]
        task = committer._task
        assert task is not None
        task.cancel()
        await asyncio.gather(task, *committer.cancel_page_reads(), return_exceptions=True)
        for future in self.outstanding.pop(member, set()):
            if not future.done():
                future.set_exception(ServiceUnavailable(f"node-{member} died"))

    async def read_page(self, member: int, source: int, body: dict[str, Any]) -> dict[str, Any]:
        """A page of `source`'s replica read by `member`, as its server answers the gRPC call
        (`storagenode/snapshots.py`), across the network: refused if either is down or the link
        between them is cut, after a delay of the network's."""
        await asyncio.sleep(self.rng.uniform(0.001, 0.01))
        if not (self.network.reachable(member, source) and self.network.reachable(source, member)):
            raise ServiceUnavailable(f"node-{source} cannot be reached from node-{member}")
        if self.page_bytes is not None:
            body = {**body, "bytes_max": min(body["bytes_max"], self.page_bytes)}
        self.pages_read[member] = self.pages_read.get(member, 0) + 1
        reply: dict[str, Any] = self.nodes[source].read(ops.RAFT_SNAPSHOT_READ, None, body)
        return reply

    async def restart(self, member: int) -> None:
        self.start(member)

    async def close(self) -> None:
        for member in list(self.committers):
            await self.kill(member)
        self.network.close()

    def leader_of(self, group: str) -> int | None:
        for member, node in self.nodes.items():
            raft = node.replication.host.groups.get(group)
            if raft is not None and raft.node.role.value == "leader":
                return member
        return None

    async def submit(
        self, member: int, op: str, target: Target | None, body: dict[str, Any]
    ) -> Any:
        future = self.committers[member].submit(op, target, body)
        outstanding = self.outstanding.setdefault(member, set())
        outstanding.add(future)
        try:
            return await future
        finally:
            outstanding.discard(future)

    async def write(
        self,
        op: str,
        target: Target,
        body: dict[str, Any],
        *,
        at: int | None = None,
        attempts: int = 60,
    ) -> dict[str, Any]:
        """A write sent as a router sends it: to `at` (or any live node), then to the leader a
        NotPartitionLeader names, pausing between tries while no leader is known. Raises the
        last refusal, or ServiceUnavailable when its outcome is unknown."""
        member = at if at is not None else self.rng.choice(sorted(self.nodes))
        last: DynamoError | None = None
        for _ in range(attempts):
            if member not in self.committers:
                member = self.rng.choice(sorted(self.nodes))
            try:
                result: dict[str, Any] = await self.submit(member, op, target, body)
                return result
            except NotPartitionLeader as refused:
                last = refused
                leader = refused.leader
                if leader is not None and int(leader.split("-")[1]) in self.committers:
                    member = int(leader.split("-")[1])
                else:
                    member = self.rng.choice(sorted(self.nodes))
                    await asyncio.sleep(0.1)
            except ServiceUnavailable:
                raise
        assert last is not None
        raise last

    async def read(self, member: int, op: str, target: Target, body: dict[str, Any]) -> Any:
        """A read at node `member`, as its server serves one (`storagenode.commit.read`)."""
        return await commit.read(self.nodes[member], self.committers[member], op, target, body)

    def data(self, member: int, families: Iterable[Family] = REPLICATED) -> dict[Any, Any]:
        store = self.stores[member]
        return {family: list(store.walk(family, b"", None, forward=True)) for family in families}
