"""Time To Live on replicated partitions (issue 27): UpdateTimeToLive's setting is each
partition's entry at its leader; only the leader's sweeper indexes and deletes, through the
group, so every replica deletes the same items (with the same REMOVE records); a new leader
sweeps after the old one dies; a replica copied from another member after a long absence copies
its own entries of the table's expiry index and leaves another partition's alone; disabling drops
exactly the partition's entries, on every replica."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar

import pytest

from dynalab.sim.cluster import START_TIME
from rpc import ops
from rpc.ops import Target
from storagenode.layout import Family, ttl_index_entry
from storagenode.raft_host import group_id
from storagenode.sweeper import TtlSweeper
from tests.sim.replicas import Replicas
from tests.sim.test_replicated_writes import REPLICAS, TABLE, run, settle

T = TypeVar("T")

# Two partitions of the table on the same three nodes, each its own group.
PARTITIONS = [
    {"id": "p0", "start": "", "end": "80", "epoch": 1, "node": "node-1", "replicas": REPLICAS},
    {"id": "p1", "start": "80", "end": None, "epoch": 1, "node": "node-2", "replicas": REPLICAS},
]
TARGETS = {p["id"]: Target(TABLE["id"], p["id"], 1) for p in PARTITIONS}
GROUPS = {p["id"]: group_id(TABLE["id"], p["id"]) for p in PARTITIONS}
EXPIRED = START_TIME - 1000  # Long expired, within the five years TTL looks back.
LATER = START_TIME + 10**6


def ttl(enabled: bool, version: int) -> dict[str, Any]:
    body = {"attribute": "expires", "enabled": enabled, "version": version}
    return ops.UpdateTtlPayload(TABLE["id"], body).to_json()


async def create_both(replicas: Replicas) -> None:
    for partition in PARTITIONS:
        for member in replicas.members:
            await replicas.submit(
                member, ops.CREATE_PARTITION, None, {"table": TABLE, "partition": partition}
            )


def where(replicas: Replicas, key: str) -> Target:
    """The target of the partition holding `key` (by the leader's metadata)."""
    node = next(iter(replicas.nodes.values()))
    for partition_id, target in TARGETS.items():
        partition = node.partitions[TABLE["id"], partition_id]
        if partition.holds(partition.key_shape.storage_key({"pk": {"S": key}})):
            return target
    raise AssertionError(key)


async def put(replicas: Replicas, key: str, expires: int | None) -> None:
    item: dict[str, Any] = {"pk": {"S": key}}
    if expires is not None:
        item["expires"] = {"N": str(expires)}
    await replicas.write(ops.PUT, where(replicas, key), {"item": item})


class Sweepers:
    """A TTL sweeper per live node, as each node's server runs one, counting the writes each
    submits."""

    def __init__(self, replicas: Replicas) -> None:
        self.replicas = replicas
        self.writes: dict[int, int] = {}

    def of(self, member: int) -> TtlSweeper:
        committer = self.replicas.committers[member]
        loop = asyncio.get_running_loop()

        async def submit(op: str, target: Target | None, body: dict[str, Any]) -> Any:
            self.writes[member] = self.writes.get(member, 0) + 1
            return await committer.submit(op, target, body)

        async def inline(work: Callable[[], T]) -> T:
            return work()

        return TtlSweeper(self.replicas.nodes[member], submit, monotonic=loop.time, offload=inline)

    async def sweep(self) -> int:
        deleted = 0
        for member in sorted(self.replicas.nodes):
            deleted += await self.of(member).sweep()
        return deleted


def keys(replicas: Replicas, member: int) -> set[str]:
    rows = replicas.data(member, (Family.ITEMS,))[Family.ITEMS]
    return {row[0].hex() for row in rows}


def entries(replicas: Replicas, member: int) -> list[bytes]:
    return [key for key, _ in replicas.data(member, (Family.TTL_INDEX,))[Family.TTL_INDEX]]


def check_alike(replicas: Replicas) -> None:
    data = [replicas.data(member) for member in sorted(replicas.nodes)]
    assert all(d == data[0] for d in data), "the replicas differ"


@pytest.mark.parametrize("seed", range(4))
def test_the_leaders_sweeper_deletes_expired_items_on_every_replica(seed: int) -> None:
    async def scenario() -> None:
        replicas = Replicas(seed, delay_seconds_max=0.005)
        sweepers = Sweepers(replicas)
        try:
            await create_both(replicas)
            # Items written before TTL is enabled: the backfill indexes them.
            for i in range(12):
                await put(replicas, f"old{i}", EXPIRED if i % 3 else LATER)
            for target in TARGETS.values():
                reply = await replicas.write(ops.UPDATE_TTL, target, ttl(True, 1))
                assert reply == {"partitions_updated": 1}
            # Written after: indexed as they are written.
            for i in range(6):
                await put(replicas, f"new{i}", EXPIRED if i % 2 else None)
            await settle(replicas, 2.0)
            for node in replicas.nodes.values():
                for partition_id in TARGETS:
                    partition = node.partitions[TABLE["id"], partition_id]
                    assert partition.ttl_attribute == "expires"
            assert await sweepers.sweep() == 8 + 3
            await settle(replicas, 2.0)
            check_alike(replicas)
            leaders = {replicas.leader_of(group) for group in GROUPS.values()}
            followers_only = [m for m in replicas.members if m not in leaders]
            assert all(sweepers.writes.get(m, 0) == 0 for m in followers_only), sweepers.writes
            for member in replicas.members:
                assert len(keys(replicas, member)) == 18 - 11
                counted = sum(
                    replicas.nodes[member].partitions[TABLE["id"], p].ttl_deleted for p in TARGETS
                )
                assert counted == 11
                # Every item left that expires is indexed, and nothing else is.
                assert len(entries(replicas, member)) == 4

            # The leader of p0 dies: the next one sweeps what expires after.
            dead = replicas.leader_of(GROUPS["p0"])
            assert dead is not None
            await replicas.kill(dead)
            for i in range(5):
                await put(replicas, f"late{i}", EXPIRED)
            await settle(replicas, 2.0)
            assert await sweepers.sweep() == 5
            await replicas.restart(dead)
            await settle(replicas, 4.0)
            check_alike(replicas)
        finally:
            await replicas.close()

    run(scenario)


@pytest.mark.parametrize("seed", range(4))
def test_a_replica_copied_after_a_long_absence_has_its_own_expiry_entries_and_no_others(
    seed: int,
) -> None:
    async def scenario() -> None:
        replicas = Replicas(seed, compact_entries=20, kept_entries=5, page_bytes=300)
        sweepers = Sweepers(replicas)
        try:
            await create_both(replicas)
            for target in TARGETS.values():
                await replicas.write(ops.UPDATE_TTL, target, ttl(True, 1))
            for i in range(10):
                await put(replicas, f"a{i}", LATER + i)
            await settle(replicas, 2.0)
            leader = replicas.leader_of(GROUPS["p0"])
            away = next(m for m in replicas.members if m != leader)
            await replicas.kill(away)
            # Enough writes to p0 alone that its log is compacted past the away member; p1's
            # entries on that member stay as they are.
            written = 0
            i = 0
            while written < 60:
                key = f"b{i}"
                i += 1
                if where(replicas, key) != TARGETS["p0"]:
                    continue
                await put(replicas, key, EXPIRED if written % 2 else LATER + written)
                written += 1
            await replicas.restart(away)
            await settle(replicas, 6.0)
            assert replicas.pages_read.get(away, 0) >= 2, "the member copied no pages"
            check_alike(replicas)
            assert await sweepers.sweep() == 30
            await settle(replicas, 2.0)
            check_alike(replicas)

            # Disabling p0's TTL drops p0's entries alone, on every replica.
            p1_entries = [
                key
                for key in entries(replicas, 1)
                if replicas.nodes[1].partitions[TABLE["id"], "p1"].holds(ttl_index_entry(key)[1])
            ]
            assert p1_entries
            await replicas.write(ops.UPDATE_TTL, TARGETS["p0"], ttl(False, 2))
            await settle(replicas, 2.0)
            check_alike(replicas)
            assert entries(replicas, 1) == p1_entries
        finally:
            await replicas.close()

    run(scenario)
