"""A seeded cluster in one process: routers, catalog, paging and writes under network faults.

Each test runs under a few seeds; the seed is printed and named in every assertion message, and
`dynalab.sim.cluster.run(seed, ...)` replays it exactly.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from core.errors import ConditionalCheckFailed, DynamoError, OutcomeUnknown, ServiceUnavailable
from dynalab.sim.cluster import SimCluster, run
from router import items, queries
from rpc.local import Faults

SEEDS = [1, 7, 42, 1234]


def ids(found: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(item["pk"]["S"], item["sk"]["N"]) for item in found]


def item(pk: str, sk: int, **attributes: str) -> dict[str, Any]:
    return {"pk": {"S": pk}, "sk": {"N": str(sk)}} | {k: {"S": v} for k, v in attributes.items()}


@pytest.mark.parametrize("seed", SEEDS)
def test_a_table_created_through_one_router_serves_through_the_other(seed: int) -> None:
    async def scenario(cluster: SimCluster) -> None:
        await cluster.create_table("Music")
        for number in range(10):
            await cluster.put("Music", item(f"a{number % 3}", number, by="router1"), router=0)
        reply = await items.get_item(
            cluster.routers[1], {"TableName": "Music", "Key": item("a1", 4)}
        )
        assert reply["Item"] == item("a1", 4, by="router1"), f"seed {seed}"
        found = await cluster.scan_all("Music", router=1)
        assert sorted(ids(found)) == sorted((f"a{n % 3}", str(n)) for n in range(10)), (
            f"seed {seed}"
        )

    run(seed, scenario)


@pytest.mark.parametrize("seed", SEEDS)
def test_query_and_scan_pages_visit_every_item_once_in_order(seed: int) -> None:
    async def scenario(cluster: SimCluster) -> None:
        await cluster.create_table("Pages")
        stored = [item(f"c{i}", j) for i in range(8) for j in range(6)]
        stored += [item("c3", j) for j in range(6, 40)]
        for entry in stored:
            await cluster.put("Pages", entry, router=seed % 2)
        everything = ids(stored)
        for limit in (1, 4, 7):
            found = ids(await cluster.scan_all("Pages", Limit=limit))
            assert sorted(found) == sorted(everything), f"seed {seed}, Scan Limit {limit}"
            for forward in (True, False):
                found = ids(
                    await cluster.read_all(
                        queries.query,
                        {
                            "TableName": "Pages",
                            "KeyConditionExpression": "pk = :p",
                            "ExpressionAttributeValues": {":p": {"S": "c3"}},
                            "ScanIndexForward": forward,
                            "Limit": limit,
                        },
                        router=1,
                    )
                )
                expected = [("c3", str(j)) for j in range(40)]
                if not forward:
                    expected.reverse()
                assert found == expected, f"seed {seed}, Query Limit {limit} forward {forward}"

    run(seed, scenario)


async def contended_writes(cluster: SimCluster) -> dict[str, Any]:
    """Writers racing under delays and duplicated calls; the history of what was acknowledged."""
    await cluster.create_table("Race")
    cluster.faults(Faults(delay=0.5, duplicate=0.5, delay_seconds_max=0.004))
    acknowledged: dict[tuple[str, str], dict[str, Any]] = {}
    winners: dict[tuple[str, str], list[str]] = {}
    refused: list[tuple[tuple[str, str], str]] = []

    async def writer(name: str) -> None:
        for number in range(12):
            own = item(f"own-{name}", number, by=name)
            await cluster.put("Race", own, router=number % 2)
            acknowledged[ids([own])[0]] = own
            shared = item("shared", number % 4, by=name)
            key = ids([shared])[0]
            try:
                await cluster.put(
                    "Race",
                    shared,
                    router=(number + 1) % 2,
                    ConditionExpression="attribute_not_exists(pk)",
                )
            except ConditionalCheckFailed:
                refused.append((key, name))
            else:
                winners.setdefault(key, []).append(name)
                acknowledged[key] = shared

    await asyncio.gather(*(writer(name) for name in ("w1", "w2", "w3")))
    cluster.faults(None)
    found = await cluster.scan_all("Race")
    return {
        "acknowledged": acknowledged,
        "winners": winners,
        "refused": refused,
        "found": found,
        "log": list(cluster.network.log),
    }


@pytest.mark.parametrize("seed", SEEDS)
def test_delays_and_duplicated_calls_keep_every_acknowledged_write(seed: int) -> None:
    history = run(seed, contended_writes)
    found = {ids([entry])[0]: entry for entry in history["found"]}
    assert found == history["acknowledged"], f"seed {seed}: end state differs from the history"
    # Each shared key was won by exactly one conditional put; the others were refused.
    for key, names in history["winners"].items():
        assert len(names) == 1, f"seed {seed}: {key} acknowledged to {names}"
    assert len(history["winners"]) == 4, f"seed {seed}"
    assert len(history["refused"]) == 3 * 12 - 4, f"seed {seed}"
    log = history["log"]
    assert any("duplicated" in entry for entry in log), f"seed {seed}: no call was duplicated"
    assert any("delayed" in entry for entry in log), f"seed {seed}: no call was delayed"


@pytest.mark.parametrize("seed", SEEDS[:2])
def test_a_seed_replays_exactly(seed: int) -> None:
    first, second = run(seed, contended_writes), run(seed, contended_writes)
    assert first == second, f"seed {seed} did not replay"


@pytest.mark.parametrize("seed", SEEDS)
def test_lost_calls_and_a_cut_node_lose_no_ack_and_apply_nothing_reported_not_applied(
    seed: int,
) -> None:
    """Every put is of its own item. A put acknowledged is there at the end; a put that failed
    as ServiceUnavailable (never sent, or refused) is not; only a put whose request or reply was
    lost may be either, and it failed as OutcomeUnknown. Reads fail as ServiceUnavailable."""

    async def scenario(cluster: SimCluster) -> None:
        await cluster.create_table("Lossy")
        cluster.faults(Faults(drop_request=0.15, drop_reply=0.15))
        acknowledged: dict[tuple[str, str], dict[str, Any]] = {}
        not_applied: set[tuple[str, str]] = set()
        unknown: set[tuple[str, str]] = set()
        read_failures: list[DynamoError] = []

        async def attempt(router: int, number: int) -> None:
            entry = item(f"k{number % 10}", number, n=str(number))
            key = ids([entry])[0]
            try:
                await cluster.put("Lossy", entry, router=router)
            except OutcomeUnknown:
                unknown.add(key)
                return
            except ServiceUnavailable:
                not_applied.add(key)
                return
            acknowledged[key] = entry
            try:
                await items.get_item(
                    cluster.routers[1 - router],
                    {"TableName": "Lossy", "Key": item(f"k{number % 10}", number)},
                )
            except DynamoError as error:
                read_failures.append(error)

        for number in range(40):
            await attempt(number % 2, number)
        victim = sorted(cluster.nodes)[seed % len(cluster.nodes)]
        cluster.network.cut(cluster.addresses[victim])
        for number in range(40, 80):
            await attempt(number % 2, number)
        try:
            await cluster.scan_all("Lossy")
        except DynamoError as error:
            read_failures.append(error)
        cluster.network.heal()
        cluster.faults(None)
        assert unknown and not_applied, f"seed {seed}: {unknown=} {not_applied=}"
        for error in read_failures:
            # ServiceUnavailable, or its NotSent (the cut node was never reached), not another.
            assert isinstance(error, ServiceUnavailable), f"seed {seed}: {error!r}"
        found = {ids([entry])[0]: entry for entry in await cluster.scan_all("Lossy")}
        lost = acknowledged.keys() - found.keys()
        assert not lost, f"seed {seed}: acknowledged writes lost: {sorted(lost)}"
        for key, entry in acknowledged.items():
            assert found[key] == entry, f"seed {seed}: {key}"
        applied = not_applied & found.keys()
        assert not applied, f"seed {seed}: writes reported not applied were: {sorted(applied)}"

    run(seed, scenario)
