"""The catalog as a replication group (real processes, the Raft transport over gRPC, boto3).

A router with a replication factor of 3 places a new cluster's catalog (and the GSI leases table
beside it) on three nodes. Kill -9 of the catalog's leader: table operations that change no
partition's placement (DescribeTable, ListTables, UpdateTable's throughput, TagResource,
UpdateTimeToLive) go on through the same router, a brand-new router with an empty state directory
finds the catalog from the live nodes' bootstrap records and serves them too, and the GSI
replicator keeps its leases and its index converges; the killed node, restarted, holds every
change made without it, and the catalog goes on when another node is killed in its turn.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path
from typing import Any

from core import catalog, limits
from core.catalog import CatalogLocation
from core.errors import NotPartitionLeader, ServiceUnavailable
from dynalab.cluster import LocalCluster, Router, free_ports
from rpc import ops
from rpc.catalog_client import bootstrap_record, system_target
from rpc.client import NodeClient
from tests.integration.conftest import create_active_table, dynamodb_client

# A new leader is elected within an election timeout or two (1-4 s here); a request retries
# within its own deadline meanwhile.
RECOVERY_SECONDS_MAX = 20.0
POLL_SECONDS = 0.2


def location_of(cluster: LocalCluster) -> CatalogLocation:
    async def read() -> CatalogLocation:
        client = NodeClient(cluster.nodes[0].address)
        try:
            found = await bootstrap_record(client)
        finally:
            await client.close()
        assert found is not None, "no bootstrap record"
        return found

    return asyncio.run(read())


def catalog_leader(cluster: LocalCluster, location: CatalogLocation) -> str:
    """The node that answers a strongly consistent read of the catalog: its leader."""
    target = system_target(catalog.CATALOG_TABLE_ID, location.partition, True)
    body = ops.GetPayload({"name": {"S": "nothing"}}).to_json()

    async def find() -> str:
        deadline = time.monotonic() + RECOVERY_SECONDS_MAX
        while True:
            for node in cluster.nodes:
                if not node.is_running():
                    continue
                client = NodeClient(node.address)
                try:
                    await client.call(ops.GET, target, body, 2.0)
                    return node.node_id
                except (NotPartitionLeader, ServiceUnavailable):
                    pass
                finally:
                    await client.close()
            assert time.monotonic() < deadline, "no catalog replica leads"
            await asyncio.sleep(POLL_SECONDS)

    return asyncio.run(find())


def eventually(what: str, attempt: Any) -> Any:
    """`attempt()`'s answer once it gives one, within RECOVERY_SECONDS_MAX."""
    deadline = time.monotonic() + RECOVERY_SECONDS_MAX
    while True:
        try:
            return attempt()
        except Exception as error:  # A 503 while the new leader is elected, any boto3 error.
            if time.monotonic() > deadline:
                raise AssertionError(f"{what} did not succeed in time") from error
            time.sleep(POLL_SECONDS)


def index_keys(client: Any, table: str) -> set[str]:
    pages = client.get_paginator("scan").paginate(TableName=table, IndexName="by_group")
    return {item["pk"]["S"] for page in pages for item in page["Items"]}


def test_table_operations_go_on_with_the_catalogs_leader_killed(tmp_path: Path) -> None:
    with LocalCluster(
        tmp_path / "cluster", nodes=3, routers=1, replicators=1, replication_factor=3
    ) as cluster:
        client = dynamodb_client(cluster.router_url)
        plain = create_active_table(client, "Plain", throughput=(5, 5))
        client.create_table(
            TableName="Indexed",
            AttributeDefinitions=[
                {"AttributeName": "pk", "AttributeType": "S"},
                {"AttributeName": "group", "AttributeType": "S"},
            ],
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
            GlobalSecondaryIndexes=[
                {
                    "IndexName": "by_group",
                    "KeySchema": [{"AttributeName": "group", "KeyType": "HASH"}],
                    "Projection": {"ProjectionType": "ALL"},
                }
            ],
            BillingMode="PAY_PER_REQUEST",
        )
        client.get_waiter("table_exists").wait(TableName="Indexed")

        location = location_of(cluster)
        assert sorted(location.nodes) == sorted(node.node_id for node in cluster.nodes)
        leader = catalog_leader(cluster, location)
        cluster.node(leader).kill()

        # The same router: every table operation that needs only the catalog answers.
        described = eventually("DescribeTable", lambda: client.describe_table(TableName=plain))
        assert described["Table"]["TableStatus"] == "ACTIVE"
        assert {"Indexed", plain} <= set(client.list_tables()["TableNames"])
        arn = described["Table"]["TableArn"]
        eventually(
            "TagResource",
            lambda: client.tag_resource(ResourceArn=arn, Tags=[{"Key": "k", "Value": "v"}]),
        )
        eventually(
            "UpdateTable",
            lambda: client.update_table(
                TableName=plain,
                ProvisionedThroughput={"ReadCapacityUnits": 7, "WriteCapacityUnits": 9},
            ),
        )
        eventually(
            "UpdateTimeToLive",
            lambda: client.update_time_to_live(
                TableName=plain,
                TimeToLiveSpecification={"Enabled": True, "AttributeName": "expires"},
            ),
        )

        # The index goes on converging: the replicator's leases and catalog reads are at the
        # new leader.
        for i in range(20):
            client.put_item(
                TableName="Indexed", Item={"pk": {"S": f"k{i}"}, "group": {"S": f"g{i % 3}"}}
            )
        wanted = {f"k{i}" for i in range(20)}
        deadline = time.monotonic() + RECOVERY_SECONDS_MAX
        while index_keys(client, "Indexed") != wanted:
            assert time.monotonic() < deadline, "the index did not converge"
            time.sleep(POLL_SECONDS)

        # A brand-new router finds the catalog from the live nodes and serves it.
        port = free_ports(1)[0]
        bare = Router(
            "router-bare",
            port,
            cluster.nodes,
            tmp_path / "bare.log",
            tmp_path / "bare",
            replication_factor=3,
        )
        try:
            bare.start()
            fresh = dynamodb_client(bare.url)
            seen = eventually("DescribeTable", lambda: fresh.describe_table(TableName=plain))
            throughput = seen["Table"]["ProvisionedThroughput"]
            assert (throughput["ReadCapacityUnits"], throughput["WriteCapacityUnits"]) == (7, 9)
            tags = fresh.list_tags_of_resource(ResourceArn=arn)["Tags"]
            assert tags == [{"Key": "k", "Value": "v"}]
        finally:
            bare.stop()

        # The killed node comes back and holds every change made without it; then another node
        # dies and the catalog goes on.
        cluster.node(leader).start()
        time.sleep(2)
        other = next(node for node in cluster.nodes if node.node_id != leader)
        other.kill()
        ttl = eventually(
            "DescribeTimeToLive", lambda: client.describe_time_to_live(TableName=plain)
        )
        assert ttl["TimeToLiveDescription"]["AttributeName"] == "expires"
        tags = eventually(
            "ListTagsOfResource", lambda: client.list_tags_of_resource(ResourceArn=arn)
        )
        assert tags["Tags"] == [{"Key": "k", "Value": "v"}]
        other.start()


def stored_partitions(node: Any, table_id: str) -> dict[str, Any]:
    """The partitions of stored table `table_id` that `node` holds, as its table_stats says."""

    async def read() -> dict[str, Any]:
        client = NodeClient(node.address)
        try:
            reply = await client.control(
                ops.TABLE_STATS, ops.TableStatsPayload(table_id).to_json(), 5.0
            )
        finally:
            await client.close()
        partitions: dict[str, Any] = reply["partitions"]
        return partitions

    return asyncio.run(read())


def table_id(client: Any, name: str) -> str:
    """The id the nodes store table `name` under (DescribeTable's TableId is it as a UUID)."""
    return uuid.UUID(client.describe_table(TableName=name)["Table"]["TableId"]).hex


def test_tables_are_created_and_deleted_with_a_node_down(tmp_path: Path) -> None:
    """CreateTable and DeleteTable of replicated tables with one node of three killed: both
    answer as DynamoDB does, and the node, started again, creates the new table's replicas and
    drops the deleted one's on its own; it then serves the new table's writes in a quorum."""
    with LocalCluster(
        tmp_path / "cluster", nodes=3, routers=1, replicators=0, replication_factor=3
    ) as cluster:
        client = dynamodb_client(cluster.router_url)
        doomed = create_active_table(client, "Doomed")
        doomed_id = table_id(client, doomed)
        away = cluster.nodes[2]
        assert stored_partitions(away, doomed_id)
        away.kill()

        eventually("DeleteTable", lambda: client.delete_table(TableName=doomed))
        deadline = time.monotonic() + RECOVERY_SECONDS_MAX
        while doomed in client.list_tables()["TableNames"]:
            assert time.monotonic() < deadline, "the deleted table stayed"
            time.sleep(POLL_SECONDS)
        fresh = eventually("CreateTable", lambda: create_active_table(client, "Fresh"))
        fresh_id = table_id(client, fresh)
        for i in range(50):
            client.put_item(TableName=fresh, Item={"pk": {"S": f"k{i}"}, "n": {"N": str(i)}})
        # The name of the deleted table can be taken again at once.
        again = eventually("CreateTable", lambda: create_active_table(client, doomed))
        assert table_id(client, again) != doomed_id

        away.start()
        deadline = time.monotonic() + RECOVERY_SECONDS_MAX + limits.PLACEMENT_RECONCILE_SECONDS
        while stored_partitions(away, doomed_id) or not stored_partitions(away, fresh_id):
            assert time.monotonic() < deadline, "the node did not match the catalog"
            time.sleep(POLL_SECONDS)

        # The node now holds a replica of every partition of the new table: with another node
        # killed, the table's strong reads and writes go on at the two left.
        time.sleep(3)
        cluster.nodes[0].kill()
        for i in range(50):
            reply = eventually(
                "GetItem",
                lambda i=i: client.get_item(
                    TableName=fresh, Key={"pk": {"S": f"k{i}"}}, ConsistentRead=True
                ),
            )
            assert reply["Item"]["n"] == {"N": str(i)}
        eventually(
            "PutItem",
            lambda: client.put_item(TableName=fresh, Item={"pk": {"S": "after"}}),
        )
        cluster.nodes[0].start()
