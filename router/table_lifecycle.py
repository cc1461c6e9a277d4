"""The table lifecycle's effects, carried out for the table machine (`core/machines/table.py`)
through the one driver (`rpc/machines.py`), and the reconciler that recovers what a dead router
left unfinished.

The request handlers (`router/tables.py`) read a request, start a flow's record and `run` it;
this module does the flow's node calls and catalog compare-and-sets, each an idempotent step, so
that any router may repeat one. The driver's crash points are the router's `crash_points`: the
simulator's, or `rpc.machines.HoldPoints` in a real router (`DYNALAB_HOLD_AT=table:<state>`).

`TableReconciler`, on every router, looks at the catalog every `TABLE_RECONCILE_SECONDS`; a row
that shows a flow unfinished (a table CREATING or DELETING, an online index CREATING before its
backfill, an index DELETING) for `TABLE_TRANSITION_STALL_SECONDS` is recovered: the machine's
record is loaded from the row and driven with RESTARTED (`core.machines.table.recovered`). A live
router that is merely slow loses nothing: the two carry out the same idempotent steps, and
whichever changes the row first wins it. The reconciler also lets go of expired streams and of
retired partitions no follower needs any more, and pre-warms the tables (and global indexes)
whose WarmThroughput was raised (`prewarm`): the target is in the row, each split is its node's
machine, so whichever router looks next goes on from the partitions the row shows.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from core import catalog, gsi, limits, streams
from core.catalog import IndexDef, IndexStatus, StreamViewType, TableDef
from core.errors import (
    DynamoError,
    LimitExceeded,
    ResourceInUse,
    ResourceNotFound,
    ServiceUnavailable,
    StaleEpoch,
)
from core.machines import RESTARTED, STARTED, Effect, Event
from core.machines import table as table_machine
from core.machines.table import TableRecord, TableState
from rpc import ops, placement
from rpc.machines import Driver, Handler

if TYPE_CHECKING:
    from router.context import RouterContext, TableChange

log = logging.getLogger("router.tables")

# Called with the row a DeleteTable (or an index's deletion) has just marked, before anything is
# dropped: the request describes the table as it goes.
Marked = Callable[[TableDef], Awaitable[None]]


def table_not_found(name: str) -> ResourceNotFound:
    return ResourceNotFound(f"Requested resource not found: Table: {name} not found")


async def run(
    ctx: RouterContext,
    record: TableRecord,
    *,
    first: TableChange | None = None,
    marked: Marked | None = None,
    event: str = STARTED,
) -> TableRecord:
    """Drive `record` (a new flow with STARTED, a recovered one with RESTARTED) until its flow
    ends; the ended record, or the first failure met (after the flow undid what it had to).
    `first` is the request's own catalog change that starts its flow (its refusals are the
    request's); `marked` is told the row a deletion marked."""
    handlers = _Handlers(ctx, first, marked)
    driver: Driver[TableRecord] = Driver(
        table_machine.MACHINE,
        handlers.table(),
        _persist,
        ctx.crash_points,
        ctx.sources.clock,
    )
    ended, failure = await driver.drive(record, Event(event))
    if failure is not None:
        raise failure
    return ended


async def _persist(record: TableRecord) -> None:
    """Nothing of its own: a flow's durable part is its table's catalog row, which its catalog
    changes write (`core/machines/table.py`)."""
    return None


async def all_calls(calls: list[Awaitable[dict[str, Any]]]) -> None:
    """Await node calls concurrently; once all have finished, raise the first failure if any.

    Waiting for every call, rather than failing on the first, leaves no call still running when
    the caller reacts to the failure (by undoing a creation, say).
    """
    for result in await asyncio.gather(*calls, return_exceptions=True):
        if isinstance(result, BaseException):
            raise result


def _known(record: TableRecord) -> TableDef:
    assert record.table is not None, f"{record.flow} of {record.name} has no row"
    return record.table


def _index_of(record: TableRecord) -> IndexDef:
    table = _known(record)
    return next(index for index in table.indexes if index.name == record.index_name)


class _Handlers:
    """The effects of one run of a flow, for its router."""

    def __init__(
        self, ctx: RouterContext, first: TableChange | None, marked: Marked | None
    ) -> None:
        self.ctx = ctx
        self.first = first
        self.marked = marked

    def table(self) -> dict[str, Handler[TableRecord]]:
        return {
            "record": self.record,
            "create_partitions": self.create_partitions,
            "activate": self.activate,
            "remove": self.remove,
            "drop_partitions": self.drop_partitions,
            "mark_deleting": self.mark_deleting,
            "add_index": self.add_index,
            "create_index_partitions": self.create_index_partitions,
            "remove_index": self.remove_index,
            "drop_index": self.drop_index,
            "mark_index_deleting": self.mark_index_deleting,
            "register_stream": self.register_stream,
            "enable_stream": self.enable_stream,
            "unregister_stream": self.unregister_stream,
            "disable_stream": self.disable_stream,
        }

    def _first(self, record: TableRecord) -> TableChange:
        assert self.first is not None, f"{record.flow} of {record.name} started without a change"
        return self.first

    async def record(self, record: TableRecord, effect: Effect) -> Event:
        """CreateTable's row, CREATING (the request's change refuses a name in use)."""
        # The count of tables is as of this read: two routers creating the last table at once
        # may both succeed, a bound that is soft by one round.
        await self.ctx.refresh()
        table = await self.ctx.change_table(record.name, self._first(record))
        return Event(effect.done, {"table": table or record.table})

    async def create_partitions(self, record: TableRecord, effect: Effect) -> Event:
        """Create a CREATING table's partitions and its global indexes' (again: creating a
        partition that exists with the same definition does nothing)."""
        await create_replicas(self.ctx, placement.replica_creations(_known(record)))
        return Event(effect.done)

    async def activate(self, record: TableRecord, effect: Effect) -> Event:
        # The record keeps the row as created: CreateTable answers with it, CREATING.
        await self.ctx.change_table(record.name, activate(_known(record).id))
        return Event(effect.done)

    async def remove(self, record: TableRecord, effect: Effect) -> Event:
        """Take the row out of the catalog, if it is still this table's and may leave it."""
        table_id = _known(record).id
        after = await self.ctx.change_table(record.name, _without(table_id))
        if after is not None and after.id == table_id:
            # Another router finished the creation meanwhile (see TableReconciler): the table
            # stays, and so do its partitions.
            return Event(table_machine.ROW_KEPT, {"table": after})
        return Event(effect.done)

    async def drop_partitions(self, record: TableRecord, effect: Effect) -> Event:
        """Drop the table's partitions, with their items and change logs, and its global
        indexes' partitions, on every node holding one (again: dropping what is gone does
        nothing). A node that cannot be reached is passed by where it holds only replicas of
        replicated partitions, each of which a majority of its replicas' nodes dropped: it
        drops them itself once it is back and finds their table gone from the catalog
        (`rpc.placement.reconcile`)."""
        table = _known(record)
        stored = [(table.id, table.partitions)]
        for index in catalog.global_indexes(table):
            assert index.table_id is not None
            stored.append((index.table_id, index.partitions))
        drops = [
            placement.Replica(node, stored_id, partition)
            for stored_id, partitions in stored
            for partition in partitions
            for node in partition.nodes
        ]
        calls = sorted({(drop.node, drop.stored_id) for drop in drops})
        replies = await asyncio.gather(
            *(
                self.ctx.control(node, ops.DROP_TABLE, ops.DropTablePayload(stored_id).to_json())
                for node, stored_id in calls
            ),
            return_exceptions=True,
        )
        results = dict(zip(calls, replies, strict=True))
        _raise_unless_standing(drops, [results[(d.node, d.stored_id)] for d in drops])
        return Event(effect.done)

    async def mark_deleting(self, record: TableRecord, effect: Effect) -> Event:
        table = await self.ctx.change_table(record.name, self._first(record))
        assert table is not None, f"DeleteTable of {record.name} found no table after marking it"
        if self.marked is not None:
            await self.marked(table)
        return Event(effect.done, {"table": table})

    async def add_index(self, record: TableRecord, effect: Effect) -> Event:
        table = await self.ctx.change_table(record.name, self._first(record))
        assert table is not None, f"UpdateTable of {record.name} found no table after adding"
        return Event(effect.done, {"table": table})

    async def create_index_partitions(self, record: TableRecord, effect: Effect) -> Event:
        table = _known(record)
        await create_replicas(self.ctx, placement.index_creations(table, _index_of(record)))
        return Event(effect.done)

    async def remove_index(self, record: TableRecord, effect: Effect) -> Event:
        """Take the index out of the row, if it is still CREATING (its creation abandoned) or
        DELETING (its partitions dropped), as the flow's state says."""
        status = (
            IndexStatus.CREATING
            if record.state == TableState.INDEX_ABANDONING
            else IndexStatus.DELETING
        )
        table = _known(record)
        assert record.index_name is not None
        await self.ctx.change_table(
            record.name, _index_removed(table.id, record.index_name, status)
        )
        # The record keeps the row with the index: what is dropped next is its partitions.
        return Event(effect.done)

    async def drop_index(self, record: TableRecord, effect: Effect) -> Event:
        """Drop a global index's partitions and let go of the change-feed consumer of its own
        (an online index's), which would otherwise hold the table's change logs."""
        table = record.table
        assert table is not None
        index = _index_of(record)
        assert index.table_id is not None
        drop = ops.DropTablePayload(index.table_id).to_json()
        calls = [
            self.ctx.control(node, ops.DROP_TABLE, drop)
            for node in sorted({node for p in index.partitions for node in p.nodes})
        ]
        if index.online:
            unregister = ops.UnregisterConsumerPayload(gsi.consumer_of(index)).to_json()
            calls.extend(
                self.ctx.feed_call(partition, ops.UNREGISTER_CONSUMER, table.id, unregister)
                for partition in table.partitions
            )
        await all_calls(calls)
        return Event(effect.done)

    async def mark_index_deleting(self, record: TableRecord, effect: Effect) -> Event:
        table = await self.ctx.change_table(record.name, self._first(record))
        assert table is not None, f"UpdateTable of {record.name} found no table after marking"
        if self.marked is not None:
            await self.marked(table)
        return Event(effect.done, {"table": table})

    async def register_stream(self, record: TableRecord, effect: Effect) -> Event:
        """Register the new stream's change-feed consumer on every partition, at the partition's
        last seq: once the catalog names the stream, every log holds what the stream owes."""
        table = _known(record)
        consumer = _stream(record).consumer
        await all_calls(
            [
                self.ctx.feed_call(
                    partition,
                    ops.REGISTER_CONSUMER,
                    table.id,
                    ops.RegisterConsumerPayload(consumer).to_json(),
                )
                for partition in table.partitions
            ]
        )
        return Event(effect.done)

    async def enable_stream(self, record: TableRecord, effect: Effect) -> Event:
        stream = _stream(record)
        change = _enable_stream(_known(record).id, stream.view_type, stream.label, stream.created)
        table = await self.ctx.change_table(record.name, change)
        return Event(effect.done, {"table": table})

    async def unregister_stream(self, record: TableRecord, effect: Effect) -> Event:
        table = _known(record)
        body = ops.UnregisterConsumerPayload(_stream(record).consumer).to_json()
        await all_calls(
            [
                self.ctx.feed_call(partition, ops.UNREGISTER_CONSUMER, table.id, body)
                for partition in table.partitions
            ]
        )
        return Event(effect.done)

    async def disable_stream(self, record: TableRecord, effect: Effect) -> Event:
        definition = record.definition
        assert definition is not None
        table = await _disable_stream(self.ctx, record.name, float(definition["now"]))
        return Event(effect.done, {"table": table})


def _stream(record: TableRecord) -> catalog.StreamDef:
    """The stream an enabling flow adds (its label and creation time are the request's)."""
    definition = record.definition
    assert definition is not None and record.view_type is not None
    return catalog.StreamDef(
        str(definition["label"]), StreamViewType(record.view_type), float(definition["now"])
    )


async def create_replicas(ctx: RouterContext, creations: list[placement.Creation]) -> None:
    """Make the partitions `creations` describe (`rpc.placement`), all at once; once all have
    finished, `_raise_unless_standing`."""
    results = await asyncio.gather(
        *(ctx.control(c.node, ops.CREATE_PARTITION, c.payload) for c in creations),
        return_exceptions=True,
    )
    _raise_unless_standing(creations, results)


def _raise_unless_standing(
    replicas: Sequence[placement.Replica], results: Sequence[object]
) -> None:
    """Raise the first failure among `results` (one per replica, in order) unless every one is
    a node that could not be reached, each of a minority of a replicated partition's replicas
    (`placement.quorum_reached`): those nodes do their part when they are back
    (`placement.reconcile`)."""
    failures = [
        (replica, result)
        for replica, result in zip(replicas, results, strict=True)
        if isinstance(result, BaseException)
    ]
    unreached = [replica for replica, result in failures if isinstance(result, ServiceUnavailable)]
    if failures and (
        len(unreached) < len(failures) or not placement.quorum_reached(replicas, unreached)
    ):
        raise failures[0][1]
    for replica, result in failures:
        log.warning(
            "replica of %s left for %s to settle when it is back: %s",
            replica.partition.id,
            replica.node,
            result,
        )


def activate(table_id: str, throughput_version: int | None = None) -> TableChange:
    """A change making table `table_id` ACTIVE, if it is still that table, may become ACTIVE
    and (for an UpdateTable) still has the throughput version `throughput_version`."""

    def change(current: TableDef | None) -> TableDef | None:
        if (
            current is None
            or current.id != table_id
            or not catalog.may_activate(current)
            or (throughput_version is not None and current.throughput_version != throughput_version)
        ):
            return current
        return catalog.activated(current)

    return change


def _without(table_id: str) -> TableChange:
    """A change removing the table from the catalog, if it is still the table `table_id` and
    may leave it (deleted, or its creation abandoned)."""

    def change(current: TableDef | None) -> TableDef | None:
        if current is None or current.id != table_id or not catalog.may_remove(current):
            return current
        return None

    return change


def created(name: str, table: TableDef, tables: Callable[[], int]) -> TableChange:
    """CreateTable's change: the new row `table`, unless the name is taken or the region holds
    `TABLES_PER_REGION_MAX` tables (`tables` counts them as last read)."""

    def add(current: TableDef | None) -> TableDef:
        if current is not None:
            raise ResourceInUse(f"Table already exists: {name}")
        if tables() >= limits.TABLES_PER_REGION_MAX:
            raise LimitExceeded(
                "Subscriber limit exceeded: the number of tables is limited to "
                f"{limits.TABLES_PER_REGION_MAX}"
            )
        return table

    return add


def marked_deleting(name: str, now: Callable[[], float]) -> TableChange:
    """DeleteTable's change: the row DELETING (a deletion that stopped half-way, a node down,
    is finished: the row stays as it is)."""

    def mark(current: TableDef | None) -> TableDef:
        if current is None:
            raise table_not_found(name)
        if current.status == catalog.TableStatus.DELETING:
            return current
        return catalog.deleting(current, now())

    return mark


def index_marked_deleting(name: str, index_name: str) -> TableChange:
    """UpdateTable Delete's change: the index DELETING (the replicator stops keeping it)."""

    def mark(current: TableDef | None) -> TableDef:
        if current is None:
            raise table_not_found(name)
        return catalog.index_deleting(current, index_name)

    return mark


def _index_removed(table_id: str, index_name: str, status: IndexStatus) -> TableChange:
    """A change taking index `index_name` out of table `table_id`, if it is still `status`."""

    def change(current: TableDef | None) -> TableDef | None:
        if current is None or current.id != table_id:
            return current
        index = next((i for i in current.indexes if i.name == index_name), None)
        if index is None or index.status != status:
            return current
        return catalog.index_moved(current, index_name, None)

    return change


def _enable_stream(table_id: str, view_type: StreamViewType, label: str, now: float) -> TableChange:
    def change(current: TableDef | None) -> TableDef:
        if current is None or current.id != table_id:
            raise ResourceInUse(
                "Attempt to change a resource which is still in use: the table was replaced"
            )
        return catalog.stream_enabled(current, view_type, label, now)

    return change


async def _disable_stream(ctx: RouterContext, name: str, now: float) -> TableDef:
    """Disable the table's stream, its shards closed where each partition's log stands.

    Each end is the last seq the partition's log has when the node answers a registration of the
    stream's consumer (already registered: a no-op write through the group commit, ordered with
    the partition's writes), so every change acknowledged before the request is in the stream.
    The catalog then records the stream disabled with those ends, refusing if a split changed
    the partitions meanwhile: the ends are read again.
    """
    for _ in range(limits.STREAM_DISABLE_ATTEMPTS_MAX):
        await ctx.refresh()
        current = ctx.records.get(name)
        if current is None:
            raise table_not_found(name)
        stream = catalog.stream_to_disable(current)
        shards = await asyncio.gather(
            *[_closed_shard(ctx, current, stream, p) for p in streams.lineage(current)]
        )
        change = _closing(name, current.id, shards, now)
        try:
            table = await ctx.change_table(name, change)
        except StaleEpoch:
            continue
        assert table is not None
        return table
    raise ServiceUnavailable(
        f"The partitions of table {name} kept splitting while its stream was disabled; retry"
    )


def _closing(
    name: str, table_id: str, shards: list[catalog.ClosedShard], now: float
) -> TableChange:
    def change(current: TableDef | None) -> TableDef:
        if current is None or current.id != table_id:
            raise table_not_found(name)
        return catalog.stream_disabled(current, shards, now)

    return change


async def _closed_shard(
    ctx: RouterContext, table: TableDef, stream: catalog.StreamDef, partition: catalog.PartitionDef
) -> catalog.ClosedShard:
    """`partition` as a shard of the disabled stream: with the last seq its log has now (before
    END for a retired one; 0 for a retired one whose log is gone)."""
    try:
        position = await ctx.feed_call(
            partition,
            ops.REGISTER_CONSUMER,
            table.id,
            ops.RegisterConsumerPayload(stream.consumer).to_json(),
        )
    except StaleEpoch:
        return catalog.ClosedShard(partition, 0)
    retired = partition.state == catalog.PartitionState.RETIRED
    return catalog.ClosedShard(partition, position["last_seq"] - (1 if retired else 0))


# Pre-warming ---------------------------------------------------------------------------------


async def prewarm(ctx: RouterContext, table: TableDef, splits_max: int) -> None:
    """Split `table`'s partitions, and then each global index's, at most `splits_max` of them,
    until they serve their warm throughput (`core.catalog.warm_settled`,
    `core.catalog.index_warm_settled`): each time the one with the widest hash range, at its
    middle, so the partitions stay even. A split that fails (its node down, another router's
    split of it first) is logged and left to the next round."""
    for _ in range(splits_max):
        current = ctx.records.get(table.name)
        if current is None or current.id != table.id or not catalog.prewarm_pending(current):
            return
        if current.status is not catalog.TableStatus.ACTIVE:
            return
        if not catalog.warm_settled(current):
            storage_id, (partition, key) = current.id, catalog.widest_partition(current)
        else:
            index = next(
                i for i in catalog.global_indexes(current) if not catalog.index_warm_settled(i)
            )
            if index.status is not catalog.IndexStatus.ACTIVE or index.table_id is None:
                return
            storage_id = index.table_id
            partition, key = catalog.widest_of(
                index.partitions, f"Index {index.name} of {current.name}"
            )
        payload = ops.SplitPartitionPayload(storage_id, partition.id, key.hex())
        try:
            await ctx.driver_call(
                partition,
                storage_id,
                ops.SPLIT_PARTITION,
                payload.to_json(),
                limits.SPLIT_CALL_SECONDS_MAX,
            )
        except DynamoError as error:
            log.info(
                "pre-warming %s: split of %s not made yet: %s", table.name, partition.id, error
            )
            return
        await ctx.refresh()


# Recovery of unfinished flows ---------------------------------------------------------------


class TableReconciler:
    """Recovers the flows that a dead router left unfinished (see the module's docstring), and
    lets go of expired streams and of retired partitions no follower needs."""

    def __init__(self, ctx: RouterContext) -> None:
        self.ctx = ctx
        self._since: dict[tuple[str, TableState, str | None], float] = {}
        # The online indexes (table id, index name) whose partitions this reconciler created:
        # the row shows them CREATING until the GSI replicator starts their backfill, which is
        # not this router's to wait for, so they are not created again meanwhile.
        self._placed: set[tuple[str, str | None]] = set()
        self._next_prune = 0.0

    def stalled(self, tables: Iterable[TableDef], now: float) -> list[TableRecord]:
        """The records of the unfinished flows the rows show that have been so for the stall
        bound, as of `now`; remembers when each was first seen."""
        pending: dict[tuple[str, TableState, str | None], TableRecord] = {}
        for table in tables:
            record = table_machine.recovered(table)
            if record is not None and (table.id, record.index_name) not in self._placed:
                pending[(table.id, record.state, record.index_name)] = record
        self._since = {key: self._since.get(key, now) for key in pending}
        return [
            record
            for key, record in pending.items()
            if now - self._since[key] >= limits.TABLE_TRANSITION_STALL_SECONDS
        ]

    async def recover(self, record: TableRecord) -> None:
        """Drive one recovered record with RESTARTED; a failure is logged (the row stays as the
        flow left it, and the next stall period tries again)."""
        log.warning(
            "finishing table %s's %s, left %s by another router",
            record.name,
            record.flow,
            record.state,
        )
        try:
            ended = await run(self.ctx, record, event=RESTARTED)
        except DynamoError as error:
            log.warning("could not finish table %s yet: %s", record.name, error)
            return
        if ended.state == TableState.INDEX_PLACED:
            self._placed.add((_known(ended).id, ended.index_name))

    async def reconcile(self) -> None:
        """One look at the cached catalog (the context re-reads it every second on its own, so
        the reconciler adds no calls to a node that is down), recovering every stalled flow it
        shows."""
        for record in self.stalled(self.ctx.records.values(), self.ctx.sources.clock()):
            await self.recover(record)
            # Tried: wait for another stall period before trying again.
            table = _known(record)
            self._since.pop((table.id, record.state, record.index_name), None)

        await self.drop_expired_streams()
        await self.prune_lineage()
        for table in list(self.ctx.records.values()):
            if catalog.prewarm_pending(table):
                await prewarm(self.ctx, table, limits.PREWARM_SPLITS_PER_ROUND_MAX)

    async def prune_lineage(self) -> None:
        """Drop the retired partitions kept only for the table's followers (`catalog.lineage_only`)
        once none of them holds their logs: the node dropped a log once every consumer passed
        its END (the stream's once all its records expired, the GSI replicator's once it drained
        the parent), or the stream is no longer enabled and the table has no global indexes.
        Every quarter of the retention, at most every `STREAM_RETENTION_ROUND_SECONDS_MAX`."""
        now = self.ctx.sources.clock()
        if now < self._next_prune:
            return
        self._next_prune = now + min(
            limits.STREAM_RETENTION_ROUND_SECONDS_MAX,
            self.ctx.settings.stream_retention_seconds / 4,
        )
        for table in list(self.ctx.records.values()):
            followers = _lineage_followers(table)
            gone = [
                partition.id
                for partition in catalog.lineage_only(table)
                if not await _held(self.ctx, table, followers, partition)
            ]
            if not gone:
                continue
            try:
                await self.ctx.change_table(table.name, _drop_retired(table.id, gone))
            except DynamoError as error:
                log.warning("could not drop %s's expired shards yet: %s", table.name, error)

    async def drop_expired_streams(self) -> None:
        """Let go of the disabled streams past their retention: their consumers unregistered on
        every partition, then the streams dropped from the catalog (a latest stream stays named
        by DescribeTable, with its shards forgotten)."""
        now = self.ctx.sources.clock()
        for table in list(self.ctx.records.values()):
            expired = catalog.streams_expired(
                table, now, self.ctx.settings.stream_retention_seconds
            )
            try:
                for stream in expired:
                    await _let_go(self.ctx, table, stream)
                if expired:
                    labels = [stream.label for stream in expired]
                    await self.ctx.change_table(table.name, _drop_streams(table.id, labels))
            except DynamoError as error:
                log.warning("could not let go of %s's expired streams yet: %s", table.name, error)

    async def run(self) -> None:
        """Reconcile every `TABLE_RECONCILE_SECONDS` until cancelled."""
        while True:
            await asyncio.sleep(limits.TABLE_RECONCILE_SECONDS)
            await self.reconcile()


async def _let_go(ctx: RouterContext, table: TableDef, stream: catalog.StreamDef) -> None:
    """Unregister `stream`'s consumer on every partition that may hold it: the table's, retired
    and serving, and the stream's closed shards (a retired log goes once no consumer holds it)."""
    partitions = {p.id: p for p in (*streams.lineage(table), *(s.partition for s in stream.shards))}
    body = ops.UnregisterConsumerPayload(stream.consumer).to_json()
    for partition in partitions.values():
        try:
            await ctx.feed_call(partition, ops.UNREGISTER_CONSUMER, table.id, body)
        except StaleEpoch:
            continue  # A retired partition whose log is gone already.


def _lineage_followers(table: TableDef) -> list[str]:
    """The consumers that read a retired partition's log before its children's: the GSI
    replicator's (one per group of indexes) and the enabled stream's."""
    consumers = list(gsi.followed_groups(table))
    if table.stream is not None and table.stream.enabled:
        consumers.append(table.stream.consumer)
    return consumers


async def _held(
    ctx: RouterContext,
    table: TableDef,
    consumers: Iterable[str],
    partition: catalog.PartitionDef,
) -> bool:
    """Whether a retired partition's log is still held for one of `consumers`, not past its END
    (when unsure, it is)."""
    for consumer in consumers:
        body = ops.CheckpointPayload(consumer, 0).to_json()  # Never moves a consumer back.
        try:
            position = await ctx.feed_call(partition, ops.CHECKPOINT, table.id, body)
        except (StaleEpoch, ResourceNotFound):
            continue
        except DynamoError:
            return True
        if position["seq"] < position["last_seq"]:
            return True
    return False


def _drop_retired(table_id: str, partition_ids: list[str]) -> TableChange:
    def change(current: TableDef | None) -> TableDef | None:
        if current is None or current.id != table_id:
            return current
        return catalog.retired_dropped(current, partition_ids)

    return change


def _drop_streams(table_id: str, labels: list[str]) -> TableChange:
    def change(current: TableDef | None) -> TableDef | None:
        if current is None or current.id != table_id:
            return current
        return catalog.streams_dropped(current, labels)

    return change
