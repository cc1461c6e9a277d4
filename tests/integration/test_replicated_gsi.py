"""Global secondary indexes on a table whose partitions (and the index's) are replicated on three
nodes (real processes, the Raft transport over gRPC, a real GSI replicator, boto3): writers go on
while a node is killed with SIGKILL, and with that node still down the index converges to
exactly the table's items, every acknowledged write in it and no refused one; an index created
online on the replicated table, with another node killed as its backfill starts, converges too.
The killed nodes are never node-1, whose catalog (and the replicator's leases beside it) is not
replicated yet."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from dynalab.cluster import LocalCluster
from tests.integration.conftest import dynamodb_client, wait_active
from tests.integration.test_replication import Writers, kill_under_writes

GROUPS = 5
CONVERGE_SECONDS_MAX = 60.0


def _grouped(key: str, number: int) -> dict[str, Any]:
    return {"pk": {"S": key}, "g": {"S": f"g{number % GROUPS}"}, "n": {"N": str(number)}}


def _scan(client: Any, table: str, index: str | None = None) -> dict[str, str]:
    """pk -> g of every item of the table, or of its index."""
    found: dict[str, str] = {}
    extra = {} if index is None else {"IndexName": index}
    for page in client.get_paginator("scan").paginate(TableName=table, **extra):
        for item in page["Items"]:
            found[item["pk"]["S"]] = item["g"]["S"]
    return found


def _converged(client: Any, table: str, index: str) -> dict[str, str]:
    """The index's items once they are exactly the table's (bounded wait)."""
    deadline = time.monotonic() + CONVERGE_SECONDS_MAX
    while True:
        base = _scan(client, table)
        indexed = _scan(client, table, index)
        if indexed == base:
            return indexed
        missing, extra = base.keys() - indexed.keys(), indexed.keys() - base.keys()
        assert time.monotonic() < deadline, (
            f"{index} never converged: {len(missing)} missing, {len(extra)} extra"
        )
        time.sleep(0.5)


def test_a_replicated_tables_global_index_converges_with_a_node_down(tmp_path: Path) -> None:
    with LocalCluster(
        tmp_path / "cluster", nodes=3, routers=1, replicators=1, replication_factor=3
    ) as cluster:
        client = dynamodb_client(cluster.router_url)
        client.create_table(
            TableName="Indexed",
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
            AttributeDefinitions=[
                {"AttributeName": "pk", "AttributeType": "S"},
                {"AttributeName": "g", "AttributeType": "S"},
            ],
            BillingMode="PAY_PER_REQUEST",
            GlobalSecondaryIndexes=[
                {
                    "IndexName": "ByGroup",
                    "KeySchema": [{"AttributeName": "g", "KeyType": "HASH"}],
                    "Projection": {"ProjectionType": "ALL"},
                }
            ],
        )
        wait_active(client, "Indexed")
        second, third = cluster.nodes[1], cluster.nodes[2]
        with Writers([client], "Indexed", _grouped) as writers:
            time.sleep(2)
            kill_under_writes(writers, second)
            time.sleep(1)
        outcomes = dict(writers.outcomes)
        acknowledged = {key for key, outcome in outcomes.items() if outcome == "acknowledged"}
        refused = {key for key, outcome in outcomes.items() if outcome == "refused"}
        assert len(acknowledged) > 50
        indexed = _converged(client, "Indexed", "ByGroup")
        assert acknowledged <= indexed.keys(), "acknowledged writes missing from the index"
        assert not refused & indexed.keys(), "writes refused as not applied are in the index"
        for key in acknowledged:
            assert indexed[key] == _grouped(key, int(key.split("-")[1]))["g"]["S"]
        reply = client.query(
            TableName="Indexed",
            IndexName="ByGroup",
            KeyConditionExpression="g = :g",
            ExpressionAttributeValues={":g": {"S": "g0"}},
        )
        assert {item["pk"]["S"] for item in reply["Items"]} == {
            key for key, group in indexed.items() if group == "g0"
        }

        # An index created online: its partitions made on every replica's node (all up), its
        # backfill copying from the base partitions' leaders, a node killed as it starts.
        second.start()
        time.sleep(2)
        client.update_table(
            TableName="Indexed",
            AttributeDefinitions=[{"AttributeName": "n", "AttributeType": "N"}],
            GlobalSecondaryIndexUpdates=[
                {
                    "Create": {
                        "IndexName": "ByNumber",
                        "KeySchema": [{"AttributeName": "n", "KeyType": "HASH"}],
                        "Projection": {"ProjectionType": "KEYS_ONLY"},
                    }
                }
            ],
        )
        third.kill()
        deadline = time.monotonic() + CONVERGE_SECONDS_MAX
        while True:
            table = client.describe_table(TableName="Indexed")["Table"]
            (index,) = [i for i in table["GlobalSecondaryIndexes"] if i["IndexName"] == "ByNumber"]
            if index["IndexStatus"] == "ACTIVE":
                break
            assert time.monotonic() < deadline, f"ByNumber stayed {index['IndexStatus']}"
            time.sleep(0.5)
        numbered: set[str] = set()
        for page in client.get_paginator("scan").paginate(
            TableName="Indexed", IndexName="ByNumber"
        ):
            numbered.update(item["pk"]["S"] for item in page["Items"])
        assert numbered == set(_scan(client, "Indexed")), "the online index is not the table"
        third.start()
