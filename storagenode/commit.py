"""The node's write loop: rounds of group commit, and the time and messages of its Raft groups.

An fsync costs about as much for one write as for a thousand, so writes that arrive while a round
is committing wait in a queue, and the next round takes the whole queue at once (up to
`WRITE_BATCH_OPS_MAX`). Each round (`StorageNode.write_round`) runs on one dedicated thread, so
the writes of a round see each other in order while the event loop goes on receiving requests
(and the next round keeps forming). A write's future resolves only after the commit that holds
it returned, so every acknowledged write is on disk.

The loop also drives the node's Raft groups (`storagenode/replication.py`): what other nodes send
(`deliver`) is handed to the next round, time passes in ticks of `RAFT_TICK_SECONDS` counted on
the monotonic clock (a round delivers every tick due, so a loop that was held up, or a process
that was paused, catches up before it acts), and each round's messages go to the transport
(`send`) once it is done. A write to a partition led here with other members waits for its
entry to commit: its round hands it back as waiting, and a later round settles it; one that
waits longer than `WRITE_COMMIT_SECONDS_MAX` is answered that its outcome is unknown. A write
whose partition's entry is still in flight is held and runs in a later round, in order.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import Awaitable, Callable, Hashable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol, TypeVar

from core import limits
from core.errors import (
    DynamoError,
    InternalServerError,
    LeaseUnavailable,
    ServiceUnavailable,
    WriteOutcomeUnknown,
)
from core.raft import Message
from rpc.ops import Target
from storagenode import metrics
from storagenode.node import WriteRound
from storagenode.snapshots import PageRead

logger = logging.getLogger(__name__)

T = TypeVar("T")
_TICK_SLACK_SECONDS = 1e-6
# A write: its op, the partition it is addressed to (None: a control-plane write) and its payload.
Write = tuple[str, Target | None, Any]
Inbound = tuple[int, Sequence[tuple[str, Message]]]
Offload = Callable[..., Awaitable[Any]]
# Reads a page of a replica from member `source` (`rpc.ops.SnapshotReadPayload`'s body).
ReadPage = Callable[[int, dict[str, Any]], Awaitable[dict[str, Any]]]


class WriteLoop(Protocol):
    """What the committer drives: `StorageNode`."""

    def write_round(
        self,
        writes: Sequence[Write],
        tokens: Sequence[Hashable] | None = None,
        inbound: Iterable[Inbound] = (),
        ticks: int = 0,
        reads: Sequence[tuple[Hashable, tuple[str, str]]] = (),
        pages: Sequence[tuple[PageRead, dict[str, Any] | DynamoError]] = (),
    ) -> WriteRound: ...

    @property
    def ticking(self) -> bool:
        """Whether its groups need time to pass (it shares groups with other nodes)."""
        ...


def _unknown(reason: str) -> WriteOutcomeUnknown:
    return WriteOutcomeUnknown(f"{reason}; the write may or may not apply")


class GroupCommitter:
    """Queues writes and runs the node's write loop on the writer thread (see the module)."""

    def __init__(
        self,
        node: WriteLoop,
        *,
        batch_ops_max: int = limits.WRITE_BATCH_OPS_MAX,
        queue_ops_max: int = limits.WRITE_QUEUE_OPS_MAX,
        commit_seconds_max: float = limits.WRITE_COMMIT_SECONDS_MAX,
        send: Callable[[int, list[tuple[str, Message]]], None] | None = None,
        tick_seconds: float = limits.RAFT_TICK_SECONDS,
        monotonic: Callable[[], float] = time.monotonic,
        offload: Offload | None = None,
        read_page: ReadPage | None = None,
    ) -> None:
        self._node = node
        self._batch_ops_max = batch_ops_max
        self._queue_ops_max = queue_ops_max
        self._commit_seconds_max = commit_seconds_max
        self._send = send
        self._tick_seconds = tick_seconds
        self._monotonic = monotonic
        self._offload = offload
        # How a page of a replica being copied is read from another member (`snapshots.py`):
        # one read in flight per copy, its reply handed to the next round.
        self._read_page = read_page
        self._page_reads: dict[str, asyncio.Task[None]] = {}
        self._pages: list[tuple[PageRead, dict[str, Any] | DynamoError]] = []
        self._queue: collections.deque[tuple[str, Target | None, Any, asyncio.Future[Any]]] = (
            collections.deque()
        )
        self._inbound: list[Inbound] = []
        self._reads: list[tuple[asyncio.Future[None], tuple[str, str]]] = []
        # Leaderships being confirmed, answered by a later round, with when they were asked.
        self._confirming: dict[asyncio.Future[None], float] = {}
        # Futures of writes waiting for their entry to commit, with when they began to wait.
        self._waiting: dict[asyncio.Future[Any], float] = {}
        # Set when the queue holds only writes the last round held (nothing new to try).
        self._held_only = False
        self._next_tick = monotonic() + tick_seconds
        self._wakeup = asyncio.Event()
        self._closing = False
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="group-commit")
        self._task: asyncio.Task[None] | None = None
        self._committing: list[asyncio.Future[Any]] = []
        self.batches_committed = 0
        self.writes_committed = 0

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="group-commit")

    def submit(
        self, op: str, target: Target | None, payload: Any
    ) -> asyncio.Future[dict[str, Any]]:
        """Queue a write; its future resolves with the reply or the typed error after the commit."""
        if self._closing:
            raise ServiceUnavailable("The storage node is shutting down")
        if len(self._queue) >= self._queue_ops_max:
            raise ServiceUnavailable(
                f"The storage node has {len(self._queue)} writes queued; retry with backoff"
            )
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._queue.append((op, target, payload, future))
        self._held_only = False
        self._wakeup.set()
        return future

    def confirm_leader(self, ref: tuple[str, str]) -> asyncio.Future[None]:
        """Have the next round confirm this node leads partition `ref` (read-index): the future
        resolves once a strong read may be served from the store, or fails NotPartitionLeader."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._reads.append((future, ref))
        self._wakeup.set()
        return future

    def deliver(self, sender: int, batch: Sequence[tuple[str, Message]]) -> None:
        """Raft messages from node `sender` (an empty batch: a keepalive), for the next round."""
        self._inbound.append((sender, batch))
        self._wakeup.set()

    def _due_ticks(self) -> int:
        if not self._node.ticking:
            return 0
        # A tick due within a microsecond is due now: a wait that short may not move a clock
        # kept as a float (a virtual one, in simulation) at all.
        now = self._monotonic() + _TICK_SLACK_SECONDS
        if now < self._next_tick:
            return 0
        due = int((now - self._next_tick) / self._tick_seconds) + 1
        self._next_tick += due * self._tick_seconds
        # After a long pause every tick is delivered up to a bound: more than a few election
        # timeouts' worth changes nothing a tick decides.
        return min(due, limits.RAFT_TICKS_CATCH_UP_MAX)

    def _idle_seconds(self) -> float | None:
        """How long the loop may sleep with nothing to do: until the next tick, if it ticks."""
        if not self._node.ticking:
            return self._commit_seconds_max if self._waiting else None
        return max(0.0, self._next_tick - self._monotonic())

    async def _run(self) -> None:
        while True:
            ticks = self._due_ticks()
            idle = (
                (not self._queue or self._held_only)
                and not self._inbound
                and not self._reads
                and not self._pages
                and not ticks
            )
            if idle:
                if self._closing and not self._queue and not self._waiting:
                    return
                timeout = self._idle_seconds()
                # Idle: submit(), deliver() or close() wakes it, and the next tick.
                try:
                    async with asyncio.timeout(timeout):
                        await self._wakeup.wait()
                except TimeoutError:
                    pass
                self._wakeup.clear()
                self._expire_waiting()
                continue
            await self._round(ticks)
            self._expire_waiting()

    async def _round(self, ticks: int) -> None:
        size = min(len(self._queue), self._batch_ops_max)
        batch = [self._queue.popleft() for _ in range(size)]
        inbound, self._inbound = self._inbound, []
        reads, self._reads = self._reads, []
        pages, self._pages = self._pages, []
        self._confirming.update((future, self._monotonic()) for future, _ in reads)
        futures = [future for *_, future in batch]
        self._committing = futures
        writes = [(op, target, payload) for op, target, payload, _ in batch]
        outcome: WriteRound | None = None
        try:
            # A timeout scope, not wait_for, which (before Python 3.12) may swallow a
            # cancellation that comes as its work completes: a killed loop would go on.
            async with asyncio.timeout(self._commit_seconds_max):
                outcome = await self._run_round(writes, futures, inbound, ticks, reads, pages)
        except TimeoutError:
            logger.error("a write round of %d writes passed %.0f s", size, self._commit_seconds_max)
            for future in futures:
                _resolve(future, _unknown("The storage node did not commit in time"))
        except Exception as error:
            # A round turns every failure into per-write results; reaching here is a bug.
            logger.exception("group commit crashed")
            for future in futures:
                _resolve(future, InternalServerError(f"The group commit crashed: {error!r}"))
        self._committing = []
        if outcome is None:
            return
        if writes:
            self.batches_committed += 1
            self.writes_committed += size - len(outcome.held)
            metrics.group_commit_writes.observe(size)
        for position, result in enumerate(outcome.results):
            if result is not None:
                _resolve(futures[position], result)
        for position in reversed(outcome.held):
            self._queue.appendleft(batch[position])
        self._held_only = bool(outcome.held) and len(self._queue) == len(outcome.held)
        now = self._monotonic()
        for position in outcome.waiting:
            self._waiting[futures[position]] = now
        for token, result in outcome.settled:
            assert isinstance(token, asyncio.Future)
            self._waiting.pop(token, None)
            _resolve(token, result)
        for token, refusal in outcome.confirmed:
            assert isinstance(token, asyncio.Future)
            self._confirming.pop(token, None)
            if not token.done():
                if refusal is None:
                    token.set_result(None)
                else:
                    token.set_exception(refusal)
        if self._send is not None:
            for to, messages in outcome.outgoing:
                self._send(to, messages)
        for read in outcome.page_reads:
            self._start_page_read(read)

    def _start_page_read(self, read: PageRead) -> None:
        if self._read_page is None or read.group in self._page_reads or self._closing:
            return
        task = asyncio.get_running_loop().create_task(
            self._page(read), name=f"snapshot-page {read.group}"
        )
        self._page_reads[read.group] = task

    async def _page(self, read: PageRead) -> None:
        assert self._read_page is not None
        reply: dict[str, Any] | DynamoError
        try:
            async with asyncio.timeout(limits.RAFT_SNAPSHOT_PAGE_SECONDS_MAX):
                reply = await self._read_page(read.source, read.request)
        except DynamoError as error:
            reply = error
        except TimeoutError:
            reply = ServiceUnavailable(f"node-{read.source} sent no snapshot page in time")
        finally:
            self._page_reads.pop(read.group, None)
        self._pages.append((read, reply))
        self._wakeup.set()

    def cancel_page_reads(self) -> list[asyncio.Task[None]]:
        """Stop the page reads in flight (the node is stopping); returns their tasks."""
        tasks = list(self._page_reads.values())
        for task in tasks:
            task.cancel()
        self._page_reads.clear()
        return tasks

    async def _run_round(
        self,
        writes: Sequence[Write],
        futures: Sequence[asyncio.Future[Any]],
        inbound: Sequence[Inbound],
        ticks: int,
        reads: Sequence[tuple[asyncio.Future[None], tuple[str, str]]],
        pages: Sequence[tuple[PageRead, dict[str, Any] | DynamoError]],
    ) -> WriteRound:
        if self._offload is not None:
            result: WriteRound = await self._offload(
                self._timed_round, writes, futures, inbound, ticks, reads, pages
            )
            return result
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            self._thread, self._timed_round, writes, futures, inbound, ticks, reads, pages
        )

    def _timed_round(
        self,
        writes: Sequence[Write],
        futures: Sequence[asyncio.Future[Any]],
        inbound: Sequence[Inbound],
        ticks: int,
        reads: Sequence[tuple[asyncio.Future[None], tuple[str, str]]],
        pages: Sequence[tuple[PageRead, dict[str, Any] | DynamoError]],
    ) -> WriteRound:
        started = time.perf_counter()
        try:
            return self._node.write_round(writes, futures, inbound, ticks, reads, pages)
        finally:
            if writes:
                metrics.group_commit_seconds.observe(time.perf_counter() - started)

    def _expire_waiting(self) -> None:
        """Answer the writes that waited past the bound for their entry: nobody can tell yet
        whether it will commit. (If it does later, its answer finds the future done.)"""
        oldest = self._monotonic() - self._commit_seconds_max
        for confirming, since in list(self._confirming.items()):
            if since <= oldest:
                del self._confirming[confirming]
                if not confirming.done():
                    confirming.set_exception(
                        ServiceUnavailable("The partition's leadership was not confirmed in time")
                    )
        if not self._waiting:
            return
        for future, since in list(self._waiting.items()):
            if since <= oldest:
                del self._waiting[future]
                _resolve(future, _unknown("Its partition's log did not commit it in time"))

    async def close(self, timeout: float) -> None:
        """Stop accepting writes, commit the queued ones, and stop the writer thread."""
        self._closing = True
        self._wakeup.set()
        await asyncio.gather(*self.cancel_page_reads(), return_exceptions=True)
        if self._task is not None:
            try:
                await asyncio.wait_for(self._task, timeout)
            except TimeoutError:
                logger.error("queued writes did not commit within %.1f s of shutdown", timeout)
                self._task.cancel()
        abandoned = self._committing + [future for *_, future in self._queue]
        abandoned += list(self._waiting)
        for confirming in [*self._confirming, *(future for future, _ in self._reads)]:
            if not confirming.done():
                confirming.set_exception(ServiceUnavailable("The storage node shut down"))
        self._queue.clear()
        self._waiting.clear()
        for future in abandoned:
            _resolve(future, _unknown("The storage node shut down"))
        # wait=True: the store must not close under a round still running on the thread.
        self._thread.shutdown(wait=True)


def _resolve(future: asyncio.Future[Any], result: dict[str, Any] | DynamoError) -> None:
    if future.done():  # The caller gave up waiting; the write still applied (or may).
        return
    if isinstance(result, DynamoError):
        future.set_exception(result)
    else:
        future.set_result(result)


class Reader(Protocol):
    def read(
        self,
        op: str,
        target: Target | None,
        body: dict[str, Any],
        *,
        leader_confirmed: bool = False,
    ) -> dict[str, Any]: ...


async def read(
    node: Reader, committer: GroupCommitter, op: str, target: Target | None, body: dict[str, Any]
) -> dict[str, Any]:
    """A read; at the leader of a replicated partition without a lease, its leadership is
    confirmed by a read-index round first (a strong read is then served from the store)."""
    try:
        return node.read(op, target, body)
    except LeaseUnavailable:
        assert target is not None
        await committer.confirm_leader((target.table_id, target.partition_id))
        return node.read(op, target, body, leader_confirmed=True)
