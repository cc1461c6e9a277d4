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

Two races of the replicator with a base partition's move (issue 31) are driven at their exact
points, an online index's copy held after its first page: a follower that began before the
partition moved and split where it moved to must drain the parent there before its children;
and a copy must not begin on a registration the move loses (made on the source after its
drain).

A failing seed prints the command that replays it (`dynalab.sim.cluster.run`).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
import pytest

from core import gsi, limits
from core.catalog import IndexStatus
from core.errors import DynamoError
from core.machines.backfill import BackfillRecord
from dynalab.sim.cluster import SimCluster, run, virtual_unix_time
from gsi_replicator.replicator import Replicator
from router import items, tables, ttl
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


MOVE_RACE_SEEDS = list(range(1, 6))


async def create_filled(cluster: SimCluster, name: str, rng: random.Random, seed: int) -> None:
    """A table keyed by pk alone, without indexes, holding KEYS random items."""
    await tables.create_table(
        cluster.routers[0],
        {
            "TableName": name,
            "KeySchema": [{"AttributeName": "pk", "KeyType": "HASH"}],
            "AttributeDefinitions": [{"AttributeName": "pk", "AttributeType": "S"}],
            "BillingMode": "PAY_PER_REQUEST",
        },
    )
    await rewrite_all(cluster, name, rng, seed)


async def rewrite_all(cluster: SimCluster, name: str, rng: random.Random, seed: int) -> None:
    """Put a new random version of every key (index key changes among them)."""
    for key in range(KEYS):
        item = random_item(rng, key)
        await retried(seed, lambda item=item: cluster.put(name, item))


def online_index(name: str) -> dict[str, Any]:
    """UpdateTable adding the index byG (g, n; ALL) online."""
    return {
        "TableName": name,
        "AttributeDefinitions": [
            {"AttributeName": "g", "AttributeType": "S"},
            {"AttributeName": "n", "AttributeType": "N"},
        ],
        "GlobalSecondaryIndexUpdates": [
            {
                "Create": {
                    "IndexName": "byG",
                    "KeySchema": [
                        {"AttributeName": "g", "KeyType": "HASH"},
                        {"AttributeName": "n", "KeyType": "RANGE"},
                    ],
                    "Projection": {"ProjectionType": "ALL"},
                }
            }
        ],
    }


def hold_after_first_page(
    replicator: Replicator, partition_id: str
) -> tuple[asyncio.Event, asyncio.Event]:
    """Hold the copy of `partition_id` once its first page is in the index (one item a page),
    before the cursor is recorded: (set when it holds, set by the test to let it go on)."""
    replicator.backfill_page_bytes = 1
    held, release = asyncio.Event(), asyncio.Event()
    handlers = dict(replicator.backfills.handlers)
    apply_page = handlers["apply"]

    async def held_after_it(record: BackfillRecord, effect: Any) -> Any:
        event = await apply_page(record, effect)
        if record.partition_id == partition_id and not held.is_set():
            held.set()
            await release.wait()
        return event

    handlers["apply"] = held_after_it
    replicator.backfills.handlers = handlers
    return held, release


async def active_and_converged(cluster: SimCluster, name: str, seed: int) -> None:
    """Wait until the online index byG is ACTIVE, then until it holds exactly its table."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + CONVERGE_SECONDS
    while True:
        table = await retried(seed, lambda: cluster.routers[0].read_table(name))
        assert table is not None
        index = next(i for i in table.indexes if i.name == "byG")
        if index.status == IndexStatus.ACTIVE:
            break
        assert loop.time() < deadline, f"seed {seed}: the index is still {index.status}"
        await asyncio.sleep(0.5)
    await index_converges(cluster, name, seed)


@pytest.mark.parametrize("seed", MOVE_RACE_SEEDS)
def test_a_partition_that_moved_then_split_under_its_copy_is_drained_where_it_split(
    seed: int,
) -> None:
    """Issue 31: while the copy of a base partition into an index added online is held after
    its first page, the partition moves to another node, its items change their index keys
    there, and it splits there. Let go, the copy is abandoned for the split, and the follower,
    which began on the old node, is refused there as stale, the catalog showing the partition
    retired by then; its retired log is on the node it split on, not gone, so it is drained
    there before the children are copied and followed. Before the fix the refusal was taken for
    the end of a drained log: those key changes never reached the index, which kept the first
    page's old entry."""

    async def scenario(cluster: SimCluster) -> None:
        rng = random.Random(f"gsi-moved-split/{seed}")
        name = "MovedThenSplit"
        router = cluster.routers[0]
        await create_filled(cluster, name, rng, seed)
        table = await router.read_table(name)
        assert table is not None
        partition = rng.choice(table.partitions)
        target = rng.choice([n for n in sorted(cluster.nodes) if n != partition.node])
        held, release = hold_after_first_page(cluster.start_replicator(), partition.id)
        await tables.update_table(router, online_index(name))
        await asyncio.wait_for(held.wait(), 60.0)
        await cluster.move(name, partition.id, target)
        await rewrite_all(cluster, name, rng, seed)
        await cluster.splitters[target].split(table.id, partition.id, None)
        await asyncio.sleep(4 * limits.GSI_CATALOG_POLL_SECONDS)  # It reads the split.
        release.set()
        for _ in range(WRITES // 3):
            await write(cluster, name, rng, seed)
        await active_and_converged(cluster, name, seed)

    run(seed, scenario)


@pytest.mark.parametrize("seed", MOVE_RACE_SEEDS)
def test_an_online_index_registered_on_a_partition_fenced_for_a_move_copies_it_where_it_moved(
    seed: int,
) -> None:
    """Issue 31: an index added online while a base partition moves is registered on the
    partition's source after the drain handed the target its consumers (the node takes it, as
    it takes a stream's), so the target's log is held for nobody. Before the fix the copy went
    on there from the row's cursor, the items of its first page changed their index keys, the
    partition split with no consumer to hand its log to, and the index kept that page's old
    entry. The registration is confirmed by a read where it was made, refused there while the
    partition is fenced, and made again on the target."""

    async def scenario(cluster: SimCluster) -> None:
        rng = random.Random(f"gsi-late-registration/{seed}")
        name = "MovedWhileAdded"
        router = cluster.routers[0]
        await create_filled(cluster, name, rng, seed)
        table = await router.read_table(name)
        assert table is not None
        partition = rng.choice(table.partitions)
        source = partition.node
        target = rng.choice([n for n in sorted(cluster.nodes) if n != source])
        held, release = hold_after_first_page(cluster.start_replicator(), partition.id)
        splitter = cluster.splitters[source]
        switch = splitter.change_table

        async def index_added_then_switch(table_name: str, change: Any) -> Any:
            # The source has drained: the replicator registers the new index's consumer here.
            await tables.update_table(router, online_index(name))
            added = await router.read_table(name)
            assert added is not None
            consumer = gsi.consumer_of(next(i for i in added.indexes if i.name == "byG"))
            for _ in range(200):
                if consumer in cluster.nodes[source].feeds.consumers((table.id, partition.id)):
                    break
                await asyncio.sleep(0.05)
            else:
                raise AssertionError(f"seed {seed}: the replicator never registered on {source}")
            return await switch(table_name, change)

        splitter.change_table = index_added_then_switch  # type: ignore[method-assign]
        await cluster.move(name, partition.id, target)
        splitter.change_table = switch  # type: ignore[method-assign]
        await asyncio.wait_for(held.wait(), 60.0)
        await rewrite_all(cluster, name, rng, seed)
        await cluster.splitters[target].split(table.id, partition.id, None)
        release.set()
        await active_and_converged(cluster, name, seed)

    run(seed, scenario)
