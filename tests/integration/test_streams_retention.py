"""DynamoDB Streams' retention on real processes: records older than the retention are trimmed.

The routers of this module's cluster keep stream records for RETENTION_SECONDS instead of 24
hours (DYNALAB_STREAM_RETENTION_SECONDS), so a record expires during the test.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import boto3
import pytest

from dynalab.cluster import LocalCluster
from router.streams import TRIMMED
from tests.integration.conftest import DUMMY_CREDENTIALS, REGION, dynamodb_client, error_of
from tests.integration.test_streams import create_streamed, read_shard, stream_arn_of

RETENTION_SECONDS = 2.0


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
