"""Group commit: many writes per synced RocksDB write batch, each acknowledged only after its
commit.

An fsync costs about as much for one write as for a thousand, so writes that arrive while a batch
is committing wait in a queue, and the next batch takes the whole queue at once (up to
`WRITE_BATCH_OPS_MAX`). The batch is planned, applied and committed on one dedicated thread, so
the writes of a group see each other in order while the event loop goes on receiving requests
(and the next batch keeps forming). A write's future resolves only after the commit that holds it
returned, so every acknowledged write is on disk.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from core import limits
from core.errors import DynamoError, InternalServerError, ServiceUnavailable
from rpc.ops import Target
from storagenode import metrics

logger = logging.getLogger(__name__)

# A write: its op, the partition it is addressed to (None: a control-plane write) and its payload.
Write = tuple[str, Target | None, Any]
ApplyBatch = Callable[[Sequence[Write]], Sequence[dict[str, Any] | DynamoError]]


class GroupCommitter:
    """Queues writes and applies each batch of them with `apply_batch` on the writer thread."""

    def __init__(
        self,
        apply_batch: ApplyBatch,
        *,
        batch_ops_max: int = limits.WRITE_BATCH_OPS_MAX,
        queue_ops_max: int = limits.WRITE_QUEUE_OPS_MAX,
        commit_seconds_max: float = limits.WRITE_COMMIT_SECONDS_MAX,
    ) -> None:
        self._apply_batch = apply_batch
        self._batch_ops_max = batch_ops_max
        self._queue_ops_max = queue_ops_max
        self._commit_seconds_max = commit_seconds_max
        self._queue: collections.deque[tuple[str, Target | None, Any, asyncio.Future[Any]]] = (
            collections.deque()
        )
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
        self._wakeup.set()
        return future

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            if not self._queue:
                if self._closing:
                    return
                # Idle: no write is waiting on this, and submit() or close() wakes it.
                await self._wakeup.wait()
                self._wakeup.clear()
                continue
            size = min(len(self._queue), self._batch_ops_max)
            batch = [self._queue.popleft() for _ in range(size)]
            self._committing = [future for *_, future in batch]
            writes = [(op, target, payload) for op, target, payload, _ in batch]
            try:
                results = await asyncio.wait_for(
                    loop.run_in_executor(self._thread, self._timed_apply, writes),
                    self._commit_seconds_max,
                )
            except TimeoutError:
                logger.error(
                    "a group commit of %d writes passed %.0f s", size, self._commit_seconds_max
                )
                results = [
                    ServiceUnavailable(
                        "The storage node did not commit in time; the write may or may not apply"
                    )
                    for _ in batch
                ]
            except Exception as error:
                # apply_batch turns every failure into per-write results; reaching here is a bug.
                logger.exception("group commit crashed")
                results = [
                    InternalServerError(f"The group commit crashed: {error!r}") for _ in batch
                ]
            else:
                self.batches_committed += 1
                self.writes_committed += size
                metrics.group_commit_writes.observe(size)
            for (*_, future), result in zip(batch, results, strict=True):
                if future.done():  # The caller gave up waiting; the write still applied.
                    continue
                if isinstance(result, DynamoError):
                    future.set_exception(result)
                else:
                    future.set_result(result)
            self._committing = []

    def _timed_apply(self, writes: Sequence[Write]) -> Sequence[dict[str, Any] | DynamoError]:
        started = time.perf_counter()
        try:
            return self._apply_batch(writes)
        finally:
            metrics.group_commit_seconds.observe(time.perf_counter() - started)

    async def close(self, timeout: float) -> None:
        """Stop accepting writes, commit the queued ones, and stop the writer thread."""
        self._closing = True
        self._wakeup.set()
        if self._task is not None:
            try:
                await asyncio.wait_for(self._task, timeout)
            except TimeoutError:
                logger.error("queued writes did not commit within %.1f s of shutdown", timeout)
        abandoned = self._committing + [future for *_, future in self._queue]
        self._queue.clear()
        for future in abandoned:
            if not future.done():
                future.set_exception(
                    ServiceUnavailable("The storage node shut down; the write may or may not apply")
                )
        # wait=True: the store must not close under a transaction still running on the thread.
        self._thread.shutdown(wait=True)
