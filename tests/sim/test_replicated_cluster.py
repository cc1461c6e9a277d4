"""A whole replicated cluster in simulation (`SimCluster(replication_factor=3)`): routers, the
catalog as a group, table partitions as groups, every node's real write loop, over seeded lossy
links between the nodes' groups and between routers and nodes.

Per seed: writers put distinct keys through both routers while a node is killed (sometimes the
catalog's leader) and started again; meanwhile a table is created and another deleted, and
DescribeTable answers. Afterwards every acknowledged write is read back strongly, no write
refused as not applied is there, the node that was away has created its replicas of the table
made without it and dropped those of the table deleted without it (its placement keeper's
round, `storagenode.placement`), and every replica of every partition holds the same bytes.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest

from core import catalog
from core.errors import DynamoError, InternalServerError, ResourceNotFound
from dynalab.sim.cluster import SimCluster, run
from router import items, tables
from router.context import RouterContext
from rpc.local import Faults
from storagenode.layout import Family, table_prefix
from storagenode.placement import PlacementKeeper

SEEDS = list(range(12))
WRITERS = 3
# Virtual seconds: writes before the kill, with the node down, and after its return.
BEFORE_S, DOWN_S, AFTER_S = 2.0, 6.0, 3.0
# Between routers and nodes: requests and replies lost (a write's outcome then unknown),
# delayed, duplicated.
CALL_FAULTS = Faults(
    drop_request=0.01, drop_reply=0.01, delay=0.2, delay_seconds_max=0.05, duplicate=0.01
)
RAFT_FAULTS = Faults(drop_request=0.03, duplicate=0.03, delay=1.0, delay_seconds_max=0.02)
# The families whose every key starts with its table's prefix, which every replica holds alike.
REPLICATED = (
    Family.ITEMS,
    Family.CHANGE_LOG,
    Family.INDEX_ENTRIES,
    Family.ITEM_COLLECTIONS,
    Family.TTL_INDEX,
)


def keeper(cluster: SimCluster, node_id: str) -> PlacementKeeper:
    committer = cluster.committers[node_id]

    async def submit(op: str, body: dict[str, Any]) -> dict[str, Any]:
        return await committer.submit(op, None, body)

    return PlacementKeeper(
        node_id, cluster.nodes[node_id], submit, cluster.splitters[node_id].catalog
    )


async def eventually(what: str, attempt: Any, seed: int, seconds: float = 30.0) -> Any:
    """`await attempt()` until it answers, within `seconds` of virtual time."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while True:
        try:
            return await attempt()
        except DynamoError as error:
            if loop.time() > deadline:
                raise AssertionError(f"seed {seed}: {what} never succeeded: {error}") from error
            await asyncio.sleep(0.2)


async def outcomes_hold(
    router: RouterContext, table: str, outcomes: dict[str, str], seed: int
) -> None:
    """Every key of `outcomes` ("acknowledged", "refused" or "unknown", by a put of it), read
    strongly through `router`: each acknowledged one there, no refused one."""
    acknowledged = [k for k, o in outcomes.items() if o == "acknowledged"]
    refused = {k for k, o in outcomes.items() if o == "refused"}
    assert len(acknowledged) > 50, f"seed {seed}: {len(acknowledged)} acknowledged"
    for key in list(outcomes):
        reply = await eventually(
            "a strong read",
            lambda key=key: items.get_item(
                router, {"TableName": table, "Key": {"pk": {"S": key}}, "ConsistentRead": True}
            ),
            seed,
        )
        present = "Item" in reply
        if key in refused:
            assert not present, f"seed {seed}: {key} was refused and is there"
        elif outcomes[key] == "acknowledged":
            assert present, f"seed {seed}: acknowledged {key} lost"
    print(
        f"seed {seed}: {len(acknowledged)} acknowledged, {len(refused)} refused, "
        f"{len(outcomes) - len(acknowledged) - len(refused)} unknown"
    )


def table_rows(cluster: SimCluster, node_id: str, table_id: str) -> dict[Family, list[Any]]:
    """What node `node_id` stores of stored table `table_id`, family by family."""
    prefix = table_prefix(table_id)
    store = cluster.stores[node_id]
    return {
        family: [
            row for row in store.walk(family, b"", None, forward=True) if row[0].startswith(prefix)
        ]
        for family in REPLICATED
    }


@pytest.mark.parametrize("seed", SEEDS)
def test_a_replicated_cluster_keeps_every_acknowledged_write_through_a_kill(seed: int) -> None:
    async def scenario(cluster: SimCluster) -> None:
        rng = random.Random(seed)
        first, second = cluster.routers
        await cluster.create_table("Kept", sort=False)
        await cluster.create_table("Doomed", sort=False)
        location = await first.locate_catalog()
        assert len(location.nodes) == 3, f"seed {seed}: {location}"
        outcomes: dict[str, str] = {}
        stop = asyncio.Event()

        async def writer(number: int, router: RouterContext) -> None:
            i = 0
            while not stop.is_set():
                key = f"w{number}-{i}"
                i += 1
                body = {"TableName": "Kept", "Item": {"pk": {"S": key}, "n": {"N": str(i)}}}
                try:
                    await items.put_item(router, body)
                    outcomes[key] = "acknowledged"
                except DynamoError as error:
                    # A 500 (sent and not answered, or taken by a leader that lost track of
                    # it) may or may not apply; anything else did not.
                    unknown = error.type_name == InternalServerError.type_name
                    outcomes[key] = "unknown" if unknown else "refused"
                await asyncio.sleep(rng.uniform(0.01, 0.05))

        cluster.faults(CALL_FAULTS)
        tasks = [asyncio.ensure_future(writer(n, (first, second)[n % 2])) for n in range(WRITERS)]
        await asyncio.sleep(BEFORE_S)
        victim = location.node if seed % 2 == 0 else rng.choice(sorted(cluster.nodes))
        await cluster.kill_node(victim)

        # With the node down: DescribeTable, a CreateTable and a DeleteTable answer.
        described = await eventually(
            "DescribeTable", lambda: tables.describe_table(second, {"TableName": "Kept"}), seed
        )
        assert described["Table"]["TableStatus"] == "ACTIVE"
        doomed_id = first.records["Doomed"].id
        await eventually(
            "DeleteTable", lambda: tables.delete_table(first, {"TableName": "Doomed"}), seed
        )
        await eventually("CreateTable", lambda: cluster.create_table("Fresh", sort=False), seed)
        fresh_id = first.records["Fresh"].id
        await asyncio.sleep(DOWN_S)

        cluster.network.heal(cluster.addresses[victim])
        await cluster.restart_node(victim)
        await asyncio.sleep(AFTER_S)
        stop.set()
        await asyncio.gather(*tasks)
        cluster.faults(None)
        assert cluster.raft is not None
        cluster.raft.drop_rate = cluster.raft.duplicate_rate = 0.0

        # The node back matches the catalog.
        plan = await eventually(
            "the placement keeper's round", lambda: keeper(cluster, victim).reconcile(), seed
        )
        assert doomed_id in plan.drop or not any(
            t == doomed_id for t, _ in cluster.nodes[victim].partitions
        ), f"seed {seed}: {plan}"
        stored = {table_id for table_id, _ in cluster.nodes[victim].partitions}
        assert fresh_id in stored and doomed_id not in stored, f"seed {seed}"

        # Every acknowledged write is there, read strongly; none refused is.
        await outcomes_hold(first, "Kept", outcomes, seed)
        print(f"seed {seed}: {victim} killed")
        with pytest.raises(ResourceNotFound):
            await tables.describe_table(first, {"TableName": "Doomed"})

        # Every replica holds the same bytes, the late one of Fresh and the returned node's too.
        await asyncio.sleep(3.0)
        for table in (first.records["Kept"], first.records["Fresh"]):
            assert {n for p in table.partitions for n in p.replicas} == set(cluster.nodes)
            copies = [table_rows(cluster, node, table.id) for node in sorted(cluster.nodes)]
            assert copies[0][Family.ITEMS] or table.name == "Fresh"
            assert all(c == copies[0] for c in copies), (
                f"seed {seed}: the replicas of {table.name} differ"
            )
        assert catalog.CATALOG_TABLE_ID not in plan.drop

    run(seed, scenario, replication_factor=3, raft_faults=RAFT_FAULTS)


class Died(Exception):
    """The keeper's node process died here (its round ends; what it committed stays)."""


@pytest.mark.parametrize("seed", [21, 22, 23])
def test_a_keeper_killed_between_any_two_of_its_effects_leaves_them_for_the_next(
    seed: int,
) -> None:
    """Two tables deleted and two created while node-3 was down give its keeper ten effects
    (two drops, eight creations); each round is killed after its first, so a death falls between
    every two of them, and the next keeper, a new process, goes on from what is stored. In the end
    the node holds exactly what the catalog places on it, with the same bytes as its peers."""

    async def scenario(cluster: SimCluster) -> None:
        router = cluster.routers[0]
        for name in ("Old1", "Old2"):
            await cluster.create_table(name, sort=False)
            for i in range(10):
                await items.put_item(router, {"TableName": name, "Item": {"pk": {"S": f"k{i}"}}})
        gone = {router.records[name].id for name in ("Old1", "Old2")}
        await cluster.kill_node("node-3")
        for name in ("Old1", "Old2"):
            await eventually(
                "DeleteTable", lambda n=name: tables.delete_table(router, {"TableName": n}), seed
            )
        for name in ("New1", "New2"):
            await eventually(
                "CreateTable", lambda n=name: cluster.create_table(n, sort=False), seed
            )
            for i in range(10):
                await items.put_item(router, {"TableName": name, "Item": {"pk": {"S": f"k{i}"}}})
        made = {router.records[name].id for name in ("New1", "New2")}
        cluster.rejoin("node-3")
        await cluster.restart_node("node-3")
        await asyncio.sleep(1.0)

        deaths = 0
        for _ in range(30):  # Rounds: ten effects need eleven; more means they do not settle.
            done: list[str] = []

            async def submit(
                op: str,
                body: dict[str, Any],
                done: list[str] = done,
                committer: Any = cluster.committers["node-3"],
            ) -> dict[str, Any]:
                if done:
                    raise Died(op)  # The round's second effect: the process dies before it.
                reply: dict[str, Any] = await committer.submit(op, None, body)
                done.append(op)
                return reply

            keeper = PlacementKeeper(
                "node-3", cluster.nodes["node-3"], submit, cluster.splitters["node-3"].catalog
            )
            try:
                plan = await eventually("a keeper's round", keeper.reconcile, seed)
            except Died:
                deaths += 1
                await cluster.kill_node("node-3")  # The process dies with the round.
                cluster.rejoin("node-3")
                await cluster.restart_node("node-3")
                continue
            if plan.drop == () and plan.create == ():
                break
        else:
            raise AssertionError(f"seed {seed}: the keeper's rounds never settled: {plan}")
        # Ten effects (two drops, four partitions of each new table): a death between each two.
        assert deaths == 9, f"seed {seed}: {deaths} deaths"
        stored = {table_id for table_id, _ in cluster.nodes["node-3"].partitions}
        assert made <= stored and not gone & stored, f"seed {seed}"
        await asyncio.sleep(3.0)
        for name in ("New1", "New2"):
            table_id = router.records[name].id
            copies = [table_rows(cluster, node, table_id) for node in sorted(cluster.nodes)]
            assert copies[0][Family.ITEMS], f"seed {seed}: {name} has no items"
            assert all(c == copies[0] for c in copies), f"seed {seed}: {name}'s replicas differ"

    run(seed, scenario, replication_factor=3)
