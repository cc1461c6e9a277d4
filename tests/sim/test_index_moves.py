"""Global index partitions moved to another node while the replicator applies, in the seeded
cluster (`storagenode.move`, `storagenode.index_move`).

The replicator's own routing (`Replicator.apply_routed`, which re-reads the catalog when an
index partition refuses a write as stale) sends a model table's changes to the index while one
of its partitions moves; the source or the target is killed at each step of the move. Afterwards
exactly one node holds the partition, its counters match its entries, it fences and skips by the
per-source rows the source held, and the index holds exactly the projection of the model: no
entry lost, none doubled, none stale, through the store and through both routers' Query.
"""

from __future__ import annotations

import asyncio
import functools
import random
from typing import Any

import pytest

from core import catalog, gsi, limits, moves
from core.catalog import PartitionDef, TableDef
from core.errors import DynamoError, LeaseFenced
from core.machines.move import NAME as MOVE
from dynalab.sim.cluster import SimCluster, run
from gsi_replicator.replicator import Replicator
from router import queries, tables, ttl
from router.placement import PlacementMover
from rpc import catalog_client as gsi_catalog
from rpc import ops
from rpc.local import Faults
from rpc.ops import Target
from storagenode.layout import Family, index_source_key, index_source_of
from storagenode.move import MOVE_CONSUMER, MOVE_CRASH_STEPS, MOVE_SOURCE
from tests.sim.crash import DieAt, Died
from tests.sim.test_index_splits import entry, hot_partition, index_query, walked

SEEDS = [5, 17]
SOURCE = "base-partition-0"  # The base partition the changes pretend to come from.
LEASE_EPOCH = 4


class Model:
    """A base table kept in memory, whose changes the test replicates to the index: every item
    is in the "hot" group (one index partition, the one moved) but a few in "cold"."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.items: dict[int, dict[str, Any]] = {}
        self.seq = 0

    def change(self) -> tuple[int, dict[str, Any] | None, dict[str, Any] | None]:
        self.seq += 1
        number = self.rng.randrange(80)
        old = self.items.get(number)
        roll = self.rng.random()
        if old is not None and roll < 0.25:
            del self.items[number]
            return self.seq, old, None
        new = entry(number, "cold" if number % 10 == 0 else "hot")
        if old is not None and roll < 0.6:
            new = {**new, "pad": {"S": "x" * self.rng.randrange(1, 200)}}
        self.items[number] = new
        return self.seq, old, new


def replicator_for(cluster: SimCluster) -> Replicator:
    return Replicator(cluster.addresses, connect=cluster.network.connect)


async def follow_once(replicator: Replicator, table: TableDef, model: Model, seed: int) -> None:
    """Send the model's next changes (one to three) as one follower batch; a batch refused
    past the replicator's re-routing is sent again (a follower restarted from its checkpoint
    replays it: the partitions that applied it skip it)."""
    changes = [model.change() for _ in range(model.rng.randrange(1, 4))]
    writes = [
        write
        for seq, old, new in changes
        for write in gsi.project_change(seq, old, new, table.indexes, table.key_shape)
    ]
    route = functools.partial(gsi.route, writes)
    for _ in range(200):
        try:
            await replicator.apply_routed(table.id, route, SOURCE, LEASE_EPOCH)
            return
        except DynamoError as error:
            refused = error
            await asyncio.sleep(0.05)
    raise AssertionError(f"seed {seed}: a batch was never applied: {refused!r}")


async def follow(
    replicator: Replicator, table: TableDef, model: Model, stop: asyncio.Event, seed: int
) -> int:
    """Send batches until `stop`; how many."""
    batches = 0
    while not stop.is_set():
        await follow_once(replicator, table, model, seed)
        batches += 1
        await asyncio.sleep(0.002)
    return batches


def holders(cluster: SimCluster, index_id: str, partition_id: str) -> dict[str, Any]:
    return {
        node_id: node.partitions[index_id, partition_id]
        for node_id, node in cluster.nodes.items()
        if (index_id, partition_id) in node.partitions
    }


def source_row(cluster: SimCluster, node: str, index_id: str, partition_id: str) -> Any:
    value = cluster.stores[node].get(
        Family.INDEX_SOURCES, index_source_key(index_id, partition_id, SOURCE)
    )
    return None if value is None else index_source_of(value)


async def check_index(
    cluster: SimCluster, name: str, model: Model, seed: int
) -> tuple[TableDef, PartitionDef]:
    """The index holds exactly the projection of the model, in the store and through both
    routers; the table as the catalog has it now and the moved ("hot") partition."""
    table = await cluster.routers[0].read_table(name)
    assert table is not None
    index = table.indexes[0]
    assert index.table_id is not None
    stored: list[dict[str, Any]] = []
    for partition in index.partitions:
        node = cluster.nodes[partition.node]
        held = node.partitions[index.table_id, partition.id]
        assert held.serving, f"seed {seed}: {partition.id} does not serve on {partition.node}"
        assert (held.item_count, held.size_bytes) == walked(
            cluster, partition.node, index.table_id, partition.id
        ), f"seed {seed}: the counters of {partition.id} do not match its entries"
        lo = held.item_prefix + held.start
        hi = held.item_prefix + (held.end or b"\xff" * 40)
        for _, value in cluster.stores[partition.node].walk(Family.ITEMS, lo, hi, forward=True):
            stored.append(value)
    expected = sorted(
        (item for item in model.items.values() if item["g"] == {"S": "hot"}),
        key=lambda item: int(item["n"]["N"]),
    )
    assert len(stored) == len(model.items), f"seed {seed}: {len(stored)} entries"
    for router in (0, 1):
        found = await cluster.read_all(
            queries.query,
            {
                "TableName": name,
                "IndexName": "byG",
                "KeyConditionExpression": "g = :g",
                "ExpressionAttributeValues": {":g": {"S": "hot"}},
                "Limit": 7,
            },
            router,
        )
        assert found == expected, f"seed {seed}: router {router} reads another index"
        scanned = await cluster.read_all(
            queries.scan, {"TableName": name, "IndexName": "byG", "Limit": 9}, router
        )
        keys = [(item["g"]["S"], item["n"]["N"]) for item in scanned]
        assert len(keys) == len(set(keys)) == len(model.items), f"seed {seed}: router {router}"
    return table, hot_partition(table)


@pytest.mark.parametrize("seed", SEEDS)
def test_a_moved_index_partition_carries_its_entries_counts_seqs_and_fence(seed: int) -> None:
    async def scenario(cluster: SimCluster) -> None:
        table = await cluster.create_indexed("Moved")
        index_id = table.indexes[0].table_id
        assert index_id is not None
        replicator = replicator_for(cluster)
        replicator.tables = {table.id: table}
        replicator.location = await gsi_catalog.locate(replicator.clients)
        model = Model(random.Random(seed))
        try:
            for _ in range(60):
                await follow_once(replicator, table, model, seed)
            partition = hot_partition(table)
            source = partition.node
            target = next(n for n in sorted(cluster.nodes) if n != source)
            row = source_row(cluster, source, index_id, partition.id)
            assert row is not None and row[1] == LEASE_EPOCH, f"seed {seed}: {row}"
            await cluster.routers[1].refresh()  # Router 1 keeps the map before the move.
            mover = cluster.movers[source]
            receive = mover._receive
            drained: list[Any] = []

            async def write_meanwhile(*args: Any, **fields: Any) -> dict[str, Any]:
                # Index writes between the pin and the fence: the catch-up must carry them.
                # (Not once fenced: index_apply is refused then, until the switch.)
                if args[2] == "items":
                    for _ in range(5):
                        await follow_once(replicator, table, model, seed)
                if args[2] == "drain":
                    drained.append(source_row(cluster, source, index_id, partition.id))
                return await receive(*args, **fields)

            mover._receive = write_meanwhile  # type: ignore[method-assign]
            reply = await mover.move(index_id, partition.id, target, cluster.addresses[target])
            mover._receive = receive  # type: ignore[method-assign]
            assert reply["records"] > 0, f"seed {seed}: no index write was caught up"
            assert reply["partition"]["node"] == target, f"seed {seed}"
            assert reply["partition"]["epoch"] == partition.epoch + 1, f"seed {seed}"
            held = holders(cluster, index_id, partition.id)
            assert list(held) == [target], f"seed {seed}: only the target holds it"
            moved = held[target]
            assert moved.serving and (moved.item_count, moved.size_bytes) == walked(
                cluster, target, index_id, partition.id
            ), f"seed {seed}: the counters are exact"
            [at_drain] = drained
            assert at_drain[0] > row[0], f"seed {seed}: no index write landed during the move"
            assert source_row(cluster, target, index_id, partition.id) == at_drain, (
                f"seed {seed}: the target has the source's last seq and fence"
            )
            assert source_row(cluster, source, index_id, partition.id) is None, f"seed {seed}"
            assert MOVE_CONSUMER not in cluster.nodes[target].feeds.consumers(
                (index_id, partition.id)
            )
            # A replay of the last batch is skipped on the target; an older lease is refused.
            last = at_drain[0]  # The newest seq this partition applied.
            old = model.items.get(0)
            replay = gsi.project_change(last, old, old, table.indexes, table.key_shape)
            replay += gsi.project_change(last, None, entry(1), table.indexes, table.key_shape)
            current = await cluster.routers[0].read_table("Moved")
            assert current is not None
            routed = gsi.route(replay, current)
            for (storage_id, partition_id, epoch, node), changes in routed.items():
                if partition_id != partition.id:
                    continue
                payload = ops.IndexApplyPayload.of(SOURCE, changes, lease_epoch=LEASE_EPOCH)
                target_op = ops.Target(storage_id, partition_id, epoch, deadline=0)
                [result] = cluster.nodes[node].apply_writes(
                    [(ops.INDEX_APPLY, target_op, payload.to_json())]
                )
                assert not isinstance(result, DynamoError), f"seed {seed}: {result!r}"
                applied = ops.part_outcome(result["parts"][0])["applied"]
                assert applied == 0, f"seed {seed}: a replay was applied"
                fenced = ops.IndexApplyPayload.of(SOURCE, changes, lease_epoch=LEASE_EPOCH - 1)
                [result] = cluster.nodes[node].apply_writes(
                    [(ops.INDEX_APPLY, target_op, fenced.to_json())]
                )
                assert not isinstance(result, DynamoError), f"seed {seed}: {result!r}"
                with pytest.raises(LeaseFenced):
                    ops.part_outcome(result["parts"][0])
            # The replicator follows it to the target (refused as stale, re-routed).
            for _ in range(20):
                await follow_once(replicator, table, model, seed)
            await check_index(cluster, "Moved", model, seed)
        finally:
            await replicator.close()

    run(seed, scenario)


async def settle_all(cluster: SimCluster) -> None:
    for mover in list(cluster.movers.values()):
        await mover.settle()


@pytest.mark.parametrize("who", ["source", "target"])
@pytest.mark.parametrize("step", MOVE_CRASH_STEPS)
@pytest.mark.parametrize("seed", SEEDS)
def test_an_index_move_killed_at_any_step_loses_no_entry_and_doubles_none(
    seed: int, step: str, who: str
) -> None:
    async def scenario(cluster: SimCluster) -> None:
        table = await cluster.create_indexed("Killed")
        index_id = table.indexes[0].table_id
        assert index_id is not None
        replicator = replicator_for(cluster)
        replicator.tables = {table.id: table}
        replicator.location = await gsi_catalog.locate(replicator.clients)
        model = Model(random.Random(seed * 1_000 + MOVE_CRASH_STEPS.index(step)))
        for _ in range(40):
            await follow_once(replicator, table, model, seed)
        partition = hot_partition(table)
        source = partition.node
        target = next(n for n in sorted(cluster.nodes) if n != source)
        await cluster.routers[1].refresh()
        cluster.faults(Faults(delay=0.5, delay_seconds_max=0.003))
        stop = asyncio.Event()
        following = asyncio.create_task(follow(replicator, table, model, stop, seed))
        await asyncio.sleep(0.03)
        mover = cluster.movers[source]

        def die(reached: str) -> None:
            if who == "source":
                raise Died(reached)
            asyncio.get_running_loop().create_task(cluster.restart_node(target))

        mover.driver.crash_points = DieAt(MOVE, step, die)
        try:
            await mover.move(index_id, partition.id, target, cluster.addresses[target])
        except Died:
            await cluster.restart_node(source)
        except DynamoError:
            pass  # The move failed and rolled back (a restarted target lost its place).
        await asyncio.sleep(0.05)
        await settle_all(cluster)
        await asyncio.sleep(0.05)
        stop.set()
        try:
            batches = await asyncio.wait_for(following, 120)
        finally:
            await replicator.close()
        assert batches > 0, f"seed {seed}"
        # A copy its source rolled back without reaching it is dropped once abandoned.
        await asyncio.sleep(limits.MOVE_ABANDONED_SECONDS + 1)
        await settle_all(cluster)
        cluster.faults()
        _, moved = await check_index(cluster, "Killed", model, seed)
        held = holders(cluster, index_id, partition.id)
        assert list(held) == [moved.node], f"seed {seed}: held by {sorted(held)}, {moved.node}"
        if who == "source":
            # Killed before the switch it rolls back; after it, the target serves.
            assert moved.node == (target if step == "switched" else source), f"seed {seed}"
        assert MOVE_CONSUMER not in cluster.nodes[moved.node].feeds.consumers(
            (index_id, partition.id)
        ), f"seed {seed}"
        row = source_row(cluster, moved.node, index_id, partition.id)
        assert row is not None and row[1] == LEASE_EPOCH, f"seed {seed}: {row}"
        for node in cluster.nodes:
            if node != moved.node:
                assert source_row(cluster, node, index_id, partition.id) is None, f"seed {seed}"
        moves_made = 1 if moved.node == target else 0
        assert moved.epoch == partition.epoch + moves_made, f"seed {seed}: {moved.epoch}"

    run(seed, scenario)


@pytest.mark.parametrize("seed", SEEDS)
def test_routers_move_an_index_split_child_to_its_ring_owner_once(seed: int) -> None:
    async def scenario(cluster: SimCluster) -> None:
        table = await cluster.create_indexed("Placed")
        index_id = table.indexes[0].table_id
        assert index_id is not None
        replicator = replicator_for(cluster)
        replicator.tables = {table.id: table}
        replicator.location = await gsi_catalog.locate(replicator.clients)
        model = Model(random.Random(seed))
        try:
            for _ in range(60):
                await follow_once(replicator, table, model, seed)
            router = cluster.routers[0]
            asked: list[tuple[str, str, str]] = []

            sent = router.control

            async def control(node: str, op: str, body: dict[str, Any], timeout: float) -> Any:
                # Through the network to the node's mover, as a router's asks go.
                assert op == ops.MOVE_PARTITION
                asked.append((body["table_id"], body["partition_id"], body["target_node"]))
                return await sent(node, op, body, timeout)

            router.control = control  # type: ignore[method-assign]
            placement = PlacementMover(router)
            await router.refresh()
            assert not await placement.move_one(), f"seed {seed}: nothing to move before a split"
            # Split the hot partition, then its children, until a child lands off its ring
            # owner (the hot group is one index key value: it splits between table keys).
            split: TableDef | None = table
            for _ in range(3):
                assert split is not None
                for parent in [
                    p
                    for p in split.indexes[0].partitions
                    if p.epoch > 1 or p.id == hot_partition(table).id
                ]:
                    await cluster.splitters[parent.node].split(index_id, parent.id)
                split = await router.read_table("Placed")
                assert split is not None
                if moves.misplaced_index_partitions(split, router.ring.owner):
                    break
            await router.refresh()
            assert split is not None
            wanted = moves.misplaced_index_partitions(split, router.ring.owner)
            assert wanted, f"seed {seed}: some index child should be off its ring owner"
            assert not moves.misplaced(split, router.ring.owner), f"seed {seed}"
            while await placement.move_one():
                pass
            placed = await router.read_table("Placed")
            assert placed is not None
            serving = {p.id: p for p in placed.indexes[0].partitions}
            for storage_id, partition, node in wanted:
                assert storage_id == index_id and serving[partition.id].node == node
            assert len(asked) == len(wanted), f"seed {seed}: each child is moved once"
            assert not moves.misplaced_index_partitions(placed, router.ring.owner)
            for _ in range(10):
                await follow_once(replicator, table, model, seed)
            await check_index(cluster, "Placed", model, seed)
            assert await index_query(cluster, "Placed", 1) == [
                item["n"]["N"]
                for item in sorted(model.items.values(), key=lambda i: int(i["n"]["N"]))
                if item["g"] == {"S": "hot"}
            ]
        finally:
            await replicator.close()

    run(seed, scenario)


@pytest.mark.parametrize("seed", SEEDS)
def test_a_moved_index_partition_takes_the_index_settings_not_the_table_ttl_or_stream(
    seed: int,
) -> None:
    async def scenario(cluster: SimCluster) -> None:
        table = await cluster.create_indexed("Settings")
        index_id = table.indexes[0].table_id
        assert index_id is not None
        router = cluster.routers[0]
        await tables.update_table(
            router,
            {
                "TableName": "Settings",
                "StreamSpecification": {"StreamEnabled": True, "StreamViewType": "KEYS_ONLY"},
            },
        )
        await ttl.update_time_to_live(
            router,
            {
                "TableName": "Settings",
                "TimeToLiveSpecification": {"Enabled": True, "AttributeName": "n"},
            },
        )
        current = await router.read_table("Settings")
        assert current is not None and current.stream is not None and current.ttl is not None
        partition = hot_partition(current)
        target = next(n for n in sorted(cluster.nodes) if n != partition.node)
        await cluster.movers[partition.node].move(
            index_id, partition.id, target, cluster.addresses[target]
        )
        moved = cluster.nodes[target].partitions[index_id, partition.id]
        assert moved.serving, f"seed {seed}"
        after = await router.read_table("Settings")
        assert after is not None
        expected = catalog.index_throughput_document(after, after.indexes[0])
        assert moved.throughput == expected, f"seed {seed}: {moved.throughput}"
        assert moved.ttl is None, f"seed {seed}: an index entry never expires on its own"
        consumers = cluster.nodes[target].feeds.consumers((index_id, partition.id))
        assert not consumers, f"seed {seed}: {dict(consumers)} on an index partition"

    run(seed, scenario)


@pytest.mark.parametrize("seed", SEEDS)
def test_an_index_write_in_the_pins_own_group_reaches_the_target(seed: int) -> None:
    """The pin's iterators see the store as committed before its group, so an index_apply
    earlier in that group is in neither the copy nor, unless logged, the catch-up: the move's
    consumer is registered a group before the pin ("register"), so it is logged."""

    async def scenario(cluster: SimCluster) -> None:
        table = await cluster.create_indexed("SameGroup")
        index_id = table.indexes[0].table_id
        assert index_id is not None
        replicator = replicator_for(cluster)
        replicator.tables = {table.id: table}
        replicator.location = await gsi_catalog.locate(replicator.clients)
        model = Model(random.Random(seed))
        try:
            for _ in range(30):
                await follow_once(replicator, table, model, seed)
            partition = hot_partition(table)
            source = partition.node
            target = next(n for n in sorted(cluster.nodes) if n != source)
            node = cluster.nodes[source]
            splitter = cluster.splitters[source]
            submit = splitter.submit

            async def pin_with_a_write(
                op: str, target: Target | None, body: dict[str, Any]
            ) -> dict[str, Any]:
                if op != MOVE_SOURCE or body["step"] != "pin":
                    return await submit(op, target, body)
                seq, old, new = model.seq + 1, None, entry(500)
                model.seq, model.items[500] = seq, new
                writes = gsi.project_change(seq, old, new, table.indexes, table.key_shape)
                [(where, changes)] = gsi.route(writes, table).items()
                assert where[1] == partition.id
                payload = ops.IndexApplyPayload.of(SOURCE, changes, lease_epoch=LEASE_EPOCH)
                address = ops.Target(where[0], where[1], where[2], deadline=0)
                applied, pinned = node.apply_writes(
                    [(ops.INDEX_APPLY, address, payload.to_json()), (op, None, body)]
                )
                assert not isinstance(applied, DynamoError), applied
                assert not isinstance(pinned, DynamoError), pinned
                return pinned  # type: ignore[no-any-return]

            splitter.submit = pin_with_a_write  # type: ignore[method-assign]
            await cluster.movers[source].move(
                index_id, partition.id, target, cluster.addresses[target]
            )
            splitter.submit = submit  # type: ignore[method-assign]
            await check_index(cluster, "SameGroup", model, seed)
        finally:
            await replicator.close()

    run(seed, scenario)
