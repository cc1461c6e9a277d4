"""A DynamoDB stream on a table whose partitions are replicated on three nodes (real processes,
the Raft transport over gRPC, boto3's DynamoDB and DynamoDB Streams clients): writers go on while
a node is killed with SIGKILL, and the stream, read while a node is down (first one, then
another; not the catalog's), holds every acknowledged write once, in the order of its shard's
sequence numbers, and no write refused as not applied."""

from __future__ import annotations

import time
import urllib.request
from pathlib import Path
from typing import Any

import boto3
import orjson

from dynalab.cluster import LocalCluster
from tests.integration.conftest import DUMMY_CREDENTIALS, REGION, dynamodb_client, wait_active
from tests.integration.test_replication import HTTP_TIMEOUT_S, Writers, kill_under_writes

PAGES_MAX = 500


def _stream_table(client: Any, name: str) -> str:
    client.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
        StreamSpecification={"StreamEnabled": True, "StreamViewType": "NEW_IMAGE"},
    )
    return str(wait_active(client, name)["LatestStreamArn"])


def _stream_keys(streams: Any, arn: str) -> list[str]:
    """The key of every record of every shard, read from TRIM_HORIZON until caught up (each
    shard's sequence numbers increasing)."""
    keys: list[str] = []
    shards = streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"]
    for shard in shards:
        iterator = streams.get_shard_iterator(
            StreamArn=arn, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON"
        )["ShardIterator"]
        last = 0
        for _ in range(PAGES_MAX):
            page = streams.get_records(ShardIterator=iterator)
            for record in page["Records"]:
                sequence = int(record["dynamodb"]["SequenceNumber"])
                assert sequence > last, f"shard {shard['ShardId']} went back to {sequence}"
                last = sequence
                keys.append(record["dynamodb"]["Keys"]["pk"]["S"])
            iterator = page.get("NextShardIterator")
            if not page["Records"] or iterator is None:
                break
    return keys


def test_a_replicated_tables_stream_holds_every_acknowledged_write_through_kills(
    tmp_path: Path,
) -> None:
    with LocalCluster(
        tmp_path / "cluster", nodes=3, routers=1, replicators=0, replication_factor=3
    ) as cluster:
        client = dynamodb_client(cluster.router_url)
        session = boto3.session.Session(region_name=REGION, **DUMMY_CREDENTIALS)
        streams = session.client("dynamodbstreams", endpoint_url=cluster.router_url)
        arn = _stream_table(client, "Streamed")
        url = f"{cluster.router_url}/admin/tables/Streamed/partitions"
        with urllib.request.urlopen(url, timeout=HTTP_TIMEOUT_S) as reply:
            listing = orjson.loads(reply.read())
        replicas = [len(p["replicas"]) for p in listing["partitions"] if p["state"] == "SERVING"]
        assert replicas and set(replicas) == {3}, f"the table is not replicated: {listing}"
        # Not node-1, which holds the catalog (not replicated yet), which DescribeStream reads.
        first, second = cluster.nodes[1], cluster.nodes[2]
        with Writers([client], "Streamed") as writers:
            time.sleep(2)
            kill_under_writes(writers, first)
            time.sleep(1)
        outcomes = dict(writers.outcomes)
        acknowledged = {key for key, outcome in outcomes.items() if outcome == "acknowledged"}
        refused = {key for key, outcome in outcomes.items() if outcome == "refused"}
        assert len(acknowledged) > 50

        def check() -> None:
            keys = _stream_keys(streams, arn)
            assert len(keys) == len(set(keys)), "a write appears twice in the stream"
            assert acknowledged <= set(keys), "acknowledged writes missing from the stream"
            assert not refused & set(keys), "writes refused as not applied are in the stream"

        check()  # With the first node down: its partitions' feeds at their new leaders.
        first.start()
        time.sleep(2)
        second.kill()
        check()  # With another node down, the first back.
        second.start()
