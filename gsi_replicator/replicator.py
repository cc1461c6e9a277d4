"""The replicator: one follower per base partition of every table with global indexes.

Every `GSI_CATALOG_POLL_SECONDS` the replicator reads the catalog (`catalog.py`) and makes sure a
follower runs for each partition `core.gsi.followable` allows: the serving partitions, and the
retired parents of a split until their logs are drained to END (their children wait until then).
A follower of a table that is gone, or no longer serving, is cancelled.

A follower is a loop over its partition's change feed (`rpc.changefeed`), from the replicator
consumer's checkpoint. The consumer is registered at seq 0 with the partition itself
(CreateTable sends it in `create_partition`), so the log holds every change until the replicator
has passed it; registering again here changes nothing. For each batch the feed sends, it:

1. projects every change into index writes (`core.gsi.project_change`, pure);
2. routes them to the index partitions holding their keys (`core.gsi.route`, pure);
3. sends one `index_apply` per index partition, all at once, each retried on a node that does not
   answer; each index partition stores the source's seq with the entries, in one batch;
4. checkpoints the batch's last seq on the source's feed, once every index partition has applied.

A crash anywhere in between (of the replicator, a base node or an index node) makes the follower
start again from its checkpoint: the changes after it are delivered again, and each index
partition skips the seqs it has already applied, so nothing is lost and nothing is applied twice.
Changes of one partition reach each index partition in seq order, because a follower sends the
next batch only once the previous one is applied everywhere.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from core import gsi, limits
from core.catalog import PartitionDef, TableDef, global_indexes
from core.errors import DynamoError, ServiceUnavailable, StaleEpoch, ThroughputExceeded
from gsi_replicator import catalog
from rpc import ops
from rpc.changefeed import Change, ChangeFeedClient
from rpc.client import NodeClient
from rpc.transport import NodeTransport

log = logging.getLogger("gsi_replicator")

FollowerKey = tuple[str, str]  # (table id, partition id)


@dataclass(slots=True)
class FollowerStats:
    """What one follower has done, for `/metrics`."""

    table: str
    partition: str
    checkpoint: int = 0  # The last seq applied to every index and checkpointed.
    changes: int = 0  # Changes read from the feed (replays included).
    index_writes: int = 0  # Index writes sent (each delete and each put is one).
    index_units: float = 0.0  # Write units the index partitions charged for them.
    last_applied_at: float = 0.0  # Wall-clock time of the last applied batch.
    failures: int = 0  # Times the follower started again from its checkpoint.
    lag_ms: float = 0.0  # Time from receiving the last batch to its checkpoint.


@dataclass(slots=True)
class ReplicatorStats:
    followers: dict[FollowerKey, FollowerStats] = field(default_factory=dict)
    catalog_reads: int = 0
    catalog_failures: int = 0


class Replicator:
    """Follows the change feeds of every table with global indexes and keeps the indexes."""

    def __init__(
        self,
        nodes: Mapping[str, str],
        *,
        connect: Callable[[str], NodeTransport] = NodeClient,
        connect_feed: Callable[[str], ChangeFeedClient] = ChangeFeedClient,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not nodes:
            raise ValueError("the replicator needs at least one storage node")
        self.clients: dict[str, NodeTransport] = {n: connect(a) for n, a in nodes.items()}
        self.feeds: dict[str, ChangeFeedClient] = {n: connect_feed(a) for n, a in nodes.items()}
        self.clock = clock
        self.tables: dict[str, TableDef] = {}  # By table id: the tables with global indexes.
        self.followers: dict[FollowerKey, asyncio.Task[None]] = {}
        self.drained: dict[str, set[str]] = {}  # Table id -> partitions read to their END.
        self.stats = ReplicatorStats()

    async def run(self, stop: asyncio.Event) -> None:
        """Poll the catalog and keep the followers running until `stop` is set."""
        try:
            while not stop.is_set():
                await self.poll()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), limits.GSI_CATALOG_POLL_SECONDS)
        finally:
            await self.close()

    async def close(self) -> None:
        for task in self.followers.values():
            task.cancel()
        await asyncio.gather(*self.followers.values(), return_exceptions=True)
        self.followers.clear()
        await asyncio.gather(
            *(client.close() for client in self.clients.values()),
            *(feed.close() for feed in self.feeds.values()),
            return_exceptions=True,
        )

    async def poll(self) -> None:
        """Read the catalog once and start or stop followers to match it."""
        try:
            location = await catalog.locate(self.clients)
            tables = {} if location is None else await catalog.read_tables(self.clients, location)
        except DynamoError as error:
            self.stats.catalog_failures += 1
            log.warning("could not read the catalog: %s", error)
            return
        self.stats.catalog_reads += 1
        self.reconcile(tables)

    def reconcile(self, tables: Mapping[str, TableDef]) -> None:
        """Start a follower for every followable partition of every serving table with global
        indexes; cancel the followers of tables that are gone."""
        self.tables = {
            table.id: table for table in tables.values() if table.serving and global_indexes(table)
        }
        for key, task in list(self.followers.items()):
            if key[0] not in self.tables:
                task.cancel()
                del self.followers[key]
                self.stats.followers.pop(key, None)
            elif task.done():
                del self.followers[key]
        for table_id in list(self.drained):
            if table_id not in self.tables:
                del self.drained[table_id]
        for table in self.tables.values():
            drained = self.drained.setdefault(table.id, set())
            for partition in gsi.followable(table, drained):
                key = (table.id, partition.id)
                if key not in self.followers:
                    stats = self.stats.followers.setdefault(
                        key, FollowerStats(table.name, partition.id)
                    )
                    self.followers[key] = asyncio.create_task(
                        self._follow(table.id, partition, stats), name=f"follow-{partition.id}"
                    )

    async def _follow(self, table_id: str, partition: PartitionDef, stats: FollowerStats) -> None:
        """Follow one partition until its log ends (a retired parent) or the follower is
        cancelled, starting again from the checkpoint after any failure."""
        backoff = limits.GSI_RETRY_BACKOFF_SECONDS_MIN
        while True:
            try:
                await self._follow_from_checkpoint(table_id, partition, stats)
            except StaleEpoch as error:
                table = self.tables.get(table_id)
                if table is not None and any(p.id == partition.id for p in table.retired):
                    # A retired parent whose log is gone: every consumer, this one included,
                    # has read it to its END.
                    self.drained.setdefault(table_id, set()).add(partition.id)
                    return
                # The partition is not (or no longer) on its node: the catalog will say where
                # it went, or that its table is gone; the next poll starts a new follower.
                log.info("partition %s is not where the catalog said: %s", partition.id, error)
                return
            except (DynamoError, OSError) as error:
                stats.failures += 1
                log.warning(
                    "following %s failed (%s); again from its checkpoint in %.2f s",
                    partition.id,
                    error,
                    backoff,
                )
            else:
                self.drained.setdefault(table_id, set()).add(partition.id)
                log.info("partition %s drained to its END", partition.id)
                return
            await asyncio.sleep(backoff)
            backoff = min(2 * backoff, limits.GSI_RETRY_BACKOFF_SECONDS_MAX)

    async def _follow_from_checkpoint(
        self, table_id: str, partition: PartitionDef, stats: FollowerStats
    ) -> None:
        """One pass over the feed from the consumer's checkpoint; returns after the END record."""
        feed = self.feeds.get(partition.node)
        if feed is None:
            raise ServiceUnavailable(f"Storage node {partition.node} is not known here")
        position = await feed.register(
            table_id, partition.id, gsi.REPLICATOR_CONSUMER, 0, limits.NODE_CALL_SECONDS_MAX
        )
        stats.checkpoint = position.seq
        batches = feed.follow_batches(table_id, partition.id, consumer=gsi.REPLICATOR_CONSUMER)
        try:
            async for batch in batches:
                received = self.clock()
                table = self.tables.get(table_id)
                if table is None:
                    return  # The table is gone: reconcile cancels this follower.
                ended = await self._apply_batch(table, partition.id, batch, stats)
                last = batch[-1].seq
                await feed.checkpoint(
                    table_id,
                    partition.id,
                    gsi.REPLICATOR_CONSUMER,
                    last,
                    limits.NODE_CALL_SECONDS_MAX,
                )
                stats.checkpoint = last
                stats.last_applied_at = self.clock()
                stats.lag_ms = 1000.0 * (stats.last_applied_at - received)
                if ended:
                    return
        finally:
            await batches.aclose()

    async def _apply_batch(
        self, table: TableDef, source: str, batch: list[Change], stats: FollowerStats
    ) -> bool:
        """Apply one feed batch to every index partition it touches; whether it held END."""
        writes: list[gsi.IndexWrite] = []
        ended = False
        for change in batch:
            if change.kind == "END":
                ended = True
                break
            writes.extend(
                gsi.project_change(
                    change.seq, change.old, change.new, table.indexes, table.key_shape
                )
            )
        stats.changes += len(batch)
        stats.index_writes += sum(write.writes for write in writes)
        routed = gsi.route(writes, table)
        results = await asyncio.gather(
            *(self._apply(target, source, changes) for target, changes in routed.items()),
            return_exceptions=True,
        )
        for result in results:
            if isinstance(result, BaseException):
                raise result
        stats.index_units += sum(result["units"] for result in results)  # type: ignore[index]
        return ended

    async def _apply(
        self, target: gsi.IndexTarget, source: str, changes: list[dict[str, Any]]
    ) -> dict[str, Any]:
        """One index_apply, retried a bounded number of times on a node that does not answer or
        throttles (a retry of an applied payload applies nothing)."""
        index_id, partition_id, epoch, node = target
        client = self.clients.get(node)
        if client is None:
            raise ServiceUnavailable(f"Storage node {node} is not known here")
        payload = ops.IndexApplyPayload(source, changes).to_json()
        address = ops.Target(index_id, partition_id, epoch)
        backoff = limits.GSI_RETRY_BACKOFF_SECONDS_MIN
        for attempt in range(1, limits.GSI_APPLY_ATTEMPTS_MAX + 1):
            try:
                return await client.call(
                    ops.INDEX_APPLY, address, payload, limits.NODE_CALL_SECONDS_MAX
                )
            except (ServiceUnavailable, ThroughputExceeded):
                if attempt == limits.GSI_APPLY_ATTEMPTS_MAX:
                    raise
            await asyncio.sleep(backoff)
            backoff = min(2 * backoff, limits.GSI_RETRY_BACKOFF_SECONDS_MAX)
        raise AssertionError("unreachable: the last attempt returns or raises")

    def metrics(self) -> str:
        """The replicator's state in the Prometheus text format."""
        lines = [
            "# HELP dynalab_gsi_catalog_reads_total Catalog reads by the replicator.",
            "# TYPE dynalab_gsi_catalog_reads_total counter",
            f"dynalab_gsi_catalog_reads_total {self.stats.catalog_reads}",
            "# HELP dynalab_gsi_catalog_failures_total Catalog reads that failed.",
            "# TYPE dynalab_gsi_catalog_failures_total counter",
            f"dynalab_gsi_catalog_failures_total {self.stats.catalog_failures}",
        ]
        families = (
            ("checkpoint_seq", "gauge", "Last seq applied to every index and checkpointed."),
            ("changes_total", "counter", "Changes read from the feed, replays included."),
            ("index_writes_total", "counter", "Index writes (deletes and puts) sent."),
            ("index_write_units_total", "counter", "Write units the indexes charged."),
            ("restarts_total", "counter", "Times a follower started again from its checkpoint."),
            ("batch_lag_milliseconds", "gauge", "From receiving the last batch to its checkpoint."),
        )
        for name, kind, help_text in families:
            lines.append(f"# HELP dynalab_gsi_{name} {help_text}")
            lines.append(f"# TYPE dynalab_gsi_{name} {kind}")
            for follower in self.stats.followers.values():
                value = {
                    "checkpoint_seq": follower.checkpoint,
                    "changes_total": follower.changes,
                    "index_writes_total": follower.index_writes,
                    "index_write_units_total": follower.index_units,
                    "restarts_total": follower.failures,
                    "batch_lag_milliseconds": follower.lag_ms,
                }[name]
                labels = f'table="{follower.table}",partition="{follower.partition}"'
                lines.append(f"dynalab_gsi_{name}{{{labels}}} {value}")
        return "\n".join(lines) + "\n"
