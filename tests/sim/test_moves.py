"""Partitions moved to another node under writes, on real in-process nodes (`storagenode.move`).

A move copies a partition to its target, catches up from the change log, fences the source,
drains, switches the catalog and drops the source's copy. These tests write and increment
counters through the routers while a partition moves, kill the source or the target at each step
of the move, or the target once each step it receives has committed on it (a restart is a new
node over the same store), and check that every acknowledged
write is there exactly once, every counter equals its acknowledged increments (give or take the
increments whose outcome the client never learnt), and exactly one node holds the partition.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import orjson
import pytest

from core import catalog, limits, moves
from core.errors import DynamoError, ServiceUnavailable
from core.machines.move import NAME as MOVE
from dynalab.sim.cluster import SimCluster, run, storage_key
from router import items, queries, tables, ttl
from router.placement import PlacementMover
from rpc import ops
from rpc.machines import HoldPoints
from storagenode.layout import Family, item_size_of
from storagenode.move import MOVE_CONSUMER, MOVE_CRASH_STEPS, MOVE_TARGET_CRASH_STEPS
from storagenode.node import WRITE_OPS
from tests.sim.crash import DieAt, Died
from tests.sim.sweep import WriteLog, Writes, check, filled_table, item

SEEDS = [5, 17]


async def moved_partition(cluster: SimCluster, name: str) -> tuple[str, str, str]:
    """(partition id, its node, another node) of the table's first partition."""
    table = await cluster.routers[0].read_table(name)
    assert table is not None
    partition = table.partitions[0]
    other = next(n for n in sorted(cluster.nodes) if n != partition.node)
    return partition.id, partition.node, other


def holders(cluster: SimCluster, table_id: str, partition_id: str) -> dict[str, Any]:
    """Each node holding the partition, with its metadata."""
    return {
        node_id: node.partitions[table_id, partition_id]
        for node_id, node in cluster.nodes.items()
        if (table_id, partition_id) in node.partitions
    }


def counted(cluster: SimCluster, node_id: str, table_id: str, partition_id: str) -> tuple[int, int]:
    """(items, bytes) of the partition on a node, walked from its store."""
    node = cluster.nodes[node_id]
    partition = node.partitions[table_id, partition_id]
    lo = partition.item_prefix + partition.start
    hi = partition.item_prefix + (partition.end or b"\xff" * 9)
    rows = list(node.store.walk(Family.ITEMS, lo, hi, forward=True))
    return len(rows), sum(item_size_of(value) for _, value in rows)


@pytest.mark.parametrize("seed", SEEDS)
def test_a_moved_partition_is_served_by_its_target_with_its_items_counts_and_log(
    seed: int,
) -> None:
    async def scenario(cluster: SimCluster) -> None:
        await cluster.create_table("Moved", lsi="v")
        entries = [item(n) for n in range(120)]
        for entry in entries:
            await cluster.put("Moved", entry)
        for n in range(0, 120, 3):  # Overwrites and deletes: records the log must carry.
            key = {"pk": entries[n]["pk"], "sk": entries[n]["sk"]}
            if n % 2:
                await items.delete_item(cluster.routers[0], {"TableName": "Moved", "Key": key})
            else:
                await cluster.put("Moved", {**entries[n], "v": {"S": "changed"}})
        table = await cluster.routers[0].read_table("Moved")
        assert table is not None
        partition_id, source, target = await moved_partition(cluster, "Moved")
        before = cluster.nodes[source].partitions[table.id, partition_id]
        log_before = cluster.nodes[source].changes(table.id, partition_id, 0, 10_000)
        stale = cluster.routers[1]
        await stale.refresh()
        reply = await cluster.move("Moved", partition_id, target)
        assert reply["partition"]["node"] == target, f"seed {seed}"
        assert reply["partition"]["epoch"] == before.epoch + 1, f"seed {seed}"
        held = holders(cluster, table.id, partition_id)
        assert list(held) == [target], f"seed {seed}: only the target holds it"
        moved = held[target]
        assert moved.serving and moved.epoch == before.epoch + 1, f"seed {seed}"
        assert (moved.item_count, moved.size_bytes, moved.index_stats) == (
            before.item_count,
            before.size_bytes,
            before.index_stats,
        ), f"seed {seed}: the counters are exact"
        assert counted(cluster, target, table.id, partition_id) == (
            moved.item_count,
            moved.size_bytes,
        ), f"seed {seed}"
        log_after = cluster.nodes[target].changes(table.id, partition_id, 0, 10_000)
        assert log_after == log_before, f"seed {seed}: the log carries on with the same seqs"
        assert (moved.first_seq, moved.last_seq) == (before.first_seq, before.last_seq)
        assert MOVE_CONSUMER not in cluster.nodes[target].feeds.consumers((table.id, partition_id))
        source_store = cluster.nodes[source].store
        lo = before.item_prefix + before.start
        hi = before.item_prefix + (before.end or b"\xff" * 9)
        assert not list(source_store.walk(Family.ITEMS, lo, hi, forward=True)), f"seed {seed}"
        # A router that still has the old map is refused by the source, refreshes and retries.
        found = await cluster.scan_all("Moved", router=1, Limit=7)
        expected = await cluster.scan_all("Moved", router=0)
        assert sorted(map(storage_key, found)) == sorted(map(storage_key, expected))
        live = [e for n, e in enumerate(entries) if n % 3 or n % 2 == 0]
        assert len(found) == len(live), f"seed {seed}"
        by_v = await cluster.read_all(
            queries.query,
            {
                "TableName": "Moved",
                "IndexName": "byV",
                "KeyConditionExpression": "pk = :p AND v = :v",
                "ExpressionAttributeValues": {":p": {"S": "k0"}, ":v": {"S": "changed"}},
            },
        )
        assert by_v and all(e["v"] == {"S": "changed"} for e in by_v), f"seed {seed}"
        # Writes go to the target now, and it logs them after the moved records.
        inside = next(e for e in entries if moved.holds(storage_key(e)))
        await cluster.put("Moved", {**inside, "v": {"S": "after the move"}}, router=1)
        assert cluster.nodes[target].partitions[table.id, partition_id].last_seq > before.last_seq

    run(seed, scenario)


async def settle_all(cluster: SimCluster) -> None:
    for mover in list(cluster.movers.values()):
        await mover.settle()


async def let_go_after_writes(directory: Path, log: WriteLog) -> None:
    """Let a source held once it has copied go on after a few more acknowledged writes."""
    while not (directory / "move-copied.held").exists():
        await asyncio.sleep(0.01)
    written = len(log.acked)
    while len(log.acked) < written + 3:
        await asyncio.sleep(0.01)
    (directory / "move-copied.go").touch()


class DiesAfter:
    """A target node that dies once a move step it receives (`move_receive` `step`) has
    committed on it, before it answers: cut from the network until the test restarts it, the
    reply to that step lost (the source sees an error)."""

    def __init__(self, cluster: SimCluster, node_id: str, step: str) -> None:
        self.cluster = cluster
        self.node = cluster.nodes[node_id]
        self.address = cluster.addresses[node_id]
        self.step = step
        self.died = False

    def check_target(self, op: str, target: Any) -> None:
        self.node.check_target(op, target)

    def read(self, op: str, target: Any, body: dict[str, Any]) -> dict[str, Any]:
        return self.node.read(op, target, body)

    def apply_writes(self, writes: Any) -> Any:
        results = self.node.apply_writes(writes)
        steps = {body.get("step") for op, _, body in writes if op == ops.MOVE_RECEIVE}
        if not self.died and self.step in steps and not isinstance(results[0], DynamoError):
            self.died = True
            self.cluster.network.cut(self.address)
            raise ServiceUnavailable(f"{self.address} died after {self.step}")
        return results


KILLED = [
    *((who, step) for who in ("source", "target", "router") for step in MOVE_CRASH_STEPS),
    *(("target", step) for step in MOVE_TARGET_CRASH_STEPS),
]


@pytest.mark.parametrize(("who", "step"), KILLED)
@pytest.mark.parametrize("seed", SEEDS)
def test_a_move_killed_at_any_step_loses_nothing_and_applies_nothing_twice(
    seed: int, step: str, who: str, tmp_path: Path
) -> None:
    async def scenario(cluster: SimCluster) -> None:
        table, log = await filled_table(cluster, "Killed", 60)
        partition_id, source, target = await moved_partition(cluster, "Killed")
        async with Writes(cluster, "Killed", log, f"seed {seed}", lead_seconds=0.05):
            mover = cluster.movers[source]
            dying = None
            releaser = None
            hold = None
            if step in MOVE_TARGET_CRASH_STEPS:  # The target kills itself at its own step.
                dying = DiesAfter(cluster, target, step.removeprefix("target-"))
                cluster.network.register(cluster.addresses[target], dying, WRITE_OPS)
            if step == "target-apply":
                # Held once it has copied while writes land, the source has records to apply.
                hold = HoldPoints(frozenset({"move:copied"}), str(tmp_path))
                releaser = asyncio.create_task(let_go_after_writes(tmp_path, log))

            def die(reached: str) -> None:
                if who == "source":
                    raise Died(reached)
                if who == "target":
                    # The target restarts between two steps; the source's next call meets it anew.
                    asyncio.get_running_loop().create_task(cluster.restart_node(target))
                else:
                    cluster.routers[0] = cluster.add_router()  # The old one is simply dropped.

            mover.driver.crash_points = DieAt(MOVE, step, die, hold)
            try:
                await cluster.move("Killed", partition_id, target)
            except Died:
                await cluster.restart_node(source)
            except DynamoError:
                pass  # The move failed and rolled back (a restarted target lost its place).
            if releaser is not None:
                await releaser
            if dying is not None:
                assert dying.died, f"seed {seed}: the target never reached {step}"
                await cluster.restart_node(target)
                cluster.network.heal(cluster.addresses[target])
            await asyncio.sleep(0.05)
            await settle_all(cluster)
        # A copy its source rolled back without reaching it is dropped once abandoned.
        await asyncio.sleep(limits.MOVE_ABANDONED_SECONDS + 1)
        await settle_all(cluster)
        current = await cluster.routers[0].read_table("Killed")
        assert current is not None
        owner = current.partition(partition_id).node
        held = holders(cluster, table.id, partition_id)
        assert list(held) == [owner], f"seed {seed}: held by {sorted(held)}, owner {owner}"
        assert held[owner].serving, f"seed {seed}: the owner serves it"
        if who == "source":
            # Killed before the switch it rolls back; after it, the target serves.
            assert owner == (target if step == "switched" else source), f"seed {seed}: {owner}"
        elif who == "router":
            assert owner == target, f"seed {seed}: a router has no part in a move"
        elif dying is not None:
            # Killed once it had activated, it serves; before, the source rolled back.
            assert owner == (target if step == "target-activate" else source), f"seed {seed}"
        assert counted(cluster, owner, table.id, partition_id) == (
            held[owner].item_count,
            held[owner].size_bytes,
        ), f"seed {seed}: the counters match the items"
        consumers = cluster.nodes[owner].feeds.consumers((table.id, partition_id))
        assert MOVE_CONSUMER not in consumers, f"seed {seed}"
        await check(cluster, "Killed", log, f"seed {seed}")

    run(seed, scenario)


@pytest.mark.parametrize("seed", SEEDS)
def test_a_move_waits_for_transaction_locks_and_refuses_when_they_stay(seed: int) -> None:
    async def scenario(cluster: SimCluster) -> None:
        await cluster.create_table("Locked")
        for n in range(10):
            await cluster.put("Locked", item(n))
        table = await cluster.routers[0].read_table("Locked")
        assert table is not None
        partition_id, source, target = await moved_partition(cluster, "Locked")
        partition = cluster.nodes[source].partitions[table.id, partition_id]
        key = partition.item_prefix + partition.start + b"\x00"
        store = cluster.stores[source]
        batch = store.batch()
        batch.put(Family.TRANSACTIONS, b"L" + key, orjson.dumps({"attempt": "t.1"}))
        store.commit(batch)
        with pytest.raises(moves.MoveRefused):
            await cluster.move("Locked", partition_id, target)
        assert list(holders(cluster, table.id, partition_id)) == [source], f"seed {seed}"
        assert cluster.nodes[source].partitions[table.id, partition_id].serving
        assert MOVE_CONSUMER not in cluster.nodes[source].feeds.consumers((table.id, partition_id))
        await cluster.put("Locked", item(99))  # Rolled back: the source serves again.

    run(seed, scenario)


@pytest.mark.parametrize("seed", SEEDS)
def test_routers_move_a_split_child_to_its_ring_owner_once(seed: int) -> None:
    async def scenario(cluster: SimCluster) -> None:
        await cluster.create_table("Placed")
        for n in range(40):
            await cluster.put("Placed", item(n))
        router = cluster.routers[0]
        asked: list[tuple[str, str]] = []

        sent = router.control

        async def control(node: str, op: str, body: dict[str, Any], timeout: float) -> Any:
            # Through the network to the node's mover, as a router's asks go.
            assert op == ops.MOVE_PARTITION
            asked.append((body["partition_id"], body["target_node"]))
            return await sent(node, op, body, timeout)

        router.control = control  # type: ignore[method-assign]
        placement = PlacementMover(router)
        await router.refresh()
        assert not await placement.move_one(), f"seed {seed}: nothing to move before a split"
        table = await router.read_table("Placed")
        assert table is not None
        # Split partitions until a child lands off its ring owner.
        for parent in list(table.partitions):
            await cluster.splitters[parent.node].split(table.id, parent.id)
        await router.refresh()
        table = await router.read_table("Placed")
        assert table is not None
        wanted = moves.misplaced(table, router.ring.owner)
        assert wanted, f"seed {seed}: some child should be off its ring owner"
        while await placement.move_one():
            pass
        table = await router.read_table("Placed")
        assert table is not None
        for partition, node in wanted:
            assert table.partition(partition.id).node == node, f"seed {seed}"
        assert len(asked) == len(wanted), f"seed {seed}: each child is moved once"
        found = await cluster.scan_all("Placed")
        assert len(found) == 40, f"seed {seed}"

    run(seed, scenario)


@pytest.mark.parametrize("seed", SEEDS)
def test_settings_changed_between_the_drain_and_the_switch_reach_the_target(seed: int) -> None:
    """An UpdateTable (throughput, stream) and an UpdateTimeToLive whose pushes reach the source
    after it drained to the target, and settle before the catalog switch: the target takes them
    from the row the switch wrote when it activates."""

    async def scenario(cluster: SimCluster) -> None:
        await cluster.create_table("Settings")
        for n in range(30):
            await cluster.put("Settings", item(n))
        router = cluster.routers[0]
        table = await router.read_table("Settings")
        assert table is not None
        partition_id, source, target = await moved_partition(cluster, "Settings")
        splitter = cluster.splitters[source]
        switch = splitter.change_table

        async def settings_then_switch(name: str, change: Any) -> Any:
            # The source has drained: every push now reaches it alone.
            await tables.update_table(
                router,
                {
                    "TableName": "Settings",
                    "BillingMode": "PROVISIONED",
                    "ProvisionedThroughput": {"ReadCapacityUnits": 70, "WriteCapacityUnits": 40},
                },
            )
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
                    "TimeToLiveSpecification": {"Enabled": True, "AttributeName": "expires"},
                },
            )
            held = cluster.nodes[source].partitions[table.id, partition_id]
            assert held.moving_to == target and held.ttl is not None, f"seed {seed}"
            return await switch(name, change)

        splitter.change_table = settings_then_switch  # type: ignore[method-assign]
        await cluster.move("Settings", partition_id, target)
        current = await router.read_table("Settings")
        assert current is not None and current.stream is not None
        moved = cluster.nodes[target].partitions[table.id, partition_id]
        assert moved.serving, f"seed {seed}"
        assert moved.throughput == catalog.throughput_document(current), f"seed {seed}"
        assert moved.ttl == catalog.ttl_document(current), f"seed {seed}"
        assert moved.ttl_backfill == moved.start.hex(), f"seed {seed}: TTL indexes from the start"
        consumers = cluster.nodes[target].feeds.consumers((table.id, partition_id))
        # Owing the whole retained log, as the stream's first read would register it.
        assert consumers.get(current.stream.consumer) == moved.first_seq - 1, f"seed {seed}"
        # A later push finds the target on the catalog's map, as before.
        await tables.update_table(
            router,
            {
                "TableName": "Settings",
                "ProvisionedThroughput": {"ReadCapacityUnits": 80, "WriteCapacityUnits": 45},
            },
        )
        latest = await router.read_table("Settings")
        assert latest is not None
        moved = cluster.nodes[target].partitions[table.id, partition_id]
        assert moved.throughput == catalog.throughput_document(latest), f"seed {seed}"

    run(seed, scenario)


@pytest.mark.parametrize("seed", SEEDS)
def test_a_move_asked_over_the_network_dies_with_its_node_and_its_restart_settles_it(
    seed: int,
) -> None:
    """A router asks a node to move a partition (`move_partition` through the network, run as a
    task of the node); the node is killed mid-move: the router's call fails as unavailable, and
    the restarted node settles the move from its record."""

    async def scenario(cluster: SimCluster) -> None:
        table, log = await filled_table(cluster, "Asked", 40)
        partition_id, source, target = await moved_partition(cluster, "Asked")
        router = cluster.routers[0]
        killing: list[asyncio.Task[None]] = []

        class KilledOnceCopied:
            """Kills the source once it has copied: the kill, a task of its own, cancels the
            node's tasks, this move's among them, while it waits here."""

            async def reached(self, machine: str, point: str) -> None:
                if machine == MOVE and point == "copied" and not killing:
                    killing.append(asyncio.ensure_future(cluster.kill_node(source)))
                    await asyncio.sleep(1.0)

        cluster.movers[source].driver.crash_points = KilledOnceCopied()
        body = ops.MovePartitionPayload(
            table.id, partition_id, target, cluster.addresses[target]
        ).to_json()
        with pytest.raises(ServiceUnavailable):
            await router.control(source, ops.MOVE_PARTITION, body, limits.MOVE_CALL_SECONDS_MAX)
        assert killing, f"seed {seed}: the move never copied"
        await killing[0]
        await cluster.restart_node(source)
        cluster.network.heal(cluster.addresses[source])
        await settle_all(cluster)
        # A copy its source rolled back without reaching it is dropped once abandoned.
        await asyncio.sleep(limits.MOVE_ABANDONED_SECONDS + 1)
        await settle_all(cluster)
        current = await router.read_table("Asked")
        assert current is not None
        owner = current.partition(partition_id).node
        assert owner == source, f"seed {seed}: killed before its switch, the move rolls back"
        held_by = holders(cluster, table.id, partition_id)
        assert list(held_by) == [owner], f"seed {seed}: held by {sorted(held_by)}, owner {owner}"
        assert held_by[owner].serving and held_by[owner].move is None, f"seed {seed}"
        await check(cluster, "Asked", log, f"seed {seed}")

    run(seed, scenario)
