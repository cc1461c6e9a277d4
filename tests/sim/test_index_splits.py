"""Global index partitions split by their own node, in the seeded cluster.

The sim runs no replicator: the tests send `index_apply` as the replicator does (projected by
`core.gsi.project_change`, placed by `core.gsi.route` on the catalog as read) and check what a
split of an index partition carries to its children: the per-source seq (a replay after the
split changes nothing), the lease-epoch fence (an older holder's write is still refused), exact
counts (also with index writes landing while the split plans), the refusal of the retired
parent, a restart between the catalog record and the install, and Query through a router that
still maps the parent: every entry once, in order, across pages.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from core import gsi
from core.catalog import TableDef
from core.errors import DynamoError, LeaseFenced, StaleEpoch
from dynalab.sim.cluster import SimCluster, run, virtual_unix_time
from router import queries, tables
from rpc import ops
from rpc.ops import Target
from storagenode.layout import Family, index_source_key, index_source_of, item_size_of
from storagenode.node import WRITE_OPS, StorageNode
from storagenode.split import SPLIT_INSTALL
from storagenode.throughput import NodeThroughput

SEEDS = [5, 17, 101]
SOURCE = "base-partition-0"  # The base partition the writes pretend to come from.
LEASE_EPOCH = 3


def entry(number: int, group: str = "hot") -> dict[str, Any]:
    return {"pk": {"S": f"p{number}"}, "g": {"S": group}, "n": {"N": str(number)}}


async def apply(
    cluster: SimCluster,
    name: str,
    changes: list[tuple[int, dict[str, Any] | None, dict[str, Any] | None]],
    lease_epoch: int = LEASE_EPOCH,
    routed_on: TableDef | None = None,
) -> list[dict[str, Any]]:
    """Send (seq, old, new) changes to the index partitions as the replicator does, placed on
    the catalog as read now (or as `routed_on` has it); each partition's reply."""
    table = routed_on or await cluster.routers[1].read_table(name)
    assert table is not None
    writes = [
        write
        for seq, old, new in changes
        for write in gsi.project_change(seq, old, new, table.indexes, table.key_shape)
    ]
    replies = []
    for (index_id, partition_id, epoch, node), routed in gsi.route(writes, table).items():
        payload = ops.IndexApplyPayload.of(SOURCE, routed, lease_epoch=lease_epoch).to_json()
        target = ops.Target(index_id, partition_id, epoch, deadline=0)
        [reply] = cluster.nodes[node].apply_writes([(ops.INDEX_APPLY, target, payload)])
        if isinstance(reply, DynamoError):
            raise reply
        replies.append(ops.part_outcome(reply["parts"][0]))
    return replies


def walked(cluster: SimCluster, node: str, index_id: str, partition_id: str) -> tuple[int, int]:
    """A partition's (entries, bytes) counted from the store, as the install's walk counts."""
    partition = cluster.nodes[node].partitions[index_id, partition_id]
    prefix = partition.item_prefix
    hi = prefix + partition.end if partition.end is not None else prefix + b"\xff" * 40
    count = size = 0
    for _, value in cluster.stores[node].walk(
        Family.ITEMS, prefix + partition.start, hi, forward=True
    ):
        count += 1
        size += item_size_of(value)
    return count, size


async def index_query(cluster: SimCluster, name: str, router: int) -> list[str]:
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
    return [item["n"]["N"] for item in found]


def hot_partition(table: TableDef) -> Any:
    """The index partition holding the "hot" group's entries (one collection: it splits by
    the index sort key and the table key)."""
    index = table.indexes[0]
    key = index.key_shape.storage_key({"g": {"S": "hot"}, "n": {"N": "0"}})
    return next(p for p in index.partitions if p.holds(key))


@pytest.mark.parametrize("seed", SEEDS)
def test_children_carry_the_source_seq_the_fence_and_exact_counts(seed: int) -> None:
    async def scenario(cluster: SimCluster) -> None:
        table = await cluster.create_indexed("Carry")
        entries = [entry(n) for n in range(50)]
        await apply(cluster, "Carry", [(n + 1, None, e) for n, e in enumerate(entries)])
        index_id = table.indexes[0].table_id
        assert index_id is not None
        parent = hot_partition(table)
        node = cluster.nodes[parent.node]
        held = node.partitions[index_id, parent.id]
        count, size = held.item_count, held.size_bytes
        assert count == 50, f"seed {seed}"
        # Router 0 maps the index's partitions before the split.
        assert await index_query(cluster, "Carry", 0) == [str(n) for n in range(50)]
        reply = await cluster.splitters[parent.node].split(index_id, parent.id)
        low, high = (child["id"] for child in reply["children"])
        children = [node.partitions[index_id, c] for c in (low, high)]
        assert all(c.epoch == parent.epoch + 1 for c in children), f"seed {seed}"
        # Each child meters half the parent's share of the index's throughput.
        assert held.throughput is not None
        halves = 2 * held.throughput["partition_count"]
        assert all(c.throughput and c.throughput["partition_count"] == halves for c in children)
        assert [c.item_count for c in children] != [count, 0], f"seed {seed}: no halving"
        assert sum(c.item_count for c in children) == count, f"seed {seed}"
        assert sum(c.size_bytes for c in children) == size, f"seed {seed}"
        for child in children:
            assert (child.item_count, child.size_bytes) == walked(
                cluster, parent.node, index_id, child.partition_id
            ), f"seed {seed}"
            stored = node.store.get(
                Family.INDEX_SOURCES, index_source_key(index_id, child.partition_id, SOURCE)
            )
            assert stored is not None and index_source_of(stored) == (50, LEASE_EPOCH)
        gone = node.store.get(Family.INDEX_SOURCES, index_source_key(index_id, parent.id, SOURCE))
        assert gone is None, f"seed {seed}: the parent's source rows stayed"
        # The catalog records the children with lineage.
        after = await cluster.routers[1].read_table("Carry")
        assert after is not None
        assert [p.id for p in after.indexes[0].retired] == [parent.id]
        assert {low, high} <= {p.id for p in after.indexes[0].partitions}
        # The retired parent refuses the replicator's write before applying it.
        stale = ops.Target(index_id, parent.id, parent.epoch, deadline=0)
        late = ops.IndexApplyPayload.of(
            SOURCE, [{"seq": 51, "delete": None, "put": entry(99)}], lease_epoch=LEASE_EPOCH
        )
        [result] = node.apply_writes([(ops.INDEX_APPLY, stale, late.to_json())])
        assert isinstance(result, StaleEpoch), f"seed {seed}: {result!r}"
        # A replay of everything, routed on the new catalog, changes nothing on the children.
        replayed = await apply(cluster, "Carry", [(n + 1, None, e) for n, e in enumerate(entries)])
        assert all(r["applied"] == 0 for r in replayed), f"seed {seed}: {replayed}"
        # A replicator that lost the lease before the split is still fenced on a child.
        with pytest.raises(LeaseFenced):
            await apply(cluster, "Carry", [(51, None, entry(51))], lease_epoch=LEASE_EPOCH - 1)
        # New changes land on the children, and router 0 (still mapping the parent) reads
        # every entry once, in order, across pages.
        await apply(cluster, "Carry", [(51, None, entry(51)), (52, entry(3), None)])
        expected = [str(n) for n in [*range(50), 51] if n != 3]
        assert await index_query(cluster, "Carry", 0) == expected, f"seed {seed}"
        assert await index_query(cluster, "Carry", 1) == expected, f"seed {seed}"
        described = await tables.describe_table(cluster.routers[1], {"TableName": "Carry"})
        [index] = described["Table"]["GlobalSecondaryIndexes"]
        total = (
            walked(cluster, parent.node, index_id, low)[0]
            + walked(cluster, parent.node, index_id, high)[0]
        )
        assert index["ItemCount"] == total == 50, f"seed {seed}"

    run(seed, scenario)


@pytest.mark.parametrize("seed", SEEDS)
def test_index_writes_during_the_split_are_counted_exactly(seed: int) -> None:
    async def scenario(cluster: SimCluster) -> None:
        table = await cluster.create_indexed("During")
        await apply(cluster, "During", [(n + 1, None, entry(n)) for n in range(40)])
        index_id = table.indexes[0].table_id
        assert index_id is not None
        parent = hot_partition(table)
        node = cluster.nodes[parent.node]
        splitter = cluster.splitters[parent.node]
        submit = splitter.submit
        seq = 40

        async def write_meanwhile(
            op: str, target: Target | None, body: dict[str, Any]
        ) -> dict[str, Any]:
            # Between the pin and the plan, and again just before the install: overwrites,
            # deletes and new entries on both sides of wherever the split falls.
            nonlocal seq
            if op == SPLIT_INSTALL:
                changes = [(seq + 1, entry(5), None), (seq + 2, None, entry(200))]
            else:
                changes = [
                    (seq + 1, entry(7), {**entry(7), "pad": {"S": "x" * 300}}),
                    (seq + 2, entry(30), None),
                    (seq + 3, None, entry(100)),
                ]
            seq += len(changes)
            # Until the install the node holds the parent only: the writes still go there.
            await apply(cluster, "During", changes, routed_on=table)
            return await submit(op, target, body)

        splitter.submit = write_meanwhile
        reply = await splitter.split(index_id, parent.id)
        splitter.submit = submit
        for child in reply["children"]:
            partition = node.partitions[index_id, child["id"]]
            assert (partition.item_count, partition.size_bytes) == walked(
                cluster, parent.node, index_id, child["id"]
            ), f"seed {seed}"
        expected = sorted([n for n in range(40) if n not in (5, 30)] + [100, 200])
        assert await index_query(cluster, "During", 1) == [str(n) for n in expected]

    run(seed, scenario)


class Crash(Exception):
    """The node died at this point."""


@pytest.mark.parametrize("seed", SEEDS)
def test_an_index_split_recorded_but_not_installed_completes_on_restart(seed: int) -> None:
    async def scenario(cluster: SimCluster) -> None:
        table = await cluster.create_indexed("Restart")
        await apply(cluster, "Restart", [(n + 1, None, entry(n)) for n in range(30)])
        index_id = table.indexes[0].table_id
        assert index_id is not None
        parent = hot_partition(table)
        splitter = cluster.splitters[parent.node]
        submit = splitter.submit

        async def die(op: str, target: Target | None, body: dict[str, Any]) -> dict[str, Any]:
            if op == SPLIT_INSTALL:
                raise Crash(op)
            return await submit(op, target, body)

        splitter.submit = die
        with pytest.raises(Crash):
            await splitter.split(index_id, parent.id)
        recorded = await cluster.routers[1].read_table("Restart")
        assert recorded is not None and parent not in recorded.indexes[0].partitions
        store = cluster.stores[parent.node]
        restarted = StorageNode(
            store, throughput=NodeThroughput(enforced=False), clock=virtual_unix_time
        )
        cluster.network.register(cluster.addresses[parent.node], restarted, WRITE_OPS)
        cluster.nodes[parent.node] = restarted
        await splitter.close()
        cluster.splitters[parent.node] = cluster.splitter(restarted)
        await cluster.splitters[parent.node].recover()
        held = {ref[1] for ref in restarted.partitions if ref[0] == index_id}
        assert held == {p.id for p in recorded.indexes[0].partitions if p.node == parent.node}
        children = [p for p in recorded.indexes[0].partitions if p.parent == parent.id]
        for child in children:
            partition = restarted.partitions[index_id, child.id]
            assert (partition.item_count, partition.size_bytes) == walked(
                cluster, parent.node, index_id, child.id
            ), f"seed {seed}"
        replayed = await apply(cluster, "Restart", [(n + 1, None, entry(n)) for n in range(30)])
        assert all(r["applied"] == 0 for r in replayed), f"seed {seed}"
        assert await index_query(cluster, "Restart", 0) == [str(n) for n in range(30)]
        await asyncio.sleep(0)

    run(seed, scenario)
