"""A router started with one more node in its `--nodes` list sees the cluster's catalog.

Routers used to find the catalog on the ring owner of a well-known id over their own node list,
so adding a node that took over that id made a new router read an empty catalog from it. Now the
catalog's place is recorded on every node (a bootstrap record): this test starts a three-node
cluster, creates a table with items, starts a fourth node whose id a four-node ring would make the
catalog's owner, and a router knowing all four, and checks that router sees the table and its
items, and that a table created through it shows through the first router.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from core.catalog import CATALOG_PLACEMENT_KEY
from core.placement import HashRing
from dynalab.cluster import LocalCluster, Router, StorageNode, free_ports, stop_all
from tests.integration.conftest import create_active_table, dynamodb_client, stored_catalog

ITEMS = 20


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """Three storage nodes and one router of the module's own: the test adds a node to them."""
    with pytest.MonkeyPatch.context() as environment:
        environment.setenv("DYNALAB_THROTTLING", "off")
        with LocalCluster(tmp_path_factory.mktemp("bootstrap"), nodes=3, routers=1) as running:
            yield running


def id_taking_the_catalog(existing: list[str]) -> str:
    """A new node id that a ring over the existing nodes and it makes the catalog's owner."""
    for number in range(len(existing) + 1, 1000):
        candidate = f"node-{number}"
        if HashRing([*existing, candidate]).owner(CATALOG_PLACEMENT_KEY) == candidate:
            return candidate
    raise AssertionError("no node id takes the catalog's placement key")


def test_a_router_with_an_added_node_sees_the_tables_and_their_items(
    cluster: LocalCluster, tmp_path: Path, table_name: Callable[[], str]
) -> None:
    first = dynamodb_client(cluster.router_url)
    name = create_active_table(first, table_name(), range_key=("sk", "N"))
    stored: list[dict[str, Any]] = [
        {"pk": {"S": f"k{number % 5}"}, "sk": {"N": str(number)}} for number in range(ITEMS)
    ]
    for item in stored:
        first.put_item(TableName=name, Item=item)
    home = stored_catalog(cluster.nodes)["catalog_node"]

    node_id = id_taking_the_catalog([node.node_id for node in cluster.nodes])
    assert node_id != home
    node_port, router_port = free_ports(2)
    added = StorageNode(node_id, node_port, tmp_path / node_id, tmp_path / f"{node_id}.log")
    router = Router(
        "router-added", router_port, [*cluster.nodes, added], tmp_path / "router-added.log"
    )
    try:
        added.start()
        router.start()
        second = dynamodb_client(router.url)
        assert name in second.list_tables()["TableNames"], "the new router saw an empty catalog"
        assert second.describe_table(TableName=name)["Table"]["TableStatus"] == "ACTIVE"
        found = second.scan(TableName=name, ConsistentRead=True)["Items"]
        assert sorted(map(str, found)) == sorted(map(str, stored))
        reply = second.get_item(TableName=name, Key=stored[7], ConsistentRead=True)
        assert reply["Item"] == stored[7]

        # Both routers keep one catalog: a table created through the new one shows in the first.
        later = create_active_table(second, table_name())
        assert later in first.list_tables()["TableNames"]
        assert stored_catalog([*cluster.nodes, added])["catalog_node"] == home
    finally:
        stop_all([router, added])
