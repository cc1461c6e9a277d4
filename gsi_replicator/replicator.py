"""The replicator: one follower per base partition of every table with global indexes.

Every `GSI_CATALOG_POLL_SECONDS` the replicator reads the catalog (`catalog_client`), works out the
partitions `core.gsi.followable` allows (the serving partitions, and the retired parents of a split
until their logs are drained to END: their children wait until then), and claims, renews or
releases its leases on them (`core.gsi_leases`, `leases.py`): several replicators share the
partitions, each following only those it holds the lease of. A follower of a table that is gone,
no longer serving, or whose lease was lost or released, is cancelled.

A follower is a loop over its partition's change feed (the node transport's `feed()`,
`rpc.transport.FeedTransport`: gRPC, or in-process under `tests/sim`), from the replicator
consumer's checkpoint. The consumer is registered at seq 0 with the partition itself
(CreateTable sends it in `create_partition`), so the log holds every change until the replicator
has passed it; registering again here changes nothing. For each batch the feed sends, it:

1. projects every change into index writes (`core.gsi.project_change`, pure);
2. routes them to the index partitions holding their keys (`core.gsi.route`, pure);
3. sends one `index_apply` per index partition, all at once, each retried on a node that does not
   answer or an index partition out of write capacity (whose refusal it passes on to the source
   partition's node, which then holds back the base writes that would change that index
   partition: `core.index_pressure`); each index partition stores the source's seq with the
   entries, in one batch;
4. checkpoints the batch's last seq on the source's feed, once every index partition has applied,
   behind the next batch's applies rather than before them (`_Checkpoints`).

While a batch is applied the feed is read ahead, and the batches waiting when the next run starts
are applied together (`_FeedRuns`): under load a follower makes fewer, larger calls.

A crash anywhere in between (of the replicator, a base node or an index node) makes the follower
start again from its checkpoint: the changes after it are delivered again, and each index
partition skips the seqs it has already applied, so nothing is lost and nothing is applied twice.
Changes of one partition reach each index partition in seq order, because a follower sends the
next batch only once the previous one is applied everywhere.

A follower's writes carry its lease's epoch. It first sends that epoch to every partition of the
indexes it keeps (its fence), so a replicator that lost the lease without noticing gets its late
writes refused (`LeaseFenced`) everywhere, a backfill page read before the takeover above all, and
stops following.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import random
import socket
import time
import uuid
from collections.abc import AsyncGenerator, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import orjson
from prometheus_client import CollectorRegistry, Histogram, generate_latest

from core import catalog as catalog_core
from core import gsi, gsi_leases, limits
from core.catalog import (
    CatalogLocation,
    IndexDef,
    IndexStatus,
    PartitionDef,
    TableDef,
    global_indexes,
)
from core.changes import Change
from core.errors import (
    DynamoError,
    InternalServerError,
    LeaseFenced,
    ServiceUnavailable,
    StaleEpoch,
    ThrottlingReason,
    ThroughputExceeded,
)
from core.gsi_leases import Lease
from core.machines import RESTARTED, STARTED, Effect, Event, backfill
from core.machines.backfill import BackfillRecord, BackfillState
from core.retry import GSI_APPLY, GSI_REROUTE, GSI_THROTTLED_APPLY
from core.token_bucket import BillingMode
from gsi_replicator import leases
from rpc import catalog_client, ops
from rpc.client import NodeClient
from rpc.machines import CrashPoints, Driver, Handler, HoldPoints
from rpc.replicas import Attempt, ReplicaCalls
from rpc.transport import ConsumerPosition, FeedTransport, NodeTransport

log = logging.getLogger("gsi_replicator")

T = TypeVar("T")

FollowerKey = tuple[str, str, str]  # (table id, partition id, change-feed consumer)


@dataclass(slots=True)
class FollowerStats:
    """What one follower has done, for `/metrics`."""

    table: str
    partition: str
    consumer: str = gsi.REPLICATOR_CONSUMER
    checkpoint: int = 0  # The last seq applied to every index and checkpointed.
    changes: int = 0  # Changes read from the feed (replays included).
    index_writes: int = 0  # Index writes sent (each delete and each put is one).
    index_units: float = 0.0  # Write units the index partitions charged for them.
    last_applied_at: float = 0.0  # Wall-clock time of the last applied batch.
    failures: int = 0  # Times the follower started again from its checkpoint.
    throttled_applies: int = 0  # index_apply calls an index partition refused for throughput.
    lag_ms: float = 0.0  # Time from taking the last run of records off the feed to its apply.
    backfilled_items: int = 0  # Items of the partition an online index's backfill has copied.
    backfill_pages: int = 0  # Pages of the partition this replicator's backfill has read.
    backfill_done: bool = False  # The partition's copy into its online index is done.
    table_id: str = ""
    last_seq: int = 0  # The log's last seq, as the last register or checkpoint answered.
    behind_since: float | None = None  # Since when the checkpoint trails the log; None: not.

    def observe(self, checkpoint: int, last_seq: int, now: float) -> None:
        """Record a checkpoint and the log's last seq as the node answered them at `now`."""
        self.checkpoint, self.last_seq = checkpoint, last_seq
        if last_seq <= checkpoint:
            self.behind_since = None
        elif self.behind_since is None:
            self.behind_since = now

    @property
    def lag_records(self) -> int:
        return max(0, self.last_seq - self.checkpoint)


# Propagation times run from a fast loopback's millisecond to a throttled index's seconds.
_LAG_SECONDS_BUCKETS = (
    0.0005,
    0.001,
    0.002,
    0.003,
    0.005,
    0.0075,
    0.01,
    0.015,
    0.025,
    0.05,
    0.1,
    0.25,
    1,
    5,
    30,
)


class _LagHistograms:
    """Where a change's time goes on its way into the indexes, per replicator process (its
    own registry: a simulation runs several in one process).

    Both start at the change's commit as the source node's clock stamped it (`Change.at`, the
    group commit's time, taken as the group is planned, before its sync), so across machines
    they hold the clocks' skew too: `feed` ends when the follower takes the change's run off the
    feed (the source's commit, the follower's wake-up and read, the stream), `applied` when
    every index partition it changes has answered (the index partition's own commit included)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.feed = Histogram(
            "dynalab_gsi_feed_seconds",
            "From a change's commit on its source node to the replicator taking it off the feed",
            buckets=_LAG_SECONDS_BUCKETS,
            registry=self.registry,
        )
        self.applied = Histogram(
            "dynalab_gsi_propagation_seconds",
            "From a change's commit on its source node to every index partition applying it",
            buckets=_LAG_SECONDS_BUCKETS,
            registry=self.registry,
        )

    def observe(self, run: Iterable[Change], received: float, applied: float) -> None:
        for change in run:
            if change.at:
                self.feed.observe(max(0.0, received - change.at))
                self.applied.observe(max(0.0, applied - change.at))

    def text(self) -> str:
        return generate_latest(self.registry).decode()


@dataclass(slots=True)
class ReplicatorStats:
    followers: dict[FollowerKey, FollowerStats] = field(default_factory=dict)
    catalog_reads: int = 0
    catalog_failures: int = 0
    leases_acquired: int = 0
    leases_released: int = 0
    leases_lost: int = 0  # Renewals refused, or index writes fenced: another holds the lease.
    leases_collected: int = 0  # Lease rows of dropped tables or deleted indexes deleted.
    members_collected: int = 0  # Member rows of replicators that stopped renewing them deleted.
    lease_rows: int = 0  # Lease rows in the leases table, as last read.
    member_rows: int = 0  # Replicator member rows in the leases table, as last read.


def _follower_key(record: BackfillRecord) -> FollowerKey:
    return (record.table_id, record.partition_id, record.consumer)


def _followed(tables: Iterable[TableDef]) -> gsi_leases.Followed:
    """The lease keys the catalog's `tables` still have: per table id and consumer, the ids of
    the table's partitions and of the retired ones of its lineage."""
    followed: dict[str, dict[str, frozenset[str]]] = {}
    for table in tables:
        lineage = frozenset(p.id for p in (*table.partitions, *table.retired))
        followed[table.id] = {consumer: lineage for consumer in gsi.followed_groups(table)}
    return followed


class _FeedRuns:
    """The runs of records a follower applies, read from its feed by a task of its own.

    The reader puts each batch the node sends into a queue of at most
    `GSI_FEED_BATCHES_QUEUED_MAX` batches (then waits: the stream's flow control holds the node
    back). A run is the next batch and every batch already waiting behind it, up to
    `CHANGE_FEED_BATCH_RECORDS_MAX` records and never past an END; so a run is at most the
    queue's batches plus one, whose bytes `core.limits` bounds below an RPC message.
    """

    def __init__(self, batches: AsyncGenerator[list[Change], None], name: str) -> None:
        self._queue: asyncio.Queue[list[Change] | Exception | None] = asyncio.Queue(
            limits.GSI_FEED_BATCHES_QUEUED_MAX
        )
        self._held: list[Change] | Exception | None = None  # Ended a run early; next comes first.
        self._holding = False
        self._reader = asyncio.create_task(self._read(batches), name=name)

    async def _read(self, batches: AsyncGenerator[list[Change], None]) -> None:
        try:
            async for batch in batches:
                await self._queue.put(batch)
            await self._queue.put(None)
        except Exception as error:  # Handed to the follower, which raises it.
            await self._queue.put(error)
        finally:
            await batches.aclose()

    async def _take(self) -> list[Change] | Exception | None:
        if self._holding:
            self._holding = False
            return self._held
        return await self._queue.get()

    async def next(self) -> list[Change] | None:
        """The next run (None: the feed ended); raises the feed's failure once the batches read
        before it are applied."""
        first = await self._take()
        if first is None:
            return None
        if isinstance(first, Exception):
            raise first
        run = list(first)
        while (
            run[-1].kind != "END"
            and len(run) < limits.CHANGE_FEED_BATCH_RECORDS_MAX
            and not self._queue.empty()
        ):
            waiting = self._queue.get_nowait()
            if waiting is None or isinstance(waiting, Exception):
                self._held, self._holding = waiting, True
                break
            run.extend(waiting)
        return run

    async def close(self) -> None:
        self._reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._reader


class _Checkpoints:
    """A follower's checkpoints on its source's feed, written behind its applies.

    `advance` records the last seq applied everywhere; a task writes the latest one once the
    previous write has finished and `GSI_CHECKPOINT_INTERVAL_SECONDS` have passed since, so a busy
    follower writes a few checkpoints a second, not one per run, and never waits for one.
    Checkpoints are monotonic on the node, so one cancelled or late changes nothing. A write that
    fails is raised by the follower at its next run (`raise_failure`), which then starts again
    from the checkpoint the node has.
    """

    def __init__(
        self,
        feed: FeedTransport,
        ref: tuple[str, str, str],
        stats: FollowerStats,
        clock: Callable[[], float],
    ) -> None:
        self._feed, self._ref, self._stats, self._clock = feed, ref, stats, clock
        self._wanted = 0
        self._wake = asyncio.Event()
        self._failure: Exception | None = None
        self._writer = asyncio.create_task(self._write_latest(), name=f"checkpoint-{ref[1]}")

    def advance(self, seq: int) -> None:
        self._wanted = max(self._wanted, seq)
        self._wake.set()

    def raise_failure(self) -> None:
        if self._failure is not None:
            raise self._failure

    async def _write_latest(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            try:
                await self._write(self._wanted)
            except (DynamoError, OSError) as error:
                self._failure = error
                return
            await asyncio.sleep(limits.GSI_CHECKPOINT_INTERVAL_SECONDS)

    async def _write(self, seq: int) -> None:
        table_id, partition_id, consumer = self._ref
        position = await self._feed.checkpoint(
            table_id, partition_id, consumer, seq, limits.NODE_CALL_SECONDS_MAX
        )
        self._stats.observe(seq, position.last_seq, self._clock())

    async def flush(self) -> None:
        """Write the last seq advanced to, and wait until it is written."""
        await self.close()
        self.raise_failure()
        await self._write(self._wanted)

    async def close(self) -> None:
        self._writer.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._writer


# A part waiting for its index partition: the part, its encoded changes' size, its reply's future.
_Waiting = tuple[ops.IndexApplyPart, int, "asyncio.Future[dict[str, Any]]"]


class _IndexWrites:
    """Every follower's writes to the index partitions, sent as one index_apply per index
    partition at a time.

    A follower hands its part (one run's projected changes for one index partition, or its
    fence) to `apply` and awaits the part's reply. The parts waiting for one index partition go
    together as one index_apply as soon as the call before them has answered (the first in the
    event-loop turn after it arrived, so an idle index waits for nothing), cut once their encoded
    changes pass `GSI_INDEX_APPLY_BYTES_TARGET`. A busy table thus costs one call and one write
    of the index node's group commit per index partition and round trip, whatever the number of
    base partitions, instead of one per base partition and feed batch. The index partition
    applies the parts in order, each source's seq committed with its entries; a part refused on
    its own (`LeaseFenced`) reaches only its follower, and a failure of the call (a stale epoch,
    a throttle, a node that does not answer) every follower whose part it carried, each of which
    retries as it would have alone. A follower sends its next run only once its part was
    answered, so one source's parts reach an index partition in seq order.

    A replicated index partition (`partition_of` gives its catalog record) is written at its
    leader (`rpc.replicas`), and a call that may have applied goes on to another replica: the
    index partition skips a source's changes it has already applied (their seq is committed
    with the entries), so a part applied twice changes nothing.
    """

    def __init__(
        self,
        clients: Mapping[str, NodeTransport],
        replicas: ReplicaCalls,
        partition_of: Callable[[gsi.IndexTarget], PartitionDef | None],
    ) -> None:
        self._clients = clients
        self._replicas = replicas
        self._partition_of = partition_of
        self._waiting: dict[gsi.IndexTarget, list[_Waiting]] = {}
        self._senders: dict[gsi.IndexTarget, asyncio.Task[None]] = {}
        self.calls = 0  # index_apply calls sent (a call carries one or more parts).
        self.parts = 0  # Parts sent in them.

    async def apply(self, target: gsi.IndexTarget, part: ops.IndexApplyPart) -> dict[str, Any]:
        """Send `part` to index partition `target` with the others waiting for it; its reply
        (`ops.part_outcome` raises its own refusal)."""
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        size = len(orjson.dumps(part.changes))
        self._waiting.setdefault(target, []).append((part, size, future))
        if target not in self._senders:
            self._senders[target] = asyncio.create_task(
                self._send(target), name=f"index-apply-{target[1]}"
            )
        return await future

    def senders(self) -> list[asyncio.Task[None]]:
        """The tasks sending to index partitions now (a stopping replicator cancels them)."""
        return list(self._senders.values())

    async def _send(self, target: gsi.IndexTarget) -> None:
        """Send the parts waiting for `target`, a call at a time, until none waits."""
        try:
            while self._waiting.get(target):
                await self._call(target, self._take(target))
        except asyncio.CancelledError:
            stopping = ServiceUnavailable("The replicator is stopping")
            _fail([future for _, _, future in self._waiting.pop(target, [])], stopping)
            raise
        finally:
            del self._senders[target]

    def _take(self, target: gsi.IndexTarget) -> list[_Waiting]:
        """The parts for the next call: the oldest waiting, up to the bytes target."""
        waiting = self._waiting[target]
        taken, total = 0, 0
        while taken < len(waiting) and (
            taken == 0 or total + waiting[taken][1] <= limits.GSI_INDEX_APPLY_BYTES_TARGET
        ):
            total += waiting[taken][1]
            taken += 1
        batch, self._waiting[target] = waiting[:taken], waiting[taken:]
        if not self._waiting[target]:
            del self._waiting[target]
        return batch

    async def _call(self, target: gsi.IndexTarget, batch: list[_Waiting]) -> None:
        live = [(part, future) for part, _, future in batch if not future.done()]
        if not live:
            return  # Every follower of these parts was cancelled meanwhile.
        index_id, partition_id, partition_epoch, node = target
        index_target = ops.Target(index_id, partition_id, partition_epoch)
        payload = ops.IndexApplyPayload([part for part, _ in live]).to_json()

        async def attempt(at: str, remaining: float) -> dict[str, Any]:
            return await _client(self._clients, at).call(
                ops.INDEX_APPLY, index_target, payload, remaining
            )

        try:
            self.calls += 1
            self.parts += len(live)
            partition = self._partition_of(target)
            if partition is None or not partition.replicas:
                reply = await attempt(node, limits.NODE_CALL_SECONDS_MAX)
            else:
                reply = await self._replicas.call(
                    partition,
                    index_id,
                    ops.INDEX_APPLY,
                    attempt,
                    limits.NODE_CALL_SECONDS_MAX,
                    retry_safe=True,
                )
            replies = reply["parts"]
            if len(replies) != len(live):
                raise InternalServerError(
                    f"index_apply answered {len(replies)} parts for the {len(live)} it was sent"
                )
        except (DynamoError, OSError) as error:
            _fail([future for _, future in live], error)
            return
        except asyncio.CancelledError:
            _fail([future for _, future in live], ServiceUnavailable("The replicator is stopping"))
            raise
        for (_, future), part_reply in zip(live, replies, strict=True):
            if not future.done():
                future.set_result(part_reply)


def _client(clients: Mapping[str, NodeTransport], node: str) -> NodeTransport:
    client = clients.get(node)
    if client is None:
        raise ServiceUnavailable(f"Storage node {node} is not known here")
    return client


def _fail(futures: Iterable[asyncio.Future[dict[str, Any]]], error: BaseException) -> None:
    for future in futures:
        if not future.done():
            future.set_exception(error)


class _IndexPartitionStale(Exception):
    """An index partition refused index_apply as stale: split (or not installed yet)."""

    def __init__(self, partition_id: str) -> None:
        super().__init__(partition_id)
        self.partition_id = partition_id


class Replicator:
    """Follows the change feeds of every table with global indexes and keeps the indexes."""

    def __init__(
        self,
        nodes: Mapping[str, str],
        *,
        connect: Callable[[str], NodeTransport] = NodeClient,
        clock: Callable[[], float] = time.time,
        owner: str | None = None,
        lease_seconds: float = limits.GSI_LEASE_SECONDS,
        backfill_page_bytes: int = limits.GSI_BACKFILL_PAGE_BYTES,
        lease_gc_grace_seconds: float = limits.GSI_LEASE_GC_GRACE_SECONDS,
        monotonic: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
        new_id: Callable[[], str] = lambda: uuid.uuid4().hex,
        crash_points: CrashPoints | None = None,
    ) -> None:
        """`rng` draws the pauses of catalog changes and `new_id` makes the owner's suffix
        (default: fresh entropy; a simulation passes seeded ones); `crash_points` are the
        backfill driver's (default: DYNALAB_HOLD_AT's, `rpc.machines.HoldPoints`)."""
        if not nodes:
            raise ValueError("the replicator needs at least one storage node")
        # Unique per process run: a restarted replicator is a new owner, never its old self.
        self.owner = owner or f"{socket.gethostname()}-{os.getpid()}-{new_id()[:8]}"
        self.lease_seconds = lease_seconds
        self.lease_gc_grace_seconds = lease_gc_grace_seconds
        self.monotonic = monotonic
        self.row_ages = gsi_leases.RowAges()
        self.backfill_page_bytes = backfill_page_bytes
        self.leases: dict[FollowerKey, Lease] = {}  # The leases this replicator holds.
        self.epochs: dict[FollowerKey, int] = {}  # The lease epoch each follower runs under.
        self.lease_rows: dict[FollowerKey, Lease] = {}  # Every lease, as last read.
        self.leases_ready = False  # The leases table exists on the catalog's node.
        self.clients: dict[str, NodeTransport] = {n: connect(a) for n, a in nodes.items()}
        # The leaders of replicated partitions last seen, and the loop that finds them.
        self.replicas = ReplicaCalls()
        self.index_writes = _IndexWrites(self.clients, self.replicas, self._index_partition)
        self.clock = clock
        self.tables: dict[str, TableDef] = {}  # By table id: the tables with global indexes.
        self.followers: dict[FollowerKey, asyncio.Task[None]] = {}
        # (Table id, consumer) -> partitions read to their END under that consumer.
        self.drained: dict[tuple[str, str], set[str]] = {}
        self.location: CatalogLocation | None = None
        rng = random.Random() if rng is None else rng
        # The catalog's partition and the leases table beside it, at a replicated one's leader.
        self.catalog_nodes = catalog_client.CatalogNodes(self._catalog_transport, self.replicas)
        self.catalog = catalog_client.CatalogClient(
            self._located, self.catalog_nodes, rng=rng, clock=monotonic
        )
        handlers: dict[str, Handler[BackfillRecord]] = {
            "register": self._register_backfill,
            "mark": self._mark_backfill,
            "read": self._read_backfill,
            "apply": self._apply_backfill,
            "checkpoint": self._checkpoint_backfill,
        }
        # Every online index's copy, one record per (index, base partition), runs on this
        # driver; its effects have no retry policy of their own, so `rng` draws nothing here.
        self.backfills: Driver[BackfillRecord] = Driver(
            backfill.MACHINE,
            handlers,
            self._persist_backfill,
            HoldPoints.from_env() if crash_points is None else crash_points,
            monotonic,
            rng,
        )
        self.stats = ReplicatorStats()
        self.lag = _LagHistograms()

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
        """Stop every follower, give up the leases (so others take them over at once rather
        than when they expire), and close the connections."""
        stopped = [*self.followers.values(), *self.index_writes.senders()]
        for task in stopped:
            task.cancel()
        await asyncio.gather(*stopped, return_exceptions=True)
        self.followers.clear()
        if self.location is not None and self.leases:
            location = self.location
            with contextlib.suppress(DynamoError, OSError, TimeoutError):
                await asyncio.wait_for(
                    asyncio.gather(
                        *(self._release(location, lease) for lease in self.leases.values())
                    ),
                    limits.NODE_CALL_SECONDS_MAX,
                )
        await asyncio.gather(
            *(client.close() for client in self.clients.values()), return_exceptions=True
        )

    async def poll(self) -> None:
        """Read the catalog once and start or stop followers to match it."""
        try:
            self.location = await catalog_client.locate(self.clients)
            tables = {} if self.location is None else await self.catalog.scan()
        except DynamoError as error:
            self.stats.catalog_failures += 1
            log.warning("could not read the catalog: %s", error)
            return
        self.stats.catalog_reads += 1
        self.tables = {
            table.id: table for table in tables.values() if table.serving and global_indexes(table)
        }
        if self.location is not None:
            try:
                await self.claim_leases(self.location, _followed(tables.values()))
            except DynamoError as error:
                log.warning("could not read or change the leases: %s", error)
        self.reconcile()

    def wanted(self) -> list[FollowerKey]:
        """The (table, partition, consumer) triples some replicator should follow now."""
        keys: list[FollowerKey] = []
        for table in self.tables.values():
            for consumer in gsi.followed_groups(table):
                drained = self.drained.setdefault((table.id, consumer), set())
                drained |= gsi_leases.drained_partitions(
                    self.lease_rows.values(), table.id, consumer
                )
                keys.extend(
                    (table.id, partition.id, consumer)
                    for partition in gsi.followable(table, drained)
                )
        return keys

    async def claim_leases(
        self, location: CatalogLocation, followed: gsi_leases.Followed | None = None
    ) -> None:
        """One round of leases: read them all, delete the dead ones (`followed`: the lease keys
        the catalog, read just before, still has; None: delete none), renew the ones kept, take
        free ones up to this replicator's fair share, release the rest
        (`core.gsi_leases.plan`)."""
        if not self.leases_ready:
            await leases.ensure_table(self.catalog_nodes, location)
            self.leases_ready = True
        rows, members = await leases.read(self.catalog_nodes, location)
        self.stats.lease_rows, self.stats.member_rows = len(rows), len(members)
        ages = self.row_ages.observe(rows.values(), members.values(), self.monotonic())
        if followed is not None:
            garbage = gsi_leases.collectable(
                rows, members, followed, ages, self.lease_gc_grace_seconds
            )
            await self._collect(location, garbage)
        self.lease_rows = rows
        now = self.clock()
        member = members.get(self.owner)
        if member is None or member.expires - now < self.lease_seconds / 2:
            version = None if member is None else member.version
            alive = gsi_leases.Member(
                self.owner, now + self.lease_seconds, 1 if member is None else member.version + 1
            )
            if await leases.write(self.catalog_nodes, location, alive.to_item(), version):
                members[self.owner] = alive
        wanted = self.wanted()
        plan = gsi_leases.plan(wanted, rows, members, self.owner, now, self.lease_seconds, ages)
        held = {lease.key: lease for lease in plan.keep}
        for lease in plan.release:
            held.pop(lease.key, None)
            self._stop_follower(lease.key)
        # Every write at once: the catalog's node commits them together (its group commit),
        # so a replicator holding many leases renews them all well within their time.
        renewals = [gsi_leases.renewed(lease, now, self.lease_seconds) for lease in plan.renew]
        takes = [
            gsi_leases.taken(rows.get(key), key, self.owner, now, self.lease_seconds)
            for key in plan.acquire
        ]
        written = await asyncio.gather(
            *(
                leases.write(self.catalog_nodes, location, row.to_item(), held[row.key].version)
                for row in renewals
            ),
            *(self._release(location, lease) for lease in plan.release),
            *(
                leases.write(
                    self.catalog_nodes,
                    location,
                    row.to_item(),
                    None if row.key not in rows else rows[row.key].version,
                )
                for row in takes
            ),
        )
        for row, ok in zip(renewals, written[: len(renewals)], strict=True):
            if ok:
                held[row.key] = row
            else:
                self.stats.leases_lost += 1
                del held[row.key]
        for row, ok in zip(takes, written[len(renewals) + len(plan.release) :], strict=True):
            if ok:
                self.stats.leases_acquired += 1
                held[row.key] = row
        self.leases = held

    async def _collect(self, location: CatalogLocation, garbage: gsi_leases.Garbage) -> None:
        """Delete the dead rows, each if still at the version read (another replicator may
        delete it first, or its owner write it again)."""
        deleted = await asyncio.gather(
            *(
                leases.delete(
                    self.catalog_nodes, location, gsi_leases.lease_name(row.key), row.version
                )
                for row in garbage.leases
            ),
            *(
                leases.delete(
                    self.catalog_nodes, location, gsi_leases.member_name(row.owner), row.version
                )
                for row in garbage.members
            ),
        )
        self.stats.leases_collected += sum(deleted[: len(garbage.leases)])
        self.stats.members_collected += sum(deleted[len(garbage.leases) :])

    async def _release(self, location: CatalogLocation, lease: Lease) -> bool:
        released = gsi_leases.released(lease)
        done = await leases.write(self.catalog_nodes, location, released.to_item(), lease.version)
        if done:
            self.stats.leases_released += 1
        return done

    def _stop_follower(self, key: FollowerKey) -> None:
        task = self.followers.pop(key, None)
        if task is not None:
            task.cancel()

    def reconcile(self) -> None:
        """Start a follower for every followable partition of every serving table with global
        indexes, under each consumer of the table (`core.gsi.followed_groups`), whose lease this
        replicator holds; cancel the followers of tables or indexes that are gone, and of leases
        no longer held (or expired by this replicator's clock: a renewal that could not be
        written)."""
        groups = {table.id: gsi.followed_groups(table) for table in self.tables.values()}
        now = self.clock()
        for key, task in list(self.followers.items()):
            lease = self.leases.get(key)
            if key[2] not in groups.get(key[0], {}):
                task.cancel()
                del self.followers[key]
                self.stats.followers.pop(key, None)
                self.epochs.pop(key, None)
            elif lease is None or lease.expires <= now or lease.epoch != self.epochs.get(key):
                # Lost, expired, or taken again under a new epoch (after it expired while the
                # catalog could not be reached): the follower starts again under the new one.
                task.cancel()
                del self.followers[key]
            elif task.done():
                del self.followers[key]
        for drained_key in list(self.drained):
            if drained_key[1] not in groups.get(drained_key[0], {}):
                del self.drained[drained_key]
        for table in self.tables.values():
            for consumer in groups[table.id]:
                drained = self.drained.setdefault((table.id, consumer), set())
                for partition in gsi.followable(table, drained):
                    key = (table.id, partition.id, consumer)
                    lease = self.leases.get(key)
                    if lease is None or lease.expires <= now:
                        continue
                    if key not in self.followers:
                        stats = self.stats.followers.setdefault(
                            key,
                            FollowerStats(table.name, partition.id, consumer, table_id=table.id),
                        )
                        self.followers[key] = asyncio.create_task(
                            self._follow(table.id, partition, consumer, lease.epoch, stats),
                            name=f"follow-{partition.id}-{consumer}",
                        )
                        self.epochs[key] = lease.epoch

    def _indexes(self, table_id: str, consumer: str) -> tuple[IndexDef, ...] | None:
        """The indexes `consumer` keeps on table `table_id` now; None when it keeps none."""
        table = self.tables.get(table_id)
        return None if table is None else gsi.followed_groups(table).get(consumer)

    async def _follow(
        self,
        table_id: str,
        partition: PartitionDef,
        consumer: str,
        epoch: int,
        stats: FollowerStats,
    ) -> None:
        """Follow one partition for one consumer's indexes, under the lease of `epoch`, until its
        log ends (a retired parent), the lease is found lost or the follower is cancelled,
        starting again from the checkpoint after any failure. The indexes' partitions are fenced
        first; an online index's partition is then copied (`_backfill`), once."""
        backoff = limits.GSI_RETRY_BACKOFF_SECONDS_MIN
        drained = self.drained.setdefault((table_id, consumer), set())
        key = (table_id, partition.id, consumer)
        while True:
            try:
                await self.fence(table_id, partition.id, consumer, epoch)
                try:
                    await self._backfill(table_id, partition, consumer, epoch, stats)
                except StaleEpoch:
                    if not self._retired(table_id, partition.id):
                        raise
                    # The partition split under its copy: its log from where the copy began to
                    # its END is applied below; the children are copied once it is drained.
                await self._follow_from_checkpoint(table_id, partition, consumer, epoch, stats)
            except LeaseFenced as error:
                self.stats.leases_lost += 1
                if self.leases.get(key) is not None and self.leases[key].epoch == epoch:
                    del self.leases[key]
                log.warning("lost the lease on %s (%s); another replicator follows it", key, error)
                return
            except StaleEpoch as error:
                if self._retired_where(table_id, partition):
                    # A retired parent whose log is gone from the node it was retired on: every
                    # consumer, this one included, has read it to its END.
                    drained.add(partition.id)
                    await self._record_drained(key)
                    return
                # The partition is not (or no longer) where this follower looked: it moved (and
                # may have split where it moved to, its retired log kept there), or its table is
                # gone; the next poll starts a follower where the catalog places it.
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
                drained.add(partition.id)
                log.info("partition %s drained to its END", partition.id)
                await self._record_drained(key)
                return
            await asyncio.sleep(backoff)
            backoff = min(2 * backoff, limits.GSI_RETRY_BACKOFF_SECONDS_MAX)

    async def _record_drained(self, key: FollowerKey) -> None:
        """Mark the lease row drained, so that a replicator that takes over the children does not
        wait for the parent (best effort: without it, it finds the parent's log gone)."""
        lease, location = self.leases.get(key), self.location
        if lease is None or location is None:
            return
        row = gsi_leases.renewed(lease, self.clock(), self.lease_seconds, drained=True)
        with contextlib.suppress(DynamoError, OSError):
            if await leases.write(self.catalog_nodes, location, row.to_item(), lease.version):
                self.leases[key] = row

    async def fence(self, table_id: str, source: str, consumer: str, epoch: int) -> None:
        """Send the lease epoch to every partition of the indexes `consumer` keeps, so that none
        takes a write of an earlier holder of the lease from now on (a follower's first step,
        public for the seeded tests that drive it alone)."""
        table = self.tables.get(table_id)
        indexes = self._indexes(table_id, consumer)
        if table is None or indexes is None:
            return

        def every_partition(table: TableDef) -> dict[gsi.IndexTarget, list[dict[str, Any]]]:
            routed: dict[gsi.IndexTarget, list[dict[str, Any]]] = {}
            for index in gsi.followed_groups(table).get(consumer, ()):
                assert index.table_id is not None
                for part in index.partitions:
                    routed[(index.table_id, part.id, part.epoch, part.node)] = []
            return routed

        await self.apply_routed(table_id, every_partition, source, epoch)

    def _retired(self, table_id: str, partition_id: str) -> bool:
        """Whether the catalog, as last read, shows the partition retired by a split."""
        table = self.tables.get(table_id)
        return table is not None and any(p.id == partition_id for p in table.retired)

    def _retired_where(self, table_id: str, partition: PartitionDef) -> bool:
        """Whether the catalog, as last read, shows `partition` retired by a split on the nodes
        and at the epoch a follower found it (`partition`, as the catalog placed it when the
        follower began): only there does a refusal as stale mean that its log is gone. A
        partition that moved, then split on the node it moved to, keeps its retired log there,
        and the node it left refuses it too (issue 31: a follower that began before the move
        took that refusal for the log's end, and its children were followed without the changes
        it still held)."""
        table = self.tables.get(table_id)
        if table is None:
            return False
        retired = next((p for p in table.retired if p.id == partition.id), None)
        return retired is not None and (retired.epoch, retired.nodes) == (
            partition.epoch,
            partition.nodes,
        )

    def _index_partition(self, target: gsi.IndexTarget) -> PartitionDef | None:
        """The catalog's record of index partition `target`, as last read."""
        index_id, partition_id = target[0], target[1]
        for table in self.tables.values():
            for index in table.indexes:
                if index.table_id == index_id:
                    return next((p for p in index.partitions if p.id == partition_id), None)
        return None

    async def _at_source(
        self, table_id: str, partition: PartitionDef, what: str, attempt: Attempt[T]
    ) -> T:
        """`attempt` on a base partition's node, or a replicated one's leader, which alone
        serves its feed (`rpc.replicas`). Every call the replicator makes there may apply twice
        (a registration, a checkpoint) or is a read, so each goes on after any failure."""
        return await self.replicas.call(
            partition, table_id, what, attempt, limits.NODE_CALL_SECONDS_MAX, retry_safe=True
        )

    async def _register(
        self, table_id: str, partition: PartitionDef, consumer: str, seq: int | None
    ) -> tuple[ConsumerPosition, FeedTransport]:
        """Register `consumer` on the partition's feed (at `seq`; None: the log's last), and the
        feed of the node that took it: where this pass follows and checkpoints. A replicated
        partition's leader refuses both once it stops leading, so the follower ends and
        registers again at the new one."""

        async def attempt(node: str, remaining: float) -> tuple[ConsumerPosition, FeedTransport]:
            feed = _client(self.clients, node).feed()
            return await feed.register(table_id, partition.id, consumer, seq, remaining), feed

        return await self._at_source(table_id, partition, "registration", attempt)

    async def _backfill(
        self,
        table_id: str,
        partition: PartitionDef,
        consumer: str,
        epoch: int,
        stats: FollowerStats,
    ) -> None:
        """Copy the partition into the online index `consumer` keeps, unless it is copied: its
        backfill machine (`core.machines.backfill`), loaded from the catalog row (from the cursor
        it records, when the copy began under an earlier run or another replicator) and driven
        under lease `epoch` until it is recorded or abandoned. A failure is raised for the
        follower, which handles it as one of its own (a lost lease, a split, a node that does
        not answer) and comes back here after its pause: the copy resumes from the cursor."""
        indexes = self._indexes(table_id, consumer)
        table = self.tables.get(table_id)
        if table is None or indexes is None or len(indexes) != 1 or not indexes[0].online:
            return
        if self._retired(table_id, partition.id):
            # Split before or during its copy: nothing to copy. If the copy had begun, its
            # consumer's log runs from where it began to END, and applying it (the follower)
            # brings every entry the copy wrote to the item's version at the split, deletions
            # included; the children, created with the consumer registered at their seq 0, are
            # then copied and followed from their first change. If it had not, the consumer
            # joins the log at its END and the children's copies hold everything.
            return
        index = indexes[0]
        record = backfill.recovered(table, index, partition.id, consumer, epoch)
        if record is None:
            stats.backfill_done = partition.id in index.backfilled or (
                index.status == IndexStatus.ACTIVE
            )
            return
        event = STARTED if record.state is BackfillState.REGISTERING else RESTARTED
        stats.backfilled_items = record.items
        record, failure = await self.backfills.drive(record, Event(event))
        if failure is not None:
            raise failure
        if record.state is BackfillState.RECORDED:
            log.info("partition %s copied into index %s", partition.id, index.name)

    async def _register_backfill(self, record: BackfillRecord, effect: Effect) -> Event:
        """Register the index's consumer at the log's last seq S (registering again changes
        nothing: its checkpoint stays at S until the copy is recorded), so the log keeps every
        change after S; then read one item of the partition where it was registered.

        A node takes a registration on a partition fenced for a move, as it takes a stream's,
        but the move's drain may have handed the target its consumers already: the registration
        is then lost with the source's copy, and the target's log holds nothing for the copy
        (issue 31: the copy went on there from the row's cursor, the partition split with no
        consumer to hand its log to, and the changes after S never reached the index). A read
        the partition serves after the registration shows that no fence came before it, so any
        later move's drain carries it; a read refused as moving fails this step, which is taken
        again (a registration that changes nothing, or a new one) where the catalog places the
        partition next."""
        partition = self._serving(record)
        await self._register(record.table_id, partition, record.consumer, None)
        await self._scan(record.table_id, partition, None, 1)
        return Event(effect.done)

    async def _mark_backfill(self, record: BackfillRecord, effect: Effect) -> Event:
        """Record the copy begun in the catalog (the index BACKFILLING, with the table's item
        count as the estimate of its progress, if it was CREATING); the row's cursor comes back."""
        table = self.tables.get(record.table_id)
        estimate = 0
        if table is not None and any(
            i.table_id == record.index_id and i.status == IndexStatus.CREATING
            for i in table.indexes
        ):
            estimate = await self._items_estimate(table)
        began_at = self.clock()
        changed = await self._change_table(
            record.table_name,
            lambda t: (
                catalog_core.partition_backfill_begun(
                    t, record.index_id, record.partition_id, record.epoch, estimate, began_at
                )
                if t.id == record.table_id
                else t
            ),
        )
        return self._fenced(backfill.observed(changed, record, effect.done), record)

    async def _items_estimate(self, table: TableDef) -> int:
        """The table's item count as its nodes report it (a node that does not answer counts
        nothing: the estimate is what OnlineIndexPercentageProgress divides by, never a bound)."""
        nodes = sorted({node for partition in table.partitions for node in partition.nodes})
        payload = ops.TableStatsPayload(table.id).to_json()
        replies = await asyncio.gather(
            *(
                self.clients[node].control(ops.TABLE_STATS, payload, limits.TABLE_STATS_SECONDS_MAX)
                for node in nodes
                if node in self.clients
            ),
            return_exceptions=True,
        )
        serving = {partition.id for partition in table.partitions}
        # Each partition once, however many replicas reported it (the most any of them holds).
        items: dict[str, int] = {}
        for reply in replies:
            if isinstance(reply, DynamoError | OSError):
                log.warning("no item count of %s for its backfill: %s", table.name, reply)
                continue
            if isinstance(reply, BaseException):
                raise reply
            for partition_id, counts in reply["partitions"].items():
                if partition_id in serving:
                    items[partition_id] = max(items.get(partition_id, 0), counts["items"])
        return sum(items.values())

    async def _read_backfill(self, record: BackfillRecord, effect: Effect) -> Event:
        """Read the page of the partition after the cursor."""
        partition = self._serving(record)
        cursor = None if record.cursor is None else dict(record.cursor)
        reply = await self._scan(record.table_id, partition, cursor, self.backfill_page_bytes)
        return Event(effect.done, {"items": reply["items"], "last_key": reply["last_key"]})

    async def _scan(
        self,
        table_id: str,
        partition: PartitionDef,
        cursor: dict[str, Any] | None,
        page_bytes: int,
    ) -> dict[str, Any]:
        """One page of a base partition after `cursor`, of at most `page_bytes` (at least one
        item), strongly consistent: a replica behind the seq the consumer was registered at
        would miss changes the feed, which starts there, does not bring either."""
        payload = ops.ScanPayload(exclusive_start=cursor, page_bytes=page_bytes)
        target = ops.Target(table_id, partition.id, partition.epoch, True)

        async def attempt(node: str, remaining: float) -> dict[str, Any]:
            return await _client(self.clients, node).call(
                ops.SCAN, target, payload.to_json(), remaining
            )

        return await self._at_source(table_id, partition, "backfill read", attempt)

    async def _apply_backfill(self, record: BackfillRecord, effect: Effect) -> Event:
        """Put the page's entries into the index (`index_apply` with `backfill`: applied whatever
        the source's seq), under the lease's epoch."""
        indexes = self._indexes(record.table_id, record.consumer)
        table = self.tables.get(record.table_id)
        if table is None or not indexes:
            raise ServiceUnavailable(f"Table {record.table_name}'s index is no longer followed")
        writes = gsi.backfill_writes(
            (dict(item) for item in record.page), indexes[0], table.key_shape
        )
        await self.apply_routed(
            record.table_id,
            functools.partial(gsi.route, writes),
            record.partition_id,
            record.epoch,
            backfill=True,
        )
        stats = self.stats.followers.get(_follower_key(record))
        if stats is not None:
            stats.index_writes += sum(write.writes for write in writes)
        return Event(effect.done)

    async def _checkpoint_backfill(self, record: BackfillRecord, effect: Effect) -> Event:
        """Record the page copied: the cursor at its last key and the items copied, or after the
        partition's last page, the partition copied (the index ACTIVE once all are)."""
        items = backfill.copied(record)
        last_key = record.last_key

        def change(table: TableDef) -> TableDef:
            if table.id != record.table_id:
                return table
            if last_key is None:
                return catalog_core.partition_backfilled(
                    table, record.index_id, record.partition_id, items, record.epoch
                )
            return catalog_core.backfill_progressed(
                table, record.index_id, record.partition_id, last_key, items, record.epoch
            )

        changed = await self._change_table(record.table_name, change)
        event = backfill.observed(changed, record, effect.done)
        if event.kind == effect.done and last_key is None:
            # The partition's last page: the row must show it copied, or another lease's
            # holder recorded past it (fenced below).
            self._fenced(event, record)
            raise ServiceUnavailable(f"Partition {record.partition_id} was not recorded copied")
        return self._fenced(event, record)

    @staticmethod
    def _fenced(event: Event, record: BackfillRecord) -> Event:
        """`event`, unless the row shows the copy recorded under a later lease than `record`'s:
        another replicator holds the partition now (LeaseFenced, as its index writes are)."""
        if int(event.data.get("epoch", 0)) > record.epoch:
            raise LeaseFenced(
                f"The copy of partition {record.partition_id} is recorded under a later lease"
            )
        return event

    async def _persist_backfill(self, record: BackfillRecord) -> None:
        """Nothing to store (the row is the record's durable part: `core.machines.backfill`);
        the follower's figures follow it."""
        stats = self.stats.followers.get(_follower_key(record))
        if stats is None:
            return
        stats.backfilled_items = backfill.copied(record)
        stats.backfill_pages += record.state is BackfillState.READ
        stats.backfill_done = record.state is BackfillState.RECORDED

    def _serving(self, record: BackfillRecord) -> PartitionDef:
        """The record's partition as the catalog, last read, serves it; StaleEpoch once a split
        retired it (the follower then follows its log to END) or it is gone."""
        table = self.tables.get(record.table_id)
        partitions = () if table is None else table.partitions
        found = next((p for p in partitions if p.id == record.partition_id), None)
        if found is None:
            raise StaleEpoch(f"Partition {record.partition_id} is no longer serving")
        return found

    async def _located(self) -> CatalogLocation:
        if self.location is None:
            raise ServiceUnavailable("The catalog's location is not known yet")
        return self.location

    def _catalog_transport(self, location: CatalogLocation, node: str) -> NodeTransport:
        client = self.clients.get(node)
        if client is None:
            raise ServiceUnavailable(f"The catalog's node {node} is not known here")
        return client

    async def _change_table(
        self, name: str, change: Callable[[TableDef], TableDef]
    ) -> TableDef | None:
        """`change` applied to table `name`'s record, if the table is still there; the record
        after it (None: the table is not in the catalog)."""
        changed = await self.catalog.change_table(
            name, lambda current: current if current is None else change(current)
        )
        if changed is not None and changed.id in self.tables:
            self.tables[changed.id] = changed
        return changed

    async def _follow_from_checkpoint(
        self,
        table_id: str,
        partition: PartitionDef,
        consumer: str,
        epoch: int,
        stats: FollowerStats,
    ) -> None:
        """One pass over the feed from the consumer's checkpoint; returns after the END record.

        The feed is read by a task of its own into a bounded queue while the previous run is
        applied, and every batch waiting there when a run starts joins it (`_next_run`): a busy
        follower sends fewer, larger `index_apply` calls instead of falling further behind by one
        round trip per feed batch. Checkpoints are written behind the applies (`_Checkpoints`):
        the index partitions already hold the seq each applied with its entries, so a checkpoint
        that lags only makes a restarted follower replay changes that are then skipped; it is
        awaited only at the END of a retired log, whose drain must be recorded.
        """
        # A retired log joined for the first time is joined at its END (there is nothing of it to
        # apply: see `_backfill`); a consumer registered already keeps its checkpoint.
        start = None if self._retired(table_id, partition.id) else 0
        position, feed = await self._register(table_id, partition, consumer, start)
        stats.observe(position.seq, position.last_seq, self.clock())
        runs = _FeedRuns(
            feed.follow_batches(table_id, partition.id, consumer=consumer),
            f"feed-{partition.id}-{consumer}",
        )
        checkpoints = _Checkpoints(feed, (table_id, partition.id, consumer), stats, self.clock)
        try:
            while True:
                run = await runs.next()
                if run is None:
                    return  # The log ended with no record left to read (a drained retired log).
                received = self.clock()
                table = self.tables.get(table_id)
                indexes = self._indexes(table_id, consumer)
                if table is None or indexes is None:
                    return  # The table or index is gone: reconcile cancels this follower.
                ended = await self._apply_batch(table, indexes, partition.id, epoch, run, stats)
                checkpoints.raise_failure()
                stats.last_applied_at = self.clock()
                stats.lag_ms = 1000.0 * (stats.last_applied_at - received)
                self.lag.observe(run, received, stats.last_applied_at)
                checkpoints.advance(run[-1].seq)
                if ended:
                    await checkpoints.flush()
                    return
        finally:
            await runs.close()
            await checkpoints.close()

    async def _apply_batch(
        self,
        table: TableDef,
        indexes: tuple[IndexDef, ...],
        source: str,
        epoch: int,
        batch: list[Change],
        stats: FollowerStats,
    ) -> bool:
        """Apply one feed batch to every index partition it touches; whether it held END."""
        writes: list[gsi.IndexWrite] = []
        ended = False
        for change in batch:
            if change.kind == "END":
                ended = True
                break
            writes.extend(
                gsi.project_change(change.seq, change.old, change.new, indexes, table.key_shape)
            )
        stats.changes += len(batch)
        stats.index_writes += sum(write.writes for write in writes)
        stats.index_units += await self.apply_routed(
            table.id, functools.partial(gsi.route, writes), source, epoch
        )
        return ended

    async def apply_routed(
        self,
        table_id: str,
        routing: Callable[[TableDef], Mapping[gsi.IndexTarget, list[dict[str, Any]]]],
        source: str,
        epoch: int,
        *,
        backfill: bool = False,
    ) -> float:
        """Apply the writes `routing` places on the index partitions of the table as last read
        (a follower's and a backfill's step, public for the seeded tests that drive it alone);
        when one of those partitions refuses them as stale (the index partition split), re-read
        the table's catalog row and place them again (the partitions that applied them already
        skip them: the source's seq is stored with its entries). The write units charged."""
        started = self.monotonic()
        for attempt in range(GSI_REROUTE.attempts_max):
            table = self.tables.get(table_id)
            if table is None:
                raise ServiceUnavailable(f"Table {table_id} is no longer followed")
            try:
                routed = routing(table)
                return await self._apply_all(table_id, routed, source, epoch, backfill=backfill)
            except _IndexPartitionStale as stale:
                pause = GSI_REROUTE.pause(attempt, self.monotonic() - started, 0.0)
                if pause is None:
                    raise ServiceUnavailable(
                        f"Index partition {stale.partition_id} kept refusing as stale"
                    ) from None
                log.info("index partition %s is stale; routing again", stale.partition_id)
                await self._reread(table)
                await asyncio.sleep(pause)
        raise AssertionError("unreachable: the last attempt returns or raises")

    async def _reread(self, table: TableDef) -> None:
        """Take table `table`'s newest catalog row (its index partitions after a split)."""
        if self.location is None:
            return
        current = await self.catalog.read_table(table.name)
        if current is not None and current.id == table.id and current.version > table.version:
            self.tables[table.id] = current

    async def _apply_all(
        self,
        table_id: str,
        routed: Mapping[gsi.IndexTarget, list[dict[str, Any]]],
        source: str,
        epoch: int,
        *,
        backfill: bool = False,
    ) -> float:
        """Send every index partition its changes at once, under lease `epoch`; the write units
        they charged."""
        results = await asyncio.gather(
            *(
                self._apply(table_id, target, source, changes, epoch, backfill)
                for target, changes in routed.items()
            ),
            return_exceptions=True,
        )
        for result in results:
            if isinstance(result, BaseException):
                raise result
        return float(sum(result["units"] for result in results))  # type: ignore[index]

    async def _apply(
        self,
        table_id: str,
        target: gsi.IndexTarget,
        source: str,
        changes: list[dict[str, Any]],
        lease_epoch: int,
        backfill: bool = False,
    ) -> dict[str, Any]:
        """One index_apply under the lease of `lease_epoch` (the index partition's own epoch is
        `target`'s), retried a bounded number of times on a node that does not answer (a retry
        of an applied payload applies nothing).

        An index partition that refuses it for throughput has no write capacity left: the call
        is retried at short pauses (`GSI_THROTTLED_APPLY`) while the source partition's node is
        told (`_note_pressure`), so that it refuses the base writes that would change that index
        partition until it takes writes again, when the note is dropped. A backfill's copy is
        retried the same way without a note: the writes during an index's copy go on."""
        part = ops.IndexApplyPart(source, changes, backfill, lease_epoch)
        started = self.monotonic()
        unanswered = throttled = 0
        noted: float | None = None  # When the source's node was last told (monotonic).
        while True:
            try:
                reply = ops.part_outcome(await self.index_writes.apply(target, part))
            except StaleEpoch:
                raise _IndexPartitionStale(target[1]) from None
            except ThroughputExceeded as error:
                self._count_throttled(table_id, source)
                renew = limits.GSI_INDEX_PRESSURE_RENEW_SECONDS
                if not backfill and (noted is None or self.monotonic() - noted >= renew):
                    noted = self.monotonic()
                    await self._note_pressure(table_id, target, source, error.reasons or None)
                pause = GSI_THROTTLED_APPLY.pause(throttled, self.monotonic() - started, 0.0)
                throttled += 1
                if pause is None:
                    raise
            except ServiceUnavailable:
                pause = GSI_APPLY.pause(unanswered, self.monotonic() - started, 0.0)
                unanswered += 1
                if pause is None:
                    raise
            else:
                if noted is not None:
                    await self._note_pressure(table_id, target, source, ())  # Released.
                return reply
            await asyncio.sleep(pause)

    def _count_throttled(self, table_id: str, source: str) -> None:
        for key, stats in self.stats.followers.items():
            if key[0] == table_id and key[1] == source:
                stats.throttled_applies += 1

    async def _note_pressure(
        self,
        table_id: str,
        target: gsi.IndexTarget,
        source: str,
        reasons: tuple[ThrottlingReason, ...] | None,
    ) -> None:
        """Tell the node of base partition `source` that index partition `target` has no write
        capacity (`reasons`: why its node refused, None if it gave none; empty: it took writes
        again), for `GSI_INDEX_PRESSURE_SECONDS` unless told again (`core.index_pressure`). Best
        effort: a note that does not arrive leaves the lag bound as the back-pressure, and a
        stale one expires."""
        table = self.tables.get(table_id)
        if table is None:
            return
        base = next((p for p in (*table.partitions, *table.retired) if p.id == source), None)
        index = next((i for i in table.indexes if i.table_id == target[0]), None)
        part = (
            None
            if index is None
            else next((p for p in index.partitions if p.id == target[1]), None)
        )
        if index is None or part is None or base is None:
            return
        if reasons is None:
            # A refusal without reasons (a node of an older version): name the index as its
            # provisioned units, which is what a refusal of it means unless its key range's
            # ceiling is reached.
            resource = catalog_core.index_storage_name(table.name, index.name)
            provisioned = table.billing_mode is BillingMode.PROVISIONED
            reasons = (ThrottlingReason.of(resource, read=False, provisioned=provisioned),)
        listed = [{"reason": r.reason, "resource": r.resource} for r in reasons]
        payload = ops.IndexPressurePayload(
            table_id,
            index.name,
            part.id,
            part.start,
            part.end,
            listed,
            limits.GSI_INDEX_PRESSURE_SECONDS if listed else 0.0,
        )
        # Every replica's node: whichever leads the base partition holds back its writes.
        nodes = [node for node in base.nodes if node in self.clients]
        replies = await asyncio.gather(
            *(
                self.clients[node].control(
                    ops.INDEX_PRESSURE, payload.to_json(), limits.GSI_INDEX_PRESSURE_SECONDS
                )
                for node in nodes
            ),
            return_exceptions=True,
        )
        for node, reply in zip(nodes, replies, strict=True):
            if isinstance(reply, DynamoError | OSError):
                log.info("could not tell %s of index %s's capacity: %s", node, part.id, reply)
            elif isinstance(reply, BaseException):
                raise reply

    def metrics(self) -> str:
        """The replicator's state in the Prometheus text format."""
        lines = [
            "# HELP dynalab_gsi_catalog_reads_total Catalog reads by the replicator.",
            "# TYPE dynalab_gsi_catalog_reads_total counter",
            f"dynalab_gsi_catalog_reads_total {self.stats.catalog_reads}",
            "# HELP dynalab_gsi_catalog_failures_total Catalog reads that failed.",
            "# TYPE dynalab_gsi_catalog_failures_total counter",
            f"dynalab_gsi_catalog_failures_total {self.stats.catalog_failures}",
            "# HELP dynalab_gsi_leases_held Source partition leases this replicator holds.",
            "# TYPE dynalab_gsi_leases_held gauge",
            f"dynalab_gsi_leases_held {len(self.leases)}",
            "# HELP dynalab_gsi_leases_acquired_total Leases taken (free, released or expired).",
            "# TYPE dynalab_gsi_leases_acquired_total counter",
            f"dynalab_gsi_leases_acquired_total {self.stats.leases_acquired}",
            "# HELP dynalab_gsi_leases_released_total Leases given up past the fair share.",
            "# TYPE dynalab_gsi_leases_released_total counter",
            f"dynalab_gsi_leases_released_total {self.stats.leases_released}",
            "# HELP dynalab_gsi_leases_lost_total Leases found taken by another replicator.",
            "# TYPE dynalab_gsi_leases_lost_total counter",
            f"dynalab_gsi_leases_lost_total {self.stats.leases_lost}",
            "# HELP dynalab_gsi_lease_rows Lease rows in the leases table, as last read.",
            "# TYPE dynalab_gsi_lease_rows gauge",
            f"dynalab_gsi_lease_rows {self.stats.lease_rows}",
            "# HELP dynalab_gsi_member_rows Replicator member rows in the leases table.",
            "# TYPE dynalab_gsi_member_rows gauge",
            f"dynalab_gsi_member_rows {self.stats.member_rows}",
            "# HELP dynalab_gsi_leases_collected_total Lease rows of dropped tables or indexes "
            "deleted.",
            "# TYPE dynalab_gsi_leases_collected_total counter",
            f"dynalab_gsi_leases_collected_total {self.stats.leases_collected}",
            "# HELP dynalab_gsi_members_collected_total Member rows of dead replicators deleted.",
            "# TYPE dynalab_gsi_members_collected_total counter",
            f"dynalab_gsi_members_collected_total {self.stats.members_collected}",
            "# HELP dynalab_gsi_index_apply_calls_total index_apply calls to index partitions.",
            "# TYPE dynalab_gsi_index_apply_calls_total counter",
            f"dynalab_gsi_index_apply_calls_total {self.index_writes.calls}",
            "# HELP dynalab_gsi_index_apply_parts_total Followers' parts those calls carried.",
            "# TYPE dynalab_gsi_index_apply_parts_total counter",
            f"dynalab_gsi_index_apply_parts_total {self.index_writes.parts}",
        ]
        families = (
            ("checkpoint_seq", "gauge", "Last seq applied to every index and checkpointed."),
            ("changes_total", "counter", "Changes read from the feed, replays included."),
            ("index_writes_total", "counter", "Index writes (deletes and puts) sent."),
            ("index_write_units_total", "counter", "Write units the indexes charged."),
            ("restarts_total", "counter", "Times a follower started again from its checkpoint."),
            ("throttled_applies_total", "counter", "Index writes refused for index capacity."),
            ("batch_lag_milliseconds", "gauge", "From taking a run off the feed to applying it."),
            ("backfill_items_total", "counter", "Items an online index's backfill has copied."),
            ("backfill_pages_total", "counter", "Pages this replicator's backfill has read."),
            ("backfill_done", "gauge", "1 once the partition is copied into its online index."),
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
                    "throttled_applies_total": follower.throttled_applies,
                    "batch_lag_milliseconds": follower.lag_ms,
                    "backfill_items_total": follower.backfilled_items,
                    "backfill_pages_total": follower.backfill_pages,
                    "backfill_done": int(follower.backfill_done),
                }[name]
                labels = (
                    f'table="{follower.table}",partition="{follower.partition}",'
                    f'consumer="{follower.consumer}"'
                )
                lines.append(f"dynalab_gsi_{name}{{{labels}}} {value}")
        lines.extend(self._index_lag_lines())
        return "\n".join(lines) + "\n" + self.lag.text()

    def _index_lag_lines(self) -> list[str]:
        """Each global index's lag: the change records its followers have not applied yet
        (summed over the table's partitions) and for how long the furthest-behind one has
        trailed its log, as of the last checkpoint each made."""
        now = self.clock()
        records: dict[tuple[str, str], int] = {}
        seconds: dict[tuple[str, str], float] = {}
        for follower in self.stats.followers.values():
            indexes = self._indexes(follower.table_id, follower.consumer) or ()
            behind = 0.0 if follower.behind_since is None else now - follower.behind_since
            for index in indexes:
                key = (follower.table, index.name)
                records[key] = records.get(key, 0) + follower.lag_records
                seconds[key] = max(seconds.get(key, 0.0), behind)
        lines = [
            "# HELP dynalab_gsi_index_lag_records Change records not yet applied to the index.",
            "# TYPE dynalab_gsi_index_lag_records gauge",
            *(
                f'dynalab_gsi_index_lag_records{{table="{t}",index="{i}"}} {n}'
                for (t, i), n in sorted(records.items())
            ),
            "# HELP dynalab_gsi_index_lag_seconds How long the index has trailed its table.",
            "# TYPE dynalab_gsi_index_lag_seconds gauge",
            *(
                f'dynalab_gsi_index_lag_seconds{{table="{t}",index="{i}"}} {s:.3f}'
                for (t, i), s in sorted(seconds.items())
            ),
        ]
        return lines
