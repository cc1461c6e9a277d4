"""A router starting while the catalog's node is down serves the partitions on the other nodes.

It used to have no catalog at all, so 20 of 20 requests for partitions on healthy nodes failed.
Now a router keeps a copy of the last catalog it read in its state directory
(router/catalog_copy.py) and starts from it, and every other node keeps a copy of the catalog
(storagenode/catalog_copy.py), from which a router with no copy of its own starts. The test creates
a table through a router, waits for both copies, kills the catalog's node with SIGKILL, restarts the
router (a new process on the same state directory), and checks that reads and writes of keys on the
healthy nodes succeed and that keys on the dead node and table operations get a retryable 503; then
it starts a brand-new router with an empty state directory and checks the same of it, with a Query
too, and that DescribeTable and ListTables answer the 503 naming the catalog's node; then it
restarts the catalog's node and checks that everything works again.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from core.catalog import CATALOG_COPY_TABLE_ID, PartitionDef, TableStatus
from core.catalog_copy import CATALOG_COPY_PARTITION_ID, CatalogCopy
from core.errors import ServiceUnavailable, StaleEpoch
from core.keycodec import encode_storage_key
from core.placement import PartitionMap
from dynalab.cluster import LocalCluster, Router, StorageNode, free_ports
from router.catalog_copy import COPY_FILE_NAME
from rpc import ops
from rpc.client import NodeClient
from tests.integration.conftest import (
    create_active_table,
    dynamodb_client,
    error_of,
    stored_catalog,
)

KEYS = 40
# The copy is written by the router's background refresh, about once a second.
COPY_WAIT_SECONDS = 20.0
RECOVERY_SECONDS = 30.0
POLL_SECONDS = 0.2
TABLE_ATTEMPTS_MAX = 20


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with pytest.MonkeyPatch.context() as environment:
        environment.setenv("DYNALAB_THROTTLING", "off")
        with LocalCluster(
            tmp_path_factory.mktemp("catalog-down"), nodes=3, routers=1, replicators=0
        ) as running:
            yield running


def wait_for_copy(state_dir: Path, name: str) -> None:
    deadline = time.monotonic() + COPY_WAIT_SECONDS
    path = state_dir / COPY_FILE_NAME
    while not (path.exists() and name.encode() in path.read_bytes()):
        assert time.monotonic() < deadline, f"no catalog copy naming {name} in {state_dir}"
        time.sleep(POLL_SECONDS)


def node_copies(nodes: list[StorageNode]) -> dict[str, CatalogCopy | None]:
    """Each node's copy of the catalog, read from its copy partition (None: it holds none, or
    did not answer in time)."""
    target = ops.Target(CATALOG_COPY_TABLE_ID, CATALOG_COPY_PARTITION_ID, 1, True)

    async def read() -> dict[str, CatalogCopy | None]:
        copies: dict[str, CatalogCopy | None] = {}
        for node in nodes:
            client = NodeClient(node.address)
            try:
                reply = await client.call(ops.SCAN, target, ops.ScanPayload().to_json(), 5.0)
                copies[node.node_id] = CatalogCopy.of_items(reply["items"])
            except (StaleEpoch, ServiceUnavailable):
                copies[node.node_id] = None  # No copy partition yet, or the node is slow.
            finally:
                await client.close()
        return copies

    return asyncio.run(read())


def wait_for_node_copies(cluster: LocalCluster, home: str, name: str) -> None:
    """Until every node but the catalog's keeps a copy in which table `name` is ACTIVE (a copy
    taken while it was being created names it too, but a router does not serve it from there)."""
    others = [node for node in cluster.nodes if node.node_id != home]
    deadline = time.monotonic() + COPY_WAIT_SECONDS
    while True:
        copies = node_copies(others)
        if all(
            copy is not None
            and name in copy.records
            and copy.records[name].status == TableStatus.ACTIVE
            for copy in copies.values()
        ):
            return
        assert time.monotonic() < deadline, f"the nodes' copies lack {name}: {copies}"
        time.sleep(POLL_SECONDS)


def table_on_both_sides(
    cluster: LocalCluster, client: Any, table_name: Callable[[], str]
) -> tuple[str, str, list[str], list[str]]:
    """A new table with keys both on the catalog's node and on others: (its name, the catalog's
    node, keys elsewhere, keys on it). Where the ring places a table's partitions depends on its
    random id, so tables are made until one has both."""
    for _ in range(TABLE_ATTEMPTS_MAX):
        name = create_active_table(client, table_name())
        stored = stored_catalog(cluster.nodes)
        home = stored["catalog_node"]
        partitions = PartitionMap(map(PartitionDef.from_json, stored["tables"][name]["partitions"]))
        keys = [f"key-{number}" for number in range(KEYS)]
        node_of = {
            key: partitions.lookup(encode_storage_key({"S": key}, None)).node for key in keys
        }
        healthy = [key for key in keys if node_of[key] != home]
        down = [key for key in keys if node_of[key] == home]
        if healthy and down:
            return name, home, healthy, down
    raise AssertionError(f"no table of {TABLE_ATTEMPTS_MAX} had partitions on {home} and elsewhere")


def test_a_router_starting_while_the_catalog_node_is_down_serves_healthy_partitions(
    cluster: LocalCluster, tmp_path: Path, table_name: Callable[[], str]
) -> None:
    router = cluster.routers[0]
    assert router.state_dir is not None
    client = dynamodb_client(router.url)
    name, home, healthy, down = table_on_both_sides(cluster, client, table_name)
    keys = healthy + down
    for key in keys:
        client.put_item(TableName=name, Item={"pk": {"S": key}, "v": {"S": "before"}})
    wait_for_copy(router.state_dir, name)
    wait_for_node_copies(cluster, home, name)

    catalog_node = cluster.node(home)
    catalog_node.kill()
    router.stop()
    router.start()
    restarted = dynamodb_client(router.url)
    for key in healthy:
        reply = restarted.get_item(TableName=name, Key={"pk": {"S": key}}, ConsistentRead=True)
        assert reply["Item"]["v"] == {"S": "before"}, key
        restarted.put_item(TableName=name, Item={"pk": {"S": key}, "v": {"S": "during"}})
    status, code, _ = error_of(
        lambda: restarted.get_item(TableName=name, Key={"pk": {"S": down[0]}})
    )
    assert (status, code) == (503, "ServiceUnavailable")
    status, code, message = error_of(
        lambda: restarted.create_table(
            TableName=table_name(),
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
    )
    assert (status, code) == (503, "ServiceUnavailable")
    assert "table catalog is unavailable" in message and home in message, message

    # A brand-new router with an empty state directory starts from the other nodes' copies.
    port = free_ports(1)[0]
    bare = Router("router-bare", port, cluster.nodes, tmp_path / "bare.log", tmp_path / "bare")
    try:
        bare.start()
        fresh = dynamodb_client(bare.url)
        for key in healthy:
            reply = fresh.get_item(TableName=name, Key={"pk": {"S": key}}, ConsistentRead=True)
            assert reply["Item"]["v"] == {"S": "during"}, key
            fresh.put_item(TableName=name, Item={"pk": {"S": key}, "v": {"S": "fresh"}})
        queried = fresh.query(
            TableName=name,
            KeyConditionExpression="pk = :k",
            ExpressionAttributeValues={":k": {"S": healthy[0]}},
        )
        assert queried["Items"] == [{"pk": {"S": healthy[0]}, "v": {"S": "fresh"}}]
        status, code, _ = error_of(
            lambda: fresh.get_item(TableName=name, Key={"pk": {"S": down[0]}})
        )
        assert (status, code) == (503, "ServiceUnavailable")
        # Table operations need the catalog itself: DescribeTable and ListTables answer the 503.
        for operation in (
            lambda: fresh.describe_table(TableName=name),
            lambda: fresh.list_tables(),
        ):
            status, code, message = error_of(operation)
            assert (status, code) == (503, "ServiceUnavailable")
            assert "table catalog is unavailable" in message and home in message, message
    finally:
        bare.stop()

    catalog_node.start()
    deadline = time.monotonic() + RECOVERY_SECONDS
    while True:
        try:
            later = create_active_table(restarted, table_name())
            break
        except ClientError as error:
            assert error.response["Error"]["Code"] == "ServiceUnavailable", error.response
            assert time.monotonic() < deadline, "CreateTable kept failing after the node returned"
            time.sleep(POLL_SECONDS)
    assert later in restarted.list_tables()["TableNames"]
    for key in keys:
        reply = restarted.get_item(TableName=name, Key={"pk": {"S": key}}, ConsistentRead=True)
        assert reply["Item"]["v"] == {"S": "fresh" if key in healthy else "before"}, key
