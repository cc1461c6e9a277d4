"""Split for read heat in the seeded cluster, on virtual time, with throughput enforced.

Strongly consistent reads of 40 KB items (10 read units each) spread over many keys of one
partition keep it throttled at its 3,000 RCU ceiling: its node notes the keys of the reads it
throttles and splits the partition where they balance. Reads of one key of another partition keep
that one throttled too, and it never splits: two children would leave the key just as throttled.
"""

from __future__ import annotations

import asyncio
import logging

import pytest

from core import limits
from core.errors import ThroughputExceeded
from core.keycodec import encode_storage_key
from dynalab.sim.cluster import SimCluster, run
from router import items
from storagenode.throughput import NodeThroughput

SEEDS = [5]
PAD = "r" * 40_000  # 10 read units a strongly consistent GetItem.
READERS = 6
READ_INTERVAL_SECONDS = 0.015  # 6 readers: about 400 reads, 4,000 units a second, past 3,000.


def keys_in_quarter(quarter: int, count: int) -> list[str]:
    found: list[str] = []
    number = 0
    while len(found) < count:
        value = f"k{number}"
        if encode_storage_key({"S": value}, None)[0] >> 6 == quarter:
            found.append(value)
        number += 1
    return found


@pytest.mark.parametrize("seed", SEEDS)
def test_reads_spread_over_a_partition_split_it_and_reads_of_one_key_do_not(
    seed: int, caplog: pytest.LogCaptureFixture
) -> None:
    async def scenario(cluster: SimCluster) -> None:
        loop = asyncio.get_running_loop()
        for node in cluster.nodes.values():
            node.throughput = NodeThroughput(enforced=True, clock=loop.time, burst_seconds=1)
        for splitter in cluster.splitters.values():
            splitter.clock = loop.time
        await cluster.create_table("ReadHeat", sort=False)
        spread = keys_in_quarter(0, 40)
        hot = keys_in_quarter(2, 1)[0]
        for key in [*spread, hot]:
            await cluster.put("ReadHeat", {"pk": {"S": key}, "v": {"S": PAD}})
            await asyncio.sleep(0.05)  # 40 write units each: 800 a second, within 1,000.
        table = await cluster.routers[0].read_table("ReadHeat")
        assert table is not None
        spread_parent = next(p for p in table.partitions if p.id.endswith("-0"))
        hot_parent = next(p for p in table.partitions if p.id.endswith("-2"))
        stop = asyncio.Event()
        served = {"spread": 0, "hot": 0}
        throttled = {"spread": 0, "hot": 0}

        async def reader(number: int, keys: list[str], kind: str) -> None:
            count = number
            while not stop.is_set():
                request = {
                    "TableName": "ReadHeat",
                    "Key": {"pk": {"S": keys[count % len(keys)]}},
                    "ConsistentRead": True,
                }
                count += 7
                try:
                    await items.get_item(cluster.routers[count % 2], request)
                    served[kind] += 1
                except ThroughputExceeded:
                    throttled[kind] += 1
                await asyncio.sleep(READ_INTERVAL_SECONDS)

        async def checking() -> None:
            while not stop.is_set():
                for splitter in cluster.splitters.values():
                    await splitter.split_hot()
                await asyncio.sleep(limits.SPLIT_CHECK_SECONDS)

        readers = [reader(n, spread, "spread") for n in range(READERS)]
        readers += [reader(n, [hot], "hot") for n in range(READERS)]
        tasks = [asyncio.ensure_future(task) for task in (*readers, checking())]
        await asyncio.sleep(2.5 * limits.SPLIT_HEAT_WINDOW_SECONDS)
        stop.set()
        await asyncio.gather(*tasks)
        after = await cluster.routers[0].read_table("ReadHeat")
        assert after is not None
        children = [p for p in after.partitions if p.parent == spread_parent.id]
        assert children, f"seed {seed}: the spread partition did not split ({throttled})"
        assert throttled["spread"] > 0 and throttled["hot"] > 0, f"seed {seed}"
        assert any(p.id == hot_parent.id for p in after.partitions), f"seed {seed}: hot split"
        assert not any(p.parent == hot_parent.id for p in after.partitions), f"seed {seed}"
        # Each child holds some of the keys the reads went to.
        held = {
            child.id: [k for k in spread if child.holds(encode_storage_key({"S": k}, None))]
            for child in children
        }
        assert all(held.values()), f"seed {seed}: {held}"

    with caplog.at_level(logging.INFO, logger="storagenode.split"):
        run(seed, scenario)
    assert "throttled at its read ceiling: splitting for heat" in caplog.text
    assert "read ceiling, but one key carries its load" in caplog.text
