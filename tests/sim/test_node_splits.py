"""Partitions split by their own node (`storagenode.split.Splitter`), in the seeded cluster.

The owner plans, records the split in the catalog by compare-and-set and installs the children
with the parent's retirement in one batch. These tests check the fence (a request naming the
parent's epoch is refused before it is applied, and the router retries it on the children), the
children's counters, the size trigger under concurrent writes, reads and counter increments, the
rule for item collections, and a node that dies between the catalog record and the install.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from core import limits, splits
from core.errors import DynamoError, StaleEpoch
from core.keycodec import encode_storage_key, successor
from dynalab.sim.cluster import SimCluster, run, storage_key, virtual_unix_time
from router import items, queries, tables
from rpc import ops
from rpc.local import Faults
from rpc.ops import Target
from storagenode.layout import Family, item_size_of
from storagenode.node import WRITE_OPS, StorageNode
from storagenode.split import SPLIT_INSTALL
from storagenode.throughput import NodeThroughput

SEEDS = [5, 17, 101]


def item(pk: str, sk: int, **attributes: str) -> dict[str, Any]:
    return {"pk": {"S": pk}, "sk": {"N": str(sk)}} | {k: {"S": v} for k, v in attributes.items()}


def keys(found: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(entry["pk"]["S"], entry["sk"]["N"]) for entry in found]


async def load(cluster: SimCluster, name: str, entries: list[dict[str, Any]]) -> None:
    await cluster.create_table(name)
    for entry in entries:
        await cluster.put(name, entry)


def partitions_of(cluster: SimCluster, table_id: str) -> dict[str, Any]:
    return {
        ref[1]: partition
        for node in cluster.nodes.values()
        for ref, partition in node.partitions.items()
        if ref[0] == table_id
    }


@pytest.mark.parametrize("seed", SEEDS)
def test_a_request_naming_the_parent_epoch_is_refused_before_it_is_applied(seed: int) -> None:
    async def scenario(cluster: SimCluster) -> None:
        entries = [item(f"k{n}", n) for n in range(40)]
        await load(cluster, "Fence", entries)
        table = await cluster.routers[0].read_table("Fence")
        assert table is not None
        parent_def = table.partitions[0]
        node = cluster.nodes[parent_def.node]
        parent = node.partitions[table.id, parent_def.id]
        count, size = parent.item_count, parent.size_bytes
        parent_json, low, high = await cluster.split("Fence", None, router=1)
        assert parent_json["id"] == parent_def.id, f"seed {seed}"
        children = [node.partitions[table.id, child["id"]] for child in (low, high)]
        assert sum(c.item_count for c in children) == count, f"seed {seed}"
        assert sum(c.size_bytes for c in children) == size, f"seed {seed}"
        assert all(c.item_count > 0 and c.epoch == parent.epoch + 1 for c in children)
        # A put still addressed to the parent, as a stale router sends it, is not applied.
        inside = next(e for e in entries if parent.holds(storage_key(e)))
        written = {**inside, "late": {"S": "yes"}}
        stale = ops.Target(table.id, parent_def.id, parent_def.epoch, deadline=0)
        put = ops.PutPayload(written).to_json()
        [result] = node.apply_writes([(ops.PUT, stale, put)])
        assert isinstance(result, StaleEpoch), f"seed {seed}: {result!r}"
        with pytest.raises(StaleEpoch):
            node.check_target(ops.GET, stale)
        key = {"pk": inside["pk"], "sk": inside["sk"]}
        got = await items.get_item(cluster.routers[1], {"TableName": "Fence", "Key": key})
        assert got["Item"] == inside, f"seed {seed}: the refused put was applied"
        # Router 0 still maps the parent: it is refused, refreshes and lands on a child.
        await cluster.put("Fence", written, router=0)
        got = await items.get_item(cluster.routers[1], {"TableName": "Fence", "Key": key})
        assert got["Item"] == written, f"seed {seed}"

    run(seed, scenario)


@pytest.mark.parametrize("seed", SEEDS)
def test_the_size_trigger_splits_under_writes_reads_and_counters(seed: int) -> None:
    async def scenario(cluster: SimCluster) -> None:
        await cluster.create_table("Grow")
        cluster.faults(Faults(delay=0.3, delay_seconds_max=0.002))
        for splitter in cluster.splitters.values():
            splitter.split_bytes = 600
        acknowledged: dict[tuple[str, str], dict[str, Any]] = {}
        increments: dict[str, int] = {}
        done = asyncio.Event()

        async def writer(number: int) -> None:
            for n in range(60):
                entry = item(f"w{number}-{n % 23}", n, pad="x" * 40)
                await cluster.put("Grow", entry, router=n % 2)
                acknowledged[keys([entry])[0]] = entry

        async def counter(number: int) -> None:
            name = f"counter{number}"
            for n in range(40):
                await items.update_item(
                    cluster.routers[n % 2],
                    {
                        "TableName": "Grow",
                        "Key": item(name, 0),
                        "UpdateExpression": "ADD hits :one",
                        "ExpressionAttributeValues": {":one": {"N": "1"}},
                    },
                )
                increments[name] = increments.get(name, 0) + 1

        async def reader() -> None:
            while not done.is_set():
                found = await cluster.scan_all("Grow", Limit=7)
                assert len(set(keys(found))) == len(found), f"seed {seed}: scanned twice"
                await asyncio.sleep(0.01)

        async def splitting() -> None:
            while not done.is_set():
                for splitter in cluster.splitters.values():
                    await splitter.split_oversized()
                await asyncio.sleep(0.005)

        background = [asyncio.ensure_future(reader()), asyncio.ensure_future(splitting())]
        await asyncio.gather(*(writer(n) for n in range(3)), *(counter(n) for n in range(2)))
        done.set()
        await asyncio.gather(*background)
        for _ in range(10):  # Each pass splits a partition once; a large child waits a pass.
            for splitter in cluster.splitters.values():
                await splitter.split_oversized()
        table = await cluster.routers[0].read_table("Grow")
        assert table is not None
        assert len(table.partitions) >= 10, f"seed {seed}: {len(table.partitions)} partitions"
        held = partitions_of(cluster, table.id)
        assert sorted(held) == sorted(p.id for p in table.partitions), f"seed {seed}"
        assert all(p.size_bytes <= 600 for p in held.values()), f"seed {seed}"
        found = await cluster.scan_all("Grow", Limit=5)
        stored = {k: e for k, e in zip(keys(found), found, strict=True)}
        assert len(stored) == len(found), f"seed {seed}: an item scanned twice"
        for key, entry in acknowledged.items():
            assert stored.get(key) == entry, f"seed {seed}: {key} lost"
        for name, count in increments.items():
            assert stored[name, "0"]["hits"] == {"N": str(count)}, f"seed {seed}: {name}"

    run(seed, scenario)


@pytest.mark.parametrize("seed", SEEDS)
def test_one_large_item_collection_splits_between_sort_keys(seed: int) -> None:
    async def scenario(cluster: SimCluster) -> None:
        entries = [item("big", n, pad="y" * 50) for n in range(80)]
        await load(cluster, "Big", entries)
        for _ in range(10):
            for splitter in cluster.splitters.values():
                splitter.split_bytes = 1500
                await splitter.split_oversized()
        table = await cluster.routers[0].read_table("Big")
        assert table is not None
        holding = {p.id for e in entries for p in table.partitions if p.holds(storage_key(e))}
        assert len(holding) >= 4, f"seed {seed}: the collection should split several times"
        for forward in (True, False):
            found = await cluster.read_all(
                queries.query,
                {
                    "TableName": "Big",
                    "KeyConditionExpression": "pk = :p",
                    "ExpressionAttributeValues": {":p": {"S": "big"}},
                    "ScanIndexForward": forward,
                    "Limit": 9,
                },
            )
            numbers = [int(entry["sk"]["N"]) for entry in found]
            assert numbers == sorted(range(80), reverse=not forward), f"seed {seed}"

    run(seed, scenario)


@pytest.mark.parametrize("seed", SEEDS[:1])
def test_a_table_with_a_local_index_never_splits_inside_a_collection(seed: int) -> None:
    async def scenario(cluster: SimCluster) -> None:
        await tables.create_table(
            cluster.routers[0],
            {
                "TableName": "Local",
                "KeySchema": [
                    {"AttributeName": "pk", "KeyType": "HASH"},
                    {"AttributeName": "sk", "KeyType": "RANGE"},
                ],
                "AttributeDefinitions": [
                    {"AttributeName": "pk", "AttributeType": "S"},
                    {"AttributeName": "sk", "AttributeType": "N"},
                    {"AttributeName": "other", "AttributeType": "S"},
                ],
                "LocalSecondaryIndexes": [
                    {
                        "IndexName": "byOther",
                        "KeySchema": [
                            {"AttributeName": "pk", "KeyType": "HASH"},
                            {"AttributeName": "other", "KeyType": "RANGE"},
                        ],
                        "Projection": {"ProjectionType": "ALL"},
                    }
                ],
                "BillingMode": "PAY_PER_REQUEST",
            },
        )
        for n in range(30):
            await cluster.put("Local", item("one", n, other=f"o{n:03}"))
        table = await cluster.routers[0].read_table("Local")
        assert table is not None
        owner = next(p for p in table.partitions if p.holds(storage_key(item("one", 0))))
        splitter = cluster.splitters[owner.node]
        with pytest.raises(splits.SplitRefused, match="local secondary index"):
            await splitter.split(table.id, owner.id)
        with pytest.raises(splits.SplitRefused, match="first key of an item collection"):
            await splitter.split(table.id, owner.id, storage_key(item("one", 15)))
        splitter.split_bytes = 100
        await splitter.split_oversized()
        after = await cluster.routers[0].read_table("Local")
        assert after is not None and after.partitions == table.partitions, f"seed {seed}"
        # A second collection in the partition gives a boundary: the split falls on it, and
        # each child counts the index entries of its own collection.
        second = next(
            f"two{n}" for n in range(1000) if owner.holds(storage_key(item(f"two{n}", 0)))
        )
        for n in range(30):
            await cluster.put("Local", item(second, n, other=f"p{n:03}"))
        reply = await splitter.split(table.id, owner.id)
        starts = {child["start"] for child in reply["children"]}
        assert encode_storage_key({"S": max("one", second, key=collection_start)}, None).hex() in (
            starts
        ), f"seed {seed}"
        held = partitions_of(cluster, table.id)
        counts = [held[child["id"]].index_stats["byOther"][0] for child in reply["children"]]
        assert counts == [30, 30], f"seed {seed}"
        found = await cluster.read_all(
            queries.query,
            {
                "TableName": "Local",
                "IndexName": "byOther",
                "KeyConditionExpression": "pk = :p",
                "ExpressionAttributeValues": {":p": {"S": "one"}},
            },
        )
        assert len(found) == 30, f"seed {seed}"

    run(seed, scenario)


def collection_start(pk: str) -> bytes:
    return encode_storage_key({"S": pk}, None)


class Crash(Exception):
    """The node died at this point."""


@pytest.mark.parametrize("seed", SEEDS)
def test_a_split_recorded_but_not_installed_completes_when_the_node_restarts(seed: int) -> None:
    async def scenario(cluster: SimCluster) -> None:
        entries = [item(f"r{n}", n) for n in range(30)]
        await load(cluster, "Restart", entries)
        table = await cluster.routers[0].read_table("Restart")
        assert table is not None
        parent = table.partitions[1]
        splitter = cluster.splitters[parent.node]

        submit = splitter.submit

        async def die(op: str, target: Target | None, body: dict[str, Any]) -> dict[str, Any]:
            if op == SPLIT_INSTALL:
                raise Crash(op)
            return await submit(op, target, body)  # The pin before it changes nothing.

        splitter.submit = die
        with pytest.raises(Crash):
            await splitter.split(table.id, parent.id)
        recorded = await cluster.routers[1].read_table("Restart")
        assert recorded is not None and parent not in recorded.partitions, f"seed {seed}"
        # The node restarts on the same store: its splitter installs what the catalog recorded.
        store = cluster.stores[parent.node]
        restarted = StorageNode(
            store, throughput=NodeThroughput(enforced=False), clock=virtual_unix_time
        )
        cluster.network.register(cluster.addresses[parent.node], restarted, WRITE_OPS)
        cluster.nodes[parent.node] = restarted
        await splitter.close()
        cluster.splitters[parent.node] = cluster.splitter(restarted)
        await cluster.splitters[parent.node].recover()
        held = partitions_of(cluster, table.id)
        assert sorted(held) == sorted(p.id for p in recorded.partitions), f"seed {seed}"
        found = await cluster.scan_all("Restart", Limit=4)
        assert sorted(keys(found)) == sorted(keys(entries)), f"seed {seed}"
        await cluster.splitters[parent.node].recover()  # Again: nothing more to do.
        assert partitions_of(cluster, table.id).keys() == held.keys(), f"seed {seed}"

    run(seed, scenario)


@pytest.mark.parametrize("seed", SEEDS)
def test_a_split_that_cannot_reach_the_catalog_changes_nothing(seed: int) -> None:
    async def scenario(cluster: SimCluster) -> None:
        entries = [item(f"u{n}", n) for n in range(30)]
        await load(cluster, "Unreached", entries)
        table = await cluster.routers[0].read_table("Unreached")
        assert table is not None
        catalog_node = cluster.routers[0].catalog_node
        parent = next(p for p in table.partitions if p.node != catalog_node)
        splitter = cluster.splitters[parent.node]
        assert catalog_node is not None
        cluster.network.cut(cluster.addresses[catalog_node])
        with pytest.raises(DynamoError):
            await splitter.split(table.id, parent.id)
        cluster.network.heal()
        await splitter.recover()
        after = await cluster.routers[1].read_table("Unreached")
        assert after is not None and after.partitions == table.partitions, f"seed {seed}"
        assert sorted(partitions_of(cluster, table.id)) == sorted(p.id for p in table.partitions)
        found = await cluster.scan_all("Unreached")
        assert sorted(keys(found)) == sorted(keys(entries)), f"seed {seed}"

    run(seed, scenario)


def walked(node: Any, partition: Any) -> tuple[int, int, dict[str, list[int]]]:
    """A partition's items, bytes and local index [entries, bytes], counted from the store."""

    def bounds(prefix: bytes) -> tuple[bytes, bytes]:
        end = successor(prefix) if partition.end is None else prefix + partition.end
        assert end is not None
        return prefix + partition.start, end

    found = list(node.store.walk(Family.ITEMS, *bounds(partition.item_prefix), forward=True))
    entries = {
        name: [
            (1, item_size_of(value) + limits.INDEX_ENTRY_OVERHEAD_BYTES)
            for _, value in node.store.walk(Family.INDEX_ENTRIES, *bounds(prefix), forward=True)
        ]
        for name, (prefix, _) in partition.index_layout.items()
    }
    return (
        len(found),
        sum(item_size_of(value) for _, value in found),
        {name: [len(rows), sum(size for _, size in rows)] for name, rows in entries.items()},
    )


@pytest.mark.parametrize("seed", SEEDS)
def test_children_count_exactly_what_was_written_while_the_split_read_off_the_writer(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The low child is counted from the pinned state off the writer thread and carried over
    the writes since: writes after the pin, after the plan and just before the install, on
    both sides, inserts, overwrites and deletes, with a local index, all land in the counts."""

    async def scenario(cluster: SimCluster) -> None:
        await cluster.create_table("Exact", lsi="other")
        owner_key = storage_key(item("c0", 0))
        table = await cluster.routers[0].read_table("Exact")
        assert table is not None
        owner = next(p for p in table.partitions if p.holds(owner_key))
        names = [f"c{n}" for n in range(400) if owner.holds(storage_key(item(f"c{n}", 0)))][:12]
        for pk in names:
            for sk in range(3):
                await cluster.put("Exact", item(pk, sk, other=f"o{sk}", pad="x" * sk))
        node = cluster.nodes[owner.node]
        splitter = cluster.splitters[owner.node]
        submit, offload = splitter.submit, splitter.offload
        rounds = iter(range(100))

        async def write_some() -> None:
            round_ = next(rounds)
            for n, pk in enumerate(names):
                if (n + round_) % 3 == 0:
                    await cluster.put("Exact", item(pk, 10 + round_, other="new", pad="y" * n))
                elif (n + round_) % 3 == 1:
                    await cluster.put("Exact", item(pk, 1, pad="z" * (n + round_)))
                else:
                    key = {"pk": {"S": pk}, "sk": {"N": str(round_ % 3)}}
                    await items.delete_item(cluster.routers[0], {"TableName": "Exact", "Key": key})

        async def staged_offload(work: Callable[[], Any]) -> Any:
            await write_some()  # After the pin (the plan's read), after the record (catch-up).
            return await offload(work)

        async def staged_submit(
            op: str, target: Target | None, body: dict[str, Any]
        ) -> dict[str, Any]:
            if op == SPLIT_INSTALL:
                await write_some()  # Between the catch-up and the install.
            return await submit(op, target, body)

        splitter.offload = staged_offload  # type: ignore[assignment]
        splitter.submit = staged_submit
        monkeypatch.setattr(limits, "SPLIT_FOLLOW_ROWS_MAX", 2)  # Read the log as it walks.
        reply = await splitter.split(table.id, owner.id)
        assert next(rounds) == 3, f"seed {seed}: writes at each of the three stages"
        for child in reply["children"]:
            partition = node.partitions[table.id, child["id"]]
            expected = walked(node, partition)
            got = (partition.item_count, partition.size_bytes, partition.index_stats)
            assert got == expected, f"seed {seed}: {child['id']}"
            assert partition.item_count > 0, f"seed {seed}"

    run(seed, scenario)
