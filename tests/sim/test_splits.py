"""Partitions split under running Query and Scan walks, on real in-process nodes.

A split (`SimCluster.split`) creates two children at epoch + 1 on the parent's node, switches the
catalog to them by compare-and-set, and retires the parent, so a router still holding the old map
is refused with StaleEpoch and must refresh and retarget. The split runs between two pages or
concurrently with one (under seeded delays, so the interleaving differs per seed); either way every
item is read exactly once and in order.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from core import keycodec
from dynalab.sim.cluster import SimCluster, run, storage_key
from router import items, queries
from rpc.local import Faults

SEEDS = [3, 11, 29]
SPLIT_KEY = keycodec.encode_storage_key({"S": "c7"}, {"N": "25"})  # Inside c7's collection.
SECOND_SPLIT_KEY = keycodec.encode_storage_key({"S": "c7"}, {"N": "12"})


def stored_items() -> list[dict[str, Any]]:
    """Items under 20 partition keys, one of which (c7) holds a collection of 50."""
    found = [{"pk": {"S": f"c{i}"}, "sk": {"N": str(j)}} for i in range(20) for j in range(5)]
    return found + [{"pk": {"S": "c7"}, "sk": {"N": str(j)}} for j in range(5, 50)]


def ids(found: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(item["pk"]["S"], item["sk"]["N"]) for item in found]


async def loaded(cluster: SimCluster) -> list[dict[str, Any]]:
    await cluster.create_table("Split")
    entries = stored_items()
    for entry in entries:
        await cluster.put("Split", entry)
    cluster.faults(Faults(delay=0.5, delay_seconds_max=0.003))
    return entries


async def walk_while_splitting(
    cluster: SimCluster,
    handler: Callable[..., Awaitable[dict[str, Any]]],
    request: dict[str, Any],
    split_at_page: int,
) -> list[dict[str, Any]]:
    """Read every page through router 0; at page `split_at_page` split the partition holding
    SPLIT_KEY (through router 1) concurrently with that page, and split again two pages later."""
    found: list[dict[str, Any]] = []
    splits = {split_at_page: SPLIT_KEY, split_at_page + 2: SECOND_SPLIT_KEY}
    request = dict(request)
    for number in range(1000):
        page_call = handler(cluster.routers[0], dict(request))
        if number in splits:
            page, _ = await asyncio.gather(page_call, cluster.split("Split", splits[number], 1))
        else:
            page = await page_call
        found.extend(page["Items"])
        if "LastEvaluatedKey" not in page:
            return found
        request["ExclusiveStartKey"] = page["LastEvaluatedKey"]
    raise AssertionError(f"seed {cluster.seed}: the pages never ended")


def exactly_once_in_order(
    seed: int, found: list[dict[str, Any]], expected: list[dict[str, Any]], forward: bool
) -> None:
    keys = [storage_key(entry) for entry in found]
    assert len(keys) == len(set(keys)), f"seed {seed}: items read twice"
    assert sorted(ids(found)) == sorted(ids(expected)), f"seed {seed}: items missed"
    assert keys == sorted(keys, reverse=not forward), f"seed {seed}: items out of order"


@pytest.mark.parametrize("split_at_page", [0, 2, 5, 9, 14])
@pytest.mark.parametrize("seed", SEEDS)
def test_scan_reads_every_item_once_in_order_while_partitions_split(
    seed: int, split_at_page: int
) -> None:
    async def scenario(cluster: SimCluster) -> None:
        entries = await loaded(cluster)
        request = {"TableName": "Split", "Limit": 6}
        found = await walk_while_splitting(cluster, queries.scan, request, split_at_page)
        exactly_once_in_order(seed, found, entries, forward=True)
        await cluster.routers[0].refresh()
        partitions = (await cluster.routers[0].table("Split")).partition_defs
        assert len(partitions) == 6, f"seed {seed}: both splits should have happened"

    run(seed, scenario)


@pytest.mark.parametrize("forward", [True, False])
@pytest.mark.parametrize("split_at_page", [0, 1, 3, 5])
@pytest.mark.parametrize("seed", SEEDS)
def test_query_reads_a_collection_once_in_order_while_it_splits(
    seed: int, split_at_page: int, forward: bool
) -> None:
    async def scenario(cluster: SimCluster) -> None:
        entries = await loaded(cluster)
        request = {
            "TableName": "Split",
            "KeyConditionExpression": "pk = :p",
            "ExpressionAttributeValues": {":p": {"S": "c7"}},
            "ScanIndexForward": forward,
            "Limit": 7,
        }
        found = await walk_while_splitting(cluster, queries.query, request, split_at_page)
        collection = [entry for entry in entries if entry["pk"]["S"] == "c7"]
        exactly_once_in_order(seed, found, collection, forward)

    run(seed, scenario)


@pytest.mark.parametrize("seed", SEEDS)
def test_a_request_with_a_stale_epoch_is_retried_and_succeeds(seed: int) -> None:
    async def scenario(cluster: SimCluster) -> None:
        await loaded(cluster)
        stale = cluster.routers[0]
        cached = await stale.table("Split")
        version = stale.catalog_version
        parent, low, high = await cluster.split("Split", SPLIT_KEY, router=1)
        assert stale.catalog_version == version, f"seed {seed}: router 0 should still be stale"
        assert parent["id"] in {p.id for p in cached.partition_defs}, f"seed {seed}"
        key = {"pk": {"S": "c7"}, "sk": {"N": "30"}}  # In the high child now.
        reply = await items.get_item(stale, {"TableName": "Split", "Key": key})
        assert reply["Item"] == key, f"seed {seed}"
        assert stale.catalog_version > version, f"seed {seed}: router 0 should have refreshed"
        written = {"pk": {"S": "c7"}, "sk": {"N": "20"}, "after": {"S": "split"}}  # Low child.
        await cluster.put("Split", written, router=0)
        reply = await items.get_item(
            cluster.routers[1],
            {"TableName": "Split", "Key": {"pk": written["pk"], "sk": written["sk"]}},
        )
        assert reply["Item"] == written, f"seed {seed}"
        current = {p.id for p in (await stale.table("Split")).partition_defs}
        assert low["id"] in current and high["id"] in current, f"seed {seed}"
        assert parent["id"] not in current, f"seed {seed}"

    run(seed, scenario)
