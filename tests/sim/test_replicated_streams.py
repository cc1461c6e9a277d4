"""The change feed of a partition replicated on three nodes (issue 27: Streams on replicated
tables): every replica holds the same change log, seq for seq, since a change record is part of
the effect its leader planned; the feed is served by the leader alone, once it has committed an
entry of its term, so a follow (and GetRecords, one read of a follow) never reads a log that lacks
an acknowledged change; a follower refuses naming the leader; a follow at a leader that is
cut off from the others ends within a heartbeat; stream retention moves the stream's
checkpoint at the leader only, through the group, and the followers' rounds pass it by."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from typing import Any

import pytest

from core import limits
from core.errors import NotPartitionLeader, ServiceUnavailable
from rpc import ops
from rpc.ops import Target
from rpc.transport import FeedPage
from storagenode.feed_service import FeedService
from storagenode.layout import Family
from storagenode.stream_retention import StreamRetention
from tests.sim.replicas import Replicas
from tests.sim.test_replicated_writes import GROUP, PARTITION, TABLE, TARGET, put, run, settle

CONSUMER = "stream/2026-12-03T00:00:00.000"
RETENTION_SECONDS = 60.0


async def create(replicas: Replicas) -> None:
    body = ops.CreatePartitionPayload(TABLE, PARTITION, None, [CONSUMER]).to_json()
    for member in replicas.members:
        await replicas.submit(member, ops.CREATE_PARTITION, None, body)


def feeds(replicas: Replicas) -> dict[int, FeedService]:
    """A feed service per live node, as each node's server runs one."""

    def of(member: int) -> FeedService:
        committer = replicas.committers[member]

        async def submit(op: str, target: Target, body: dict[str, Any]) -> dict[str, Any]:
            result: dict[str, Any] = await committer.submit(op, target, body)
            return result

        async def inline(work: Any) -> Any:
            return work()

        return FeedService(replicas.nodes[member], submit, inline)

    return {member: of(member) for member in replicas.nodes}


def follow(
    feed: FeedService, after_seq: int, records_max: int = limits.GET_RECORDS_LIMIT_MAX
) -> AsyncGenerator[FeedPage, None]:
    """A follow of the partition's feed after `after_seq`, its batches as pages."""
    return feed.follow(
        TABLE["id"],
        "p0",
        consumer="",
        after_seq=after_seq,
        records_max=records_max,
        encode=lambda page: page,
    )


async def read(feed: FeedService, after_seq: int) -> FeedPage:
    """One read of a follow, as GetRecords reads a shard."""
    batches = follow(feed, after_seq)
    try:
        return await anext(batches)
    finally:
        await batches.aclose()


async def one_write_led(replicas: Replicas) -> int:
    """The partition created on every member, one write, and its leader once settled."""
    await create(replicas)
    await replicas.write(ops.PUT, TARGET, put("a"))
    await settle(replicas)
    leader = replicas.leader_of(GROUP)
    assert leader is not None
    return leader


def member_of(name: str | None) -> int:
    assert name is not None
    return int(name.split("-")[1])


@pytest.mark.parametrize("seed", range(4))
def test_the_leader_alone_serves_a_feed_every_replica_holds_alike(seed: int) -> None:
    async def scenario() -> None:
        replicas = Replicas(seed)
        try:
            await create(replicas)
            for i in range(30):
                await replicas.write(ops.PUT, TARGET, put(f"k{i}", v={"N": str(i)}))
            await settle(replicas)
            leader = replicas.leader_of(GROUP)
            assert leader is not None
            logs = {m: replicas.data(m, [Family.CHANGE_LOG]) for m in replicas.nodes}
            assert all(log == logs[leader] for log in logs.values()), "the logs differ"
            services = feeds(replicas)
            page = await read(services[leader], 0)
            assert [change.seq for change in page.records] == list(range(1, 31))
            assert [change.keys["pk"]["S"] for change in page.records] == [
                f"k{i}" for i in range(30)
            ]
            for member, service in services.items():
                if member == leader:
                    continue
                with pytest.raises(NotPartitionLeader) as refused:
                    await read(service, 0)
                assert refused.value.leader == f"node-{leader}"

            # The leader dies: the new one serves the same log, and what is written next.
            await replicas.kill(leader)
            for i in range(30, 40):
                await replicas.write(ops.PUT, TARGET, put(f"k{i}", v={"N": str(i)}))
            await settle(replicas)
            new_leader = replicas.leader_of(GROUP)
            assert new_leader is not None and new_leader != leader
            services = feeds(replicas)
            page = await read(services[new_leader], 25)
            assert [change.seq for change in page.records] == list(range(26, 41))
            assert [change.keys["pk"]["S"] for change in page.records][-1] == "k39"
        finally:
            await replicas.close()

    run(scenario)


def test_a_follow_at_a_leader_cut_off_from_its_group_ends() -> None:
    async def scenario() -> None:
        replicas = Replicas(1)
        try:
            leader = await one_write_led(replicas)
            service = feeds(replicas)[leader]
            seen: list[int] = []

            async def following_all() -> None:
                async for page in follow(service, 0, records_max=100):
                    seen.extend(change.seq for change in page.records)

            following = asyncio.create_task(following_all())
            await asyncio.sleep(1)
            assert seen == [1]
            # Cut it off: the others elect a leader, and it steps down for want of a quorum.
            for other in replicas.members:
                if other != leader:
                    replicas.network.cut(leader, other)
            bound = 4 * limits.RAFT_ELECTION_TIMEOUT_TICKS_DEFAULT * limits.RAFT_TICK_SECONDS
            done, _ = await asyncio.wait(
                {following}, timeout=bound + limits.CHANGE_FEED_HEARTBEAT_SECONDS
            )
            assert done, "the follow at the cut-off leader went on"
            # Ended as no longer sure it leads, or, once deposed, naming another leader.
            with pytest.raises((ServiceUnavailable, NotPartitionLeader)) as ended:
                following.result()
            if isinstance(ended.value, NotPartitionLeader):
                assert ended.value.leader is None or member_of(ended.value.leader) != leader
        finally:
            await replicas.close()

    run(scenario)


def test_a_leader_serves_its_feed_only_until_its_views_feed_until() -> None:
    async def scenario() -> None:
        replicas = Replicas(2)
        try:
            leader = await one_write_led(replicas)
            node = replicas.nodes[leader]
            view = node.replication.views[TABLE["id"], "p0"]
            assert view.leads and node.serves_feed((TABLE["id"], "p0"))
            # As a view says of a leader just elected, its log not yet known whole.
            early = type(view)(view.leader, True, 0.0, 0.0, feed_until=0.0)
            with pytest.raises(ServiceUnavailable):
                early.check_feed(node.monotonic(), "p0")
        finally:
            await replicas.close()

    run(scenario)


def test_stream_retention_moves_the_checkpoint_at_the_leader_through_the_group() -> None:
    async def scenario() -> None:
        replicas = Replicas(3)
        try:
            await create(replicas)
            for i in range(5):
                await replicas.write(ops.PUT, TARGET, put(f"k{i}"))
            await settle(replicas)
            leader = replicas.leader_of(GROUP)
            assert leader is not None
            # Every record is older than the retention on this clock.
            later = replicas.nodes[leader].clock() + RETENTION_SECONDS + 1

            def retention(member: int) -> StreamRetention:
                committer = replicas.committers[member]

                async def submit(op: str, target: Target, body: dict[str, Any]) -> Any:
                    return await committer.submit(op, target, body)

                return StreamRetention(
                    replicas.nodes[member], submit, RETENTION_SECONDS, clock=lambda: later
                )

            moved = {m: await retention(m).advance() for m in sorted(replicas.nodes)}
            assert moved == {m: 1 if m == leader else 0 for m in moved}
            await settle(replicas, 2.0)
            for member, node in replicas.nodes.items():
                checkpoint = node.consumer_checkpoint(TABLE["id"], "p0", CONSUMER)
                assert checkpoint == 5, f"node-{member}'s replica has the stream at {checkpoint}"
        finally:
            await replicas.close()

    run(scenario)
