"""Back-pressure from a global index's own write capacity, in the seeded cluster on virtual time
with throughput enforced.

A provisioned table (1,000 WCU) has two global indexes: byG at 5 WCU, byH at 1,000. Writers put
items at about 60 a second each of three kinds: with a `g` (they change byG), with only an `h`
(byH alone), and with neither (no index). byG's partition soon has no write capacity: it refuses
the replicator's `index_apply`, the replicator notes that on the base partitions' nodes
(`core.index_pressure`), and those refuse the base writes that would change byG with
ProvisionedThroughputExceededException naming byG. Checked: exactly the writes of the first kind
are refused, every one of them naming byG alone; the writes of the other two kinds all pass; the
byG writes acknowledged stay near what byG can take in the run; and once the writers stop, both
indexes converge to their table.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

import orjson
import pytest

from core.errors import GSI_THROTTLED, ThroughputExceeded
from dynalab.sim.cluster import SimCluster, run
from router import items, tables
from storagenode.throughput import NodeThroughput

SEEDS = [1, 2, 3]
NAME = "Capacity"
INDEX_WCU = 5
RUN_SECONDS = 12.0
WRITE_INTERVAL_SECONDS = 1 / 60
CONVERGE_SECONDS = 120.0
KINDS = ("g", "h", "none")


async def create(cluster: SimCluster) -> None:
    def index(name: str, attribute: str, units: int) -> dict[str, Any]:
        return {
            "IndexName": name,
            "KeySchema": [{"AttributeName": attribute, "KeyType": "HASH"}],
            "Projection": {"ProjectionType": "KEYS_ONLY"},
            "ProvisionedThroughput": {"ReadCapacityUnits": 1000, "WriteCapacityUnits": units},
        }

    await tables.create_table(
        cluster.routers[0],
        {
            "TableName": NAME,
            "KeySchema": [{"AttributeName": "pk", "KeyType": "HASH"}],
            "AttributeDefinitions": [
                {"AttributeName": name, "AttributeType": "S"} for name in ("pk", "g", "h")
            ],
            "ProvisionedThroughput": {"ReadCapacityUnits": 1000, "WriteCapacityUnits": 1000},
            "GlobalSecondaryIndexes": [index("byG", "g", INDEX_WCU), index("byH", "h", 1000)],
        },
    )


def made(kind: str, number: int) -> dict[str, Any]:
    item: dict[str, Any] = {"pk": {"S": f"{kind}-{number}"}}
    if kind != "none":
        item[kind] = {"S": f"{kind}-value-{number % 7}"}
    return item


def canonical(entries: list[dict[str, Any]]) -> list[bytes]:
    return sorted(orjson.dumps(entry, option=orjson.OPT_SORT_KEYS) for entry in entries)


async def converges(cluster: SimCluster, index: str, attribute: str, seed: int) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + CONVERGE_SECONDS
    while True:
        table = await cluster.scan_all(NAME, ConsistentRead=True)
        entries = await cluster.scan_all(NAME, IndexName=index)
        expected = canonical(
            [{"pk": i["pk"], attribute: i[attribute]} for i in table if attribute in i]
        )
        if canonical(entries) == expected:
            return
        assert loop.time() < deadline, f"seed {seed}: {index} did not converge"
        await asyncio.sleep(0.5)


@pytest.mark.parametrize("seed", SEEDS)
def test_an_index_at_its_capacity_throttles_exactly_the_writes_that_change_it(seed: int) -> None:
    async def scenario(cluster: SimCluster) -> None:
        loop = asyncio.get_running_loop()
        for node in cluster.nodes.values():
            node.throughput = NodeThroughput(enforced=True, clock=loop.time, burst_seconds=1)
        await create(cluster)
        cluster.start_replicator()
        rng = random.Random(f"gsi-capacity/{seed}")
        acknowledged = dict.fromkeys(KINDS, 0)
        refused: dict[str, list[ThroughputExceeded]] = {kind: [] for kind in KINDS}
        stop = loop.time() + RUN_SECONDS

        async def writer(kind: str) -> None:
            number = 0
            while loop.time() < stop:
                number += 1
                router = cluster.routers[rng.randrange(len(cluster.routers))]
                body = {"TableName": NAME, "Item": made(kind, number)}
                try:
                    await items.put_item(router, body)
                    acknowledged[kind] += 1
                except ThroughputExceeded as error:
                    refused[kind].append(error)
                await asyncio.sleep(WRITE_INTERVAL_SECONDS * rng.uniform(0.5, 1.5))

        await asyncio.gather(*(writer(kind) for kind in KINDS))
        assert refused["h"] == [] and refused["none"] == [], f"seed {seed}: {refused}"
        assert refused["g"], f"seed {seed}: byG never throttled the base writes"
        for error in refused["g"]:
            assert error.message == GSI_THROTTLED
            assert [(r.reason, r.resource) for r in error.reasons] == [
                ("IndexWriteProvisionedThroughputExceeded", f"{NAME}/index/byG")
            ], f"seed {seed}"
        # byG takes INDEX_WCU writes of one unit a second, and its first second's bank: the
        # writes acknowledged are about what it can take (a few slip through between an apply
        # the index took and its next refusal), and it is kept busy, not starved.
        capacity = INDEX_WCU * (RUN_SECONDS + 1)
        assert 0.8 * capacity <= acknowledged["g"] <= 1.5 * capacity, f"seed {seed}: {acknowledged}"
        assert acknowledged["h"] > 0.8 * RUN_SECONDS / WRITE_INTERVAL_SECONDS, f"seed {seed}"
        await converges(cluster, "byG", "g", seed)
        await converges(cluster, "byH", "h", seed)

    run(seed, scenario)
