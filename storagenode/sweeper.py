"""The TTL sweeper of one storage node: finds expired items in the expiry index and deletes them.

Every `interval` seconds (DYNALAB_TTL_SWEEP_SECONDS, `--ttl-sweep-seconds`, 1 s by default) the
sweeper first indexes, step by step, the items of partitions whose TTL was just enabled
(`expiry.backfill`), then, for each table with TTL enabled here, reads the expired entries of its
expiry index (a walk that costs what expires, not the table's size) and hands them to the group
committer as the node's own `ttl_expire` writes, one per partition and at most
`TTL_SWEEP_BATCH_ITEMS_MAX` items each. Each write deletes only what is still expired when it runs,
through the ordinary write path (`expiry.expire`). A replicated partition is swept by its
leader's sweeper alone, its writes addressed to the partition, so that each is an entry of its
Raft group and every replica deletes the same items (`_swept`).

It keeps foreground latency: index reads run on an executor thread, never on the event loop;
every delete shares the writer thread with client writes in bounded groups; and while a backlog
lasts the sweeper pauses after each write as long as the write took
(`TTL_SWEEP_BUSY_FRACTION_MAX`), so client requests get the writer and the GIL at least half of
the time. A
sweep is best-effort (T-04): a write that fails (the node is overloaded or stopping) is logged and
retried at the next round, as the expired items are still in the index.

`report` gives what Prometheus shows per table: the TTL deletions (committed counters, so they
survive a restart) and the sweeper's lag, the age of the oldest expired item not yet deleted.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable
from typing import Any

from core import limits
from core.errors import DynamoError
from rpc.ops import Target
from storagenode import expiry
from storagenode.node import StorageNode
from storagenode.partition import Partition

logger = logging.getLogger(__name__)

# Hands a node write (op, the partition it is addressed to or None, body) to the group
# committer and resolves with its reply.
Submit = Callable[[str, Target | None, dict[str, Any]], Awaitable[dict[str, Any]]]


class TtlSweeper:
    """Runs the sweep rounds of one node as an asyncio task; `close` stops it."""

    def __init__(
        self,
        node: StorageNode,
        submit: Submit,
        interval: float = limits.TTL_SWEEP_SECONDS_DEFAULT,
        *,
        monotonic: Callable[[], float] = time.monotonic,
        offload: Callable[[Callable[[], Any]], Awaitable[Any]] | None = None,
    ) -> None:
        """`offload` runs a walk of the expiry index off the event loop (default: the loop's
        executor; the simulated cluster runs it inline, on its virtual-time loop)."""
        self.node = node
        self.submit = submit
        self.interval = interval
        self.monotonic = monotonic
        self.offload = offload or _on_executor
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.rounds = 0

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="ttl-sweeper")

    async def close(self) -> None:
        """Stop after the write in flight, if any."""
        self._stop.set()
        if self._task is not None:
            await self._task

    async def _run(self) -> None:
        while not self._stop.is_set():
            try:
                await self.sweep()
            except DynamoError as error:
                logger.warning("TTL sweep stopped early, retried next round: %s", error)
            except Exception:
                logger.exception("TTL sweep failed; retried next round")
            self.rounds += 1
            await self._pause(self.interval)

    async def sweep(self) -> int:
        """One round: finish indexing what needs it, then delete what has expired. Returns how
        many items were deleted."""
        await self._backfill()
        deleted = 0
        tables = {
            partition.table_id
            for partition in list(self.node.partitions.values())
            if partition.ttl_attribute is not None
        }
        for table_id in sorted(tables):
            deleted += await self._sweep_table(table_id)
        return deleted

    def _swept(self, partition: Partition) -> tuple[bool, Target | None]:
        """Whether this node sweeps `partition`, and the partition its writes are addressed to:
        one of one copy is swept where it is, unaddressed; a replicated one only by its leader,
        whose writes name it, so that each is an entry of its group and every replica applies
        the same deletes (another replica's sweeper leaves it alone)."""
        ref = (partition.table_id, partition.partition_id)
        if not self.node.replicated(ref):
            return True, None
        if not self.node.leads(ref):
            return False, None
        return True, Target(partition.table_id, partition.partition_id, partition.epoch)

    async def _backfill(self) -> None:
        for partition in list(self.node.partitions.values()):
            payload = expiry.BackfillPayload(partition.table_id, partition.partition_id)
            done = partition.ttl_attribute is None or partition.ttl_backfill is None
            swept, target = self._swept(partition)
            while swept and not done and not self._stop.is_set():
                reply = await self._paced(expiry.TTL_BACKFILL, target, payload.to_json())
                done = reply["done"]

    async def _sweep_table(self, table_id: str) -> int:
        deleted = 0
        while not self._stop.is_set():
            partitions = [p for p in list(self.node.partitions.values()) if p.table_id == table_id]
            targets = {}
            for partition in partitions:
                swept, target = self._swept(partition)
                if swept:
                    targets[partition.partition_id] = target
            mine = [p for p in partitions if p.partition_id in targets]
            if not mine:
                break

            def ours(storage_key: bytes, mine: list[Partition] = mine) -> bool:
                return any(p.holds(storage_key) for p in mine)

            entries = await self.offload(
                functools.partial(
                    expiry.expired_entries,
                    self.node.store,
                    table_id,
                    self.node.clock(),
                    limits.TTL_SWEEP_BATCH_ITEMS_MAX,
                    ours,
                )
            )
            if not entries:
                break
            by_partition: dict[str, list[bytes]] = defaultdict(list)
            for _, storage_key in entries:
                holder = next((p for p in mine if p.holds(storage_key)), None)
                if holder is not None:
                    by_partition[holder.partition_id].append(storage_key)
            batch_deleted = 0
            for partition_id, keys in by_partition.items():
                payload = expiry.ExpirePayload(table_id, partition_id, keys)
                reply = await self._paced(
                    expiry.TTL_EXPIRE, targets[partition_id], payload.to_json()
                )
                batch_deleted += reply["deleted"]
            deleted += batch_deleted
            if batch_deleted == 0:
                # What is left was extended or deleted meanwhile and its entries are gone with
                # it, or is in no partition here: nothing more to do this round.
                break
        return deleted

    async def _paced(self, op: str, target: Target | None, body: dict[str, Any]) -> dict[str, Any]:
        """Run one node write, then pause so that the sweeper keeps to its share of the writer."""
        started = self.monotonic()
        reply = await self.submit(op, target, body)
        busy = self.monotonic() - started
        pause = busy * (1 / limits.TTL_SWEEP_BUSY_FRACTION_MAX - 1)
        if pause > 0:
            await self._pause(pause)
        return reply

    def report(self) -> list[dict[str, Any]]:
        """The node's TTL report (`report`), for Prometheus."""
        return report(self.node)

    async def _pause(self, seconds: float) -> None:
        """Wait `seconds`, or less if the sweeper is stopped meanwhile."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stop.wait(), seconds)


async def _on_executor(work: Callable[[], Any]) -> Any:
    return await asyncio.get_running_loop().run_in_executor(None, work)


def report(node: StorageNode) -> list[dict[str, Any]]:
    """Per table with TTL enabled on this node: {"table", "deleted", "lag_seconds"}.

    `deleted` sums the partitions' committed TTL deletions; `lag_seconds` is how long ago the
    oldest expired item still here expired (0 when none is waiting)."""
    now = node.clock()
    tables: dict[str, dict[str, Any]] = {}
    for partition in list(node.partitions.values()):
        entry = tables.setdefault(
            partition.table_id, {"table": partition.table_name, "deleted": 0, "enabled": False}
        )
        entry["deleted"] += partition.ttl_deleted
        entry["enabled"] |= partition.ttl_attribute is not None
    reports = []
    for table_id, entry in sorted(tables.items()):
        if not entry["enabled"] and not entry["deleted"]:
            continue
        oldest = expiry.oldest_expired(node.store, table_id, now) if entry["enabled"] else None
        lag = 0.0 if oldest is None else max(0.0, now - oldest)
        reports.append({"table": entry["table"], "deleted": entry["deleted"], "lag_seconds": lag})
    return reports
