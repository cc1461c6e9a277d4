"""The catalog as a system table, found through a bootstrap record, on a seeded in-process cluster.

A table changed through one router shows in another; two routers creating different tables at
once both succeed (each changes its own row); routers started with different `--nodes` lists,
one after the other or both at once on a new cluster, agree on where the catalog lives and never
see an empty catalog; and a router that cannot reach every node of a cluster without a record
refuses to start a second catalog.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from core import catalog
from core.catalog import CatalogLocation
from core.errors import ResourceInUse, ResourceNotFound, ServiceUnavailable
from core.placement import HashRing
from dynalab.sim.cluster import SimCluster, run
from router import items, tables
from router.context import RouterContext
from rpc import ops
from rpc.local import Faults
from tests import envelope

SEEDS = [2, 13, 77, 2024]
DELAYS = Faults(delay=0.7, delay_seconds_max=0.004)


def item(pk: str, sk: int) -> dict[str, Any]:
    return {"pk": {"S": pk}, "sk": {"N": str(sk)}}


def record_on(cluster: SimCluster, node_id: str) -> CatalogLocation | None:
    """The bootstrap record node `node_id` holds, read from the node itself."""
    node = cluster.nodes[node_id]
    if (catalog.BOOTSTRAP_TABLE_ID, catalog.BOOTSTRAP_PARTITION_ID) not in node.partitions:
        return None
    reply = envelope.read(
        node,
        ops.GET,
        {
            "table_id": catalog.BOOTSTRAP_TABLE_ID,
            "partition_id": catalog.BOOTSTRAP_PARTITION_ID,
            "epoch": 1,
            "key": {"name": {"S": catalog.BOOTSTRAP_RECORD_NAME}},
        },
    )
    return None if reply["item"] is None else CatalogLocation.from_item(reply["item"])


def node_taking_the_catalog(cluster: SimCluster, prefix: str) -> str:
    """A new node id starting with `prefix` that a ring over every node plus it would make the
    owner of the catalog's placement key: a router hashing its own list would look there."""
    for number in range(1000):
        candidate = f"{prefix}{number}"
        if candidate in cluster.nodes:
            continue
        ring = HashRing([*cluster.nodes, candidate])
        if ring.owner(catalog.CATALOG_PLACEMENT_KEY) == candidate:
            return candidate
    raise AssertionError("no node id takes the catalog's placement key")


async def names(router: RouterContext) -> list[str]:
    reply = await tables.list_tables(router, {})
    return list(reply["TableNames"])


@pytest.mark.parametrize("seed", SEEDS)
def test_a_second_router_sees_every_change_of_a_table(seed: int) -> None:
    async def scenario(cluster: SimCluster) -> None:
        first, second = cluster.routers
        cluster.faults(DELAYS)
        await cluster.create_table("Music", router=0)
        described = await tables.describe_table(second, {"TableName": "Music"})
        assert described["Table"]["TableStatus"] == "ACTIVE", f"seed {seed}"
        assert described["Table"]["BillingModeSummary"]["BillingMode"] == "PAY_PER_REQUEST"

        await tables.update_table(
            first,
            {
                "TableName": "Music",
                "BillingMode": "PROVISIONED",
                "ProvisionedThroughput": {"ReadCapacityUnits": 5, "WriteCapacityUnits": 7},
            },
        )
        described = await tables.describe_table(second, {"TableName": "Music"})
        provisioned = described["Table"]["ProvisionedThroughput"]
        assert (provisioned["ReadCapacityUnits"], provisioned["WriteCapacityUnits"]) == (5, 7), (
            f"seed {seed}"
        )
        assert second.records["Music"].throughput_version == 1, f"seed {seed}"

        await cluster.put("Music", item("a", 1), router=1)
        await tables.delete_table(first, {"TableName": "Music"})
        with pytest.raises(ResourceNotFound):
            await items.get_item(second, {"TableName": "Music", "Key": item("a", 1)})
        assert await names(second) == [], f"seed {seed}"

    run(seed, scenario)


@pytest.mark.parametrize("seed", SEEDS)
def test_two_routers_creating_different_tables_at_once_lose_neither(seed: int) -> None:
    async def scenario(cluster: SimCluster) -> None:
        cluster.faults(DELAYS)
        created = [f"Table{number}" for number in range(8)]
        await asyncio.gather(
            *(cluster.create_table(name, router=number % 2) for number, name in enumerate(created))
        )
        for router in cluster.routers:
            assert await names(router) == sorted(created), f"seed {seed}"
        for number, name in enumerate(created):
            await cluster.put(name, item(name, number), router=(number + 1) % 2)
        for name in created:
            assert len(await cluster.scan_all(name, router=0)) == 1, f"seed {seed}: {name}"
        # The same name at once from both routers: exactly one creation wins.
        outcomes = await asyncio.gather(
            cluster.create_table("Same", router=0),
            cluster.create_table("Same", router=1),
            return_exceptions=True,
        )
        refused = [o for o in outcomes if isinstance(o, ResourceInUse)]
        assert len(refused) == 1, f"seed {seed}: {outcomes}"
        assert await names(cluster.routers[1]) == sorted([*created, "Same"]), f"seed {seed}"

    run(seed, scenario)


@pytest.mark.parametrize("seed", SEEDS)
def test_a_router_with_one_more_node_sees_the_same_catalog(seed: int) -> None:
    async def scenario(cluster: SimCluster) -> None:
        await cluster.create_table("Music")
        stored = [item(f"k{number % 4}", number) for number in range(12)]
        for entry in stored:
            await cluster.put("Music", entry)
        home = cluster.routers[0].catalog_node
        assert home is not None

        added = node_taking_the_catalog(cluster, "node")
        cluster.add_node(added)
        assert HashRing(cluster.nodes).owner(catalog.CATALOG_PLACEMENT_KEY) == added != home
        cluster.faults(DELAYS)
        newcomer = cluster.add_router()
        assert await names(newcomer) == ["Music"], f"seed {seed}: the catalog looked empty"
        assert newcomer.catalog_node == home, f"seed {seed}"
        found = await cluster.scan_all("Music", router=len(cluster.routers) - 1)
        assert sorted(map(str, found)) == sorted(map(str, stored)), f"seed {seed}"
        # The new node got a copy of the record, so a router knowing only it finds the catalog.
        recorded = CatalogLocation(home, cluster.addresses[home])
        assert record_on(cluster, added) == recorded, f"seed {seed}"
        alone = cluster.add_router([added])
        assert await names(alone) == ["Music"], f"seed {seed}"
        # A table created through the newcomer shows through the first router.
        await cluster.create_table("Later", router=len(cluster.routers) - 1)
        assert await names(cluster.routers[0]) == ["Later", "Music"], f"seed {seed}"

    run(seed, scenario)


@pytest.mark.parametrize("seed", SEEDS)
def test_routers_bootstrapping_at_once_with_different_node_lists_agree(seed: int) -> None:
    async def scenario(cluster: SimCluster) -> None:
        # A node whose id sorts before the others' and that a ring over all four would make the
        # catalog's home: the two routers neither start from the same node nor propose the same
        # place for the catalog.
        extra = node_taking_the_catalog(cluster, "node0")
        old_nodes = sorted(cluster.nodes)
        cluster.add_node(extra)
        narrow = cluster.add_router(old_nodes)
        wide = cluster.add_router()
        assert min(wide.clients) == extra < min(narrow.clients)
        cluster.faults(DELAYS)
        await asyncio.gather(narrow.refresh(), wide.refresh())
        assert narrow.location == wide.location, f"seed {seed}"
        assert narrow.location is not None
        for node_id in cluster.nodes:
            assert record_on(cluster, node_id) == narrow.location, f"seed {seed}: {node_id}"
        await cluster.create_table("First", router=1)
        assert await names(narrow) == ["First"], f"seed {seed}"

    run(seed, scenario, routers=0)


@pytest.mark.parametrize("seed", SEEDS)
def test_no_second_catalog_is_started_while_a_node_does_not_answer(seed: int) -> None:
    async def scenario(cluster: SimCluster) -> None:
        first = cluster.add_router()
        cluster.network.cut(cluster.addresses["node2"])
        with pytest.raises(ServiceUnavailable):
            await first.refresh()
        assert all(record_on(cluster, node_id) is None for node_id in cluster.nodes)
        cluster.network.heal()
        await cluster.create_table("Music", router=0)
        # With a record on the other nodes, one node's silence no longer stops a new router.
        silent = next(node_id for node_id in sorted(cluster.nodes) if node_id != first.catalog_node)
        cluster.network.cut(cluster.addresses[silent])
        second = cluster.add_router()
        assert await names(second) == ["Music"], f"seed {seed}"
        assert second.location == first.location, f"seed {seed}"

    run(seed, scenario, routers=0)
