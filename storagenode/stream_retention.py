"""DynamoDB Streams' retention on one storage node, kept with no reader.

A stream holds each partition's change log through a change-feed consumer named `stream/<label>`
(`core.catalog.StreamDef.consumer`), which readers never move: GetRecords reads after an
iterator's seq, not after the consumer's checkpoint. Left alone, that consumer would hold every
record up to the log's hard bounds (`change_log_records_max`, `change_log_bytes_max`), however
old. So every round (`interval`: a quarter of the retention, at most
`limits.STREAM_RETENTION_ROUND_SECONDS_MAX`) this task looks at every stream consumer on the node,
on live partitions and on retired logs kept for them, reads the records after its checkpoint (on
an executor thread, a page at a time) and checkpoints it, through the group commit, past:

- the records the log no longer holds (the hard bounds trimmed them): to just before the first
  one kept, where a reader's TRIM_HORIZON then starts;
- the records committed more than the retention (24 hours; `DYNALAB_STREAM_RETENTION_SECONDS`)
  before the node's clock, and a retired log's END once every record before it has expired, so
  the node drops that log (`core.streams.retention_checkpoint`).

A checkpoint never moves back and never past a record the stream still owes, so a round racing a
router doing the same (`router.streams`, at TRIM_HORIZON and DescribeStream) changes nothing
twice. A failed round (the node overloaded or stopping) is logged and tried again next round.
A replicated partition's stream is kept so by its leader alone, through its group: every
replica applies the checkpoint, and a follower's round passes it by.
The rounds run as an `rpc.background.BackgroundTask`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from core import limits, streams
from core.catalog import is_stream_consumer
from core.errors import ChangeLogTrimmed, DynamoError, NotPartitionLeader, StaleEpoch
from rpc import ops
from rpc.background import BackgroundTask
from rpc.ops import Target
from storagenode.changefeed import PartitionRef
from storagenode.node import StorageNode

logger = logging.getLogger(__name__)

# Hands a change-feed write (op, target, body) to the group committer and resolves with its reply.
Submit = Callable[[str, Target, dict[str, Any]], Awaitable[dict[str, Any]]]


def round_seconds(retention: float) -> float:
    return min(limits.STREAM_RETENTION_ROUND_SECONDS_MAX, retention / 4)


class StreamRetention:
    """Runs the rounds as an asyncio task; `advance` is one round, `close` stops them."""

    def __init__(
        self,
        node: StorageNode,
        submit: Submit,
        retention: float,
        *,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.node = node
        self.submit = submit
        self.retention = retention
        self.interval = round_seconds(retention)
        self.clock = node.clock if clock is None else clock
        self._task = BackgroundTask("stream-retention", self._run)

    def start(self) -> None:
        self._task.start()

    async def close(self) -> None:
        """Stop (a checkpoint in flight is committed or not: either is safe)."""
        await self._task.close()

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            try:
                await self.advance()
            except DynamoError as error:
                logger.warning("stream retention round stopped early, retried: %s", error)
            except Exception:
                logger.exception("stream retention round failed; retried next round")

    async def advance(self) -> int:
        """One round over every stream consumer on the node; how many checkpoints moved."""
        moved = 0
        for ref, consumers in list(self.node.feeds.checkpoints.items()):
            if not self.node.serves_feed(ref):
                continue  # A replica of a replicated partition: its leader keeps the stream.
            for consumer, checkpoint in list(consumers.items()):
                if is_stream_consumer(consumer):
                    moved += await self._advance(ref, consumer, checkpoint)
        return moved

    async def _advance(self, ref: PartitionRef, consumer: str, checkpoint: int) -> int:
        loop = asyncio.get_running_loop()
        moved = 0
        for _ in range(limits.STREAM_RETENTION_ROUND_PAGES_MAX):
            passed = await loop.run_in_executor(None, self._passed, ref, checkpoint)
            if passed <= checkpoint:
                break
            body = ops.CheckpointPayload(consumer, passed).to_json()
            try:
                reply = await self.submit(ops.CHECKPOINT, Target(*ref), body)
            except NotPartitionLeader:
                break  # It stopped leading since the round began: the new leader goes on.
            checkpoint = int(reply["seq"])
            moved = 1
        return moved

    def _passed(self, ref: PartitionRef, checkpoint: int) -> int:
        """Where the consumer at `checkpoint` may move, from one page of the log after it."""
        try:
            bounds = self.node.feed_bounds(*ref)
            start = max(checkpoint, bounds.first_seq - 1)
            if start >= bounds.last_seq:
                return start
            page = self.node.read_feed(*ref, start, records_max=limits.GET_RECORDS_LIMIT_MAX)
        except StaleEpoch:
            return checkpoint  # The partition left the node since the round began.
        except ChangeLogTrimmed as error:
            first = error.first_retained_seq
            return checkpoint if first is None else max(checkpoint, first - 1)
        return streams.retention_checkpoint(start, page.records, self.clock(), self.retention)
