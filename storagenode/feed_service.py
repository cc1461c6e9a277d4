"""The serving side of a node's change feed, transport-neutral: what a follow sends, and when.

`FeedService.follow` is a follow as the node runs it, whatever carries it: the gRPC servicer
(`server.ChangeFeedServicer`) writes each batch it yields to the stream, and the in-process network
(`rpc.local.LocalNetwork`, under `tests/sim`) hands each one to its follower. A follow sends what
the log holds after the follower's seq in bounded batches (`changefeed.read_batch`, read off the
event loop by `offload`: a batch may hold megabytes), until a batch reaches the log's last seq as
it was read (no read more to find nothing, a read of the store and a thread's round trip per
batch saved), then waits until a commit moves that
partition's feed (the node calls `FollowerHub.committed` after each commit and the waiting
followers' events are set on the loop), never longer than a heartbeat, after which it sends an
empty batch so the follower knows the node is alive. The first batch goes out even when empty: the
follow is accepted. The follow ends after an END record, or at once when the service drains (the
node is stopping); a refusal (`ChangeLogTrimmed`, `StaleEpoch`, a `ValidationError`) is raised.
A replicated partition's feed is served by its leader alone, once complete
(`replication.ReadView.check_feed`): elsewhere the follow is refused, or ended before its next
batch, with `NotPartitionLeader` naming the leader, so that a follower reads only a log that holds
every acknowledged change.

Register, checkpoint and unregister are writes like any other: they go through the node's group
commit (`submit`), so an acknowledged checkpoint survives kill -9.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncGenerator, Awaitable, Callable, Collection
from typing import Any, TypeVar

from core import limits
from core.changes import Change
from core.errors import ValidationError
from rpc import ops
from rpc.transport import ConsumerPosition, FeedPage
from storagenode.changefeed import PartitionRef
from storagenode.node import StorageNode

T = TypeVar("T")
Submit = Callable[[str, ops.Target, dict[str, Any]], Awaitable[dict[str, Any]]]
Offload = Callable[[Callable[[], T]], Awaitable[T]]


class FollowerHub:
    """The events of the followers waiting on each partition's feed, set after its commits."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._waiting: dict[PartitionRef, set[asyncio.Event]] = {}
        self.closed = False

    def watch(self, ref: PartitionRef) -> asyncio.Event:
        event = asyncio.Event()
        self._waiting.setdefault(ref, set()).add(event)
        if self.closed:
            event.set()
        return event

    def unwatch(self, ref: PartitionRef, event: asyncio.Event) -> None:
        events = self._waiting.get(ref)
        if events is not None:
            events.discard(event)
            if not events:
                del self._waiting[ref]

    def committed(self, refs: Collection[PartitionRef]) -> None:
        """On the writer thread, after a commit: wake the followers of the partitions it moved.

        A follower registers its event before it reads, so a commit it did not see in its read
        finds the event here; without followers this costs one dictionary lookup per partition.
        """
        woken = [ref for ref in refs if ref in self._waiting]
        if woken:
            self._loop.call_soon_threadsafe(self._wake, woken)

    def _wake(self, refs: list[PartitionRef]) -> None:
        for ref in refs:
            for event in self._waiting.get(ref, ()):
                event.set()

    def close(self) -> None:
        self.closed = True
        for events in self._waiting.values():
            for event in events:
                event.set()


class FeedService:
    """The change feed of one StorageNode: follows, and consumer writes through `submit`."""

    def __init__(
        self, node: StorageNode, submit: Submit, offload: Offload[Any] | None = None
    ) -> None:
        self.node = node
        self.submit = submit
        self.hub = FollowerHub(asyncio.get_running_loop())
        node.on_commit = self.hub.committed
        self._offload: Offload[Any] = self._on_executor if offload is None else offload
        self._reads: set[asyncio.Future[Any]] = set()

    def drain(self) -> None:
        """Begin shutdown: every follow ends after its current batch."""
        self.hub.close()

    async def wait_reads(self, timeout: float) -> None:
        """Wait for the reads still running on the executor, before the store closes."""
        if self._reads:
            await asyncio.wait(set(self._reads), timeout=timeout)

    async def follow(
        self,
        table_id: str,
        partition_id: str,
        *,
        consumer: str,
        after_seq: int | None,
        records_max: int,
        encode: Callable[[FeedPage], T],
    ) -> AsyncGenerator[T, None]:
        """The batches of one follow, each as `encode` makes it (on the read's executor, with the
        read): after `after_seq`, or after `consumer`'s checkpoint when it is None."""
        ref = (table_id, partition_id)
        event = self.hub.watch(ref)
        try:
            self.node.check_feed(ref)
            after = self._start_seq(table_id, partition_id, consumer, after_seq)
            records_max = records_max or limits.CHANGE_FEED_BATCH_RECORDS_MAX
            idle = True  # The first batch goes out even empty: the follow is accepted.
            while not self.hub.closed:
                event.clear()
                # A replica that stopped leading (deposed, or copying another member's state)
                # ends the follow naming its leader, within a heartbeat at most.
                self.node.check_feed(ref)
                page, encoded = await self._offload(
                    functools.partial(self._read, ref, after, records_max, encode)
                )
                if page.records or page.end_of_log or idle:
                    yield encoded
                if page.end_of_log:
                    return
                if page.records:
                    after = page.records[-1].seq
                    idle = False
                    if after < page.last_seq:
                        continue  # The log held more than one batch: read on at once.
                # Woken by a commit of this partition (or shutdown); bounded by the heartbeat.
                # A batch that reached the log's last seq as it was read needs no second read
                # to find nothing: a commit since then has set the event (cleared before it).
                try:
                    await asyncio.wait_for(event.wait(), limits.CHANGE_FEED_HEARTBEAT_SECONDS)
                    idle = False
                except TimeoutError:
                    idle = True
        finally:
            self.hub.unwatch(ref, event)

    def _start_seq(
        self, table_id: str, partition_id: str, consumer: str, after_seq: int | None
    ) -> int:
        if after_seq is not None:
            bounds = self.node.feed_bounds(table_id, partition_id)
            if after_seq > bounds.last_seq:
                raise ValidationError(
                    f"Partition {partition_id}'s change log ends at seq {bounds.last_seq}, "
                    f"before {after_seq}"
                )
            return after_seq
        if not consumer:
            raise ValidationError("Follow needs after_seq, or a registered consumer to resume")
        checkpoint = self.node.consumer_checkpoint(table_id, partition_id, consumer)
        if checkpoint is None:
            self.node.feed_bounds(table_id, partition_id)  # StaleEpoch first.
            raise ValidationError(
                f"Consumer {consumer!r} is not registered on partition {partition_id}; "
                "register it or follow from an after_seq"
            )
        return checkpoint

    def _read(
        self,
        ref: PartitionRef,
        after_seq: int,
        records_max: int,
        encode: Callable[[FeedPage], T],
    ) -> tuple[FeedPage, T]:
        batch = self.node.read_feed(*ref, after_seq, records_max)
        page = FeedPage(
            tuple(Change.from_record(record) for record in batch.records),
            batch.end_of_log,
            batch.first_seq,
            batch.last_seq,
        )
        return page, encode(page)

    async def _on_executor(self, work: Callable[[], T]) -> T:
        future = asyncio.get_running_loop().run_in_executor(None, work)
        self._reads.add(future)
        future.add_done_callback(self._reads.discard)
        return await future

    # Consumers: writes through the group commit ------------------------------------------------

    async def register(
        self, table_id: str, partition_id: str, consumer: str, seq: int | None
    ) -> ConsumerPosition:
        body = ops.RegisterConsumerPayload(consumer, seq).to_json()
        return await self._write(ops.REGISTER_CONSUMER, table_id, partition_id, body)

    async def checkpoint(
        self, table_id: str, partition_id: str, consumer: str, seq: int
    ) -> ConsumerPosition:
        body = ops.CheckpointPayload(consumer, seq).to_json()
        return await self._write(ops.CHECKPOINT, table_id, partition_id, body)

    async def unregister(self, table_id: str, partition_id: str, consumer: str) -> ConsumerPosition:
        body = ops.UnregisterConsumerPayload(consumer).to_json()
        return await self._write(ops.UNREGISTER_CONSUMER, table_id, partition_id, body)

    async def _write(
        self, op: str, table_id: str, partition_id: str, body: dict[str, Any]
    ) -> ConsumerPosition:
        # A feed request names a partition live or retired-and-kept, whatever its epoch.
        reply = await self.submit(op, ops.Target(table_id, partition_id), body)
        return position(reply)


def position(reply: dict[str, Any]) -> ConsumerPosition:
    """The position a consumer write's reply (`rpc.ops`, "Change feed") describes."""
    return ConsumerPosition(
        reply.get("seq", 0),
        reply["first_seq"],
        reply["last_seq"],
        reply.get("unregistered", False),
    )
