"""DynamoDB Streams across real splits: a 2-node cluster whose nodes split partitions past 2 KB.

A writer puts items while the nodes split the table's partitions two levels deep and more; a
reader follows every shard at the same time, parent first (a child only once its parent's shard is
drained), as the Kinesis adapter does, and every DescribeStream listing is in lexical shard id
order, which is creation order, each parent before its children. The stream's consumer is
registered on each child in the node's split batch, and a retired partition stays a shard while the
stream holds its log, so the reader sees every acknowledged change exactly once, in per-item order
(`check_stream`), and so does a reader that starts only after the writer is done.
"""

from __future__ import annotations

import threading
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import boto3
import orjson
import pytest

from dynalab.checkers import check_stream
from dynalab.cluster import LocalCluster
from tests.integration.conftest import DUMMY_CREDENTIALS, REGION, dynamodb_client
from tests.integration.test_streams import PAGES_MAX, create_streamed, stream_arn_of

SPLIT_BYTES = 2048
KEYS = 120
ROUNDS = 2
PAD = "x" * 200  # About 24 KB of items over 4 partitions of at most 2 KB: two levels of splits.
WRITER_SECONDS_MAX = 300.0
DRAIN_SECONDS_MAX = 60.0
SPLIT_WAIT_SECONDS = 60.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with pytest.MonkeyPatch.context() as environment:
        environment.setenv("DYNALAB_THROTTLING", "off")
        directory = tmp_path_factory.mktemp("streams-splits")
        with LocalCluster(directory, nodes=2, routers=1, split_bytes=SPLIT_BYTES) as running:
            yield running


def partition_sizes(cluster: LocalCluster, name: str) -> list[int | None]:
    """The serving partitions' sizes in bytes, as the admin listing gives them (None: the node
    did not answer)."""
    url = f"{cluster.router_url}/admin/tables/{name}/partitions"
    with urllib.request.urlopen(url, timeout=60) as reply:
        listing = orjson.loads(reply.read())
    return [p["size_bytes"] for p in listing["partitions"] if p["state"] == "SERVING"]


class ParentFirstReader:
    """Reads every shard of a stream, a child only once its parent's shard is drained."""

    def __init__(self, streams: Any, arn: str) -> None:
        self.streams = streams
        self.arn = arn
        self.parents: dict[str, str | None] = {}  # Every shard ever listed, with its parent.
        self.iterators: dict[str, str] = {}
        self.drained: set[str] = set()
        self.seen: dict[str, list[int]] = {}

    def shards(self) -> list[dict[str, Any]]:
        listed: list[dict[str, Any]] = []
        request: dict[str, Any] = {"StreamArn": self.arn}
        for _ in range(PAGES_MAX):
            description = self.streams.describe_stream(**request)["StreamDescription"]
            listed.extend(description["Shards"])
            if "LastEvaluatedShardId" not in description:
                # The shards in lexical order, which is creation order: every parent before
                # its children (the Kinesis adapter for DynamoDB Streams relies on both).
                ids = [shard["ShardId"] for shard in listed]
                assert ids == sorted(ids), ids
                for shard in listed:
                    parent = shard.get("ParentShardId")
                    assert parent is None or parent < shard["ShardId"], shard
                return listed
            request["ExclusiveStartShardId"] = description["LastEvaluatedShardId"]
        raise AssertionError(f"DescribeStream still had shards after {PAGES_MAX} pages")

    def poll(self) -> int:
        """One pass over the shards that may be read now; how many records it read."""
        for shard in self.shards():
            self.parents.setdefault(shard["ShardId"], shard.get("ParentShardId"))
        read = 0
        for shard_id, parent in list(self.parents.items()):
            if shard_id in self.drained:
                continue
            if parent is not None and parent in self.parents and parent not in self.drained:
                continue  # Parent first.
            if shard_id not in self.iterators:
                self.iterators[shard_id] = self.streams.get_shard_iterator(
                    StreamArn=self.arn, ShardId=shard_id, ShardIteratorType="TRIM_HORIZON"
                )["ShardIterator"]
            page = self.streams.get_records(ShardIterator=self.iterators[shard_id])
            for record in page["Records"]:
                image = record["dynamodb"]["NewImage"]
                self.seen.setdefault(image["pk"]["S"], []).append(int(image["n"]["N"]))
            read += len(page["Records"])
            following = page.get("NextShardIterator")
            if following is None:
                self.drained.add(shard_id)
            else:
                self.iterators[shard_id] = following
        return read

    def depth(self) -> int:
        """How many generations the shards listed span below the first."""

        def generations(shard_id: str) -> int:
            parent = self.parents.get(shard_id)
            return 0 if parent is None or parent not in self.parents else 1 + generations(parent)

        return max((generations(shard_id) for shard_id in self.parents), default=0)


def test_a_reader_follows_real_splits_parent_first_and_sees_every_change_once(
    cluster: LocalCluster,
) -> None:
    dynamodb = dynamodb_client(cluster.router_url)
    session = boto3.session.Session(region_name=REGION, **DUMMY_CREDENTIALS)
    streams: Any = session.client("dynamodbstreams", endpoint_url=cluster.router_url)
    name = "SplitStream"
    create_streamed(dynamodb, name, "NEW_IMAGE")
    arn = stream_arn_of(dynamodb, name)
    acknowledged: dict[str, list[int]] = {}
    failures: list[BaseException] = []

    def write() -> None:
        try:
            for number in range(KEYS * ROUNDS):
                key = f"k{number % KEYS:03d}"
                item = {"pk": {"S": key}, "n": {"N": str(number)}, "pad": {"S": PAD}}
                dynamodb.put_item(TableName=name, Item=item)
                acknowledged.setdefault(key, []).append(number)
        except BaseException as error:
            failures.append(error)

    reader = ParentFirstReader(streams, arn)
    writer = threading.Thread(target=write)
    writer.start()
    deadline = time.monotonic() + WRITER_SECONDS_MAX
    while writer.is_alive():
        reader.poll()
        assert time.monotonic() < deadline, "the writer did not finish"
        time.sleep(0.05)
    writer.join(timeout=WRITER_SECONDS_MAX)
    assert not failures, failures
    # The nodes bring every partition under the split size (two levels down), the reader on.
    deadline = time.monotonic() + SPLIT_WAIT_SECONDS
    while any(size is None or size > SPLIT_BYTES for size in partition_sizes(cluster, name)):
        reader.poll()
        assert time.monotonic() < deadline, "partitions stayed past the split size"
        time.sleep(0.2)
    # A second reader starts only now, far behind: the first partitions have been retired for
    # a while and are no serving partition's parent any more, yet it still reads them first.
    late = ParentFirstReader(streams, arn)
    for each in (reader, late):
        # Drain: until a pass reads nothing and all is seen (splits may still come).
        deadline = time.monotonic() + DRAIN_SECONDS_MAX
        while each.poll() or sum(len(v) for v in each.seen.values()) < KEYS * ROUNDS:
            assert time.monotonic() < deadline, "the reader never caught up"
        assert each.depth() >= 2, f"the table split only {each.depth()} level(s) deep"
        assert check_stream(acknowledged, each.seen) == []
