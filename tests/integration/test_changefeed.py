"""A partition's change feed on a real `python -m storagenode` process, across kill -9.

A consumer registers at a checkpoint and follows the feed while a writer puts items; the node is
killed with SIGKILL mid-stream and restarted on the same data directory; the consumer resumes
from the checkpoint the node stored. Delivery is at-least-once from the stored checkpoint: after
the restart the records past it are sent again, and the consumer drops those it has already
applied (by seq). The test checks both halves: the *effect* is exactly once and in order (every
acknowledged put appears once, as seqs without gaps or repeats, in the order written), and the
redelivery starts right after a checkpoint the node had acknowledged (or the one in flight at the
kill), so the checkpoint survived. Every wait has a deadline; the process is killed at the end.

A second test overwrites one 100 KB item 275 times (which kept 56 MB of log when the log was
bounded by record count only) and checks that the log keeps at most its byte bound, that what it
keeps is all readable, and that a consumer registered before the overwrites must re-snapshot.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path
from typing import Any

import pytest

from core import limits
from core.errors import ChangeLogTrimmed, OutcomeUnknown, ServiceUnavailable
from rpc import ops
from rpc.changefeed import Change, ChangeFeedClient
from rpc.client import NodeClient
from tests import envelope
from tests.integration.test_storagenode import NodeProcess, free_port

pytestmark = pytest.mark.integration

CALL_SECONDS = 5.0
RECOVERY_SECONDS = 30.0  # From the kill until writer and consumer have both carried on.
TABLE = {"id": "7c" * 16, "name": "Feed", "key_schema": {"hash": ["pk", "S"], "range": None}}
PARTITION = {"id": "p0", "start": "", "end": None, "epoch": 1, "node": "it-1"}
CONSUMER = "it-consumer"
ITEMS = 400  # Items written; item n's put is record n + 1.
BEFORE_FOLLOW = 20  # Written before the consumer registers...
CHECKPOINT_AT = 10  # ...at this checkpoint, so the follow starts from a checkpoint, not 0.
CHECKPOINT_EVERY = 7  # Records between the consumer's checkpoints.
KILL_AFTER = 150  # Records the consumer has applied when the node is killed.


def item(n: int) -> dict[str, Any]:
    return {"pk": {"S": f"item-{n:04d}"}, "n": {"N": str(n)}}


def put_body(n: int) -> dict[str, Any]:
    return {"table_id": TABLE["id"], "partition_id": "p0", "epoch": 1, "item": item(n)}


async def put_until_acknowledged(client: NodeClient, n: int) -> None:
    """Put item n, retrying while the node is down (a retried put that had applied changes
    nothing, so it records nothing)."""
    deadline = time.monotonic() + RECOVERY_SECONDS
    while True:
        try:
            await envelope.call(client, ops.PUT, put_body(n), CALL_SECONDS)
            return
        except (ServiceUnavailable, OutcomeUnknown):
            assert time.monotonic() < deadline, f"put {n} not acknowledged after the restart"
            await asyncio.sleep(0.05)


class Consumer:
    """Applies each change once, in seq order, and checkpoints every few records."""

    def __init__(self, feed: ChangeFeedClient, applied_through: int) -> None:
        self.feed = feed
        self.applied_through = applied_through
        self.applied: list[Change] = []
        self.delivered: list[int] = []  # Every seq the node sent, repeats included.
        self.checkpoint_acknowledged = applied_through
        self.checkpoint_sent = applied_through
        self.resumed_after: list[tuple[int, int]] = []  # (checkpoint acked, sent) at each resume.
        self.resumed_at: list[int] = []  # The first seq each resumed follow delivered.

    async def run(self, last_seq: int) -> None:
        deadline = time.monotonic() + RECOVERY_SECONDS
        follows = 0
        while self.applied_through < last_seq:
            follows += 1
            first = True
            try:
                # No after_seq: the node resumes this consumer from its stored checkpoint.
                changes = self.feed.follow(TABLE["id"], "p0", consumer=CONSUMER)
                async with contextlib.aclosing(changes):
                    async for change in changes:
                        if first and follows > 1:
                            checkpoints = (self.checkpoint_acknowledged, self.checkpoint_sent)
                            self.resumed_after.append(checkpoints)
                            self.resumed_at.append(change.seq)
                        first = False
                        self.apply(change)
                        if change.seq % CHECKPOINT_EVERY == 0 or change.seq == last_seq:
                            self.checkpoint_sent = change.seq
                            await self.feed.checkpoint(
                                TABLE["id"], "p0", CONSUMER, change.seq, CALL_SECONDS
                            )
                            self.checkpoint_acknowledged = change.seq
                        if self.applied_through == last_seq:
                            return
            except ServiceUnavailable:
                assert time.monotonic() < deadline, "the consumer did not resume in time"
                await asyncio.sleep(0.1)

    def apply(self, change: Change) -> None:
        self.delivered.append(change.seq)
        if change.seq <= self.applied_through:
            return  # Redelivered after a resume: applied already.
        assert change.seq == self.applied_through + 1, "a change was skipped"
        self.applied.append(change)
        self.applied_through = change.seq


async def test_a_follower_sees_every_change_once_in_order_across_kill_9(tmp_path: Path) -> None:
    node = NodeProcess(tmp_path / "data", free_port(), tmp_path / "node.log")
    await node.start()
    client = NodeClient(node.address)
    feed = ChangeFeedClient(node.address)
    tasks: list[asyncio.Task[None]] = []
    try:
        body = {"table": TABLE, "partition": PARTITION}
        await client.control(ops.CREATE_PARTITION, body, CALL_SECONDS)
        for n in range(BEFORE_FOLLOW):
            await put_until_acknowledged(client, n)
        position = await feed.register(TABLE["id"], "p0", CONSUMER, CHECKPOINT_AT, CALL_SECONDS)
        assert (position.seq, position.first_seq, position.last_seq) == (
            CHECKPOINT_AT,
            CHECKPOINT_AT + 1,  # What the consumer passed is released at once.
            BEFORE_FOLLOW,
        )

        async def writer() -> None:
            for n in range(BEFORE_FOLLOW, ITEMS):
                await put_until_acknowledged(client, n)

        consumer = Consumer(feed, CHECKPOINT_AT)
        tasks = [asyncio.create_task(writer()), asyncio.create_task(consumer.run(ITEMS))]
        deadline = time.monotonic() + RECOVERY_SECONDS
        while consumer.applied_through < KILL_AFTER:
            assert time.monotonic() < deadline, "the consumer saw too few changes"
            assert not any(task.done() for task in tasks), [t.exception() for t in tasks]
            await asyncio.sleep(0.005)
        await node.kill()  # SIGKILL, mid-stream and mid-writes.
        killed_at = consumer.applied_through
        assert killed_at < ITEMS, "the writer finished before the kill"
        await asyncio.sleep(0.3)
        await node.start()
        await asyncio.wait_for(asyncio.gather(*tasks), RECOVERY_SECONDS * 2)

        # The effect: every change after the checkpoint exactly once, in the order written.
        assert [c.seq for c in consumer.applied] == list(range(CHECKPOINT_AT + 1, ITEMS + 1))
        assert [(c.kind, c.new) for c in consumer.applied] == [
            ("INSERT", item(seq - 1)) for seq in range(CHECKPOINT_AT + 1, ITEMS + 1)
        ]
        # The delivery: at-least-once, resumed right after a checkpoint the node had stored.
        assert consumer.resumed_at, "the follow never had to resume"
        for (acknowledged, sent), resumed in zip(
            consumer.resumed_after, consumer.resumed_at, strict=True
        ):
            assert resumed - 1 in (acknowledged, sent), (acknowledged, sent, resumed)
        assert set(consumer.delivered) == set(range(CHECKPOINT_AT + 1, ITEMS + 1))
        redelivered = len(consumer.delivered) - len(set(consumer.delivered))
        assert redelivered <= CHECKPOINT_EVERY * len(consumer.resumed_at)
        # The consumer has passed everything: the log it held is released.
        final = await feed.checkpoint(TABLE["id"], "p0", CONSUMER, ITEMS, CALL_SECONDS)
        assert (final.seq, final.first_seq, final.last_seq) == (ITEMS, ITEMS + 1, ITEMS)
        print(
            f"killed after {killed_at} applied; {len(consumer.resumed_at)} resume(s); "
            f"{redelivered} record(s) redelivered and dropped by seq"
        )
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await feed.close()
        await client.close()
        await node.kill()


OVERWRITES = 275  # The measurement: 275 overwrites of one 100 KB item kept 56 MB of log.
LARGE_VALUE_CHARS = 100_000
# A 100 KB put and its synced commit take milliseconds, but the machine may be shared and loaded.
LARGE_CALL_SECONDS = 30.0


async def test_a_large_item_overwritten_keeps_a_log_bounded_in_bytes(tmp_path: Path) -> None:
    node = NodeProcess(tmp_path / "data", free_port(), tmp_path / "node.log")
    await node.start()
    client = NodeClient(node.address)
    feed = ChangeFeedClient(node.address)
    try:
        body = {"table": TABLE, "partition": PARTITION}
        await client.control(ops.CREATE_PARTITION, body, CALL_SECONDS)
        await feed.register(TABLE["id"], "p0", CONSUMER, 0, CALL_SECONDS)
        for n in range(OVERWRITES):
            large = {"pk": {"S": "large"}, "n": {"N": str(n)}, "v": {"S": "x" * LARGE_VALUE_CHARS}}
            put = {"table_id": TABLE["id"], "partition_id": "p0", "epoch": 1, "item": large}
            await envelope.call(client, ops.PUT, put, LARGE_CALL_SECONDS)
        stats = await client.control(ops.TABLE_STATS, {"table_id": TABLE["id"]}, CALL_SECONDS)
        log = stats["partitions"]["p0"]
        assert log["last_seq"] == OVERWRITES
        assert log["log_bytes"] <= limits.CHANGE_LOG_BYTES_MAX
        # Each retained record holds two 100 KB images: what is kept fits the bound...
        first = log["first_seq"]
        assert (OVERWRITES - first + 1) * 2 * LARGE_VALUE_CHARS <= limits.CHANGE_LOG_BYTES_MAX
        # ...and is all there, in order, for a reader that starts where the log starts.
        seqs = []
        changes = feed.follow(TABLE["id"], "p0", after_seq=first - 1)
        async with contextlib.aclosing(changes):
            async for change in changes:
                seqs.append(change.seq)
                assert change.new is not None and change.new["n"] == {"N": str(change.seq - 1)}
                if change.seq == OVERWRITES:
                    break
        assert seqs == list(range(first, OVERWRITES + 1))
        # The consumer registered at 0 is past the byte bound: it must re-snapshot.
        with pytest.raises(ChangeLogTrimmed) as trimmed:
            behind = feed.follow(TABLE["id"], "p0", consumer=CONSUMER)
            async with contextlib.aclosing(behind):
                await anext(behind)
        assert trimmed.value.first_retained_seq == first
        print(
            f"{OVERWRITES} overwrites of a 100 KB item keep seqs {first}..{OVERWRITES}, "
            f"{log['log_bytes'] / 2**20:.1f} MiB of log"
        )
    finally:
        await feed.close()
        await client.close()
        await node.kill()
