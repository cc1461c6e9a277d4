"""A table's items are spread over every storage node, and every router sees all of them.

The table is provisioned for 30,000 write units so that it starts with 31 partitions: with
partitions placed on the ring by the hash of their ids, every one of three nodes then holds some
(the chance that one holds none is about 1 in 70,000).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from dynalab.cluster import LocalCluster
from rpc import ops
from rpc.client import NodeClient

ITEMS = 600
BATCH = 25
CONTROL_TIMEOUT_S = 5.0


def _node_item_counts(cluster: LocalCluster, table_id: str) -> dict[str, int]:
    async def count(address: str) -> int:
        client = NodeClient(address)
        try:
            stats = await client.control(
                ops.TABLE_STATS, {"table_id": table_id}, timeout=CONTROL_TIMEOUT_S
            )
        finally:
            await client.close()
        return sum(p["items"] for p in stats["partitions"].values())

    async def gather() -> list[int]:
        return await asyncio.gather(*(count(node.address) for node in cluster.nodes))

    return dict(zip((n.node_id for n in cluster.nodes), asyncio.run(gather()), strict=True))


def test_items_spread_over_every_node(
    cluster: LocalCluster, dynamodb: Any, dynamodb_for: Callable[[str], Any], table_name: Any
) -> None:
    name = table_name()
    dynamodb.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        ProvisionedThroughput={"ReadCapacityUnits": 1, "WriteCapacityUnits": 30_000},
    )
    dynamodb.get_waiter("table_exists").wait(
        TableName=name, WaiterConfig={"Delay": 1, "MaxAttempts": 30}
    )
    keys = [f"item-{i}" for i in range(ITEMS)]
    for start in range(0, ITEMS, BATCH):
        reply = dynamodb.batch_write_item(
            RequestItems={
                name: [
                    {"PutRequest": {"Item": {"pk": {"S": k}}}} for k in keys[start : start + BATCH]
                ]
            }
        )
        assert not reply["UnprocessedItems"]

    table_id = dynamodb.describe_table(TableName=name)["Table"]["TableId"].replace("-", "")
    counts = _node_item_counts(cluster, table_id)
    assert all(count > 0 for count in counts.values()), f"a node holds no item: {counts}"
    assert sum(counts.values()) == ITEMS
    assert dynamodb.describe_table(TableName=name)["Table"]["ItemCount"] == ITEMS

    other = dynamodb_for(cluster.router_urls[1])
    seen: list[str] = []
    page: dict[str, Any] = {"TableName": name}
    while True:
        reply = other.scan(**page)
        seen.extend(item["pk"]["S"] for item in reply["Items"])
        if "LastEvaluatedKey" not in reply:
            break
        page["ExclusiveStartKey"] = reply["LastEvaluatedKey"]
    assert sorted(seen) == sorted(keys)
