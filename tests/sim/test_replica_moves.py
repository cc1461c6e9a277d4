"""Replica moves of replicated partitions (`core.machines.replica_move`, driven by
`storagenode.replica_move.ReplicaMover`): on four nodes, a table's partitions on three each,
whose Raft links drop, duplicate and delay messages, while writers put distinct keys through
both routers and every node runs its placement keeper.

Per seed one partition's replica moves to the node that holds none of it, in one of these cases:
a follower's replica; the leader's (its leadership is handed over first); the driver's node
killed right after one of the steps (drawn from the seed), the move then resumed by the keeper
of the node leading the partition; the target killed while it catches up, and started again;
the source killed before it is removed, and started again after the move (its keeper drops its
replica). Afterwards: every acknowledged write is there (read strongly) and no write refused as
not applied is; the catalog names the target in the source's place and records no move; every
member's group has exactly the catalog's replicas as voters and no learner; every node holds
exactly the partitions the catalog places on it; and the three replicas hold the same rows.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest

from core.catalog import PartitionDef, TableDef
from core.machines.replica_move import Step
from dynalab.sim.cluster import SimCluster, run
from storagenode import snapshots
from storagenode.layout import Family
from storagenode.placement import PlacementKeeper
from storagenode.raft_host import group_id, node_name
from tests.sim.test_replicated_cluster import CALL_FAULTS, RAFT_FAULTS, outcomes_hold
from tests.sim.test_replicated_splits import leader_of, writer

SEEDS = list(range(10))
WRITERS = 3
# The families a replica's rows are compared in (its metadata row names the replicas as the
# node that made it saw them; the expiry index is shared by the table's partitions on a node).
COMPARED = (Family.ITEMS, Family.ITEM_COLLECTIONS, Family.INDEX_ENTRIES, Family.CHANGE_LOG)
STEPS = (Step.ADD_LEARNER, Step.NAME_TARGET, Step.PROMOTE, Step.REMOVE_SOURCE, Step.SWITCH)


class Died(Exception):
    """The driver's process died here."""


def keeper(cluster: SimCluster, node_id: str, heal_seconds: float = 0.0) -> PlacementKeeper:
    """A node's placement keeper on virtual time, resuming replica moves as a node's does, and
    healing those of its partitions with a replica on a peer silent `heal_seconds` (0: never)."""
    committer = cluster.committers[node_id]

    async def submit(op: str, body: dict[str, Any]) -> Any:
        return await committer.submit(op, None, body)

    return PlacementKeeper(
        node_id,
        cluster.nodes[node_id],
        submit,
        cluster.splitters[node_id].catalog,
        interval=1.0,
        clock=asyncio.get_running_loop().time,
        resume_move=cluster.replica_movers[node_id].resume,
        heal_seconds=heal_seconds,
        heal_move=cluster.replica_movers[node_id].heal,
    )


class Keepers:
    """Every live node's keeper, stopped with its node and started again with it."""

    def __init__(self, cluster: SimCluster, heal_seconds: float = 0.0) -> None:
        self.cluster = cluster
        self.heal_seconds = heal_seconds
        self.running: dict[str, PlacementKeeper] = {}
        for node_id in cluster.nodes:
            self.start(node_id)

    def start(self, node_id: str) -> None:
        self.running[node_id] = keeper(self.cluster, node_id, self.heal_seconds)
        self.running[node_id].start()

    async def kill(self, node_id: str) -> None:
        await self.running.pop(node_id).close()
        await self.cluster.kill_node(node_id)

    async def restart(self, node_id: str) -> None:
        self.cluster.network.heal(self.cluster.addresses[node_id])
        await self.cluster.restart_node(node_id)
        self.start(node_id)

    async def close(self) -> None:
        for running in self.running.values():
            await running.close()


def serving(table: TableDef | None, partition_id: str) -> PartitionDef:
    assert table is not None
    return next(p for p in table.partitions if p.id == partition_id)


def replica_rows(cluster: SimCluster, node_id: str, ref: tuple[str, str]) -> list[Any]:
    partition = cluster.nodes[node_id].partitions[ref]
    store = cluster.stores[node_id]
    return [
        (family, list(store.walk(family, lo, hi, forward=True)))
        for family, lo, hi in snapshots.ranges(partition)
        if family in COMPARED
    ]


async def settled(cluster: SimCluster, name: str, partition_id: str, seed: int) -> PartitionDef:
    """The partition once the catalog records no move of it (within 120 s of virtual time)."""
    for _ in range(600):
        partition = serving(await cluster.routers[0].read_table(name), partition_id)
        if partition.replica_move is None:
            return partition
        await asyncio.sleep(0.2)
    raise AssertionError(f"seed {seed}: the move of {partition_id} never ended: {partition}")


@pytest.mark.parametrize("seed", SEEDS)
def test_a_replica_moves_under_writes_and_kills(seed: int) -> None:
    async def scenario(cluster: SimCluster) -> None:
        rng = random.Random(f"replica moves/{seed}")
        first, second = cluster.routers
        await cluster.create_table("Tab", sort=False)
        table = await first.read_table("Tab")
        assert table is not None
        outcomes: dict[str, str] = {}
        stop = asyncio.Event()
        cluster.faults(CALL_FAULTS)
        tasks = [
            asyncio.ensure_future(writer(n, (first, second)[n % 2], outcomes, stop, rng))
            for n in range(WRITERS)
        ]
        keepers = Keepers(cluster)
        await asyncio.sleep(1.5)
        before = rng.choice(table.partitions)
        ref = (table.id, before.id)
        [target] = sorted(set(cluster.nodes) - set(before.replicas))
        leader = await leader_of(cluster, ref, seed)
        case = seed % 5
        source = leader if case == 1 else rng.choice([n for n in before.replicas if n != leader])
        driver = rng.choice(sorted(set(before.replicas) - {source}))
        mover = cluster.replica_movers[driver]
        down: str | None = None
        if case == 2:
            # The driver's process dies right after a step: the keeper of the partition's leader
            # finds the move in the catalog and drives it on.
            fatal = rng.choice(STEPS)
            take = mover._take

            async def dying(step: Step, *args: Any) -> None:
                await take(step, *args)
                if step is fatal:
                    raise Died(step)

            mover._take = dying  # type: ignore[method-assign]
            moving = asyncio.ensure_future(mover.move(table.id, before.id, target, source))
            while not moving.done():
                await asyncio.sleep(0.05)
            with pytest.raises(Died):
                moving.result()
            await keepers.kill(driver)
            down = driver
        elif case == 3:
            # The target dies while it catches up, and comes back.
            moving = asyncio.ensure_future(mover.move(table.id, before.id, target, source))
            for _ in range(400):
                member = cluster.nodes[target].replication.host.groups.get(group_id(*ref))
                if member is not None:
                    break
                await asyncio.sleep(0.01)
            await keepers.kill(target)
            await asyncio.sleep(3.0)
            await keepers.restart(target)
            await moving
        elif case == 4:
            # The source dies before its removal, and is started again only once it is gone
            # from the group: its keeper drops the replica the catalog no longer places there.
            moving = asyncio.ensure_future(mover.move(table.id, before.id, target, source))
            await asyncio.sleep(0.3)
            await keepers.kill(source)
            down = source
            await moving
        else:
            reply = await mover.move(table.id, before.id, target, source)
            assert (Step.TRANSFER.value in reply["steps"]) == (case == 1), reply
        after = await settled(cluster, "Tab", before.id, seed)
        if down is not None:
            await keepers.restart(down)
        await asyncio.sleep(2.0)
        stop.set()
        await asyncio.gather(*tasks)
        cluster.faults(None)
        assert cluster.raft is not None
        cluster.raft.drop_rate = cluster.raft.duplicate_rate = 0.0
        await asyncio.sleep(8.0)  # The keepers' rounds; the members apply all.
        await keepers.close()

        await outcomes_hold(first, "Tab", outcomes, seed)
        expected = tuple(target if node == source else node for node in before.replicas)
        assert after.replicas == expected and after.node == expected[0], f"seed {seed}: {after}"
        table = await first.read_table("Tab")
        assert table is not None
        for node_id, node in cluster.nodes.items():
            placed = {(table.id, p.id) for p in table.partitions if node_id in p.nodes}
            held = {r for r in node.partitions if r[0] == table.id}
            assert held == placed, f"seed {seed}: {node_id} holds {held}, not {placed}"
            groups = {n for n in node.replication.host.groups if n.startswith(table.id)}
            assert groups == {group_id(*r) for r in placed}, f"seed {seed}: {node_id} {groups}"
        for node_id in expected:
            conf = cluster.nodes[node_id].replication.host.groups[group_id(*ref)].node.conf
            voters = {node_name(member) for member in conf.voters}
            assert voters == set(expected) and not conf.learners, f"seed {seed}: {conf}"
        copies = [replica_rows(cluster, node_id, ref) for node_id in expected]
        assert all(c == copies[0] for c in copies), f"seed {seed}: the replicas differ"

    run(seed, scenario, nodes=4, replication_factor=3, raft_faults=RAFT_FAULTS)
