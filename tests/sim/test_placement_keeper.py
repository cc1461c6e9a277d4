"""The placement keeper (`storagenode.placement`) on a seeded in-process cluster: a node drops the
stored tables no table in the catalog names (a table deleted while it held a copy, an abandoned
creation's partitions) and keeps every partition the catalog still places, a global index's too;
a node no router has told where the catalog is does nothing."""

from __future__ import annotations

import asyncio
import random
import uuid
from typing import Any

import pytest

from core import catalog
from core.catalog import CatalogLocation
from core.errors import DynamoError
from dynalab.sim.cluster import SimCluster, run
from router import tables
from rpc import ops
from rpc.catalog_client import CatalogClient
from storagenode.memory_store import MemoryStore
from storagenode.node import StorageNode
from storagenode.placement import PlacementKeeper
from storagenode.throughput import NodeThroughput

SEEDS = [5, 77, 910]
MUSIC = {
    "TableName": "Music",
    "KeySchema": [{"AttributeName": "pk", "KeyType": "HASH"}],
    "AttributeDefinitions": [
        {"AttributeName": "pk", "AttributeType": "S"},
        {"AttributeName": "genre", "AttributeType": "S"},
    ],
    "GlobalSecondaryIndexes": [
        {
            "IndexName": "by_genre",
            "KeySchema": [{"AttributeName": "genre", "KeyType": "HASH"}],
            "Projection": {"ProjectionType": "ALL"},
        }
    ],
    "BillingMode": "PAY_PER_REQUEST",
}


def keeper(cluster: SimCluster, node_id: str) -> PlacementKeeper:
    node = cluster.nodes[node_id]

    async def submit(op: str, body: dict[str, Any]) -> dict[str, Any]:
        [result] = node.apply_writes([(op, None, body)])
        if isinstance(result, DynamoError):
            raise result
        return result

    return PlacementKeeper(node_id, node, submit, cluster.splitters[node_id].catalog)


def orphan(cluster: SimCluster, node_id: str) -> str:
    """Create a partition of a stored table no catalog row names on `node_id`; its id."""
    stored_id = uuid.uuid4().hex
    body = ops.CreatePartitionPayload(
        {"id": stored_id, "name": "Ghost", "key_schema": {"hash": ["pk", "S"], "range": None}},
        {"id": f"{stored_id}-0", "start": "", "end": None, "epoch": 1, "node": node_id},
    ).to_json()
    [result] = cluster.nodes[node_id].apply_writes([(ops.CREATE_PARTITION, None, body)])
    assert not isinstance(result, DynamoError), result
    return stored_id


def stored(cluster: SimCluster, node_id: str) -> set[str]:
    return {table_id for table_id, _ in cluster.nodes[node_id].partitions}


@pytest.mark.parametrize("seed", SEEDS)
def test_a_node_drops_only_what_no_table_in_the_catalog_names(seed: int) -> None:
    async def scenario(cluster: SimCluster) -> None:
        router = cluster.routers[0]
        await tables.create_table(router, MUSIC)
        await cluster.create_table("Films", sort=False)
        await router.refresh()
        films = router.records["Films"]
        music = router.records["Music"]
        node_id = films.partitions[0].node
        ghost = orphan(cluster, node_id)
        before = stored(cluster, node_id)
        assert ghost in before and films.id in before

        plan = await keeper(cluster, node_id).reconcile()
        assert plan.drop == (ghost,), f"seed {seed}: {plan}"
        assert plan.create == ()  # One copy: nothing is placed on a node that it lacks.
        assert stored(cluster, node_id) == before - {ghost}

        # After a DeleteTable no node has anything left to drop, and the table kept keeps its
        # global index's partitions.
        await tables.delete_table(router, {"TableName": "Films"})
        await router.refresh()
        plan = await keeper(cluster, node_id).reconcile()
        assert plan.drop == (), f"seed {seed}: {plan}"
        index_ids = {i.table_id for i in catalog.global_indexes(music) if i.table_id}
        for other in cluster.nodes:
            assert (await keeper(cluster, other).reconcile()).drop == ()
            assert not (stored(cluster, other) & {films.id, ghost})
        assert index_ids <= set().union(*(stored(cluster, n) for n in cluster.nodes))

    run(seed, scenario)


def test_a_node_without_a_catalog_does_nothing() -> None:
    node = StorageNode(MemoryStore(), throughput=NodeThroughput(enforced=False))

    async def submit(op: str, body: dict[str, Any]) -> dict[str, Any]:
        raise AssertionError(f"a node with no catalog wrote {op}")

    async def no_catalog() -> CatalogLocation:
        raise AssertionError("a node with no bootstrap record looked for the catalog")

    client = CatalogClient(no_catalog, lambda _l, _n: None, rng=random.Random(1), clock=float)  # type: ignore[arg-type,return-value]
    body = ops.CreatePartitionPayload(
        {"id": "f" * 32, "name": "Ghost", "key_schema": {"hash": ["pk", "S"], "range": None}},
        {"id": "p0", "start": "", "end": None, "epoch": 1, "node": "node-1"},
    ).to_json()
    node.apply_writes([(ops.CREATE_PARTITION, None, body)])
    plan = asyncio.run(PlacementKeeper("node-1", node, submit, client).reconcile())
    assert plan.drop == () and plan.create == ()
    assert ("f" * 32, "p0") in node.partitions
