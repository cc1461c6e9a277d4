"""A replicated partition's throughput settings (UpdateTable) change through its Raft group
(issue 27): update_throughput addressed to the partition is an entry proposed at its leader and
applied by every replica, so every replica's metadata and token buckets take the new settings,
the leader elected after the old one dies serves with them, a late retry of an older version
changes nothing, and the control-plane form, which would change a replica outside its log, is
refused and changes nothing."""

from __future__ import annotations

from typing import Any

import pytest

from core.errors import NotPartitionLeader, ValidationError
from rpc import ops
from rpc.ops import Target
from storagenode.layout import Family
from tests.sim.replicas import Replicas
from tests.sim.test_replicated_writes import GROUP, TABLE, TARGET, create, put, run, settle

REF = (TABLE["id"], "p0")


def throughput(version: int, write: int) -> dict[str, Any]:
    return {
        "billing_mode": "PROVISIONED",
        "read": 40,
        "write": write,
        "partition_count": 1,
        "version": version,
    }


def update(document: dict[str, Any]) -> dict[str, Any]:
    return ops.UpdateThroughputPayload(TABLE["id"], document).to_json()


def settings(replicas: Replicas) -> dict[int, dict[str, Any] | None]:
    """Each live replica's partition settings, as its readers and buckets see them."""
    return {member: node.partitions[REF].throughput for member, node in replicas.nodes.items()}


def rates(replicas: Replicas) -> dict[int, float]:
    """Each live replica's write bucket rate for the partition (`NodeThroughput.report`)."""
    return {
        member: node.throughput.report(TABLE["id"])["partitions"][0]["write"]["rate_per_second"]
        for member, node in replicas.nodes.items()
    }


@pytest.mark.parametrize("seed", range(4))
def test_a_replicated_partitions_throughput_changes_on_every_replica_through_its_log(
    seed: int,
) -> None:
    async def scenario() -> None:
        replicas = Replicas(seed, delay_seconds_max=0.005, throttling=True)
        try:
            await create(replicas)
            await replicas.write(ops.PUT, TARGET, put("k0"))
            leader = replicas.leader_of(GROUP)
            assert leader is not None
            follower = next(member for member in replicas.members if member != leader)
            # At a follower it is refused, naming the leader; nothing changes.
            with pytest.raises(NotPartitionLeader):
                await replicas.submit(
                    follower, ops.UPDATE_THROUGHPUT, TARGET, update(throughput(2, 30))
                )
            # The control-plane form would change the replicas one by one, outside the log.
            before = settings(replicas)
            with pytest.raises(ValidationError, match="replicated"):
                await replicas.submit(
                    leader, ops.UPDATE_THROUGHPUT, None, update(throughput(2, 30))
                )
            await settle(replicas, 1.0)
            assert settings(replicas) == before

            reply = await replicas.write(ops.UPDATE_THROUGHPUT, TARGET, update(throughput(2, 30)))
            assert reply == {"partitions_updated": 1}
            await settle(replicas, 2.0)
            assert all(s == throughput(2, 30) for s in settings(replicas).values())
            assert set(rates(replicas).values()) == {30.0}
            # A late retry of an older change is ignored everywhere.
            await replicas.write(ops.UPDATE_THROUGHPUT, TARGET, update(throughput(1, 5)))
            await settle(replicas, 2.0)
            assert all(s == throughput(2, 30) for s in settings(replicas).values())
            # Its metadata row is the same bytes on every replica.
            rows = [replicas.data(m, (Family.PARTITIONS,)) for m in replicas.members]
            assert rows[0] == rows[1] == rows[2]

            # The leader dies; the next one has the settings, and takes a newer change.
            await replicas.kill(leader)
            await replicas.write(ops.UPDATE_THROUGHPUT, TARGET, update(throughput(3, 60)))
            await replicas.write(ops.PUT, TARGET, put("k1"))
            await settle(replicas, 2.0)
            assert set(rates(replicas).values()) == {60.0}
            await replicas.restart(leader)
            await settle(replicas, 4.0)
            assert all(s == throughput(3, 60) for s in settings(replicas).values())
            assert set(rates(replicas).values()) == {60.0}
        finally:
            await replicas.close()

    run(scenario)


def test_an_update_addressed_to_another_tables_partition_is_refused() -> None:
    async def scenario() -> None:
        replicas = Replicas(0)
        try:
            await create(replicas)
            other = ops.UpdateThroughputPayload("cd" * 16, throughput(2, 30)).to_json()
            with pytest.raises(ValidationError, match="another partition than its target"):
                await replicas.write(ops.UPDATE_THROUGHPUT, TARGET, other)
            stale = Target(TARGET.table_id, TARGET.partition_id, TARGET.epoch + 1)
            with pytest.raises(Exception, match="epoch"):
                await replicas.write(ops.UPDATE_THROUGHPUT, stale, update(throughput(2, 30)))
            await settle(replicas, 1.0)
            assert all(s != throughput(2, 30) for s in settings(replicas).values())
        finally:
            await replicas.close()

    run(scenario)
