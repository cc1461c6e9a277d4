"""A partition replicated on three nodes, each a member of its Raft group (issue 27, step 3):
writes planned at the leader and applied at every member from the log, the leader killed and
restarted under writes, lossy links; after healing every replica holds the same bytes, every
acknowledged write is there and no refused one is."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from core.errors import (
    ConditionalCheckFailed,
    NotPartitionLeader,
    ServiceUnavailable,
    ValidationError,
)
from dynalab.sim.cluster import VirtualTimeLoop
from rpc import ops
from rpc.ops import Target
from storagenode.layout import Family
from storagenode.raft_host import group_id
from tests.sim.replicas import Replicas

TABLE = {"id": "ab" * 16, "name": "T", "key_schema": {"hash": ["pk", "S"], "range": None}}
REPLICAS = ["node-1", "node-2", "node-3"]
PARTITION = {
    "id": "p0",
    "start": "",
    "end": None,
    "epoch": 1,
    "node": "node-1",
    "replicas": REPLICAS,
}
TARGET = Target(TABLE["id"], "p0", 1)
GROUP = group_id(TABLE["id"], "p0")


def run(scenario: Any) -> Any:
    loop = VirtualTimeLoop()
    try:
        return loop.run_until_complete(scenario())
    finally:
        loop.close()


async def create(replicas: Replicas) -> None:
    for member in replicas.members:
        await replicas.submit(
            member, ops.CREATE_PARTITION, None, {"table": TABLE, "partition": PARTITION}
        )


async def settle(replicas: Replicas, seconds: float = 5.0) -> None:
    """Let the groups catch up: time passes, the network delivers."""
    await asyncio.sleep(seconds)


def put(pk: str, **item: Any) -> dict[str, Any]:
    return {"item": {"pk": {"S": pk}, **item}}


@pytest.mark.parametrize("seed", range(6))
def test_writes_reach_every_replica_through_the_leaders_log(seed: int) -> None:
    async def scenario() -> None:
        replicas = Replicas(seed)
        try:
            await create(replicas)
            acknowledged = []
            for i in range(40):
                await replicas.write(ops.PUT, TARGET, put(f"k{i}", v={"N": str(i)}))
                acknowledged.append(f"k{i}")
            with pytest.raises(ConditionalCheckFailed):
                await replicas.write(
                    ops.PUT, TARGET, {**put("k0"), "condition": "attribute_not_exists(pk)"}
                )
            await settle(replicas)
            leader = replicas.leader_of(GROUP)
            assert leader is not None
            data = [replicas.data(member) for member in replicas.members]
            assert data[0] == data[1] == data[2]
            for member in replicas.members:
                partition = replicas.nodes[member].partitions[TABLE["id"], "p0"]
                assert partition.item_count == 40 and partition.last_seq == 40
            # A follower refuses writes, naming the leader.
            follower = next(m for m in replicas.members if m != leader)
            with pytest.raises(NotPartitionLeader) as refused:
                await replicas.submit(follower, ops.PUT, TARGET, put("x"))
            assert refused.value.leader == f"node-{leader}"
        finally:
            await replicas.close()

    run(scenario)


@pytest.mark.parametrize("seed", range(60))
def test_a_killed_leader_loses_no_acknowledged_write_and_applies_no_refused_one(
    seed: int,
) -> None:
    async def scenario() -> None:
        replicas = Replicas(seed, drop_rate=0.05, duplicate_rate=0.05, delay_seconds_max=0.02)
        outcomes: dict[str, str] = {}
        killed: list[int] = []
        try:
            await create(replicas)

            async def writer(number: int) -> None:
                for i in range(30):
                    key = f"w{number}-{i}"
                    try:
                        await replicas.write(ops.PUT, TARGET, put(key))
                        outcomes[key] = "acknowledged"
                    except NotPartitionLeader:
                        outcomes[key] = "refused"
                    except ServiceUnavailable:
                        outcomes[key] = "unknown"
                    await asyncio.sleep(0.01)

            async def killer() -> None:
                for _ in range(2):
                    await asyncio.sleep(replicas.rng.uniform(0.2, 1.0))
                    leader = replicas.leader_of(GROUP)
                    if leader is None:
                        continue
                    await replicas.kill(leader)
                    killed.append(leader)
                    await asyncio.sleep(replicas.rng.uniform(0.5, 3.0))
                    await replicas.restart(leader)

            await asyncio.gather(writer(1), writer(2), writer(3), killer())
            assert killed, f"seed {seed}: no leader was killed"
            await settle(replicas, 10.0)
            data = [replicas.data(member) for member in replicas.members]
            assert data[0] == data[1] == data[2], f"seed {seed}: replicas differ"
            leader = replicas.leader_of(GROUP)
            assert leader is not None, f"seed {seed}: no leader after healing"
            node = replicas.nodes[leader]
            partition = node.partitions[TABLE["id"], "p0"]
            present = set()
            for key, outcome in outcomes.items():
                items_key = partition.item_prefix + partition.storage_key({"pk": {"S": key}})
                found = node.store.get(Family.ITEMS, items_key) is not None
                if found:
                    present.add(key)
                if outcome == "acknowledged":
                    assert found, f"seed {seed}: acknowledged {key} lost"
                elif outcome == "refused":
                    assert not found, f"seed {seed}: refused {key} applied"
            assert sum(o == "acknowledged" for o in outcomes.values()) >= 30
            assert partition.item_count == len(present)
        finally:
            await replicas.close()

    run(scenario)


def get(pk: str) -> dict[str, Any]:
    return {"key": {"pk": {"S": pk}}}


def consistent(target: Target) -> Target:
    return Target(target.table_id, target.partition_id, target.epoch, True)


@pytest.mark.parametrize("seed", range(4))
def test_reads_strong_at_the_leader_under_its_lease_eventual_at_caught_up_followers(
    seed: int,
) -> None:
    async def scenario() -> None:
        replicas = Replicas(seed)
        try:
            await create(replicas)
            await replicas.write(ops.PUT, TARGET, put("a", v={"N": "1"}))
            await settle(replicas, 3.0)  # A lease needs a heartbeat round after an election.
            leader = replicas.leader_of(GROUP)
            assert leader is not None
            followers = [m for m in replicas.members if m != leader]
            strong = await replicas.read(leader, ops.GET, consistent(TARGET), get("a"))
            assert strong["item"] == {"pk": {"S": "a"}, "v": {"N": "1"}}
            for follower in followers:
                with pytest.raises(NotPartitionLeader) as refused:
                    replicas.nodes[follower].read(ops.GET, consistent(TARGET), get("a"))
                assert refused.value.leader == f"node-{leader}"
                eventual = replicas.nodes[follower].read(ops.GET, TARGET, get("a"))
                assert eventual["item"] == {"pk": {"S": "a"}, "v": {"N": "1"}}
            # A write acknowledged by the leader is on the followers a round trip later: the
            # leader tells them the commit at once, not at its next heartbeat.
            await replicas.write(ops.PUT, TARGET, put("a", v={"N": "2"}), at=leader)
            await asyncio.sleep(0.001)
            for follower in followers:
                eventual = replicas.nodes[follower].read(ops.GET, TARGET, get("a"))
                assert eventual["item"] == {"pk": {"S": "a"}, "v": {"N": "2"}}
            # The node's own changes to a replicated partition are refused, not applied apart
            # from its log.
            with pytest.raises(ValidationError, match="replicated"):
                await replicas.submit(
                    leader,
                    ops.UPDATE_TTL,
                    None,
                    {
                        "table_id": TABLE["id"],
                        "ttl": {"attribute": "t", "enabled": True, "version": 1},
                    },
                )
        finally:
            await replicas.close()

    run(scenario)


@pytest.mark.parametrize("seed", range(4))
def test_a_leader_cut_off_from_the_others_stops_serving_and_the_majority_goes_on(
    seed: int,
) -> None:
    async def scenario() -> None:
        replicas = Replicas(seed)
        try:
            await create(replicas)
            await replicas.write(ops.PUT, TARGET, put("a", v={"N": "1"}))
            await settle(replicas, 3.0)
            old = replicas.leader_of(GROUP)
            assert old is not None
            others = [m for m in replicas.members if m != old]
            for other in others:
                replicas.network.cut(old, other)
            # Within its lease it may still answer strong reads (no one else can lead yet);
            # once it has ended, it answers none, and a write there is never acknowledged.
            await asyncio.sleep(1.2)
            # (No answer within the read's deadline is no stale answer either.)
            with pytest.raises((NotPartitionLeader, ServiceUnavailable, TimeoutError)):
                await asyncio.wait_for(
                    replicas.read(old, ops.GET, consistent(TARGET), get("a")), 2.0
                )
            stuck = asyncio.ensure_future(
                replicas.submit(old, ops.PUT, TARGET, put("a", v={"N": "9"}))
            )
            await asyncio.sleep(3.0)
            new = next(
                m
                for m in others
                if replicas.nodes[m].replication.host.groups[GROUP].node.role.value == "leader"
            )
            await replicas.write(ops.PUT, TARGET, put("a", v={"N": "2"}), at=new)
            strong = await replicas.read(new, ops.GET, consistent(TARGET), get("a"))
            assert strong["item"]["v"] == {"N": "2"}
            replicas.network.heal()
            await settle(replicas, 5.0)
            assert stuck.done()
            with pytest.raises((NotPartitionLeader, ServiceUnavailable)):
                stuck.result()
            data = [replicas.data(member) for member in replicas.members]
            assert data[0] == data[1] == data[2]
            # The old leader, a follower again, serves eventually consistent reads once it has
            # heard from its leader within half an election timeout: awake (woken by the
            # election), it may first have to wait for the leader's group, asleep, to speak.
            node = replicas.nodes[old]
            for _ in range(40):
                try:
                    item = node.read(ops.GET, TARGET, get("a"))["item"]
                    break
                except NotPartitionLeader:
                    await asyncio.sleep(0.1)
            else:
                raise AssertionError("the old leader serves no reads 4 s after it rejoined")
            assert item["v"] == {"N": "2"}
        finally:
            await replicas.close()

    run(scenario)
