"""The GSI replicator in the seeded cluster, through the transport seam: a global index converges
to its table.

The real replicator (`gsi_replicator.replicator.Replicator`: catalog polls, leases, followers of
each partition's change feed through `NodeTransport.feed()`, `index_apply`) runs beside the
routers, while a client writes, overwrites (moving items between index keys, and out of the
sparse index) and deletes items. Every seed draws its own faults on the network (requests and
replies lost, delays, duplicates, on data calls and feed batches alike), and when, during the
writes, the replicator is killed and restarted, and the base partition is split and a partition
moved to another node. Afterwards the index holds exactly the projection of the table: every entry
of every item with the index key, and no extra or stale one. With TTL on the table, the items the
nodes' sweepers delete leave the index too.

A failing seed prints the command that replays it (`dynalab.sim.cluster.run`).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
import pytest

from core.errors import DynamoError
from dynalab.sim.cluster import SimCluster, run, virtual_unix_time
from router import items, ttl
from rpc.local import Faults

SEEDS = list(range(1, 26))
KEYS = 30
WRITES = 90
GROUPS = ("a", "b", "c")
CONVERGE_SECONDS = 120.0  # Virtual: a restarted replicator waits out the dead one's leases.


def random_item(rng: random.Random, key: int) -> dict[str, Any]:
    """An item of key `key`: in one of the index's groups, or (one in five) without `g`, so out
    of the sparse index; padded now and then, so an overwrite changes a projected attribute."""
    item: dict[str, Any] = {"pk": {"S": f"k{key}"}, "n": {"N": str(rng.randrange(1000))}}
    if rng.random() < 0.8:
        item["g"] = {"S": rng.choice(GROUPS)}
    if rng.random() < 0.3:
        item["pad"] = {"S": "x" * rng.randrange(1, 100)}
    return item


async def retried(seed: int, call: Callable[[], Awaitable[Any]]) -> Any:
    """A client's request, sent again while it fails (its outcome unknown, a node unreachable):
    every write here is idempotent by its final state."""
    for _ in range(100):
        try:
            return await call()
        except DynamoError:
            await asyncio.sleep(0.05)
    raise AssertionError(f"seed {seed}: a request kept failing")


async def write(
    cluster: SimCluster,
    name: str,
    rng: random.Random,
    seed: int,
    make_item: Callable[[random.Random, int], dict[str, Any]] = random_item,
) -> None:
    """One client write: a put (new item or overwrite, made by `make_item`) or a delete, of a
    random key."""
    key = rng.randrange(KEYS)
    router = cluster.routers[rng.randrange(len(cluster.routers))]
    if rng.random() < 0.2:
        body = {"TableName": name, "Key": {"pk": {"S": f"k{key}"}}}
        await retried(seed, lambda: items.delete_item(router, dict(body)))
    else:
        body = {"TableName": name, "Item": make_item(rng, key)}
        await retried(seed, lambda: items.put_item(router, dict(body)))


def canonical(entries: list[dict[str, Any]]) -> list[bytes]:
    return sorted(orjson.dumps(entry, option=orjson.OPT_SORT_KEYS) for entry in entries)


async def index_converges(cluster: SimCluster, name: str, seed: int) -> None:
    """Wait until the index holds exactly the projection of the table (every item with the
    index key, whole: ALL), bounded in virtual time; fail naming what is missing or extra."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + CONVERGE_SECONDS
    while True:
        table = await retried(seed, lambda: cluster.scan_all(name, ConsistentRead=True))
        index = await retried(seed, lambda: cluster.scan_all(name, IndexName="byG"))
        expected = canonical([item for item in table if "g" in item])
        actual = canonical(index)
        if actual == expected:
            return
        if loop.time() > deadline:
            missing = sorted(set(expected) - set(actual))
            extra = sorted(set(actual) - set(expected))
            raise AssertionError(
                f"seed {seed}: the index did not converge: {len(missing)} missing "
                f"{missing[:3]}, {len(extra)} extra or stale {extra[:3]}, "
                f"{len(actual)} entries for {len(expected)} items"
            )
        await asyncio.sleep(0.5)


async def split_base(cluster: SimCluster, name: str, seed: int) -> None:
    """Split the table's fullest partition where it halves (one of a single item has no point to
    halve at), the faults paused: the point is the split under the replicator, not the
    splitter's own retries."""
    faults = cluster.network.faults
    cluster.faults(None)
    try:
        table = await cluster.routers[0].read_table(name)
        assert table is not None
        partition = max(
            table.partitions,
            key=lambda p: cluster.nodes[p.node].partitions[table.id, p.id].item_count,
        )
        splitter = cluster.splitters[partition.node]
        await retried(seed, lambda: splitter.split(table.id, partition.id, None))
    finally:
        cluster.faults(faults)


async def move_base(cluster: SimCluster, name: str, rng: random.Random, seed: int) -> None:
    """Move one of the table's partitions to another node (faults paused, as for the split)."""
    faults = cluster.network.faults
    cluster.faults(None)
    try:
        table = await cluster.routers[0].read_table(name)
        assert table is not None
        partition = rng.choice(table.partitions)
        target = rng.choice([n for n in cluster.nodes if n != partition.node])
        await retried(seed, lambda: cluster.move(name, partition.id, target))
    finally:
        cluster.faults(faults)


@pytest.mark.parametrize("seed", SEEDS)
def test_a_global_index_converges_through_faults_kills_a_split_and_a_move(seed: int) -> None:
    async def scenario(cluster: SimCluster) -> None:
        rng = random.Random(f"gsi/{seed}")
        name = "Indexed"
        await cluster.create_indexed(name)
        replicator = cluster.start_replicator().owner
        faults = Faults(
            drop_request=rng.uniform(0, 0.08),
            drop_reply=rng.uniform(0, 0.08),
            delay=rng.uniform(0, 0.3),
            duplicate=rng.uniform(0, 0.2),
            delay_seconds_max=0.01,
            timeout_seconds=0.05,
        )
        cluster.faults(faults)
        kill_at, restart_at = sorted(rng.sample(range(10, WRITES), 2))
        split_at = rng.randrange(20, WRITES - 20)
        move_at = rng.randrange(split_at + 1, WRITES)
        for number in range(WRITES):
            if number == kill_at:
                await cluster.kill_replicator(replicator)
            if number == restart_at:
                replicator = cluster.start_replicator().owner
            if number == split_at:
                await split_base(cluster, name, seed)
            if number == move_at:
                await move_base(cluster, name, rng, seed)
            await write(cluster, name, rng, seed)
            await asyncio.sleep(rng.uniform(0, 0.05))
        cluster.faults(None)
        await index_converges(cluster, name, seed)

    run(seed, scenario)


TTL_SEEDS = list(range(1, 9))


@pytest.mark.parametrize("seed", TTL_SEEDS)
def test_items_the_ttl_sweeper_deletes_leave_the_global_index(seed: int) -> None:
    """TTL with a global index: the nodes' sweepers delete the expired items (service deletions
    in the change feed) while the replicator, killed and restarted once, follows; the index ends
    without their entries, and with every item that has not expired."""

    async def scenario(cluster: SimCluster) -> None:
        rng = random.Random(f"gsi-ttl/{seed}")
        name = "Expiring"
        router = cluster.routers[0]
        await cluster.create_indexed(name)
        await ttl.update_time_to_live(
            router,
            {
                "TableName": name,
                "TimeToLiveSpecification": {"Enabled": True, "AttributeName": "expires"},
            },
        )
        replicator = cluster.start_replicator().owner
        start = virtual_unix_time()
        for key in range(KEYS):
            item = random_item(rng, key)
            if rng.random() < 0.7:  # Expiring within the run, or already past.
                item["expires"] = {"N": str(int(start + rng.uniform(-50, 20)))}
            await retried(
                seed, lambda item=item: items.put_item(router, {"TableName": name, "Item": item})
            )
        sweepers = [cluster.ttl_sweeper(node_id) for node_id in sorted(cluster.nodes)]
        cluster.faults(Faults(drop_request=0.03, drop_reply=0.03, delay=0.2, timeout_seconds=0.05))
        deleted = 0
        for round_number in range(20):
            if round_number == 5:
                await cluster.kill_replicator(replicator)
            if round_number == 10:
                replicator = cluster.start_replicator().owner
            for sweeper in sweepers:
                deleted += await sweeper.sweep()
            await asyncio.sleep(1.0)
        swept_at = virtual_unix_time() - 1.0
        cluster.faults(None)
        await index_converges(cluster, name, seed)
        table = await cluster.scan_all(name, ConsistentRead=True)
        expired = [i for i in table if "expires" in i and float(i["expires"]["N"]) < swept_at - 1]
        assert expired == [], f"seed {seed}: expired items were not deleted: {expired[:3]}"
        assert deleted > 0, f"seed {seed}: no item expired"

    run(seed, scenario)
