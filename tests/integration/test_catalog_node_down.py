"""A router starting while the catalog's node is down serves the partitions on the other nodes.

It used to have no catalog at all, so 20 of 20 requests for partitions on healthy nodes failed.
Now a router keeps a copy of the last catalog it read in its state directory
(router/catalog_copy.py) and starts from it. The test creates a table through a router, stops the
catalog's node, restarts the router (a new process on the same state directory), and checks that
reads and writes of keys on the healthy nodes succeed, that keys on the stopped node and table
operations get a retryable 503, and that a router with no copy answers 503 too; then it restarts the
catalog's node and checks that everything works again.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from core.keycodec import encode_storage_key
from core.placement import PartitionMap
from dynalab.cluster import LocalCluster, Router, free_ports
from router.catalog_copy import COPY_FILE_NAME
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
        partitions = PartitionMap(stored["tables"][name]["partitions"])
        keys = [f"key-{number}" for number in range(KEYS)]
        node_of = {
            key: partitions.lookup(encode_storage_key({"S": key}, None))["node"] for key in keys
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

    catalog_node = cluster.node(home)
    catalog_node.stop()
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

    # A router with no copy has nothing to start from: it answers 503, naming the catalog.
    port = free_ports(1)[0]
    bare = Router("router-bare", port, cluster.nodes, tmp_path / "bare.log", tmp_path / "bare")
    try:
        bare.start()
        status, code, message = error_of(
            lambda: dynamodb_client(bare.url).get_item(
                TableName=name, Key={"pk": {"S": healthy[0]}}
            )
        )
        assert (status, code) == (503, "ServiceUnavailable")
        assert "table catalog is unavailable" in message, message
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
        assert reply["Item"]["v"] == {"S": "during" if key in healthy else "before"}, key
