"""A global index with a multi-attribute key in the seeded cluster: it converges to its table
through the GSI sim test's faults (requests and replies lost, delays, duplicates, the replicator
killed and restarted, the base partition split and one moved) and a split of its own fullest
partition (the node finds item collections by every partition key attribute), and a Query of
every partition of the index, fixing a sort key prefix and conditioning the next attribute,
reads exactly the entries the table's items project, in key order.

The index `byGH` is keyed by two partition key attributes (g: S, h: N) and two sort key attributes
(r: S, n: N), as DynamoDB allows since November 2025; an item lacking any of the four is not in
it. The setup and faults are `tests.sim.test_gsi`'s.

A failing seed prints the command that replays it (`dynalab.sim.cluster.run`).
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest

from core.catalog import PartitionDef
from dynalab.sim.cluster import SimCluster, run
from router import queries, tables
from rpc.local import Faults
from tests.sim.test_gsi import canonical, move_base, retried, split_base, write

SEEDS = list(range(1, 13))
WRITES = 90
GROUPS = ("a", "b")
KEY_ATTRIBUTES = ("g", "h", "r", "n")
CONVERGE_SECONDS = 120.0  # Virtual: a restarted replicator waits out the dead one's leases.


async def create_indexed(cluster: SimCluster, name: str) -> None:
    """A table keyed by pk with a global index byGH (g, h | r, n) projecting ALL."""
    types = {"pk": "S", "g": "S", "h": "N", "r": "S", "n": "N"}
    await tables.create_table(
        cluster.routers[0],
        {
            "TableName": name,
            "KeySchema": [{"AttributeName": "pk", "KeyType": "HASH"}],
            "AttributeDefinitions": [
                {"AttributeName": attribute, "AttributeType": kind}
                for attribute, kind in types.items()
            ],
            "BillingMode": "PAY_PER_REQUEST",
            "GlobalSecondaryIndexes": [
                {
                    "IndexName": "byGH",
                    "KeySchema": [
                        {"AttributeName": "g", "KeyType": "HASH"},
                        {"AttributeName": "h", "KeyType": "HASH"},
                        {"AttributeName": "r", "KeyType": "RANGE"},
                        {"AttributeName": "n", "KeyType": "RANGE"},
                    ],
                    "Projection": {"ProjectionType": "ALL"},
                }
            ],
        },
    )


def random_item(rng: random.Random, key: int) -> dict[str, Any]:
    """An item of key `key`, each index key attribute left out now and then (the item is then
    out of the sparse index), padded now and then so an overwrite changes a projected one."""
    item: dict[str, Any] = {"pk": {"S": f"k{key}"}}
    values = {
        "g": {"S": rng.choice(GROUPS)},
        "h": {"N": str(rng.randrange(2))},
        "r": {"S": rng.choice(("x", "y"))},
        "n": {"N": str(rng.randrange(-50, 50))},
    }
    for attribute, value in values.items():
        if rng.random() < 0.92:
            item[attribute] = value
    if rng.random() < 0.3:
        item["pad"] = {"S": "x" * rng.randrange(1, 100)}
    return item


async def split_index(cluster: SimCluster, name: str, seed: int) -> None:
    """Split the index's fullest partition where it halves, the faults paused (as
    `split_base` does), if it holds enough entries to halve."""
    faults = cluster.network.faults
    cluster.faults(None)
    try:
        table = await cluster.routers[0].read_table(name)
        assert table is not None
        (index,) = table.indexes
        index_id = index.table_id
        assert index_id is not None

        def held(partition: PartitionDef) -> int:
            return cluster.nodes[partition.node].partitions[index_id, partition.id].item_count

        partition = max(index.partitions, key=held)
        if held(partition) >= 4:
            splitter = cluster.splitters[partition.node]
            await retried(seed, lambda: splitter.split(index_id, partition.id, None))
    finally:
        cluster.faults(faults)


def in_index(item: dict[str, Any]) -> bool:
    return all(attribute in item for attribute in KEY_ATTRIBUTES)


async def index_converges(cluster: SimCluster, name: str, seed: int) -> list[dict[str, Any]]:
    """Wait until the index holds exactly the projection of the table, bounded in virtual time;
    the table's items then."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + CONVERGE_SECONDS
    while True:
        table = await retried(seed, lambda: cluster.scan_all(name, ConsistentRead=True))
        index = await retried(seed, lambda: cluster.scan_all(name, IndexName="byGH"))
        expected = canonical([item for item in table if in_index(item)])
        actual = canonical(index)
        if actual == expected:
            return list(table)
        if loop.time() > deadline:
            missing = sorted(set(expected) - set(actual))
            extra = sorted(set(actual) - set(expected))
            raise AssertionError(
                f"seed {seed}: the index did not converge: {len(missing)} missing "
                f"{missing[:3]}, {len(extra)} extra or stale {extra[:3]}"
            )
        await asyncio.sleep(0.5)


async def queries_read_the_model(
    cluster: SimCluster, name: str, table: list[dict[str, Any]], seed: int
) -> None:
    """Every index partition (g, h), with r fixed and n over a bound, read a page of two at a
    time both ways: exactly the model's entries in (r, n, pk) order."""
    for group in GROUPS:
        for h in range(2):
            for r in ("x", "y"):
                members = [
                    item
                    for item in table
                    if in_index(item)
                    and (item["g"]["S"], item["h"]["N"], item["r"]["S"]) == (group, str(h), r)
                    and int(item["n"]["N"]) >= -10
                ]
                members.sort(key=lambda item: (int(item["n"]["N"]), item["pk"]["S"]))
                for forward in (True, False):
                    request = {
                        "TableName": name,
                        "IndexName": "byGH",
                        "KeyConditionExpression": "g = :g AND h = :h AND r = :r AND n >= :n",
                        "ExpressionAttributeValues": {
                            ":g": {"S": group},
                            ":h": {"N": str(h)},
                            ":r": {"S": r},
                            ":n": {"N": "-10"},
                        },
                        "ScanIndexForward": forward,
                        "Limit": 2,
                    }
                    read = await retried(
                        seed, lambda request=request: cluster.read_all(queries.query, request)
                    )
                    want = members if forward else members[::-1]
                    assert read == want, f"seed {seed}: {group}/{h}/{r} read {read} != {want}"


@pytest.mark.parametrize("seed", SEEDS)
def test_a_multi_attribute_index_converges_and_queries_read_it_in_order(seed: int) -> None:
    async def scenario(cluster: SimCluster) -> None:
        rng = random.Random(f"gsi-multi/{seed}")
        name = "MultiIndexed"
        await create_indexed(cluster, name)
        replicator = cluster.start_replicator().owner
        cluster.faults(
            Faults(
                drop_request=rng.uniform(0, 0.08),
                drop_reply=rng.uniform(0, 0.08),
                delay=rng.uniform(0, 0.3),
                duplicate=rng.uniform(0, 0.2),
                delay_seconds_max=0.01,
                timeout_seconds=0.05,
            )
        )
        kill_at, restart_at = sorted(rng.sample(range(10, WRITES), 2))
        split_at = rng.randrange(20, WRITES - 20)
        move_at = rng.randrange(split_at + 1, WRITES)
        index_split_at = rng.randrange(WRITES // 2, WRITES)
        for number in range(WRITES):
            if number == kill_at:
                await cluster.kill_replicator(replicator)
            if number == restart_at:
                replicator = cluster.start_replicator().owner
            if number == split_at:
                await split_base(cluster, name, seed)
            if number == move_at:
                await move_base(cluster, name, rng, seed)
            if number == index_split_at:
                await split_index(cluster, name, seed)
            await write(cluster, name, rng, seed, random_item)
            await asyncio.sleep(rng.uniform(0, 0.05))
        cluster.faults(None)
        table = await index_converges(cluster, name, seed)
        await queries_read_the_model(cluster, name, table, seed)

    run(seed, scenario)
