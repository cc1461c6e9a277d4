"""A member behind its leader's compacted log copies its replica from another member
(`storagenode/snapshots.py`): the copy is fuzzy (read from a live replica while writes go on)
and caught up from the log after the snapshot's index; a member killed in the middle of a copy
resumes it; a copy being made serves no read; after healing every replica holds the same bytes,
every acknowledged write is there and no refused one is."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from core.errors import NotPartitionLeader, ServiceUnavailable
from rpc import ops
from storagenode.layout import Family
from tests.sim.replicas import Replicas
from tests.sim.test_replicated_writes import GROUP, TABLE, TARGET, create, get, put, run

COMPACT, KEPT, PAGE_BYTES = 20, 5, 400


def compacting(seed: int, **network: Any) -> Replicas:
    return Replicas(
        seed, compact_entries=COMPACT, kept_entries=KEPT, page_bytes=PAGE_BYTES, **network
    )


async def wait_for(condition: Any, seconds: float, what: str) -> None:
    async with asyncio.timeout(seconds):
        while not condition():
            await asyncio.sleep(0.05)
    assert condition(), what


def first_index(replicas: Replicas, member: int) -> int:
    return replicas.nodes[member].replication.host.groups[GROUP].storage.first_index()


async def churn(replicas: Replicas, prefix: str, count: int, outcomes: dict[str, str]) -> None:
    """Puts, overwrites and deletes of a few keys (what a fuzzy copy must get right: a key a
    page read before a later entry changed it), recording each put's outcome."""
    for i in range(count):
        key = f"{prefix}{i % 7}"
        try:
            if i % 5 == 4:
                await replicas.write(ops.DELETE, TARGET, get(key))
                outcomes[key] = "deleted"
            else:
                item = put(key, v={"N": str(i)}, pad={"S": "x" * 60})
                await replicas.write(ops.PUT, TARGET, item)
                outcomes[key] = f"acknowledged {i}"
        except (NotPartitionLeader, ServiceUnavailable):
            outcomes[key] = "unknown"
        await asyncio.sleep(0.01)


def check_replicas(replicas: Replicas, outcomes: dict[str, str], seed: int) -> None:
    data = [replicas.data(member) for member in replicas.members]
    assert data[0] == data[1] == data[2], f"seed {seed}: replicas differ"
    leader = replicas.leader_of(GROUP)
    assert leader is not None, f"seed {seed}: no leader after healing"
    node = replicas.nodes[leader]
    partition = node.partitions[TABLE["id"], "p0"]
    for key, outcome in outcomes.items():
        reply = node.read(ops.GET, TARGET, get(key))
        if outcome == "deleted":
            assert reply["item"] is None, f"seed {seed}: deleted {key} is back"
        elif outcome.startswith("acknowledged"):
            assert reply["item"] is not None, f"seed {seed}: acknowledged {key} lost"
            assert reply["item"]["v"] == {"N": outcome.split()[1]}, f"seed {seed}: {key} stale"
    for member in replicas.members:
        assert replicas.nodes[member].partitions[TABLE["id"], "p0"].item_count == (
            partition.item_count
        )


@pytest.mark.parametrize("seed", range(8))
def test_a_member_behind_the_compacted_log_copies_its_replica_while_writes_go_on(
    seed: int,
) -> None:
    async def scenario() -> None:
        replicas = compacting(seed)
        outcomes: dict[str, str] = {}
        try:
            await create(replicas)
            await churn(replicas, "a", 10, outcomes)
            await asyncio.sleep(2.0)
            leader = replicas.leader_of(GROUP)
            assert leader is not None
            away = next(member for member in replicas.members if member != leader)
            await replicas.kill(away)
            await churn(replicas, "b", 3 * COMPACT, outcomes)
            assert first_index(replicas, leader) > 1, "the leader compacted its log"
            await replicas.restart(away)
            # Writes go on while the member copies: its pages are read from a live replica.
            await churn(replicas, "c", 30, outcomes)
            await asyncio.sleep(5.0)
            assert replicas.pages_read.get(away, 0) >= 2, f"seed {seed}: no copy in pages"
            assert not replicas.nodes[away].replication.installs
            check_replicas(replicas, outcomes, seed)
        finally:
            await replicas.close()

    run(scenario)


@pytest.mark.parametrize("seed", range(6))
def test_a_member_killed_mid_copy_resumes_it_and_serves_no_read_until_whole(seed: int) -> None:
    async def scenario() -> None:
        replicas = compacting(seed)
        outcomes: dict[str, str] = {}
        try:
            await create(replicas)
            await churn(replicas, "a", 40, outcomes)
            await asyncio.sleep(2.0)
            leader = replicas.leader_of(GROUP)
            assert leader is not None
            away = next(member for member in replicas.members if member != leader)
            await replicas.kill(away)
            await churn(replicas, "b", 3 * COMPACT, outcomes)
            await replicas.restart(away)
            node = replicas.nodes[away]
            await wait_for(lambda: replicas.pages_read.get(away, 0) >= 1, 10.0, "a copy began")
            assert node.replication.installs, f"seed {seed}: the copy ended in one page"
            # A copy being made serves no read, eventual or strong.
            with pytest.raises(NotPartitionLeader):
                node.read(ops.GET, TARGET, get("a1"))
            # Killed in the middle of the copy, it resumes where its record says, not from the
            # start of the replica.
            await replicas.kill(away)
            read_before = replicas.pages_read[away]
            await replicas.restart(away)
            (resumed,) = replicas.nodes[away].replication.installs.values()
            assert (resumed.range, resumed.key) != (0, b""), f"seed {seed}: the copy starts over"
            await churn(replicas, "c", 20, outcomes)
            await asyncio.sleep(5.0)
            assert not replicas.nodes[away].replication.installs
            assert replicas.pages_read[away] > read_before
            check_replicas(replicas, outcomes, seed)
        finally:
            await replicas.close()

    run(scenario)


@pytest.mark.parametrize("seed", range(24))
def test_kills_of_any_member_over_a_lossy_network_with_compacting_logs(seed: int) -> None:
    async def scenario() -> None:
        replicas = compacting(seed, drop_rate=0.05, duplicate_rate=0.05, delay_seconds_max=0.02)
        outcomes: dict[str, str] = {}
        killed: list[int] = []
        try:
            await create(replicas)

            async def killer() -> None:
                for _ in range(3):
                    await asyncio.sleep(replicas.rng.uniform(0.3, 1.5))
                    alive = sorted(replicas.nodes)
                    if len(alive) < 3:
                        continue
                    victim = replicas.rng.choice(alive)
                    await replicas.kill(victim)
                    killed.append(victim)
                    await asyncio.sleep(replicas.rng.uniform(0.5, 3.0))
                    await replicas.restart(victim)

            await asyncio.gather(
                churn(replicas, "x", 60, outcomes),
                churn(replicas, "y", 60, outcomes),
                killer(),
            )
            assert killed, f"seed {seed}: no member was killed"
            await asyncio.sleep(10.0)
            for member in replicas.members:
                assert not replicas.nodes[member].replication.installs, f"seed {seed}: a copy hung"
            check_replicas(replicas, outcomes, seed)
            leader = replicas.leader_of(GROUP)
            assert leader is not None
            items = replicas.data(leader, [Family.ITEMS])[Family.ITEMS]
            assert items, f"seed {seed}: nothing was written"
        finally:
            await replicas.close()

    run(scenario)
