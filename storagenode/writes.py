"""The public write interface: what a node operation's handler may do inside a write group.

A write group (`StorageNode.apply_writes`) runs the handlers of many requests, in order, against
one write batch and one overlay of partition metadata, and commits them as one synced batch. A
handler (`storagenode.operations`) is written against `WriteContext` alone, never against the
node's private parts: it reads the store through the batch (`batch`, `read_item`) and partitions
as the group sees them (`lookup`), plans a write (`core.writes.plan`, or `replacing` for a copy
that decides nothing), stages it through the one `apply` (`replica.apply`: the item, its local
index entries, its expiry entry, its change record, the partition's counters) on the group's
private copy of the partition (`stage`), and notes what must happen once the group has committed
(`note_split`, `note_carried`). Metadata changes go to copies that become visible only after the
commit, so a failed commit leaves the node's view untouched.

`NodeState` is what handlers and the node's drivers (`split.Splitter`, `move.Mover`, the
sweepers) read of the node: a protocol here, so that none of them imports `storagenode.node`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from typing import Any, Protocol

import orjson

from core import heat
from core.errors import (
    ConditionalCheckFailed,
    DynamoError,
    InternalServerError,
    StaleEpoch,
    ValidationError,
)
from core.index_pressure import IndexPressure
from core.transactions import Vote
from core.values import Item
from core.writes import WriteEffect
from rpc.ops import Target
from rpc.partition_metrics import Durations
from storagenode import changefeed, replica
from storagenode.layout import Family, item_json_of, item_size_of, partition_meta_key, seq_bytes
from storagenode.partition import Partition
from storagenode.store import NodeStore, WriteBatchView
from storagenode.throughput import NodeThroughput

PartitionRef = tuple[str, str]  # (table id, partition id)
# A split's parent, and each child's (key, table name, throughput settings), for the node to
# give the children their share of the parent's token buckets once the install commits.
SplitMeters = tuple[PartitionRef, list[tuple[PartitionRef, str, dict[str, Any] | None]]]
# A run of a batch's writes and the partition whose effect they are (`Ready.spans`).
Span = tuple[PartitionRef | None, int, int]


class NodeState(Protocol):
    """The node as its handlers and drivers read it (`storagenode.node.StorageNode`)."""

    store: NodeStore
    clock: Callable[[], float]
    partitions: dict[PartitionRef, Partition]
    feeds: changefeed.FeedState
    throughput: NodeThroughput
    item_collection_bytes_max: int
    change_log_records_max: int
    change_log_bytes_max: int
    gsi_lag_records_max: int
    index_pressure: IndexPressure
    split_stats: Durations
    move_stats: Durations
    move_heard: dict[PartitionRef, float]
    moving_out: dict[PartitionRef, str]
    read_heat: heat.ThrottledKeys[PartitionRef]
    on_commit: Callable[[Collection[PartitionRef]], None] | None

    def read(self, op: str, target: Target | None, body: dict[str, Any]) -> dict[str, Any]: ...

    def replicated(self, ref: PartitionRef) -> bool: ...

    def leads(self, ref: PartitionRef) -> bool: ...

    def leader_of(self, ref: PartitionRef) -> str | None: ...

    def raft_report(self, table_id: str | None) -> tuple[list[dict[str, Any]], dict[str, Any]]: ...

    def changes(
        self, table_id: str, partition_id: str, after_seq: int, limit: int
    ) -> list[dict[str, Any]]: ...

    def feed_bounds(self, table_id: str, partition_id: str) -> changefeed.LogBounds: ...

    def read_feed(
        self, table_id: str, partition_id: str, after_seq: int, records_max: int = ...
    ) -> changefeed.FeedBatch: ...

    def consumer_checkpoint(
        self, table_id: str, partition_id: str, consumer: str
    ) -> int | None: ...

    def admit_transaction(self, ref: PartitionRef, units: float) -> Vote | None: ...

    def admit_transaction_read(self, ref: PartitionRef, units: float) -> Vote | None: ...

    def log_sizes(self, log: bytes, first_seq: int, last_seq: int) -> Iterator[tuple[int, int]]: ...


@dataclasses.dataclass(frozen=True, slots=True)
class Ready:
    """A write group's outcome, as one value: what to persist, what to answer, and what the node
    does once it is persisted. Nothing of it is visible to readers until it is installed.

    This is where a replication log goes: persisting becomes "append to the log, wait for a
    quorum"; installing stays what it is.
    """

    # The write batch to persist with one synced write: items, index entries, change records,
    # checkpoints and the partitions' metadata.
    batch: WriteBatchView
    # Each write's reply or refusal, in order, as it stands if the batch persists.
    replies: tuple[dict[str, Any] | DynamoError, ...]
    # The units each write was charged at admission, and those it consumed (0: none).
    charged: tuple[float, ...]
    consumed: tuple[float, ...]
    # The change records the group appended: (seq, bytes) per partition.
    appended: Mapping[PartitionRef, Sequence[tuple[int, int]]]
    # Installs: the partitions' metadata (None: gone from this node) and the feeds' state.
    partitions: Mapping[PartitionRef, Partition | None]
    feeds: changefeed.FeedState
    # Meters: the splits installed (children share the parent's buckets), and the partitions
    # moved here and activated, with their source's balances.
    splits: tuple[SplitMeters, ...]
    carried: tuple[tuple[PartitionRef, dict[str, float]], ...]
    # Moves: when each incoming copy the group wrote to last heard from its source (group time),
    # or None for a copy the group activated or dropped (`storagenode.move`'s abandoned-copy check).
    heard: Mapping[PartitionRef, float | None]
    # Wake-ups: the partitions whose change feed moved (their followers look again).
    woken: frozenset[PartitionRef]
    # Whose each of the batch's writes is, in order: (partition, start, end) says that
    # `batch.ops[start:end]` is the effect of a write addressed to that partition, or of the
    # metadata it was the first in the group to change (None: a write addressed to no one
    # partition, the node's own). The spans cover the batch's writes exactly; each partition's
    # log carries its own (`storagenode.replication`).
    spans: tuple[Span, ...] = ()

    def lost(self, error: Exception) -> tuple[list[dict[str, Any] | DynamoError], list[float]]:
        """The replies and consumed units if the batch could not be persisted: every write that
        would have been acknowledged fails, and a failed condition too (it was decided against
        writes that are lost as well); refusals stand."""
        replies: list[dict[str, Any] | DynamoError] = list(self.replies)
        consumed = list(self.consumed)
        for index, reply in enumerate(replies):
            if isinstance(reply, dict | ConditionalCheckFailed):
                replies[index] = InternalServerError(f"The node could not commit: {error}")
                consumed[index] = 0.0
        return replies, consumed


class WriteContext:
    """One write group as its handlers see it: the batch, the overlay, the one apply, and the
    notes of what the node does once the group has committed."""

    def __init__(self, node: NodeState, batch: WriteBatchView) -> None:
        self.node = node
        self.batch = batch
        # The group's clock (Unix time): every write of the group is stamped with it.
        self.now = node.clock()
        # The partitions this group changed, as they will be once it commits (None: dropped).
        self.dirty: dict[PartitionRef, Partition | None] = {}
        self.feed = changefeed.FeedChanges(node.feeds, batch)
        # (seq, bytes) of the change-log records this group appended, per partition, and the
        # partitions created in it (whose log starts in this group), for retention in `finish`.
        self.appended: dict[PartitionRef, list[tuple[int, int]]] = {}
        self.created: set[PartitionRef] = set()
        # The splits installed in this group, whose children's buckets share the parent's.
        self.splits: list[SplitMeters] = []
        # The partitions moved here that this group activated, with their source's balances.
        self.carried: list[tuple[PartitionRef, dict[str, float]]] = []
        # The incoming copies this group heard of from their source (None: no longer incoming).
        self.heard: dict[PartitionRef, float | None] = {}
        # The units the running write consumed (a metered write's handler sets it).
        self.consumed = 0.0
        # The partition the running write is addressed to (None: none), and whose each run of
        # the batch's writes is (`Ready.spans`); each changed partition's metadata is the effect
        # of the write that first changed it in the group.
        self.writer: PartitionRef | None = None
        self.spans: list[Span] = []
        self._changed_by: dict[PartitionRef, PartitionRef | None] = {}

    # Reading through the overlay ----------------------------------------------------------------

    def lookup(self, ref: PartitionRef) -> Partition | None:
        """A partition's metadata as this group sees it (None: not on this node)."""
        if ref in self.dirty:
            return self.dirty[ref]
        return self.node.partitions.get(ref)

    def refs(self, table_id: str) -> set[PartitionRef]:
        """The partitions of a table this group knows of, committed or created in it (some may
        have been dropped in it: `lookup` says None)."""
        return {ref for ref in (*self.node.partitions, *self.dirty) if ref[0] == table_id}

    def holder(self, table_id: str, items_key: bytes) -> PartitionRef | None:
        """The partition of table `table_id` on this node, as this group sees it, whose range
        holds the item stored under `items_key`; None when no partition here does."""
        for ref in self.refs(table_id):
            partition = self.lookup(ref)
            if partition is None:
                continue
            prefix = partition.item_prefix
            if items_key.startswith(prefix) and partition.holds(items_key[len(prefix) :]):
                return ref
        return None

    def read_item(self, items_key: bytes) -> tuple[Item | None, int]:
        """The item stored under `items_key` as this group sees it, and its size (0: none)."""
        raw = self.batch.get(Family.ITEMS, items_key)
        if raw is None:
            return None, 0
        return orjson.loads(item_json_of(raw)), item_size_of(raw)

    # Staging --------------------------------------------------------------------------------------

    def staged(self, ref: PartitionRef) -> Partition | None:
        """The group's private copy of a partition's metadata, made on first use."""
        partition = self.lookup(ref)
        if partition is None or ref in self.dirty:
            return partition
        self._check_replicated(ref)
        staged = partition.staged()
        self.dirty[ref] = staged
        self._changed_by.setdefault(ref, self.writer)
        return staged

    def _check_replicated(self, ref: PartitionRef) -> None:
        """Refuse a change to a partition shared with other nodes by a write not addressed to
        it: only a write to the partition itself goes through its group's log, at its leader
        (the settings and TTL writes that may be addressed to it are: `Operation.addressable`),
        and the node's other writes (splits, moves, transaction commits) do not yet (issue 27's
        next steps). Dropping the replica here stays allowed."""
        if self.writer != ref and self.node.replicated(ref):
            raise ValidationError(
                f"Partition {ref[1]} of table {ref[0]} is replicated on several nodes; this "
                "change is not supported on replicated partitions yet"
            )

    def stage(self, ref: PartitionRef) -> Partition:
        """The group's private copy of a partition's metadata, which must be on this node."""
        staged = self.staged(ref)
        assert staged is not None, f"partition {ref[1]} is on this node"
        return staged

    def changed(self, ref: PartitionRef) -> bool:
        """Whether a write earlier in this group changed the partition's metadata."""
        return ref in self.dirty

    def put_partition(self, ref: PartitionRef, partition: Partition | None) -> None:
        """Make `partition` (None: none) what the group holds under `ref` once it commits."""
        if partition is not None:
            self._check_replicated(ref)
        self.dirty[ref] = partition
        self._changed_by.setdefault(ref, self.writer)

    def replacing(
        self, partition: Partition, items_key: bytes, key: Item, new: Item | None, new_bytes: int
    ) -> WriteEffect:
        """The effect of storing `new` (None: nothing) over what this group holds under
        `items_key`: a copy's write, which decides nothing and consumes no units."""
        old, old_bytes = self.read_item(items_key)
        return WriteEffect(key, old, new, old_bytes, new_bytes, 0.0, None)

    def apply(
        self,
        batch: WriteBatchView,
        partition: Partition,
        items_key: bytes,
        effect: WriteEffect,
        *,
        by_service: bool = False,
        now: float,
        capped: bool = True,
        logged: bool = True,
        record_json: bytes | None = None,
    ) -> replica.Applied:
        """`replica.apply` with the node's item collection cap (`capped` False: a transaction's
        commit, whose prepare checked it, or a copy), noting the size of the change-log record it
        appended, which `finish` needs to keep the log within its bytes bound."""
        applied = replica.apply(
            batch,
            partition,
            items_key,
            effect,
            by_service=by_service,
            now=now,
            collection_bytes_max=self.node.item_collection_bytes_max if capped else None,
            logged=logged,
            record_json=record_json,
        )
        if applied.record_bytes:
            ref = (partition.table_id, partition.partition_id)
            self.appended.setdefault(ref, []).append((partition.last_seq, applied.record_bytes))
        return applied

    def append_record(self, partition: Partition, value: bytes) -> None:
        """Append a record, as it is, to a staged partition's change log (a move's copy)."""
        seq = partition.last_seq + 1
        self.batch.put(Family.CHANGE_LOG, partition.log_prefix + seq_bytes(seq), value)
        partition.last_seq = seq
        partition.log_bytes += len(value)
        ref = (partition.table_id, partition.partition_id)
        self.appended.setdefault(ref, []).append((seq, len(value)))

    def run(
        self,
        writer: PartitionRef | None,
        handler: Callable[[WriteContext, Target | None, Any], dict[str, Any] | DynamoError],
        target: Target | None,
        payload: Any,
    ) -> dict[str, Any] | DynamoError:
        """Run one write's handler as `writer`'s (the partition it is addressed to, or None),
        recording the batch's writes it made as its span, whether it returns or raises."""
        self.writer = writer
        self.consumed = 0.0
        start = len(self.batch.ops)
        try:
            return handler(self, target, payload)
        finally:
            self._span(writer, start)
            self.writer = None

    def _span(self, owner: PartitionRef | None, start: int) -> None:
        end = len(self.batch.ops)
        if end > start:
            self.spans.append((owner, start, end))

    # What happens once the group has committed ----------------------------------------------------

    def note_created(self, ref: PartitionRef) -> None:
        """A partition created in this group: its log starts here."""
        self.created.add(ref)

    def note_split(self, meters: SplitMeters) -> None:
        """A split installed in this group: its children share the parent's buckets."""
        self.splits.append(meters)

    def note_carried(self, ref: PartitionRef, balances: dict[str, float]) -> None:
        """A moved partition activated in this group takes its source's bucket balances."""
        self.carried.append((ref, balances))

    def note_heard(self, ref: PartitionRef, incoming: bool) -> None:
        """The source of an incoming copy was heard from in this group (`incoming`), or the copy
        stopped being incoming (activated or dropped): when it last heard, as of the group."""
        self.heard[ref] = self.now if incoming else None

    def _log_sizes(self, ref: PartitionRef, partition: Partition) -> Iterator[tuple[int, int]]:
        """(seq, bytes) of every record of a partition's log as this group sees it, oldest first:
        the committed ones from the store, then those this group appended."""
        committed = None if ref in self.created else self.node.partitions.get(ref)
        if committed is not None:
            yield from self.node.log_sizes(
                partition.log_prefix, partition.first_seq, committed.last_seq
            )
        yield from self.appended.get(ref, ())

    def finish(self) -> None:
        """Persist the touched partitions' metadata and trim their change logs.

        A log is trimmed below the oldest record some registered consumer has not passed, and
        always to the hard bounds of `change_log_records_max` records and `change_log_bytes_max`
        bytes (`changefeed`).
        """
        node = self.node
        for ref, partition in self.dirty.items():
            start = len(self.batch.ops)
            self._finish_partition(node, ref, partition)
            self._span(self._changed_by.get(ref), start)

    def _finish_partition(
        self, node: NodeState, ref: PartitionRef, partition: Partition | None
    ) -> None:
        meta_key = partition_meta_key(*ref)
        if partition is None:
            self.batch.delete(Family.PARTITIONS, meta_key)
            return
        keep = changefeed.first_retained_seq(
            partition.first_seq,
            partition.last_seq,
            node.change_log_records_max,
            self.feed.consumers(ref).values(),
        )
        if keep > partition.first_seq or partition.log_bytes > node.change_log_bytes_max:
            keep, partition.log_bytes = changefeed.first_retained_within_bytes(
                keep,
                partition.last_seq,
                partition.log_bytes,
                node.change_log_bytes_max,
                self._log_sizes(ref, partition),
            )
        if keep > partition.first_seq:
            log = partition.log_prefix
            self.batch.delete_range(
                Family.CHANGE_LOG, log + seq_bytes(partition.first_seq), log + seq_bytes(keep)
            )
            partition.first_seq = keep
        self.batch.put(Family.PARTITIONS, meta_key, partition.to_meta())

    def ready(
        self,
        replies: Sequence[dict[str, Any] | DynamoError],
        charged: Sequence[float],
        consumed: Sequence[float],
    ) -> Ready:
        """Close the group (`finish`) and give its outcome as one value."""
        self.finish()
        return Ready(
            self.batch,
            tuple(replies),
            tuple(charged),
            tuple(consumed),
            self.appended,
            self.dirty,
            self.feed.install(),
            tuple(self.splits),
            tuple(self.carried),
            dict(self.heard),
            frozenset(self.dirty.keys() | self.feed.touched),
            tuple(self.spans),
        )


def addressed(partition: Partition | None, target: Target) -> Partition:
    """The partition a request is addressed to, refused with StaleEpoch if it is not here or at
    another epoch."""
    if partition is None:
        raise StaleEpoch(
            f"Partition {target.partition_id} of table {target.table_id} is not on this node"
        )
    partition.check_epoch(target.epoch)
    return partition


def where(target: Target) -> str:
    """A request's partition, for messages."""
    return f"partition {target.partition_id} of table {target.table_id}"
