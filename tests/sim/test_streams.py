"""DynamoDB Streams across splits and a move, in the seeded cluster: the router's Streams API reads
every shard through the change feed on the transport seam (`NodeTransport.feed()`).

A writer puts versions of a few keys while the table's partitions are split (a child split again)
and one is moved to another node; a reader follows every shard at the same time, parent first (a
child only once its parent's shard is drained), as the Kinesis adapter does, and a second reader
starts only once the writer is done. Requests and replies are lost and delayed on the network
(from the seed), so some writes have unknown outcomes and some reads fail and are asked again.
Both readers see every acknowledged change exactly once, in the order it was made per key, and
no change that was never made (`dynalab.checkers.check_stream`).

A failing seed prints the command that replays it (`dynalab.sim.cluster.run`).
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest

from core.errors import DynamoError
from dynalab.checkers import check_stream
from dynalab.sim.cluster import SimCluster, run, virtual_unix_time
from router import items, streams, tables
from rpc.local import Faults

SEEDS = list(range(1, 21))
KEYS = 12
WRITES = 70
PAGES_MAX = 100
ATTEMPTS_MAX = 100


async def retried(seed: int, call: Any) -> Any:
    for _ in range(ATTEMPTS_MAX):
        try:
            return await call()
        except DynamoError:
            await asyncio.sleep(0.05)
    raise AssertionError(f"seed {seed}: a request kept failing")


class ParentFirstReader:
    """Reads every shard of a stream through the router's handlers, a child only once its
    parent's shard is drained."""

    def __init__(self, cluster: SimCluster, arn: str, seed: int) -> None:
        self.router = cluster.routers[-1]
        self.arn = arn
        self.seed = seed
        self.parents: dict[str, str | None] = {}
        self.iterators: dict[str, str] = {}
        self.drained: set[str] = set()
        self.seen: dict[str, list[int]] = {}

    async def shards(self) -> list[dict[str, Any]]:
        listed: list[dict[str, Any]] = []
        request: dict[str, Any] = {"StreamArn": self.arn}
        for _ in range(PAGES_MAX):
            reply = await streams.describe_stream(self.router, dict(request))
            description = reply["StreamDescription"]
            listed.extend(description["Shards"])
            if "LastEvaluatedShardId" not in description:
                return listed
            request["ExclusiveStartShardId"] = description["LastEvaluatedShardId"]
        raise AssertionError(f"seed {self.seed}: DescribeStream never ended")

    async def poll(self) -> int:
        """One pass over the shards that may be read now; how many records it read (a request
        that fails leaves its shard for the next pass)."""
        try:
            for shard in await self.shards():
                self.parents.setdefault(shard["ShardId"], shard.get("ParentShardId"))
        except DynamoError:
            return 0
        read = 0
        for shard_id, parent in list(self.parents.items()):
            if shard_id in self.drained:
                continue
            if parent is not None and parent in self.parents and parent not in self.drained:
                continue  # Parent first.
            try:
                read += await self._read(shard_id)
            except DynamoError:
                continue
        return read

    async def _read(self, shard_id: str) -> int:
        if shard_id not in self.iterators:
            reply = await streams.get_shard_iterator(
                self.router,
                {"StreamArn": self.arn, "ShardId": shard_id, "ShardIteratorType": "TRIM_HORIZON"},
            )
            self.iterators[shard_id] = reply["ShardIterator"]
        page = await streams.get_records(self.router, {"ShardIterator": self.iterators[shard_id]})
        for record in page["Records"]:
            image = record["dynamodb"]["NewImage"]
            self.seen.setdefault(image["pk"]["S"], []).append(int(image["n"]["N"]))
        following = page.get("NextShardIterator")
        if following is None:
            self.drained.add(shard_id)
        else:
            self.iterators[shard_id] = following
        return len(page["Records"])

    def depth(self) -> int:
        def generations(shard_id: str) -> int:
            parent = self.parents.get(shard_id)
            return 0 if parent is None or parent not in self.parents else 1 + generations(parent)

        return max((generations(shard_id) for shard_id in self.parents), default=0)


async def create_streamed(cluster: SimCluster, name: str) -> str:
    await tables.create_table(
        cluster.routers[0],
        {
            "TableName": name,
            "KeySchema": [{"AttributeName": "pk", "KeyType": "HASH"}],
            "AttributeDefinitions": [{"AttributeName": "pk", "AttributeType": "S"}],
            "BillingMode": "PAY_PER_REQUEST",
            "StreamSpecification": {"StreamEnabled": True, "StreamViewType": "NEW_IMAGE"},
        },
    )
    described = await tables.describe_table(cluster.routers[0], {"TableName": name})
    return str(described["Table"]["LatestStreamArn"])


async def reshape(
    cluster: SimCluster,
    name: str,
    rng: random.Random,
    step: str,
    seed: int,
    splits: list[tuple[int, int]],
) -> None:
    """Split a serving partition where it halves, or move one to another node (the network's
    faults paused meanwhile: the point is the stream across them, not the drivers' retries).
    A split's span of virtual time, in milliseconds, is added to `splits`."""
    faults = cluster.network.faults
    cluster.faults(None)
    try:
        table = await cluster.routers[0].read_table(name)
        assert table is not None
        partition = rng.choice(table.partitions)
        if step == "split":
            # The fullest partition: one of a single item has no point to halve at.
            partition = max(
                table.partitions,
                key=lambda p: cluster.nodes[p.node].partitions[table.id, p.id].item_count,
            )
            splitter = cluster.splitters[partition.node]
            started_ms = round(virtual_unix_time() * 1000)
            await retried(seed, lambda: splitter.split(table.id, partition.id, None))
            splits.append((started_ms, round(virtual_unix_time() * 1000)))
        else:
            target = rng.choice([n for n in cluster.nodes if n != partition.node])
            await retried(seed, lambda: cluster.move(name, partition.id, target))
    finally:
        cluster.faults(faults)


@pytest.mark.parametrize("seed", SEEDS)
def test_a_stream_read_across_splits_and_a_move_sees_every_change_once_in_order(
    seed: int,
) -> None:
    async def scenario(cluster: SimCluster) -> None:
        rng = random.Random(f"streams/{seed}")
        name = "Streamed"
        arn = await create_streamed(cluster, name)
        reader = ParentFirstReader(cluster, arn, seed)
        cluster.faults(
            Faults(
                drop_request=rng.uniform(0, 0.05),
                drop_reply=rng.uniform(0, 0.05),
                delay=rng.uniform(0, 0.3),
                delay_seconds_max=0.01,
                timeout_seconds=0.05,
            )
        )
        steps = dict.fromkeys(rng.sample(range(10, WRITES), 3), "split")
        steps[rng.randrange(10, WRITES)] = "move"
        acknowledged: dict[str, list[int]] = {}
        unknown: dict[str, set[int]] = {}
        splits: list[tuple[int, int]] = []
        for number in range(WRITES):
            if number in steps:
                await reshape(cluster, name, rng, steps[number], seed, splits)
            key = f"k{rng.randrange(KEYS)}"
            item = {"pk": {"S": key}, "n": {"N": str(number)}}
            try:
                await items.put_item(cluster.routers[0], {"TableName": name, "Item": item})
                acknowledged.setdefault(key, []).append(number)
            except DynamoError:
                unknown.setdefault(key, set()).add(number)  # Perhaps applied, perhaps not.
            if number % 3 == 0:
                await reader.poll()
        cluster.faults(None)
        late = ParentFirstReader(cluster, arn, seed)
        made = sum(len(changes) for changes in acknowledged.values())
        for each in (reader, late):
            # Drain: until a pass reads nothing and every acknowledged change has been read (a
            # change missing for good then shows in the check).
            for _ in range(PAGES_MAX):
                read = await each.poll()
                if not read and sum(len(seen) for seen in each.seen.values()) >= made:
                    break
            problems = check_stream(acknowledged, each.seen, unknown)
            assert problems == [], f"seed {seed}: {problems[:5]}"
            # Every child's shard id carries the time its split made it, on the node's clock
            # (a millisecond past a parent made in the same one at most).
            children = [shard for shard, parent in each.parents.items() if parent is not None]
            assert len(children) == 2 * len(splits), f"seed {seed}"
            for shard in children:
                made_ms = int(shard.split("-")[1])
                assert any(start <= made_ms <= end + 1 for start, end in splits), (
                    f"seed {seed}: {shard} made outside every split, {splits}"
                )
        assert reader.depth() >= 1, f"seed {seed}: no shard has a parent"

    run(seed, scenario)
