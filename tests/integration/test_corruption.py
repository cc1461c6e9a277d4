"""Damaged data on a node's disk reaches a client as an error naming the node and the partition,
never as items that silently went missing (a real cluster, real processes, boto3)."""

from __future__ import annotations

from pathlib import Path

import pytest
from botocore.exceptions import ClientError

from dynalab.cluster import LocalCluster
from tests.damage import damage_table_blocks
from tests.integration.conftest import create_active_table, dynamodb_client

ITEMS = 3000


def test_a_scan_over_damaged_data_fails_naming_node_and_partition(tmp_path: Path) -> None:
    with LocalCluster(tmp_path / "cluster", nodes=1, replicators=0) as cluster:
        client = dynamodb_client(cluster.router_url)
        name = "Damaged"
        create_active_table(client, name)
        for start in range(0, ITEMS, 25):
            client.batch_write_item(
                RequestItems={
                    name: [
                        {"PutRequest": {"Item": {"pk": {"S": f"k{i:05d}"}, "v": {"S": "x" * 100}}}}
                        for i in range(start, start + 25)
                    ]
                }
            )
        node = cluster.nodes[0]
        node.stop()  # A graceful stop flushes the node's memory tables into SST files.
        assert damage_table_blocks(node.data_dir), "the node flushed no large SST file"
        node.start()

        seen = 0
        start_key = None
        with pytest.raises(ClientError) as failure:
            while True:
                page = client.scan(
                    TableName=name, **({"ExclusiveStartKey": start_key} if start_key else {})
                )
                seen += page["Count"]
                start_key = page.get("LastEvaluatedKey")
                if start_key is None:
                    break
        error = failure.value.response["Error"]
        assert error["Code"] == "InternalServerError"
        assert failure.value.response["ResponseMetadata"]["HTTPStatusCode"] == 500
        assert str(node.data_dir) in error["Message"] and "is corrupt" in error["Message"]
        assert "reading partition" in error["Message"]
        assert seen < ITEMS
