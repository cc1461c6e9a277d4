"""The storage node's state, and its loops over the operations of `storagenode.operations`.

`StorageNode` has no asyncio and no gRPC: `read` answers a read operation from the store, and
`apply_writes` runs a group of write operations as one synced write batch (the group commit),
returning each write's reply or typed error. Each operation is declared once in
`storagenode.operations` (its payload type, kind, metering, disk-full rule and handler); this
module only reads those declarations. Each request's JSON body is decoded once into its typed
payload before it runs, and its handler reads that.

A write group is: refuse what is late or what the disk cannot take, decode, admit (token buckets),
run each write's handler against one `writes.WriteContext` (the batch, the overlay of partition
metadata, the one `replica.apply`), persist the batch through the partitions' Raft logs
(`replication`: each partition's share of it an entry of its log, all in one synced write), then
install what the group changed (partition metadata, change feeds, meters) for readers. A write
that fails, with a typed error or a bug, fails alone: nothing of it reaches the batch and its
neighbours commit. Only a failure of the commit itself (the disk) fails the whole group.

Every data-plane request passes its partition's token buckets (`storagenode.throughput`): a read
is admitted before it runs and charged its real size after; a write is admitted before its batch is
planned, so a throttled write never enters the batch, and charged the larger of its old and
new item (or, when its condition fails, the existing item) once its plan has measured them.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Collection, Hashable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from typing import Any

import orjson

from core import heat, limits
from core.errors import (
    DynamoError,
    InternalServerError,
    NotPartitionLeader,
    ServiceUnavailable,
    StaleEpoch,
    ThroughputExceeded,
    UnknownOperation,
    ValidationError,
    WriteOutcomeUnknown,
)
from core.index_pressure import IndexPressure
from core.raft import NONE, Message, TimeoutSource
from core.raft import NotLeader as RaftNotLeader
from core.transactions import Vote, throttled
from rpc import ops
from rpc.ops import Target
from rpc.partition_metrics import COMMIT_SECONDS_BUCKETS, Durations
from storagenode import changefeed, metrics, snapshots
from storagenode.layout import (
    Family,
    partition_of_log_key,
    partition_of_meta_key,
    seq_bytes,
)
from storagenode.operations import OPERATIONS, DiskFull, Kind, Operation
from storagenode.partition import Partition
from storagenode.raft_host import group_id, node_name, partition_of_group
from storagenode.replication import Proposed, Replication, Route
from storagenode.snapshots import PageRead
from storagenode.store import PUT, BatchOp, DataCorruption, NodeStore, WriteBatchView
from storagenode.throughput import NodeThroughput
from storagenode.writes import PartitionRef, Ready, WriteContext, addressed, where

logger = logging.getLogger(__name__)

# The operations other services send that run in a write group (the simulated network, like
# the gRPC server, sends them to the group committer).
WRITE_OPS = frozenset(name for name, op in OPERATIONS.items() if op.kind is Kind.WRITE)
WriteResult = dict[str, Any] | DynamoError
# A write: its op, the partition it is addressed to (None: a control-plane write), its JSON body.
Write = tuple[str, Target | None, dict[str, Any]]


@dataclasses.dataclass(frozen=True)
class WriteRound:
    """What one round of the write loop did (`StorageNode.write_round`)."""

    # Each write's answer, by position; None while it is held or waits for its entry.
    results: list[WriteResult | None]
    # Positions of writes to run again in a later round (their partition's entry is in flight).
    held: list[int]
    # Positions of writes proposed in this round: a later round answers them by their token.
    waiting: list[int]
    # (token, answer) of writes proposed in earlier rounds that this round settled.
    settled: list[tuple[Hashable, WriteResult]]
    # Raft messages to send, per member id: the node's loop hands them to the transport.
    outgoing: list[tuple[int, list[tuple[str, Message]]]]
    # (token, refusal or None) of leaderships asked to be confirmed (`reads`) that were.
    confirmed: list[tuple[Hashable, DynamoError | None]] = dataclasses.field(default_factory=list)
    # The pages of partition replicas being copied from other members that are to be read
    # (`snapshots.py`): the node's loop reads each and hands the reply to a later round.
    page_reads: list[PageRead] = dataclasses.field(default_factory=list)


@dataclasses.dataclass(frozen=True)
class _Waiting:
    """The writes an entry in flight carries: their group's outcome, each write's token, index
    in that outcome and request, and when the entry was proposed (monotonic clock)."""

    lead: Ready
    writes: list[tuple[Hashable, int, Write]]
    since: float


def _not_leader(target: Target | None, leader: int) -> NotPartitionLeader:
    where = "this partition" if target is None else f"partition {target.partition_id}"
    name = node_name(leader) if leader != NONE else None
    known = f"; {name} leads it" if name else "; no leader is known yet"
    return NotPartitionLeader(f"This node does not lead {where}{known}", name)


def _outcome_unknown(op: str) -> WriteOutcomeUnknown:
    return WriteOutcomeUnknown(
        f"The {op} was proposed to its partition's log but its leader lost track of it; "
        "the write may or may not apply"
    )


def _refusal(op: str, error: Exception) -> DynamoError:
    """What a write that failed alone answers; called while its exception is being handled.

    A typed error is its refusal; anything else is a bug, logged and answered InternalServerError.
    """
    if isinstance(error, DynamoError):
        return error
    logger.exception("write %r failed; its group goes on without it", op)
    return InternalServerError(f"The node failed on this write: {error!r}")


class StorageNode:
    """The partitions hosted by one node and the operations on them."""

    def __init__(
        self,
        store: NodeStore,
        *,
        change_log_records_max: int = limits.CHANGE_LOG_RECORDS_MAX,
        change_log_bytes_max: int = limits.CHANGE_LOG_BYTES_MAX,
        throughput: NodeThroughput | None = None,
        clock: Callable[[], float] = time.time,
        item_collection_bytes_max: int = limits.ITEM_COLLECTION_BYTES_MAX,
        gsi_lag_records_max: int = limits.GSI_LAG_RECORDS_MAX,
        member: int = 1,
        timeouts: TimeoutSource | None = None,
        peers: Iterable[int] = (),
        monotonic: Callable[[], float] = time.monotonic,
        raft_log_compact_entries: int = limits.RAFT_LOG_COMPACT_ENTRIES,
        raft_log_kept_entries: int = limits.RAFT_LOG_KEPT_ENTRIES,
    ) -> None:
        self.store = store
        # The clock read views and leases are measured on (virtual in simulation).
        self.monotonic = monotonic
        # Every partition's Raft group, and the node's own (`replication`): opened before the
        # partitions are read, since applying what the logs hold may change them.
        self.replication = Replication(
            store,
            member,
            timeouts,
            peers=peers,
            compact_entries=raft_log_compact_entries,
            kept_entries=raft_log_kept_entries,
        )
        # The writes each entry in flight at this node as a leader carries, by group.
        self._waiting: dict[str, _Waiting] = {}
        # Membership changes proposed here as a group's leader, by group: the token of the
        # request that asked, and its partition (`_change_membership`).
        self._changing: dict[str, tuple[Hashable, PartitionRef]] = {}
        # Leaderships being confirmed for strong reads (read-index), by the asker's token.
        self._confirming: dict[Hashable, tuple[PartitionRef, Future[int]]] = {}
        # Back-pressure of global indexes on base writes (`limits.GSI_LAG_RECORDS_MAX`).
        self.gsi_lag_records_max = gsi_lag_records_max
        # ...and of their partitions' own write capacity, as the GSI replicator reports it.
        self.index_pressure = IndexPressure()
        # Unix time: TTL compares items' expiry times with it, and requests' deadlines are
        # checked against it.
        self.clock = clock
        self.change_log_records_max = change_log_records_max
        self.change_log_bytes_max = change_log_bytes_max
        # The cap on an item collection of a table with local indexes: DynamoDB's 10 GB unless
        # the node's settings say (`NodeSettings.item_collection_bytes_max`).
        self.item_collection_bytes_max = item_collection_bytes_max
        # Token buckets per partition, enforced, on the monotonic clock, unless the node's
        # settings say otherwise. Tests pass one with a clock of their own.
        self.throughput = NodeThroughput() if throughput is None else throughput
        metrics.watch(self.throughput)
        # The splits this node made (`split.Splitter`), reported with its throughput.
        self.split_stats = Durations()
        metrics.watch_splits(self.split_stats)
        # The partitions this node moved away (`move.Mover`), reported with its splits; and when
        # each copy moving to it last heard from its source (node clock), to drop abandoned ones.
        self.move_stats = Durations()
        metrics.watch_moves(self.move_stats)
        self.move_heard: dict[PartitionRef, float] = {}
        # How long this node's entries took to commit and apply, as the leader of their group.
        self.commit_stats = Durations(COMMIT_SECONDS_BUCKETS)
        metrics.watch_raft(self)
        # The partitions this node's mover is moving away now, with their target node.
        self.moving_out: dict[PartitionRef, str] = {}
        # The keys of the newest throttled reads per partition: what a read-heat split balances.
        self.read_heat: heat.ThrottledKeys[PartitionRef] = heat.ThrottledKeys()
        # Replaced or updated only by the writer after each commit, so a reader on another thread
        # always sees the metadata of committed data.
        self.partitions: dict[PartitionRef, Partition] = {}
        # Change-feed consumers and retired logs, replaced whole by the writer after each commit.
        self.feeds = changefeed.FeedState.load(store)
        # Called on the writer thread after each commit with the partitions whose change feed it
        # moved (the server wakes their followers); it must not block.
        self.on_commit: Callable[[Collection[PartitionRef]], None] | None = None
        for meta in store.load_partition_metas():
            partition = Partition.from_meta(meta)
            if "log_bytes" not in meta:
                # Written before logs were bounded in bytes: measured once, kept from then on.
                sizes = self.log_sizes(
                    partition.log_prefix, partition.first_seq, partition.last_seq
                )
                partition.log_bytes = sum(size for _, size in sizes)
            self.partitions[partition.table_id, partition.partition_id] = partition
            self.throughput.track(
                (partition.table_id, partition.partition_id),
                partition.table_name,
                partition.throughput,
            )
        self.replication.recover(self.partitions)

    def replicated(self, ref: PartitionRef) -> bool:
        """Whether partition `ref`'s replica here shares its group with other nodes."""
        return self.replication.replicated(ref)

    def leads(self, ref: PartitionRef) -> bool:
        """Whether this node leads partition `ref`'s replicated group, as of its latest round."""
        view = self.replication.views.get(ref)
        return view is not None and view.leads

    def leader_of(self, ref: PartitionRef) -> str | None:
        """The node this one believes leads partition `ref`'s replicated group (None: none)."""
        view = self.replication.views.get(ref)
        return None if view is None else view.leader

    @property
    def ticking(self) -> bool:
        """Whether its Raft groups need time to pass: it shares groups with other nodes."""
        return self.replication.ticking

    def raft_report(self, table_id: str | None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """The replicated groups of table `table_id` (None: of every table) as of their latest
        report (`replication.GroupStatus`, renewed every RAFT_STATUS_SECONDS), one entry per
        replica this node holds, and the node's Raft counters: the partition_throughput reply's
        `replicas` and `raft` (`rpc.ops`). A partition of one copy has no entry."""
        replication = self.replication
        replicas = []
        for (owner, partition_id), status in sorted(replication.status.items()):
            if table_id is not None and owner != table_id:
                continue
            partition = self.partitions.get((owner, partition_id))
            name = partition.table_name if partition is not None else owner
            replicas.append(
                {"table_id": owner, "table_name": name, "partition_id": partition_id}
                | status.to_json()
            )
        host = replication.host.stats
        leaders = sum(1 for status in replication.status.values() if status.role == "leader")
        report = {
            "elections": host.elections,
            "leader_changes": host.leader_changes,
            "groups": len(replication.status),
            "leaders": leaders,
            "commit": self.commit_stats.to_json(),
        }
        return replicas, report

    def log_sizes(self, log: bytes, first_seq: int, last_seq: int) -> Iterator[tuple[int, int]]:
        """(seq, bytes) of the committed change-log records first_seq..last_seq under the log
        prefix `log`, oldest first, read lazily (retention reads only as far as it trims)."""
        rows = self.store.walk(
            Family.CHANGE_LOG,
            log + seq_bytes(first_seq),
            log + seq_bytes(last_seq + 1),
            forward=True,
        )
        for key, value in rows:
            yield int.from_bytes(key[len(log) :], "big"), len(value)

    # Reads ---------------------------------------------------------------------------------------

    def check_target(self, op: str, target: Target | None) -> None:
        """Refuse a data-plane request addressed to a partition this node does not hold, or to
        another epoch of it, with StaleEpoch: from the envelope alone, before its body is decoded.

        A write is checked again in its group, against the partitions as the group sees them.
        """
        if op not in ops.DATA_OPS:
            return
        if target is None:
            raise ValidationError(f"A {op} request names no partition")
        addressed(self.partitions.get((target.table_id, target.partition_id)), target)

    def read(
        self,
        op: str,
        target: Target | None,
        body: dict[str, Any],
        *,
        leader_confirmed: bool = False,
    ) -> dict[str, Any]:
        """Answer one read operation from the committed state of the store.

        A data-plane read names its partition in `target`; a control-plane read passes None.
        At a replica shared with other nodes, a read is served as its read view allows
        (`replication.ReadView`): a strongly consistent one only at the leader, under its lease
        or once it has confirmed it leads (`leader_confirmed`, after a read-index round:
        `commit.read`); otherwise NotPartitionLeader, or LeaseUnavailable at a leader without
        a lease.
        """
        operation = OPERATIONS.get(op)
        if operation is None or operation.kind is not Kind.READ:
            raise UnknownOperation(f"{op!r} is not a storage node read operation")
        if target is not None and 0 < target.deadline < (now := self.clock()):
            raise _expired(op, target, now)
        if target is not None:
            view = self.replication.views.get((target.table_id, target.partition_id))
            if view is not None and not (leader_confirmed and view.leads):
                view.check(target.consistent, self.monotonic(), target.partition_id)
        key = self._metered(operation, target)
        if key is None:
            return self._located(operation, target, body)
        assert target is not None
        consistent = target.consistent
        try:
            charged = self.throughput.admit_read(key, consistent)
        except ThroughputExceeded:
            self._note_read_heat(key, op, body)
            raise
        read_bytes: int | None = None
        try:
            reply = self._located(operation, target, body)
            read_bytes = reply["read_bytes"]
            return reply
        finally:
            if charged:
                self.throughput.settle_read(key, consistent, read_bytes, charged)

    def check_feed(self, ref: PartitionRef) -> None:
        """Refuse to serve partition `ref`'s change feed where its replica does not serve it now
        (`replication.ReadView.check_feed`); a partition of one copy is served here."""
        view = self.replication.views.get(ref)
        if view is not None:
            view.check_feed(self.monotonic(), ref[1])

    def serves_feed(self, ref: PartitionRef) -> bool:
        """Whether this node serves partition `ref`'s change feed now (`check_feed`)."""
        view = self.replication.views.get(ref)
        return view is None or view.serves_feed(self.monotonic())

    def _note_read_heat(self, ref: PartitionRef, op: str, body: dict[str, Any]) -> None:
        """Note the storage key a throttled read asked for (a Query: its item collection's
        start); a Scan, which reads a range, notes nothing."""
        partition = self.partitions.get(ref)
        if partition is None:
            return
        shape = partition.key_shape
        try:
            if op == ops.GET:
                key = shape.storage_key(body["key"])
            elif op == ops.QUERY:
                key = shape.storage_key_of([body["hash_value"]])
            else:
                return
        except (DynamoError, KeyError, TypeError):
            return  # A body the read itself would refuse: no sample.
        self.read_heat.note(ref, key)

    def _located(
        self, operation: Operation, target: Target | None, body: dict[str, Any]
    ) -> dict[str, Any]:
        """A read's reply; damaged data it meets is reported with the partition it was reading."""
        try:
            handler: Any = operation.handler
            reply: dict[str, Any] = handler(self, target, operation.payload.from_json(body))
            return reply
        except DataCorruption as error:
            raise error.within("the node's metadata" if target is None else where(target)) from None

    def _metered(self, operation: Operation, target: Target | None) -> PartitionRef | None:
        """The partition a data-plane request spends units of; None if it spends none.

        A request for a partition this node does not hold at that epoch is not metered: it is
        refused as stale, and the router retries it where the partition is now.
        """
        if not operation.metered or not self.throughput.enforced or target is None:
            return None
        key = (target.table_id, target.partition_id)
        partition = self.partitions.get(key)
        if partition is None or partition.epoch != target.epoch:
            return None
        return key

    def admit_transaction(self, ref: PartitionRef, units: float) -> Vote | None:
        """Charge a transaction's prepare `units` of partition `ref`'s write capacity; None
        when admitted, else the vote of a throttled participant."""
        if self.throughput.try_charge(ref, units, read=False):
            return None
        return throttled(self.throughput.on_demand(ref))

    def admit_transaction_read(self, ref: PartitionRef, units: float) -> Vote | None:
        """Charge a TransactGetItems `units` of partition `ref`'s read capacity, as above."""
        if self.throughput.try_charge(ref, units, read=True):
            return None
        return throttled(self.throughput.on_demand(ref))

    def changes(
        self, table_id: str, partition_id: str, after_seq: int, limit: int
    ) -> list[dict[str, Any]]:
        """Up to `limit` of the change-log records a partition still holds with seq > after_seq,
        oldest first: the feed's own read, from where the log now starts if it was trimmed past
        `after_seq` (a view for tools and tests, which need no re-snapshot error).

        The partition may be live or retired with its log kept for its consumers.
        """
        bounds = self.feed_bounds(table_id, partition_id)
        start = max(after_seq, bounds.first_seq - 1)
        batch = changefeed.read_batch(
            self.store, table_id, partition_id, bounds, start, records_max=limit
        )
        return batch.records

    def feed_bounds(self, table_id: str, partition_id: str) -> changefeed.LogBounds:
        """The committed bounds of a partition's change log, live or retired and kept."""
        ref = (table_id, partition_id)
        partition = self.partitions.get(ref)
        if partition is not None:
            return changefeed.LogBounds(partition.first_seq, partition.last_seq)
        retired = self.feeds.retired.get(ref)
        if retired is not None:
            return retired.bounds()
        raise StaleEpoch(f"Partition {partition_id} of table {table_id} is not on this node")

    def read_feed(
        self,
        table_id: str,
        partition_id: str,
        after_seq: int,
        records_max: int = limits.CHANGE_FEED_BATCH_RECORDS_MAX,
    ) -> changefeed.FeedBatch:
        """A batch of a partition's change feed after `after_seq` (`changefeed.read_batch`)."""
        bounds = self.feed_bounds(table_id, partition_id)
        return changefeed.read_batch(
            self.store,
            table_id,
            partition_id,
            bounds,
            after_seq,
            records_max=max(1, min(records_max, limits.CHANGE_FEED_BATCH_RECORDS_MAX)),
        )

    def consumer_checkpoint(self, table_id: str, partition_id: str, consumer: str) -> int | None:
        """A registered consumer's committed checkpoint; None if it is not registered."""
        return self.feeds.consumers((table_id, partition_id)).get(consumer)

    # Writes --------------------------------------------------------------------------------------

    def apply_writes(self, writes: Sequence[Write]) -> list[WriteResult]:
        """Run writes in order as one synced batch; return each one's reply or error.

        One round of the node's write loop (`write_round`) for writes that all settle in it:
        those of partitions whose group has one member, this node (its tests, the simulated
        cluster's nodes, every node at replication factor 1). A write to a partition it shares
        with other nodes is refused here as it is everywhere off its leader.
        """
        outcome = self.write_round(writes)
        assert not outcome.held and not outcome.waiting, "every write settles in its round"
        return [result for result in outcome.results if result is not None]

    def write_round(
        self,
        writes: Sequence[Write],
        tokens: Sequence[Hashable] | None = None,
        inbound: Iterable[tuple[int, Sequence[tuple[str, Message]]]] = (),
        ticks: int = 0,
        reads: Sequence[tuple[Hashable, PartitionRef]] = (),
        pages: Sequence[tuple[PageRead, dict[str, Any] | DynamoError]] = (),
    ) -> WriteRound:
        """One round of the node's write loop: what came from other nodes and the ticks that
        passed, then these writes, then one synced commit of everything the round persists.
        `pages` are the replies to the `page_reads` of earlier rounds (`_copy_pages`).
        `reads` ask this node to confirm it leads a partition before a strong read is served
        there without a lease (read-index): a later round answers each by its token, in
        `WriteRound.confirmed` (None: confirmed; else the refusal).

        The loop: run the writes (`run_group`: admit, run the handlers, give the outcome as a
        `writes.Ready` value), persist that value through the partitions' Raft logs
        (`replication.Replication.persist`), then install it (`install`) and charge each write
        what it consumed. A write to a partition whose group has one voter, this node, settles
        in its round: its entry commits as it is appended, with its effect. A write to a
        partition this node leads with others is planned against the applied state and waits
        for its entry to commit (`WriteRound.waiting`; a later round answers it, by its token,
        in `WriteRound.settled`), one entry in flight per partition: the writes to a partition
        whose entry is in flight are held for a later round (`WriteRound.held`), in order.
        Elsewhere a write is refused as NotPartitionLeader, naming the leader.

        A write refused with a typed error (a failed condition, a stale epoch, a validation
        error) changes nothing and the others go ahead. A write that fails with anything else is
        a bug: it is logged and answered InternalServerError, and it too changes nothing, because
        nothing of a write reaches the batch before the write has been planned and encoded. A
        failure of the commit (the disk) fails every write of the round that had not failed.
        """
        tokens = list(range(len(writes))) if tokens is None else list(tokens)
        replication = self.replication
        replication.step(inbound, ticks)
        self._copy_pages(pages)
        for token, ref in reads:
            self._confirming[token] = (ref, replication.read_index(ref))
        results: list[WriteResult | None] = [None] * len(writes)
        local, led, held, changes = self._route_writes(writes, results)
        changing = [
            position
            for position in changes
            if self._change_membership(writes[position], tokens[position], results, position)
        ]
        led_order = sorted(position for positions in led.values() for position in positions)
        ready = self.run_group([writes[position] for position in local])
        lead = self.run_group([writes[position] for position in led_order]) if led_order else None
        index_of = {position: index for index, position in enumerate(led_order)}
        waiting: list[int] = []
        try:
            proposed = replication.persist(
                ready,
                self.partitions,
                lead,
                {ref: [index_of[p] for p in positions] for ref, positions in led.items()},
            )
        except Exception as error:
            logger.exception("group commit of %d writes failed", len(writes))
            # The logs in memory are ahead of the disk: read them again, as a restart would.
            replication.reopen()
            replies, consumed = ready.lost(error)
            if lead is not None:
                lost, _ = lead.lost(error)
                for index, position in enumerate(led_order):
                    results[position] = lost[index]
                led_writes = [writes[position] for position in led_order]
                self._settle_writes(led_writes, lead.charged, [0.0] * len(led_order))
            settled = self._fail_waiting()
        else:
            self.install(ready)
            replies, consumed = list(ready.replies), list(ready.consumed)
            if lead is not None:
                for entry in proposed:
                    positions = [led_order[index] for index in entry.writes]
                    self._waiting[entry.group] = _Waiting(
                        lead,
                        [(tokens[p], index_of[p], writes[p]) for p in positions],
                        self.monotonic(),
                    )
                    waiting.extend(positions)
            waiting.extend(changing)
            self.install_effects(replication.take_applied())
            settled = self._settle_proposals(replication.settle())
        self._settle_writes([writes[position] for position in local], ready.charged, consumed)
        for index, position in enumerate(local):
            results[position] = replies[index]
        if replication.ticking:
            replication.publish(self.monotonic())
        return WriteRound(
            results,
            held,
            sorted(waiting),
            settled,
            replication.outbox.take(),
            self._take_confirmed(),
            replication.page_reads(),
        )

    def _copy_pages(self, pages: Sequence[tuple[PageRead, dict[str, Any] | DynamoError]]) -> None:
        """Begin a copy of each replica offered a snapshot it cannot continue its log from, and
        write the pages read for the copies running (`snapshots.py`), each in a synced commit of
        its own, before the round's writes."""
        replication = self.replication
        for name, message in replication.take_offered():
            ref = partition_of_group(name)
            partition = self.partitions.get(ref)
            if partition is None:
                continue
            batch = self.store.batch()
            install = replication.begin_install(name, message, batch)
            cleared = snapshots.clear(self.store, batch, partition)
            # No read of the replica from now on: the views say so before its rows go.
            replication.publish(self.monotonic())
            self._commit_copy(batch, name, cleared)
            logger.info(
                "partition %s/%s copies its replica from node-%d from index %d",
                *ref,
                install.source,
                install.snapshot.index,
            )
        for read, reply in pages:
            copy = replication.installs.get(read.group)
            if copy is None or not copy.answers(read.request, read.source):
                continue  # a late reply to an earlier read, or a copy that has ended
            if isinstance(reply, DynamoError):
                copy.next_source(replication.member)
                continue
            ref = partition_of_group(read.group)
            partition = self.partitions.get(ref)
            if partition is None:
                continue
            batch = self.store.batch()
            written = copy.write_page(batch, reply)
            if copy.done(partition):
                replication.end_install(copy, batch)
                logger.info(
                    "partition %s/%s copied its replica in %d pages; whole again at index %d",
                    *ref,
                    copy.pages,
                    copy.applied,
                )
            else:
                replication.record_page(copy, batch)
            self._commit_copy(batch, read.group, written)

    def _commit_copy(self, batch: WriteBatchView, group: str, writes: list[BatchOp]) -> None:
        try:
            self.store.commit(batch)
        except Exception:
            logger.exception("a commit of group %s's replica copy failed", group)
            # The groups in memory are ahead of the disk: read them again, as a restart would.
            self.replication.reopen()
            return
        self.install_effects([(group, writes)])

    def _take_confirmed(self) -> list[tuple[Hashable, DynamoError | None]]:
        confirmed: list[tuple[Hashable, DynamoError | None]] = []
        for token, (ref, future) in list(self._confirming.items()):
            if not future.done():
                continue
            del self._confirming[token]
            failure = future.exception()
            if failure is None:
                confirmed.append((token, None))
            elif isinstance(failure, RaftNotLeader):
                confirmed.append((token, _not_leader(Target(*ref), failure.leader)))
            else:
                confirmed.append((token, _outcome_unknown("read")))
        return confirmed

    def _route_writes(
        self, writes: Sequence[Write], results: list[WriteResult | None]
    ) -> tuple[list[int], dict[PartitionRef, list[int]], list[int], list[int]]:
        """Sort a round's writes by where they go (`replication.Route`): positions to run now on
        groups of one voter, positions to plan and propose by partition led here with others,
        positions held for a later round, positions of membership requests to groups led
        here (`_change_membership`); a write refused as NotPartitionLeader gets its refusal in
        `results`. A membership request, like a write, waits for the entry in flight before it,
        and the writes after it wait for its own."""
        local: list[int] = []
        led: dict[PartitionRef, list[int]] = {}
        held: list[int] = []
        changes: list[int] = []
        busy: set[PartitionRef] = set()
        for position, (op, target, _) in enumerate(writes):
            operation = OPERATIONS.get(op)
            if target is None or operation is None or not operation.addressable:
                local.append(position)
                continue
            ref = (target.table_id, target.partition_id)
            if ref in busy:
                held.append(position)  # after a write held before it: order is kept
                continue
            route, leader = self.replication.route(ref)
            if op == ops.RAFT_MEMBERSHIP and route is Route.LEAD:
                busy.add(ref)
                if ref in led:
                    held.append(position)
                else:
                    changes.append(position)
            elif route is Route.LOCAL:
                local.append(position)
            elif route is Route.LEAD:
                led.setdefault(ref, []).append(position)
            elif route is Route.BUSY:
                busy.add(ref)
                held.append(position)
            else:
                results[position] = _not_leader(target, leader)
        return local, led, held, changes

    def _change_membership(
        self, write: Write, token: Hashable, results: list[WriteResult | None], position: int
    ) -> bool:
        """A membership request to a group this node leads with nothing in flight
        (`ops.RaftMembershipPayload`): answered in `results` now, or, for a change proposed as
        an entry, True (a later round answers it by `token`, once it applied)."""
        op, target, body = write
        assert target is not None
        ref = (target.table_id, target.partition_id)
        replication = self.replication
        future = None
        try:
            addressed(self.partitions.get(ref), target)
            payload = ops.RaftMembershipPayload.from_json(body)
            if payload.change != "read":
                assert payload.node is not None
                future = replication.change_membership(ref, payload.change, payload.node)
        except DynamoError as error:
            results[position] = error
            return False
        except (KeyError, ValueError) as error:
            results[position] = ValidationError(f"A malformed raft_membership request: {error}")
            return False
        if payload.change == "read" or future is None:
            results[position] = replication.membership(ref) or _outcome_unknown(op)
            return False
        self._changing[group_id(*ref)] = (token, ref)
        return True

    def _settle_proposals(self, done: Sequence[Proposed]) -> list[tuple[Hashable, WriteResult]]:
        """The answers of writes whose entry the latest round settled: their planned replies if
        it applied; if another entry took its index, NotPartitionLeader (they were not applied,
        and the router retries at the new leader); if the host cannot tell, ServiceUnavailable
        saying so."""
        settled: list[tuple[Hashable, WriteResult]] = []
        for entry in done:
            change = self._changing.pop(entry.group, None)
            if change is not None:
                token, ref = change
                failure = entry.future.exception()
                reply: WriteResult
                membership = self.replication.membership(ref)
                if failure is None and membership is not None:
                    reply = membership
                elif isinstance(failure, RaftNotLeader):
                    reply = _not_leader(Target(*ref), failure.leader)
                else:
                    reply = _outcome_unknown(ops.RAFT_MEMBERSHIP)
                settled.append((token, reply))
                continue
            waiting = self._waiting.pop(entry.group)
            failure = entry.future.exception()
            if failure is None:
                self.commit_stats.record(self.monotonic() - waiting.since)
            for token, index, write in waiting.writes:
                lead = waiting.lead
                if failure is None:
                    reply = lead.replies[index]
                    units = lead.consumed[index]
                elif isinstance(failure, RaftNotLeader):
                    reply, units = _not_leader(write[1], failure.leader), 0.0
                else:
                    reply, units = _outcome_unknown(write[0]), 0.0
                self._settle_writes([write], [lead.charged[index]], [units])
                settled.append((token, reply))
        return settled

    def _fail_waiting(self) -> list[tuple[Hashable, WriteResult]]:
        """The answers of every write waiting on an entry when the logs were read again after a
        failed commit: its entry was persisted and may yet commit, so no one can tell."""
        settled: list[tuple[Hashable, WriteResult]] = []
        for waiting in self._waiting.values():
            for token, index, write in waiting.writes:
                self._settle_writes([write], [waiting.lead.charged[index]], [0.0])
                settled.append((token, _outcome_unknown(write[0])))
        self._waiting = {}
        for token, _ref in self._changing.values():
            settled.append((token, _outcome_unknown(ops.RAFT_MEMBERSHIP)))
        self._changing = {}
        return settled

    def install_effects(self, applied: Sequence[tuple[str, Sequence[BatchOp]]]) -> None:
        """Make visible what committed entries of groups of several members changed, once the
        round that applied them has committed: at every member alike (the leader too), from
        the effect itself: the partitions' metadata, the feeds' consumers and retired logs;
        then wake the followers of the feeds it moved."""
        if not applied:
            return
        partitions: dict[PartitionRef, Partition | None] = {}
        woken: set[PartitionRef] = set()
        feeds = changefeed.FeedEdits()
        for _group, effect in applied:
            for kind, family, key, value in effect:
                if family is Family.PARTITIONS:
                    ref = partition_of_meta_key(key)
                    if kind == PUT and value is not None:
                        partitions[ref] = Partition.from_meta(orjson.loads(value))
                    else:
                        partitions[ref] = None
                elif family is Family.CHANGE_LOG and kind == PUT:
                    woken.add(partition_of_log_key(key))
                elif family in (Family.CHECKPOINTS, Family.RETIRED_LOGS):
                    woken.add(feeds.note(kind, family, key, value))
        self.feeds = feeds.applied_to(self.feeds)
        self._install(partitions)
        if self.on_commit is not None:
            self.on_commit(frozenset(woken | partitions.keys()))

    def run_group(self, writes: Sequence[Write]) -> Ready:
        """Admit a group of writes and run their handlers in order against one write context:
        the group's outcome as a value, nothing of it persisted or visible to readers yet.

        Admission charges the partitions' token buckets (`_settle_writes` settles them)."""
        results: list[WriteResult | None] = [None] * len(writes)
        self._refuse_expired(writes, results)
        self._keep_disk_reserve(writes, results)
        decoded = _decode_writes(writes, results)
        charged = self._admit_writes(writes, decoded, results)
        # Units each write consumed, known once it has been planned (0 for one not applied).
        consumed = [0.0] * len(writes)
        group = WriteContext(self, self.store.batch())
        for index, (op, target, _) in enumerate(writes):
            write = decoded[index]
            if results[index] is not None or write is None:
                continue
            operation, payload = write
            if target is None and operation.addressed:
                results[index] = ValidationError(f"A {op} request names no partition")
                continue
            writer = None
            if target is not None and operation.addressable:
                writer = (target.table_id, target.partition_id)
            handler: Any = operation.handler
            try:
                results[index] = group.run(writer, handler, target, payload)
                consumed[index] = group.consumed
            except Exception as error:
                results[index] = _refusal(op, error)
        assert all(result is not None for result in results)
        return group.ready(results, charged, consumed)  # type: ignore[arg-type]

    def install(self, ready: Ready) -> None:
        """Make a persisted group's outcome visible: the feeds' state, the partitions' metadata
        and their meters; then wake the followers of the feeds it moved."""
        # Feeds first: a reader that finds a retired partition gone finds its kept log.
        self.feeds = ready.feeds
        for parent, children in ready.splits:
            self.throughput.split(parent, children)  # Before the children are tracked.
        self._install(ready.partitions)
        for ref, balances in ready.carried:
            self.throughput.carry(ref, balances)  # Once the moved partition is tracked.
        for ref, heard in ready.heard.items():
            if heard is None:
                self.move_heard.pop(ref, None)
            else:
                self.move_heard[ref] = heard
        if self.on_commit is not None:
            self.on_commit(ready.woken)

    def _refuse_expired(self, writes: Sequence[Write], results: list[WriteResult | None]) -> None:
        """Refuse the writes whose deadline has passed, before anything of them is planned.

        Their callers have stopped waiting (or will, within RPC_DEADLINE_GRACE_SECONDS), so
        applying them now would apply a write its client was told had failed: they fail here,
        not applied, as ServiceUnavailable, which SDKs retry.
        """
        now = self.clock()
        for index, (op, target, _) in enumerate(writes):
            if target is not None and 0 < target.deadline < now:
                results[index] = _expired(op, target, now)

    def _keep_disk_reserve(
        self, writes: Sequence[Write], results: list[WriteResult | None]
    ) -> None:
        """Refuse the writes the disk's free space cannot take, keeping its reserve.

        Below `disk_reserve_bytes` of free space only what frees space goes on (deletes, TTL
        expiry, change-feed checkpoints that let the log be trimmed, dropped tables); below a
        quarter of it only dropped tables. Refused writes fail as ServiceUnavailable, not
        applied, and SDKs retry them; reads are untouched. One free-space query per group.
        """
        if self.store.read_only:
            for index in range(len(writes)):
                results[index] = results[index] or ServiceUnavailable(
                    "The storage node started read-only because its disk was full: it serves "
                    "reads and refuses writes until it is restarted with free space"
                )
            return
        reserve = self.store.disk_reserve_bytes
        free = self.store.free_bytes()
        if free >= reserve:
            return
        floor = reserve * limits.DISK_DELETE_RESERVE_SHARE_MIN
        needed = DiskFull.ALWAYS if free < floor else DiskFull.FREES_SPACE
        for index, (op, _, _) in enumerate(writes):
            operation = OPERATIONS.get(op)
            allowed = operation is not None and operation.disk_full >= needed
            if results[index] is None and not allowed:
                results[index] = ServiceUnavailable(
                    f"The storage node's disk is full ({free // limits.MIB} MiB free, "
                    f"{reserve // limits.MIB} MiB kept in reserve): writes that add data are "
                    "refused until space is freed; deletes go on"
                )

    def _admit_writes(
        self,
        writes: Sequence[Write],
        decoded: Sequence[tuple[Operation, Any] | None],
        results: list[WriteResult | None],
    ) -> list[float]:
        """Admit each item write on its estimate before any is planned; refuse the throttled.

        Returns the units charged per write (0 for a write that is not metered). A throttled
        write gets its ProvisionedThroughputExceededException in `results` and is never applied.
        The size a put will write is known (the router measured it); an update's or a delete's is
        known only once planned, so they are admitted on one unit and charged the rest.
        """
        charged = [0.0] * len(writes)
        if not self.throughput.enforced:
            return charged
        for index, (_, target, _) in enumerate(writes):
            write = decoded[index]
            if write is None:
                continue
            operation, payload = write
            key = self._metered(operation, target)
            if key is None:
                continue
            estimate_bytes = payload.item_bytes if isinstance(payload, ops.PutPayload) else None
            try:
                charged[index] = self.throughput.admit_write(key, estimate_bytes)
            except ThroughputExceeded as error:
                results[index] = error
        return charged

    def _settle_writes(
        self,
        writes: Sequence[Write],
        charged: Sequence[float],
        consumed: Sequence[float],
    ) -> None:
        """Charge each admitted write what it consumed (refund what was not applied)."""
        for index, units in enumerate(charged):
            if units:
                target = writes[index][1]
                assert target is not None, "only addressed writes are metered"
                key = (target.table_id, target.partition_id)
                self.throughput.settle_write(key, consumed[index], units)

    def _install(self, dirty: Mapping[PartitionRef, Partition | None]) -> None:
        """Make a committed batch's partition metadata visible to readers, and meter it."""
        for key, partition in dirty.items():
            if partition is None:
                self.throughput.forget(key)
            else:
                self.throughput.track(key, partition.table_name, partition.throughput)
        if all(key in self.partitions for key in dirty) and all(dirty.values()):
            # Same keys: assign in place, which readers iterating a snapshot list tolerate.
            self.partitions.update(dirty)  # type: ignore[arg-type]
            return
        partitions = dict(self.partitions)
        for key, partition in dirty.items():
            if partition is None:
                partitions.pop(key, None)
            else:
                partitions[key] = partition
        self.partitions = partitions


def _expired(op: str, target: Target, now: float) -> ServiceUnavailable:
    late = now - target.deadline
    return ServiceUnavailable(
        f"The {op} reached partition {target.partition_id} {late:.3f} s after its deadline; "
        "it was not applied"
    )


def _decode_writes(
    writes: Sequence[Write], results: list[WriteResult | None]
) -> list[tuple[Operation, Any] | None]:
    """Each write's operation and its body decoded once into its payload; None for a write that
    cannot be (its refusal is put in `results`: it fails alone, like any write)."""
    decoded: list[tuple[Operation, Any] | None] = [None] * len(writes)
    for index, (op, _, body) in enumerate(writes):
        try:
            operation = OPERATIONS.get(op)
            if operation is None or not operation.writes:
                raise UnknownOperation(f"{op!r} is not a storage node write operation")
            decoded[index] = (operation, operation.payload.from_json(body))
        except Exception as error:
            results[index] = _refusal(op, error)
    return decoded
