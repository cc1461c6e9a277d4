"""The copies of the catalog the storage nodes keep, on a seeded in-process cluster.

Each node but the catalog's copies the catalog when its seq moved (`storagenode.catalog_copy`);
a router that has never read the catalog and cannot reach its node serves item operations from the
newest copy among the nodes it reaches, answers table operations with the catalog's 503, and never
takes a copy older than one it has taken, so a table dropped since does not come back.
"""

from __future__ import annotations

from typing import Any

import pytest

from core import limits
from core.errors import DynamoError, ServiceUnavailable
from core.keycodec import encode_storage_key
from dynalab.sim.cluster import SimCluster, run
from router import items, tables
from router.context import RouterContext
from rpc import ops
from storagenode.catalog_copy import CatalogCopier

SEEDS = [3, 21, 404]


def copier(cluster: SimCluster, node_id: str) -> CatalogCopier:
    """Node `node_id`'s copier, its writes applied in place, its calls on the network."""
    node = cluster.nodes[node_id]

    async def submit(op: str, target: ops.Target | None, body: dict[str, Any]) -> dict[str, Any]:
        [result] = node.apply_writes([(op, target, body)])
        if isinstance(result, DynamoError):
            raise result
        return result

    return CatalogCopier(node_id, node, submit, cluster.network.connect)


def key_on(router: RouterContext, name: str, node_ids: list[str]) -> dict[str, Any]:
    """A key of table `name` whose partition is on one of `node_ids`."""
    partitions = router.tables[name].partitions
    for number in range(1000):
        key = {"pk": {"S": f"key-{number}"}}
        if partitions.lookup(encode_storage_key(key["pk"], None)).node in node_ids:
            return key
    raise AssertionError(f"no key of {name} on {node_ids}")


@pytest.mark.parametrize("seed", SEEDS)
def test_a_new_router_serves_from_the_newest_copy_and_never_goes_back(seed: int) -> None:
    async def scenario(cluster: SimCluster) -> None:
        first = cluster.routers[0]
        for name in ("Music", "Films"):
            await cluster.create_table(name, sort=False)
        home = first.catalog_node
        assert home is not None
        others = sorted(node for node in cluster.nodes if node != home)
        copiers = {node: copier(cluster, node) for node in others}
        for node in others:
            assert await copiers[node].copy(), f"seed {seed}: {node} took no copy"
            assert not await copiers[node].copy(), f"seed {seed}: {node} copied an unchanged one"
        # The catalog's own node keeps no copy: it answers from the catalog.
        assert not await copier(cluster, home).copy()

        # Films dropped and Books created; only the second node copies that.
        await tables.delete_table(first, {"TableName": "Films"})
        await cluster.create_table("Books", sort=False)
        assert await first.read_table("Films") is None
        assert await copiers[others[1]].copy()
        older, newer = (copiers[node].held() for node in others)
        assert older is not None and newer is not None and older.seq < newer.seq
        assert sorted(older.records) == ["Films", "Music"], f"seed {seed}"
        assert sorted(newer.records) == ["Books", "Music"], f"seed {seed}"
        books = key_on(first, "Books", others)
        await cluster.put("Books", {**books, "v": {"S": "kept"}})

        cluster.network.cut(cluster.addresses[home])
        fresh = cluster.add_router()
        reply = await items.get_item(
            fresh, {"TableName": "Books", "Key": books, "ConsistentRead": True}
        )
        assert reply["Item"] == {**books, "v": {"S": "kept"}}, f"seed {seed}"
        for operation, body in (
            (tables.describe_table, {"TableName": "Books"}),
            (tables.list_tables, {}),
        ):
            with pytest.raises(ServiceUnavailable, match="table catalog is unavailable"):
                await operation(fresh, body)

        # The node of the newer copy goes too: the older copy, which still has Films, is not
        # taken, and what the router has seen stays.
        cluster.network.cut(cluster.addresses[others[1]])
        fresh.sources.clock.advance(2 * limits.CATALOG_REFRESH_SECONDS)  # type: ignore[attr-defined]
        with pytest.raises(ServiceUnavailable):
            await fresh.refresh()
        assert sorted(fresh.records) == ["Books", "Music"], f"seed {seed}"
        with pytest.raises(ServiceUnavailable):
            await items.get_item(fresh, {"TableName": "Films", "Key": {"pk": {"S": "a"}}})

    run(seed, scenario)
