"""The change feed on the transport seam, in the seeded cluster (`rpc.local.LocalFeed`, served by
`storagenode.feed_service.FeedService`): what a follower sees through the in-process twin's
faults, and how a follow fails when its node is cut or restarted.

A failing seed prints the command that replays it (`dynalab.sim.cluster.run`).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest

from core.changes import Change
from core.errors import ServiceUnavailable, ValidationError
from dynalab.sim.cluster import SimCluster, run, storage_key
from rpc.local import Faults

SEEDS = list(range(1, 21))
FEED_FAULTS = Faults(
    drop_request=0.05, drop_reply=0.1, delay=0.3, duplicate=0.2, timeout_seconds=0.05
)
CONSUMER = "follower"


def item(n: int) -> dict[str, Any]:
    """Every item in one item collection, so all of them are in one partition."""
    return {"pk": {"S": "one"}, "sk": {"N": str(n)}, "n": {"N": str(n)}}


async def table_partition(cluster: SimCluster, name: str) -> tuple[str, str, str]:
    """The table's id, and the partition (and node) holding every `item`."""
    await cluster.create_table(name)
    table = await cluster.routers[0].read_table(name)
    assert table is not None
    partition = next(p for p in table.partitions if p.holds(storage_key(item(0))))
    return table.id, partition.id, partition.node


@pytest.mark.parametrize("seed", SEEDS)
def test_a_follower_sees_every_change_once_in_order_through_faults(seed: int) -> None:
    """Writes land while a follower follows from its checkpoint, resuming after every failure
    (drops, delays, duplicates, a cut and a restart of the node): deduped by seq, it sees each
    change once, in the order of the log, with the images written."""

    async def scenario(cluster: SimCluster) -> None:
        table_id, partition_id, node = await table_partition(cluster, "Fed")
        feed = cluster.routers[0].clients[node].feed()
        position = await feed.register(table_id, partition_id, CONSUMER, 0, 1.0)
        assert position.seq == 0
        writes = 40
        seen: list[Change] = []
        failures = 0
        last_seq: int | None = None  # The log's last seq, once every write has landed.

        def caught_up() -> bool:
            return last_seq is not None and bool(seen) and seen[-1].seq >= last_seq

        async def follow() -> None:
            nonlocal failures
            while not caught_up():
                try:
                    batches = feed.follow_batches(table_id, partition_id, consumer=CONSUMER)
                    async with contextlib.aclosing(batches):
                        async for batch in batches:
                            seqs = [change.seq for change in batch]
                            assert seqs == sorted(seqs), f"seed {seed}: a batch out of order"
                            seen.extend(c for c in batch if not seen or c.seq > seen[-1].seq)
                            await feed.checkpoint(
                                table_id, partition_id, CONSUMER, seen[-1].seq, 1.0
                            )
                            if caught_up():
                                return
                except ServiceUnavailable:
                    failures += 1
                    await asyncio.sleep(0.05)

        follower = asyncio.create_task(follow())
        cluster.faults(FEED_FAULTS)
        for n in range(writes):
            for _ in range(50):
                try:
                    await cluster.put("Fed", item(n))
                    break
                except Exception:
                    await asyncio.sleep(0.02)
            if n == writes // 3:
                cluster.network.cut(cluster.addresses[node])
                await asyncio.sleep(0.3)
                cluster.network.heal(cluster.addresses[node])
            if n == 2 * writes // 3:
                await cluster.restart_node(node)
            await asyncio.sleep(0.01)
        cluster.faults(None)
        last_seq = cluster.nodes[node].partitions[table_id, partition_id].last_seq
        for _ in range(600):  # The follower may be idle already, past the last seq.
            if caught_up() or follower.done():
                break
            await asyncio.sleep(0.1)
        follower.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await follower
        # A put retried after an unknown outcome, or duplicated, lands twice (a MODIFY): the log
        # holds at least one record per write, and the last image of each key is the one written.
        assert [c.seq for c in seen] == list(range(1, last_seq + 1)), f"seed {seed}"
        assert last_seq >= writes, f"seed {seed}"
        images = {c.keys["sk"]["N"]: c.new for c in seen if c.keys is not None}
        assert images == {str(n): item(n) for n in range(writes)}, f"seed {seed}"
        assert failures > 0, f"seed {seed}: the cut and the restart broke no follow"

    run(seed, scenario)


def test_refusals_cross_the_seam_typed_and_a_page_is_a_poll() -> None:
    async def scenario(cluster: SimCluster) -> None:
        table_id, partition_id, node = await table_partition(cluster, "Polled")
        feed = cluster.routers[0].clients[node].feed()
        with pytest.raises(ValidationError, match="not registered"):
            await anext(feed.follow_batches(table_id, partition_id, consumer="nobody"))
        await cluster.put("Polled", item(1))
        page = await feed.read(table_id, partition_id, 0, max_records=10, timeout=1.0)
        assert [(c.seq, c.kind) for c in page.records] == [(1, "INSERT")]
        assert (page.end_of_log, page.first_seq, page.last_seq) == (False, 1, 1)
        empty = await feed.read(table_id, partition_id, 1, max_records=10, timeout=1.0)
        assert empty.records == () and not empty.end_of_log
        gone = await feed.unregister(table_id, partition_id, "nobody", 1.0)
        assert not gone.unregistered

    run(7, scenario)
