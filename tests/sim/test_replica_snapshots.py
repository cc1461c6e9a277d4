"""A member behind its leader's compacted log copies its replica from another member
(`storagenode/snapshots.py`): the copy is fuzzy (read from a live replica while writes go on)
and caught up from the log after the snapshot's index; a member killed in the middle of a copy
resumes it; a copy being made serves no read; after healing every replica holds the same bytes,
every acknowledged write is there and no refused one is."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from core import transactions as txn
from core.errors import NotPartitionLeader, ServiceUnavailable
from rpc import ops
from rpc.transactions import TxnApplyPayload, TxnPreparePayload, TxnRecordPayload
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


async def transact(replicas: Replicas, number: int, keys: list[str], decide: bool) -> str:
    """Begin a record of transaction `number` kept by the partition, prepare puts of `keys`
    (locking them), and, with `decide`, commit it: the steps a coordinator takes, each a write
    addressed to the partition. Its attempt's id."""
    record_id = f"t{number}"
    participant = txn.Participant(TABLE["id"], "p0", 1, "node-1", True)
    ledger = txn.Record(record_id, "d", txn.State.PENDING, (participant,), 0.0)
    begun = await replicas.write(
        ops.TXN_RECORD,
        TARGET,
        TxnRecordPayload("begin", record_id, record=ledger.to_json()).to_json(),
    )
    attempt = txn.Record.from_json(begun["record"]).attempt
    attempt_id = f"{record_id}.{attempt}"
    actions = [{"op": ops.PUT, "body": put(key, t={"N": str(number)})} for key in keys]
    prepared = await replicas.write(
        ops.TXN_PREPARE,
        TARGET,
        TxnPreparePayload(attempt_id, [TABLE["id"], "p0"], actions).to_json(),
    )
    assert all(txn.Vote.from_json(vote).yes for vote in prepared["votes"])
    if decide:
        payload = TxnRecordPayload("decide", record_id, attempt=attempt, outcome="COMMITTED")
        await replicas.write(ops.TXN_RECORD, TARGET, payload.to_json())
        await replicas.write(ops.TXN_APPLY, TARGET, TxnApplyPayload(attempt_id, True).to_json())
    return attempt_id


@pytest.mark.parametrize("seed", range(4))
def test_a_copied_replica_carries_the_partitions_transactions(seed: int) -> None:
    """A member that copies its replica while transactions are in flight on the partition gets
    their records, parts and locks (`snapshots.ranges`): once it leads, the transaction it was
    away for commits from what it copied."""

    async def scenario() -> None:
        replicas = compacting(seed)
        try:
            await create(replicas)
            await asyncio.sleep(2.0)
            leader = replicas.leader_of(GROUP)
            assert leader is not None
            away = next(member for member in replicas.members if member != leader)
            await replicas.kill(away)
            await transact(replicas, 1, ["done"], decide=True)
            pending = await transact(replicas, 2, ["held0", "held1"], decide=False)
            await churn(replicas, "b", 2 * COMPACT, {})
            assert first_index(replicas, leader) > 1, "the leader compacted its log"
            await replicas.restart(away)
            await asyncio.sleep(5.0)
            assert replicas.pages_read.get(away, 0) >= 1, f"seed {seed}: no copy"
            rows = [replicas.data(member, (Family.TRANSACTIONS,)) for member in replicas.members]
            assert rows[0] == rows[1] == rows[2], f"seed {seed}: transaction rows differ"
            kept = {key[:1] for key, _ in rows[0][Family.TRANSACTIONS]}
            assert kept == {b"L", b"p", b"r"}, f"seed {seed}: {kept}"
            # The copy leads (its leaders are killed until it is elected): it commits the
            # pending transaction from what it copied.
            for _ in range(30):
                current = replicas.leader_of(GROUP)
                if current == away:
                    break
                if current is not None:
                    await replicas.kill(current)
                    await asyncio.sleep(1.0)
                    await replicas.restart(current)
                await asyncio.sleep(1.0)
            assert replicas.leader_of(GROUP) == away, f"seed {seed}: the copy never led"
            record_id, attempt = pending.split(".")
            decide = TxnRecordPayload(
                "decide", record_id, attempt=int(attempt), outcome="COMMITTED"
            )
            await replicas.write(ops.TXN_RECORD, TARGET, decide.to_json())
            applied = await replicas.write(
                ops.TXN_APPLY, TARGET, TxnApplyPayload(pending, True).to_json()
            )
            assert applied["applied"] == 2, f"seed {seed}: {applied}"
            await asyncio.sleep(2.0)
            node = replicas.nodes[away]
            for key in ("done", "held0", "held1"):
                item = node.read(ops.GET, TARGET, get(key))["item"]
                assert item is not None and "t" in item, f"seed {seed}: {key} {item}"
            locks = [
                key
                for member in replicas.members
                for key, _ in replicas.data(member, (Family.TRANSACTIONS,))[Family.TRANSACTIONS]
                if key.startswith(b"L")
            ]
            assert locks == [], f"seed {seed}: locks left {locks}"
        finally:
            await replicas.close()

    run(scenario)
