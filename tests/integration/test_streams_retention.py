"""DynamoDB Streams' retention on real processes: records older than the retention are trimmed.

The routers of this module's cluster keep stream records for RETENTION_SECONDS instead of 24
hours (DYNALAB_STREAM_RETENTION_SECONDS), so a record expires during the test.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from typing import Any

import boto3
import pytest

from core import catalog, keycodec
from core.errors import ResourceNotFound
from dynalab.cluster import LocalCluster
from router.context import RouterContext
from router.streams import TRIMMED
from rpc import ops
from tests.integration.conftest import DUMMY_CREDENTIALS, REGION, dynamodb_client, error_of
from tests.integration.test_streams import (
    _read_table,
    create_streamed,
    read_shard,
    split_partition,
    stream_arn_of,
)

RETENTION_SECONDS = 2.0
LET_GO_WAIT_S = 20.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with pytest.MonkeyPatch.context() as environment:
        environment.setenv("DYNALAB_THROTTLING", "off")
        environment.setenv("DYNALAB_STREAM_RETENTION_SECONDS", str(RETENTION_SECONDS))
        directory = tmp_path_factory.mktemp("streams-retention")
        with LocalCluster(directory, nodes=1, routers=1) as running:
            yield running


def test_records_past_the_retention_are_trimmed(
    cluster: LocalCluster, table_name: Callable[[], str]
) -> None:
    dynamodb = dynamodb_client(cluster.router_url)
    session = boto3.session.Session(region_name=REGION, **DUMMY_CREDENTIALS)
    streams: Any = session.client("dynamodbstreams", endpoint_url=cluster.router_url)
    name = table_name()
    create_streamed(dynamodb, name, "KEYS_ONLY")
    arn = stream_arn_of(dynamodb, name)
    dynamodb.put_item(TableName=name, Item={"pk": {"S": "old"}})
    shards = streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"]
    (shard_id, (old,)) = next(
        (shard["ShardId"], records)
        for shard in shards
        if (records := read_shard(streams, arn, shard["ShardId"]))
    )
    early = streams.get_shard_iterator(
        StreamArn=arn, ShardId=shard_id, ShardIteratorType="TRIM_HORIZON"
    )["ShardIterator"]
    time.sleep(RETENTION_SECONDS + 0.5)
    dynamodb.put_item(TableName=name, Item={"pk": {"S": "new"}})
    # An iterator handed out before the record expired cannot read it any more.
    assert error_of(lambda: streams.get_records(ShardIterator=early)) == (
        400,
        "TrimmedDataAccessException",
        TRIMMED,
    )
    # TRIM_HORIZON now starts after it, and a position before it is refused.
    keys = [r["dynamodb"]["Keys"] for r in read_shard(streams, arn, shard_id)]
    assert {"pk": {"S": "old"}} not in keys
    number = old["dynamodb"]["SequenceNumber"]
    assert error_of(
        lambda: streams.get_shard_iterator(
            StreamArn=arn,
            ShardId=shard_id,
            ShardIteratorType="AT_SEQUENCE_NUMBER",
            SequenceNumber=number,
        )
    ) == (400, "TrimmedDataAccessException", TRIMMED)


def test_a_disabled_stream_is_let_go_after_the_retention(
    cluster: LocalCluster, table_name: Callable[[], str]
) -> None:
    """Read while retained; then no longer listed or described, its consumers unregistered on
    the nodes by the routers' reconciler, and the catalog forgets its shards."""
    dynamodb = dynamodb_client(cluster.router_url)
    session = boto3.session.Session(region_name=REGION, **DUMMY_CREDENTIALS)
    streams: Any = session.client("dynamodbstreams", endpoint_url=cluster.router_url)
    name = table_name()
    create_streamed(dynamodb, name, "KEYS_ONLY")
    arn = stream_arn_of(dynamodb, name)
    dynamodb.put_item(TableName=name, Item={"pk": {"S": "kept"}})
    dynamodb.update_table(TableName=name, StreamSpecification={"StreamEnabled": False})
    dynamodb.update_table(
        TableName=name, StreamSpecification={"StreamEnabled": True, "StreamViewType": "KEYS_ONLY"}
    )
    assert arn in [s["StreamArn"] for s in streams.list_streams(TableName=name)["Streams"]]
    before = asyncio.run(_read_table(cluster, name))
    (old,) = before.previous_streams
    time.sleep(RETENTION_SECONDS + 0.5)
    assert arn not in [s["StreamArn"] for s in streams.list_streams(TableName=name)["Streams"]]
    assert error_of(lambda: streams.describe_stream(StreamArn=arn)) == (
        400,
        "ResourceNotFoundException",
        f"Requested resource not found: Stream: {arn} not found",
    )
    deadline = time.monotonic() + LET_GO_WAIT_S
    while asyncio.run(_read_table(cluster, name)).previous_streams:
        assert time.monotonic() < deadline, "the expired stream was never dropped"
        time.sleep(0.2)
    for partition in before.partitions:
        assert asyncio.run(_consumer_on(cluster, before.id, partition, old.consumer)) is False


def test_the_retention_advances_with_no_reader(
    cluster: LocalCluster, table_name: Callable[[], str]
) -> None:
    """No Streams call at all: the node itself moves the stream's consumer past expired records
    (`storagenode.stream_retention`), so the log does not hold them."""
    dynamodb = dynamodb_client(cluster.router_url)
    name = table_name()
    create_streamed(dynamodb, name, "KEYS_ONLY")
    dynamodb.put_item(TableName=name, Item={"pk": {"S": "unread"}})
    table = asyncio.run(_read_table(cluster, name))
    assert table.stream is not None
    consumer = table.stream.consumer
    deadline = time.monotonic() + LET_GO_WAIT_S
    while True:
        positions = [
            asyncio.run(_checkpoint(cluster, table.id, p, consumer)) for p in table.partitions
        ]
        if all(p["seq"] == p["last_seq"] for p in positions):
            break
        assert time.monotonic() < deadline, f"the stream's consumers never moved: {positions}"
        time.sleep(0.2)
    assert sorted(p["last_seq"] for p in positions)[-1] == 1  # The write was passed...
    assert all(p["first_seq"] == p["last_seq"] + 1 for p in positions)  # ...and trimmed.


def test_a_retired_shard_leaves_the_lineage_once_its_log_expired(
    cluster: LocalCluster, table_name: Callable[[], str]
) -> None:
    """Split a partition and both its children: the first parent stays in the catalog as the
    stream's shard while its log is held, and the routers drop it once the node let the log go
    (every record, then END, past the retention)."""
    dynamodb = dynamodb_client(cluster.router_url)
    name = table_name()
    create_streamed(dynamodb, name, "KEYS_ONLY")
    table = asyncio.run(_read_table(cluster, name))
    first = table.partitions[0]
    assert first.start == "" and first.end is not None
    middle = (int(first.end, 16) // 2).to_bytes(8, "big")
    quarter = (int(first.end, 16) // 4).to_bytes(8, "big")
    three_quarters = (int(first.end, 16) * 3 // 4).to_bytes(8, "big")
    item = next(
        {"pk": {"S": f"p{number}"}}
        for number in range(10_000)
        if first.holds(keycodec.encode_storage_key({"S": f"p{number}"}, None))
    )
    dynamodb.put_item(TableName=name, Item=item)
    split_partition(cluster, name, middle)
    split_partition(cluster, name, quarter)
    split_partition(cluster, name, three_quarters)
    split = asyncio.run(_read_table(cluster, name))
    assert first.id in [p.id for p in split.retired]
    assert all(p.parent != first.id for p in split.partitions)
    deadline = time.monotonic() + LET_GO_WAIT_S
    while first.id in [p.id for p in asyncio.run(_read_table(cluster, name)).retired]:
        assert time.monotonic() < deadline, "the expired parent stayed in the lineage"
        time.sleep(0.5)


async def _checkpoint(
    cluster: LocalCluster, table_id: str, partition: catalog.PartitionDef, consumer: str
) -> dict[str, Any]:
    """The consumer's position on `partition` ({seq, first_seq, last_seq}), unchanged: a
    checkpoint at 0 never moves a consumer back."""
    ctx = RouterContext({node.node_id: node.address for node in cluster.nodes}, "test")
    try:
        return await ctx.feed_call(
            partition, ops.CHECKPOINT, table_id, ops.CheckpointPayload(consumer, 0).to_json()
        )
    finally:
        await ctx.close()


async def _consumer_on(
    cluster: LocalCluster, table_id: str, partition: catalog.PartitionDef, consumer: str
) -> bool:
    """Whether `consumer` is registered on `partition` (a checkpoint of a missing one fails)."""
    ctx = RouterContext({node.node_id: node.address for node in cluster.nodes}, "test")
    try:
        await ctx.feed_call(
            partition, ops.CHECKPOINT, table_id, ops.CheckpointPayload(consumer, 0).to_json()
        )
        return True
    except ResourceNotFound:
        return False
    finally:
        await ctx.close()
