"""Splits of replicated partitions (`storagenode/split.py` at the parent's leader; the split's
record and install are entries of the parent's group; every member that applies the install
makes both children and their groups alike, `storagenode.replication`), on three nodes whose
Raft links drop, duplicate and delay messages, while writers put distinct keys through both
routers.

Per seed: the first partition splits, then one of its children splits again. In some seeds a
node is killed before a split and comes back only after the parent's group has gone from its
peers: it never applies that split, and its placement keeper retires the parent it holds
(after the grace) and creates the children, which it copies from a member. In others the
splitting leader is killed just after its install, or just before it (the new leader's
splitter resumes the split from its record, which the parent's group replicated). Afterwards
every acknowledged write is there (read strongly), none refused as not applied is, the
catalog's children are replicated on every node, every node holds every serving partition and
no other of the table, no parent's group is left, and every replica holds the same bytes.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from typing import Any

import pytest

from core import limits
from core import transactions as txn
from core.errors import (
    DynamoError,
    InternalServerError,
)
from core.keycodec import encode_storage_key
from dynalab.sim.cluster import SimCluster, run
from router import items, transactions
from router.context import RouterContext
from storagenode.placement import PlacementKeeper
from storagenode.raft_host import group_id
from storagenode.split import SPLIT_INSTALL
from tests.sim.test_gsi import index_converges, write
from tests.sim.test_replicated_cluster import (
    CALL_FAULTS,
    RAFT_FAULTS,
    eventually,
    outcomes_hold,
    table_rows,
)
from tests.sim.test_transactions import locks_left
from tests.sim.test_txn_sweep import Death, RouterDied, killable

SEEDS = list(range(8))
WRITERS = 3


def keepers(cluster: SimCluster) -> dict[str, PlacementKeeper]:
    """A placement keeper per node on virtual time, as a node process runs one."""
    loop = asyncio.get_running_loop()
    made = {}
    for node_id in cluster.nodes:
        committer = cluster.committers[node_id]

        async def submit(op: str, body: dict[str, Any], committer: Any = committer) -> Any:
            return await committer.submit(op, None, body)

        made[node_id] = PlacementKeeper(
            node_id,
            cluster.nodes[node_id],
            submit,
            cluster.splitters[node_id].catalog,
            interval=1.0,
            clock=loop.time,
        )
    return made


class Died(Exception):
    """The splitting leader's process died here."""


async def leader_of(cluster: SimCluster, ref: tuple[str, str], seed: int) -> str:
    """The live node leading partition `ref`'s group, waited for while an election runs."""
    for _ in range(200):
        for node_id in sorted(cluster.committers):
            if cluster.nodes[node_id].leads(ref):
                return node_id
        await asyncio.sleep(0.1)
    raise AssertionError(f"seed {seed}: partition {ref[1]} has no leader")


async def writer(
    number: int,
    router: RouterContext,
    outcomes: dict[str, str],
    stop: asyncio.Event,
    rng: random.Random,
) -> None:
    i = 0
    while not stop.is_set():
        key = f"w{number}-{i}"
        i += 1
        body = {"TableName": "Tab", "Item": {"pk": {"S": key}, "pad": {"S": "x" * 40}}}
        try:
            await items.put_item(router, body)
            outcomes[key] = "acknowledged"
        except DynamoError as error:
            # What a client sees: a 500 may or may not have applied (sent and not answered, or
            # taken by a leader that lost track of it); anything else did not.
            unknown = error.type_name == InternalServerError.type_name
            outcomes[key] = "unknown" if unknown else "refused"
        await asyncio.sleep(rng.uniform(0.005, 0.03))


@pytest.mark.parametrize("seed", SEEDS)
def test_replicated_partitions_split_under_writes_and_kills(seed: int) -> None:
    async def scenario(cluster: SimCluster) -> None:
        rng = random.Random(seed)
        first, second = cluster.routers
        await cluster.create_table("Tab", sort=False)
        outcomes: dict[str, str] = {}
        stop = asyncio.Event()
        cluster.faults(CALL_FAULTS)
        tasks = [
            asyncio.ensure_future(writer(n, (first, second)[n % 2], outcomes, stop, rng))
            for n in range(WRITERS)
        ]
        running = keepers(cluster)
        for keeper in running.values():
            keeper.start()
        await asyncio.sleep(1.5)
        case = seed % 4
        away = None
        if case == 1:
            # A node is away for the first split, and back only once its peers' parent group
            # has gone: it never applies the split.
            away = rng.choice(sorted(cluster.nodes))
            await running.pop(away).close()
            await cluster.kill_node(away)
        parent, low, _high = await eventually("a split", lambda: cluster.split("Tab"), seed)
        assert len(low["replicas"]) == 3 and low["replicas"] == parent["replicas"], low
        await asyncio.sleep(1.0)
        if case == 2:
            # The leader of the low child is killed right after it splits it.
            table = await first.read_table("Tab")
            assert table is not None
            ref = (table.id, low["id"])
            splitter_node = await leader_of(cluster, ref, seed)
            splitter = cluster.splitters[splitter_node]
            submit = splitter.submit
            killed = asyncio.Event()

            async def die_after_install(op: str, target: Any, body: dict[str, Any]) -> Any:
                reply = await submit(op, target, body)
                if op == SPLIT_INSTALL:
                    killed.set()
                return reply

            splitter.submit = die_after_install  # type: ignore[method-assign]
            split = asyncio.ensure_future(splitter.split(*ref))
            await asyncio.wait_for(killed.wait(), 30)
            await running.pop(splitter_node).close()
            await cluster.kill_node(splitter_node)
            await asyncio.gather(split, return_exceptions=True)
            await asyncio.sleep(2.0)
            cluster.network.heal(cluster.addresses[splitter_node])
            await cluster.restart_node(splitter_node)
            running.update({splitter_node: keepers(cluster)[splitter_node]})
            running[splitter_node].start()
        elif case == 3:
            # The leader of the low child dies as it is about to install its split (recorded in
            # the catalog and in the parent's replicated metadata): the new leader's splitter
            # resumes it from that record.
            table = await first.read_table("Tab")
            assert table is not None
            ref = (table.id, low["id"])
            leader = await leader_of(cluster, ref, seed)
            splitter = cluster.splitters[leader]
            submit = splitter.submit

            async def die_at_install(op: str, target: Any, body: dict[str, Any]) -> Any:
                if op == SPLIT_INSTALL:
                    raise Died(op)
                return await submit(op, target, body)

            splitter.submit = die_at_install  # type: ignore[method-assign]
            with pytest.raises(Died):
                await splitter.split(*ref)
            await running.pop(leader).close()
            await cluster.kill_node(leader)
            successor = await leader_of(cluster, ref, seed)
            resumed = cluster.nodes[successor].partitions[ref].split
            assert resumed is not None, f"seed {seed}: the split's record is not replicated"
            await cluster.splitters[successor].recover()
            assert ref not in cluster.nodes[successor].partitions, f"seed {seed}: not installed"
            cluster.network.heal(cluster.addresses[leader])
            await cluster.restart_node(leader)
            running[leader] = keepers(cluster)[leader]
            running[leader].start()
        else:
            at = encode_storage_key({"S": "w1-5"}, None)
            await eventually("a second split", lambda: cluster.split("Tab", at), seed)
        if away is not None:
            await asyncio.sleep(12.0)  # Past RAFT_RETIRED_GROUP_TICKS_MIN: the parent's group went.
            cluster.network.heal(cluster.addresses[away])
            await cluster.restart_node(away)
            running[away] = keepers(cluster)[away]
            running[away].start()
        await asyncio.sleep(2.0)
        stop.set()
        await asyncio.gather(*tasks)
        cluster.faults(None)
        assert cluster.raft is not None
        cluster.raft.drop_rate = cluster.raft.duplicate_rate = 0.0
        # The keeper's grace, its rounds, and the copies of the children to the node back.
        await asyncio.sleep(45.0 if away is not None else 12.0)
        for keeper in running.values():
            await keeper.close()

        await outcomes_hold(first, "Tab", outcomes, seed)

        table = await first.read_table("Tab")
        assert table is not None
        assert len(table.partitions) == 6, f"seed {seed}: {table.partitions}"
        serving = {(table.id, p.id) for p in table.partitions}
        for partition in table.partitions:
            assert set(partition.replicas) == set(cluster.nodes), partition
        for node_id, node in cluster.nodes.items():
            held = {ref for ref in node.partitions if ref[0] == table.id}
            assert held == serving, f"seed {seed}: {node_id} holds {held}, not {serving}"
            groups = {
                name
                for name in node.replication.host.groups
                if name.startswith(group_id(table.id, ""))
            }
            assert groups == {group_id(*ref) for ref in serving}, f"seed {seed}: {node_id} {groups}"
        copies = [table_rows(cluster, node, table.id) for node in sorted(cluster.nodes)]
        assert all(c == copies[0] for c in copies), f"seed {seed}: the replicas differ"

    run(seed, scenario, replication_factor=3, raft_faults=RAFT_FAULTS)


async def split_fullest(cluster: SimCluster, name: str, seed: int) -> None:
    """Split the table's partition holding the most items where it halves, at its leader."""
    table = await cluster.routers[0].read_table(name)
    assert table is not None
    partition = max(
        table.partitions,
        key=lambda p: max(
            n.partitions[table.id, p.id].item_count
            for n in cluster.nodes.values()
            if (table.id, p.id) in n.partitions
        ),
    )
    leader = await leader_of(cluster, (table.id, partition.id), seed)
    await cluster.splitters[leader].split(table.id, partition.id)


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_a_global_index_follows_replicated_splits(seed: int) -> None:
    """A table with a global index, both replicated, takes writes while its partitions split
    twice at their leaders (the second split long after the first parent's group went, so its
    kept log is read from a replica without one) and the replicator is killed and started
    again: the index converges to exactly the table."""

    async def scenario(cluster: SimCluster) -> None:
        rng = random.Random(f"replicated gsi/{seed}")
        await cluster.create_indexed("Indexed")
        replicator = cluster.start_replicator().owner
        for number in range(160):
            if number in (60, 120):
                await eventually("a split", lambda: split_fullest(cluster, "Indexed", seed), seed)
                if number == 60:
                    await asyncio.sleep(12.0)  # Past the parent's group's stay.
            if number == 80:
                await cluster.kill_replicator(replicator)
            if number == 100:
                replicator = cluster.start_replicator().owner
            await write(cluster, "Indexed", rng, seed)
            await asyncio.sleep(rng.uniform(0, 0.03))
        await index_converges(cluster, "Indexed", seed)
        table = await cluster.routers[0].read_table("Indexed")
        assert table is not None and len(table.partitions) == 6, f"seed {seed}"

    run(seed, scenario, replication_factor=3, raft_faults=RAFT_FAULTS)


def transfer(keys: list[str], token: str) -> dict[str, Any]:
    return {
        "ClientRequestToken": token,
        "TransactItems": [
            {
                "Update": {
                    "TableName": "Bank",
                    "Key": {"pk": {"S": key}},
                    "UpdateExpression": "ADD n :one",
                    "ExpressionAttributeValues": {":one": {"N": "1"}},
                }
            }
            for key in keys
        ],
    }


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_transaction_in_flight_across_a_replicated_split_ends_whole(seed: int) -> None:
    """A coordinator dies with its transaction decided (COMMITTED) and not applied: its record
    and its locks are in a replicated partition, which then splits between its two items, the
    record going to the high child. The children take its rows over (the install carries them);
    a resolver on another router applies it at both, and a retry of its ClientRequestToken is
    answered as the same transaction, not applied again."""

    async def scenario(cluster: SimCluster) -> None:
        coordinating, resolving = cluster.routers
        await cluster.create_table("Bank", sort=False)
        table = await resolving.read_table("Bank")
        assert table is not None
        first = table.partitions[0]
        keys = sorted(
            (encode_storage_key({"S": f"a{i}"}, None), f"a{i}")
            for i in range(2_000)
            if first.holds(encode_storage_key({"S": f"a{i}"}, None))
        )
        (_, low_key), (split_at, high_key) = keys[0], keys[len(keys) // 2]
        token = next(
            f"token-{i}"
            for i in range(10_000)
            if first.holds(key := txn.record_key(txn.token_transaction_id(f"token-{i}")))
            and key >= split_at
        )
        for name in (low_key, high_key):
            await items.put_item(resolving, {"TableName": "Bank", "Item": {"pk": {"S": name}}})
        death = Death(cluster, "committing", "", killable(coordinating))
        coordinating.crash_points = death
        with contextlib.suppress(RouterDied):
            await transactions.transact_write_items(
                coordinating, transfer([low_key, high_key], token)
            )
        assert death.died, f"seed {seed}: the coordinator never reached committing"
        _, low, high = await eventually(
            "a split", lambda: cluster.split("Bank", split_at, router=1), seed
        )
        assert low["end"] == split_at.hex() == high["start"]
        for _ in range(4):
            await asyncio.sleep(limits.TRANSACTION_RESOLVE_SECONDS + 1)
            await transactions.resolve_once(resolving)
            await asyncio.sleep(0.5)
            if not locks_left(cluster):
                break
        assert locks_left(cluster) == [], f"seed {seed}: items stay locked"
        for name in (low_key, high_key):
            reply = await items.get_item(
                resolving, {"TableName": "Bank", "Key": {"pk": {"S": name}}, "ConsistentRead": True}
            )
            assert reply["Item"].get("n") == {"N": "1"}, f"seed {seed}: {name} {reply}"
        # The token's retry finds its record in the child that holds its key: not applied again.
        await transactions.transact_write_items(resolving, transfer([low_key, high_key], token))
        for name in (low_key, high_key):
            reply = await items.get_item(
                resolving, {"TableName": "Bank", "Key": {"pk": {"S": name}}, "ConsistentRead": True}
            )
            assert reply["Item"].get("n") == {"N": "1"}, f"seed {seed}: {name} applied twice"

    run(seed, scenario, replication_factor=3, raft_faults=RAFT_FAULTS)
