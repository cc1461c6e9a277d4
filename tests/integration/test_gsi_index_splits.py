"""Global index partitions split on a real cluster whose split size is tiny (DYNALAB_SPLIT_BYTES),
while writes go on, the replicator and the index partitions' node are killed with SIGKILL and
restarted, and while an online index is copied: the replicator follows each split (a retired
index partition refuses its writes; it reads the catalog again and sends them to the children)
and each move of a split child the routers place on its ring owner,
the index converges exactly (`dynalab.convergence`), and DescribeTable's ItemCount and
IndexSizeBytes count its entries exactly. By hand, the admin endpoint splits an index
partition, and a Query paged across the split returns every entry once.

The first test keeps its base table from splitting, so that only the index splits under the
kills. With base partitions splitting too, that scenario had left a few stale entries in about
one run in four: the catalog dropped a grandparent partition before the replicator had drained
its log (fixed by `catalog.keeps_lineage`; `test_gsi_splits.py` reproduces it deterministically).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from core import limits
from core.machines.split import NAME as SPLIT
from core.size import item_size_bytes
from dynalab import convergence
from dynalab.cluster import LocalCluster
from tests.integration.conftest import dynamodb_client, wait_active
from tests.integration.crash_points import KillAt, hold_environment
from tests.integration.test_gsi_faults import Writer, create_scores
from tests.integration.test_gsi_online import (
    add_by_game,
    create_users,
    load,
    wait_index,
)
from tests.integration.test_splits import admin

SPLIT_BYTES = 2000  # A few dozen index entries: the indexes below split many times.
PAGE_BYTES = 512  # An online index's copy reads a few items a page: splits land during it.
CONVERGE_TIMEOUT_S = 90.0
SETTLE_TIMEOUT_S = 60.0
POLL_S = 0.5
NODE_EXIT_WAIT_S = 30.0
PAGE_ATTEMPTS_MAX = 10


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with pytest.MonkeyPatch.context() as environment:
        environment.setenv("DYNALAB_THROTTLING", "off")
        environment.setenv("DYNALAB_GSI_BACKFILL_PAGE_BYTES", str(PAGE_BYTES))
        with LocalCluster(
            tmp_path_factory.mktemp("index-splits"), nodes=3, split_bytes=SPLIT_BYTES
        ) as running:
            yield running


def index_partitions(cluster: LocalCluster, name: str, index: str) -> list[dict[str, Any]]:
    status, listing = admin(cluster, f"/admin/tables/{name}/partitions")
    assert status == 200, listing
    return [p for p in listing["partitions"] if p.get("index") == index]


def index_entries(client: Any, name: str, index: str) -> list[dict[str, Any]]:
    """Every entry of a Scan of the index, a page refused as unavailable asked again as SDKs
    do (routers move index split children: a page can meet a move's fence, and on a loaded
    machine outlast the router's own retries)."""
    found: list[dict[str, Any]] = []
    request: dict[str, Any] = {"TableName": name, "IndexName": index, "Limit": 37}
    while True:
        for attempt in range(PAGE_ATTEMPTS_MAX):
            try:
                page = client.scan(**request)
                break
            except ClientError as error:
                code = error.response["Error"]["Code"]
                if code != "ServiceUnavailable" or attempt + 1 == PAGE_ATTEMPTS_MAX:
                    raise
                time.sleep(POLL_S)
        found.extend(page["Items"])
        if "LastEvaluatedKey" not in page:
            return found
        request["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def wait_settled(cluster: LocalCluster, client: Any, name: str, index: str) -> None:
    """Until every serving index partition is held by its node and under the split size, and
    DescribeTable's ItemCount and IndexSizeBytes equal the entries a Scan of the index returns
    and their sizes with DynamoDB's 100 bytes of overhead each (the index projects what it
    stores)."""
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while True:
        serving = [p for p in index_partitions(cluster, name, index) if p["state"] == "SERVING"]
        held = all(p["size_bytes"] is not None and p["size_bytes"] <= SPLIT_BYTES for p in serving)
        described = client.describe_table(TableName=name)["Table"]["GlobalSecondaryIndexes"]
        counted = next(
            (i["ItemCount"], i["IndexSizeBytes"]) for i in described if i["IndexName"] == index
        )
        entries = index_entries(client, name, index)
        scanned = (
            len(entries),
            sum(item_size_bytes(e) + limits.INDEX_ENTRY_OVERHEAD_BYTES for e in entries),
        )
        if held and counted == scanned:
            return
        assert time.monotonic() < deadline, (counted, scanned, serving)
        time.sleep(POLL_S)


def create_wide_scores(client: Any, name: str) -> None:
    """The scores table of `test_gsi_faults`, provisioned at the per-table quota so that it
    starts with 54 partitions (a few hundred bytes each below), which stay under the split size
    while its index, with one partition to start from, splits many times."""
    units = {"ReadCapacityUnits": 40_000, "WriteCapacityUnits": 40_000}
    client.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": "UserId", "KeyType": "HASH"}],
        AttributeDefinitions=[
            {"AttributeName": "UserId", "AttributeType": "S"},
            {"AttributeName": "Game", "AttributeType": "S"},
            {"AttributeName": "Score", "AttributeType": "N"},
        ],
        BillingMode="PROVISIONED",
        ProvisionedThroughput=units,
        GlobalSecondaryIndexes=[
            {
                "IndexName": "ByGame",
                "KeySchema": [
                    {"AttributeName": "Game", "KeyType": "HASH"},
                    {"AttributeName": "Score", "KeyType": "RANGE"},
                ],
                "Projection": {"ProjectionType": "INCLUDE", "NonKeyAttributes": ["Level"]},
                "ProvisionedThroughput": {"ReadCapacityUnits": 1, "WriteCapacityUnits": 1},
            }
        ],
    )
    wait_active(client, name)


def test_an_index_splits_under_writes_and_kills_and_converges_exactly(
    cluster: LocalCluster,
) -> None:
    """Only the index splits here: base partitions splitting while the replicator is killed
    are `test_gsi_splits`' subject (and see the module's note)."""
    client = dynamodb_client(cluster.router_url)
    name = "index_splits_under_kills"
    create_wide_scores(client, name)
    writer = Writer(client, name)
    (replicator,) = cluster.replicators
    writer.burst(0, 150, 0)
    replicator.kill()  # SIGKILL while it applies, and likely while index partitions split.
    writer.burst(0, 150, 1)
    replicator.start()
    writer.burst(50, 200, 2)
    # The node holding the most index partitions, killed while the writes above split them.
    partitions = index_partitions(cluster, name, "ByGame")
    nodes = [p["node"] for p in partitions if p["state"] == "SERVING"]
    busiest = cluster.node(max(set(nodes), key=nodes.count))
    writer.burst(100, 150, 3)
    busiest.kill()
    time.sleep(0.5)
    busiest.start()
    writer.burst(0, 400, 4)
    result = convergence.wait_converged(client, name, "ByGame", CONVERGE_TIMEOUT_S, writer.history)
    assert result.converged
    wait_settled(cluster, client, name, "ByGame")
    listed = index_partitions(cluster, name, "ByGame")
    serving = [p for p in listed if p["state"] == "SERVING"]
    # Created with one partition; each split adds one.
    assert len(serving) >= 1 + 5, f"the index should have split several times: {listed}"
    # Every entry is read once, in a paged Scan and in paged Queries of each game.
    entries = index_entries(client, name, "ByGame")
    keys = [e["UserId"]["S"] for e in entries]
    assert len(keys) == len(set(keys))
    queried = 0
    for game in {e["Game"]["S"] for e in entries}:
        request: dict[str, Any] = {
            "TableName": name,
            "IndexName": "ByGame",
            "KeyConditionExpression": "Game = :g",
            "ExpressionAttributeValues": {":g": {"S": game}},
            "Limit": 9,
        }
        scores: list[int] = []
        while True:
            page = client.query(**request)
            scores.extend(int(item["Score"]["N"]) for item in page["Items"])
            if "LastEvaluatedKey" not in page:
                break
            request["ExclusiveStartKey"] = page["LastEvaluatedKey"]
        assert scores == sorted(scores), game
        queried += len(scores)
    assert queried == len(entries)


def test_an_online_index_splits_while_it_is_copied_and_converges(cluster: LocalCluster) -> None:
    client = dynamodb_client(cluster.router_url)
    name = "index_splits_under_copy"
    create_users(client, name)
    writer = Writer(client, name)
    load(client, name, writer, 600)
    add_by_game(client, name)
    wait_index(client, name, "ByGame", lambda i: i is not None and i["Backfilling"])
    writer.burst(0, 100, 1)  # Writes while it copies, key changes and deletes among them.
    wait_index(client, name, "ByGame", lambda i: i is not None and i["IndexStatus"] == "ACTIVE")
    result = convergence.wait_converged(client, name, "ByGame", CONVERGE_TIMEOUT_S, writer.history)
    assert result.converged
    wait_settled(cluster, client, name, "ByGame")
    listed = index_partitions(cluster, name, "ByGame")
    assert any(p["state"] == "RETIRED" for p in listed) or any(
        p["parent"] is not None for p in listed
    ), "the index should have split while it was copied"


def test_the_admin_endpoint_splits_an_index_partition_and_a_query_pages_across(
    cluster: LocalCluster,
) -> None:
    client = dynamodb_client(cluster.router_url)
    name = "index_split_by_hand"
    create_scores(client, name)
    writer = Writer(client, name)
    for user in range(12):
        writer.put(user, game=1, score=user, level=0)
    convergence.wait_converged(client, name, "ByGame", CONVERGE_TIMEOUT_S, writer.history)
    request: dict[str, Any] = {
        "TableName": name,
        "IndexName": "ByGame",
        "KeyConditionExpression": "Game = :g",
        "ExpressionAttributeValues": {":g": {"S": "game-1"}},
        "Limit": 5,
    }
    first = client.query(**request)
    [holder] = [
        p
        for p in index_partitions(cluster, name, "ByGame")
        if p["state"] == "SERVING" and p["size_bytes"]
    ]
    refused, reply = admin(
        cluster,
        f"/admin/tables/{name}/partitions/{holder['id']}/split",
        {"Key": {"UserId": {"S": "user-1"}}},
    )
    assert refused == 400, reply
    status, reply = admin(cluster, f"/admin/tables/{name}/partitions/{holder['id']}/split", {})
    assert status == 200, reply
    assert [c["parent"] for c in reply["children"]] == [holder["id"]] * 2
    scores = [int(item["Score"]["N"]) for item in first["Items"]]
    request["ExclusiveStartKey"] = first["LastEvaluatedKey"]
    while True:
        page = client.query(**request)
        scores.extend(int(item["Score"]["N"]) for item in page["Items"])
        if "LastEvaluatedKey" not in page:
            break
        request["ExclusiveStartKey"] = page["LastEvaluatedKey"]
    assert scores == list(range(12))
    writer.put(12, game=1, score=12, level=0)
    writer.put(3, game=2, score=3, level=0)
    result = convergence.wait_converged(client, name, "ByGame", CONVERGE_TIMEOUT_S, writer.history)
    assert result.converged
    wait_settled(cluster, client, name, "ByGame")


def test_an_index_node_killed_between_the_record_and_the_install_completes_the_split(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    """The node of an index partition dies (SIGKILL, held by `DYNALAB_HOLD_AT=split:recorded`
    at the split machine's crash point, then killed) just after the catalog recorded the
    partition's split; restarted, it installs the children (with the
    source rows and counts), and the index, written to meanwhile, converges exactly."""
    client = dynamodb_client(cluster.router_url)
    name = "index_split_killed"
    create_wide_scores(client, name)
    writer = Writer(client, name)
    for user in range(30):
        writer.put(user, game=user % 2, score=user, level=0)
    convergence.wait_converged(client, name, "ByGame", CONVERGE_TIMEOUT_S, writer.history)
    [parent] = index_partitions(cluster, name, "ByGame")
    node = cluster.node(parent["node"])
    node.stop()
    with pytest.MonkeyPatch.context() as environment:
        for variable, value in hold_environment(tmp_path, "recorded", machine=SPLIT).items():
            environment.setenv(variable, value)
        node.start()
    with KillAt(node, tmp_path, "recorded", machine=SPLIT) as killer:
        status, reply = admin(cluster, f"/admin/tables/{name}/partitions/{parent['id']}/split", {})
    assert killer.killed, "the node never held at the split's record"
    assert status == 503, reply
    assert node.process is not None and node.process.wait(NODE_EXIT_WAIT_S) == -9
    # Without the crash point (the node may hold the catalog too: read it once it is back),
    # it installs what the catalog recorded.
    node.start()
    recorded = index_partitions(cluster, name, "ByGame")
    assert [p["parent"] for p in recorded if p["state"] == "SERVING"] == [parent["id"]] * 2
    for user in range(20, 50):
        writer.put(user, game=user % 3, score=user, level=1)
    writer.delete(3)
    result = convergence.wait_converged(client, name, "ByGame", CONVERGE_TIMEOUT_S, writer.history)
    assert result.converged
    wait_settled(cluster, client, name, "ByGame")
