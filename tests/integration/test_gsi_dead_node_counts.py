"""DescribeTable's global index counts with a node down: answered from what the nodes last reported.

A table's ItemCount already counted a dead node's partitions as that node last reported them; a
global index's ItemCount and IndexSizeBytes silently left out the dead node's share. The test
fills an index, kills (SIGKILL) a node holding some of the index's entries, and checks that
DescribeTable answers, with the same index counts as before.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from core.catalog import PartitionDef
from core.keycodec import encode_storage_key
from core.placement import PartitionMap
from dynalab.cluster import LocalCluster
from tests.integration.conftest import dynamodb_client, stored_catalog, wait_active

ITEMS = 40
INDEX = "by_g"
REPLICATED_SECONDS = 60.0
TABLE_ATTEMPTS_MAX = 10
POLL_SECONDS = 0.2


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with pytest.MonkeyPatch.context() as environment:
        environment.setenv("DYNALAB_THROTTLING", "off")
        with LocalCluster(
            tmp_path_factory.mktemp("gsi-counts"), nodes=3, routers=1, replicators=1
        ) as running:
            yield running


def create_indexed(client: Any, name: str) -> None:
    client.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "g", "AttributeType": "S"},
        ],
        GlobalSecondaryIndexes=[
            {
                "IndexName": INDEX,
                "KeySchema": [{"AttributeName": "g", "KeyType": "HASH"}],
                "Projection": {"ProjectionType": "ALL"},
            }
        ],
        BillingMode="PAY_PER_REQUEST",
    )
    wait_active(client, name)


def index_counts(client: Any, name: str) -> tuple[int, int]:
    (index,) = client.describe_table(TableName=name)["Table"]["GlobalSecondaryIndexes"]
    return index["ItemCount"], index["IndexSizeBytes"]


def index_entries_by_node(cluster: LocalCluster, name: str) -> tuple[str, dict[str, int]]:
    """The catalog's node, and how many of the items' index entries each node holds."""
    stored = stored_catalog(cluster.nodes)
    (index,) = stored["tables"][name]["indexes"]
    partitions = PartitionMap(map(PartitionDef.from_json, index["partitions"]))
    held: dict[str, int] = {}
    for number in range(ITEMS):
        node = partitions.lookup(encode_storage_key({"S": f"g{number}"}, None)).node
        held[node] = held.get(node, 0) + 1
    return stored["catalog_node"], held


def test_describe_table_counts_a_dead_nodes_index_entries_as_last_reported(
    cluster: LocalCluster, table_name: Callable[[], str]
) -> None:
    client = dynamodb_client(cluster.router_url)
    # A node other than the catalog's (DescribeTable reads the catalog) must hold index entries;
    # where the index's partitions go follows its random id, so tables are made until one does.
    for _ in range(TABLE_ATTEMPTS_MAX):
        name = table_name()
        create_indexed(client, name)
        home, held = index_entries_by_node(cluster, name)
        victims = sorted(node for node in held if node != home)
        if victims:
            break
    assert victims, "every index's entries were on the catalog's node"
    for number in range(ITEMS):
        client.put_item(TableName=name, Item={"pk": {"S": f"k{number}"}, "g": {"S": f"g{number}"}})
    deadline = time.monotonic() + REPLICATED_SECONDS
    while (counts := index_counts(client, name))[0] != ITEMS:
        assert time.monotonic() < deadline, f"the index holds {counts[0]} of {ITEMS} entries"
        time.sleep(POLL_SECONDS)

    node = cluster.node(victims[0])
    node.kill()
    try:
        assert index_counts(client, name) == counts
        assert client.describe_table(TableName=name)["Table"]["ItemCount"] == ITEMS
    finally:
        node.start()
    assert index_counts(client, name) == counts
