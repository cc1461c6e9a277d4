"""Healing (`rpc.placement.heals`, driven by each node's placement keeper): on four nodes, a
table's partitions on three each, whose Raft links drop, duplicate and delay messages, while
writers put distinct keys through both routers, one node is lost (killed, or cut off the network
while it goes on running), and every partition that had a replica there moves it, driven by its
leader, to the one node that holds none of it once the peers have not heard from the lost node
for `HEAL_SECONDS`.

Per seed, one of these cases: the lost node stays dead; it is killed and started again after the
heal (its keeper drops the replicas the catalog no longer places there); it is cut off and let
back in after the heal (it ran all along, and must not serve a stale read: a strong read through
every router sees each acknowledged write). Afterwards: every acknowledged write is there (read
strongly) and no write refused as not applied is; no partition names the lost node or records a
move; every node holds exactly the partitions the catalog places on it, each group's voters are
the catalog's replicas; and the three replicas of each partition hold the same rows.
"""

from __future__ import annotations

import asyncio
import random

import pytest

from core.catalog import TableDef
from dynalab.sim.cluster import SimCluster, run
from storagenode.raft_host import group_id, node_name
from tests.sim.test_replica_moves import Keepers, replica_rows
from tests.sim.test_replicated_cluster import CALL_FAULTS, RAFT_FAULTS, outcomes_hold
from tests.sim.test_replicated_splits import writer

SEEDS = list(range(9))
WRITERS = 3
HEAL_SECONDS = 3.0
HEAL_WITHIN_S = 120.0  # virtual seconds the heal of every partition may take


async def healed(cluster: SimCluster, lost: str, seed: int) -> TableDef:
    """The table once no partition names `lost` or records a move (within HEAL_WITHIN_S)."""
    table = None
    for _ in range(int(HEAL_WITHIN_S / 0.5)):
        table = await cluster.routers[0].read_table("Tab")
        assert table is not None
        if all(lost not in p.nodes and p.replica_move is None for p in table.partitions):
            return table
        await asyncio.sleep(0.5)
    raise AssertionError(f"seed {seed}: not healed of {lost}: {table and table.partitions}")


@pytest.mark.parametrize("seed", SEEDS)
def test_a_lost_nodes_replicas_are_rebuilt_elsewhere(seed: int) -> None:
    async def scenario(cluster: SimCluster) -> None:
        rng = random.Random(f"healing/{seed}")
        first, second = cluster.routers
        await cluster.create_table("Tab", sort=False)
        before = await first.read_table("Tab")
        assert before is not None
        outcomes: dict[str, str] = {}
        stop = asyncio.Event()
        cluster.faults(CALL_FAULTS)
        tasks = [
            asyncio.ensure_future(writer(n, (first, second)[n % 2], outcomes, stop, rng))
            for n in range(WRITERS)
        ]
        keepers = Keepers(cluster, heal_seconds=HEAL_SECONDS)
        await asyncio.sleep(1.5)
        # The node that holds the catalog's first replica stays: the catalog's own group
        # never moves, and a router must reach it to read the table after the heal.
        lost = rng.choice(sorted(set(cluster.nodes) - {"node-1"}))
        case = seed % 3
        if case == 2:
            await keepers.running.pop(lost).close()
            cluster.isolate(lost)
        else:
            await keepers.kill(lost)
        after = await healed(cluster, lost, seed)
        if case == 1:
            await keepers.restart(lost)
        elif case == 2:
            cluster.rejoin(lost)
            keepers.start(lost)
        await asyncio.sleep(2.0)
        stop.set()
        await asyncio.gather(*tasks)
        cluster.faults(None)
        assert cluster.raft is not None
        cluster.raft.drop_rate = cluster.raft.duplicate_rate = 0.0
        await asyncio.sleep(8.0)  # The keepers' rounds; the members apply all.
        await keepers.close()

        await outcomes_hold(first, "Tab", outcomes, seed)
        if case != 0:
            await outcomes_hold(second, "Tab", outcomes, seed)
        moved = [p for p in before.partitions if lost in p.replicas]
        assert moved, f"seed {seed}: {lost} held no replica"
        for old, new in zip(before.partitions, after.partitions, strict=True):
            assert old.id == new.id, f"seed {seed}: a partition split"
            kept = [node for node in old.replicas if node != lost]
            assert set(kept) <= set(new.replicas) and len(new.replicas) == 3, f"seed {seed}: {new}"
        table = await first.read_table("Tab")
        assert table is not None
        alive = [n for n in cluster.nodes if case != 0 or n != lost]
        for node_id in alive:
            node = cluster.nodes[node_id]
            placed = {(table.id, p.id) for p in table.partitions if node_id in p.nodes}
            held = {r for r in node.partitions if r[0] == table.id}
            assert held == placed, f"seed {seed}: {node_id} holds {held}, not {placed}"
            groups = {n for n in node.replication.host.groups if n.startswith(table.id)}
            assert groups == {group_id(*r) for r in placed}, f"seed {seed}: {node_id} {groups}"
        for partition in table.partitions:
            ref = (table.id, partition.id)
            for node_id in partition.replicas:
                conf = cluster.nodes[node_id].replication.host.groups[group_id(*ref)].node.conf
                voters = {node_name(member) for member in conf.voters}
                assert voters == set(partition.replicas), f"seed {seed}: {node_id} {conf}"
                assert not conf.learners, f"seed {seed}: {node_id} {conf}"
            copies = [replica_rows(cluster, node_id, ref) for node_id in partition.replicas]
            assert all(c == copies[0] for c in copies), f"seed {seed}: {partition.id} differs"

    run(seed, scenario, nodes=4, replication_factor=3, raft_faults=RAFT_FAULTS)
