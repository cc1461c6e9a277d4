"""A partition's change feed: reading its log after a seq, consumers' checkpoints, retention, END.

Every write appends a record to its partition's change log in the same batch as the item
(`replica.apply`). This module holds the rules around that log, with no asyncio and no gRPC; the
node (`node.py`) calls them inside its group commit and the server (`server.py`) streams what
`read_batch` returns:

- **Reading.** `read_batch` returns a bounded batch of the records after a seq, oldest first, and
  raises `ChangeLogTrimmed` (naming the first retained seq) when the reader asks for a record the
  log no longer holds: it must re-snapshot the partition. Delivery is at-least-once from a
  checkpoint; a reader dedupes by seq.
- **Consumers.** A consumer registers on a partition at a seq (its starting checkpoint) and then
  checkpoints the seq it has passed. Checkpoints are stored in the `checkpoints` column family by
  the same group commit as writes (ops `register_consumer`, `checkpoint`, `unregister_consumer`),
  so an acknowledged checkpoint survives kill -9 and is ordered with the writes around it. A
  checkpoint never moves backwards: a late retry of an older one changes nothing.
- **Retention** (`first_retained_seq`, then `first_retained_within_bytes`). Without registered
  consumers a log keeps its newest `change_log_records_max` records, as before there were
  consumers. With consumers it keeps every record that some consumer has not passed yet, but never
  more than that hard bound: a consumer further behind is told to re-snapshot (DESIGN.md, "Storage
  on a node"). The records kept also hold at most `change_log_bytes_max` bytes (the newest record
  always stays), a second hard bound with the same consequence: a log of large items rewritten
  often is bounded by what it holds, not only by how many records.
- **The end of a log.** Retiring a partition (a split or a move) appends an END record naming the
  children. When consumers are registered the retired log (and their checkpoints) is kept, in the
  `retired_logs` family, until every one of them has checkpointed the END record or unregistered,
  and is then removed; a retired partition without consumers loses its log at once, as before.

`FeedState` is what has been committed (replaced whole after each commit, so readers on other
threads always see one consistent state); `FeedChanges` is one group's staged changes to it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from core import limits
from core.errors import ChangeLogTrimmed, LimitExceeded, ResourceNotFound, ValidationError
from core.keycodec import successor
from storagenode.layout import (
    Family,
    change_log_prefix,
    checkpoint_key,
    seq_bytes,
    split_log_key,
    table_prefix,
)
from storagenode.store import DELETE, PUT, NodeStore, WriteBatchView

PartitionRef = tuple[str, str]  # (table id, partition id)

END = "END"  # The kind of the record that ends a retired partition's log.


def first_retained_seq(
    first_seq: int, last_seq: int, records_max: int, checkpoints: Iterable[int]
) -> int:
    """The oldest seq a partition's log must keep (records below it may be deleted).

    Always within the hard bound of `records_max` records; with registered consumers, also past
    every record all of them have passed (a checkpoint is the last seq its consumer has passed).
    Never moves backwards.
    """
    keep = max(first_seq, last_seq - records_max + 1)
    positions = list(checkpoints)
    if positions:
        keep = max(keep, min(positions) + 1)
    return keep


def first_retained_within_bytes(
    keep: int, last_seq: int, log_bytes: int, bytes_max: int, sizes: Iterable[tuple[int, int]]
) -> tuple[int, int]:
    """Where a log starts once trimmed, and the bytes it then holds.

    `keep` is what `first_retained_seq` allows; `log_bytes` is what the records from the log's
    first seq to `last_seq` hold together, and `sizes` gives each record's (seq, bytes) from that
    first seq on, oldest first. Records below `keep` go, and then the oldest of the rest while they
    hold more than `bytes_max`, though never the newest record. `sizes` is read only as far as the
    records that go, so a log within its bounds costs nothing to walk.
    """
    first, remaining = keep, log_bytes
    for seq, size in sizes:
        if seq >= keep and (remaining <= bytes_max or seq >= last_seq):
            return seq, remaining
        remaining -= size
        first = max(keep, seq + 1)
    return first, remaining


def end_record(seq: int, children: Iterable[str]) -> dict[str, Any]:
    """The record that ends a retired partition's log, naming the partitions that continue it."""
    return {
        "seq": seq,
        "kind": END,
        "keys": None,
        "old": None,
        "new": None,
        "by_service": True,
        "children": list(children),
    }


@dataclass(frozen=True, slots=True)
class LogBounds:
    """What a reader needs of a partition's log: its retained seqs, and its END if retired."""

    first_seq: int
    last_seq: int
    end_seq: int | None = None  # The END record's seq once the partition is retired.


@dataclass(frozen=True, slots=True)
class FeedBatch:
    """Records after a seq, oldest first, and whether the last of them ends the log."""

    records: list[dict[str, Any]]
    end_of_log: bool
    first_seq: int
    last_seq: int


def read_batch(
    store: NodeStore,
    table_id: str,
    partition_id: str,
    bounds: LogBounds,
    after_seq: int,
    *,
    records_max: int = limits.CHANGE_FEED_BATCH_RECORDS_MAX,
    bytes_target: int = limits.CHANGE_FEED_BATCH_BYTES_TARGET,
) -> FeedBatch:
    """Up to `records_max` records with seq > after_seq (cut after `bytes_target` bytes).

    Raises ChangeLogTrimmed when the record right after `after_seq` is gone. That is decided from
    the records themselves as well as from `bounds`, so a reader whose view of the partition's
    metadata lags a commit that trimmed the log still cannot skip a record silently.
    """
    if after_seq + 1 < bounds.first_seq:
        raise _trimmed(partition_id, after_seq, bounds.first_seq)
    if bounds.end_seq is not None and after_seq >= bounds.end_seq:
        return FeedBatch([], True, bounds.first_seq, bounds.last_seq)
    prefix = change_log_prefix(table_id, partition_id)
    rows = store.walk(
        Family.CHANGE_LOG, prefix + seq_bytes(after_seq + 1), successor(prefix), forward=True
    )
    records: list[dict[str, Any]] = []
    size = 0
    for _, value in rows:
        record = orjson.loads(value)
        if not records and record["seq"] != after_seq + 1:
            raise _trimmed(partition_id, after_seq, record["seq"])
        records.append(record)
        size += len(value)
        if record["kind"] == END or len(records) >= records_max or size >= bytes_target:
            break
    end_of_log = bool(records) and records[-1]["kind"] == END
    return FeedBatch(records, end_of_log, bounds.first_seq, bounds.last_seq)


def _trimmed(partition_id: str, after_seq: int, first_seq: int) -> ChangeLogTrimmed:
    return ChangeLogTrimmed(
        f"The change log of partition {partition_id} starts at seq {first_seq}; the records after "
        f"{after_seq} were trimmed. Re-snapshot the partition and follow from seq {first_seq - 1}.",
        first_retained_seq=first_seq,
    )


@dataclass(frozen=True, slots=True)
class RetiredLog:
    """The log of a retired partition, kept until every registered consumer has read its END."""

    table_id: str
    partition_id: str
    first_seq: int
    end_seq: int
    children: tuple[str, ...]

    def bounds(self) -> LogBounds:
        return LogBounds(self.first_seq, self.end_seq, self.end_seq)

    def to_value(self) -> bytes:
        return orjson.dumps(
            {
                "table_id": self.table_id,
                "partition_id": self.partition_id,
                "first_seq": self.first_seq,
                "end_seq": self.end_seq,
                "children": list(self.children),
            }
        )

    @classmethod
    def from_value(cls, value: bytes) -> RetiredLog:
        fields = orjson.loads(value)
        return cls(**{**fields, "children": tuple(fields["children"])})


class FeedState:
    """The committed consumers (checkpoint per consumer per partition) and retired logs.

    Never changed in place: `FeedChanges.install` makes a new one, which the node swaps in after
    its commit, so a reader on another thread holds either the old state or the new one.
    """

    def __init__(
        self,
        checkpoints: Mapping[PartitionRef, Mapping[str, int]],
        retired: Mapping[PartitionRef, RetiredLog],
    ) -> None:
        self.checkpoints = checkpoints
        self.retired = retired

    @classmethod
    def load(cls, store: NodeStore) -> FeedState:
        checkpoints: dict[PartitionRef, dict[str, int]] = {}
        for _, value in store.walk(Family.CHECKPOINTS, b"", None, forward=True):
            entry = orjson.loads(value)
            ref = (entry["table_id"], entry["partition_id"])
            checkpoints.setdefault(ref, {})[entry["consumer"]] = entry["seq"]
        retired: dict[PartitionRef, RetiredLog] = {}
        for _, value in store.walk(Family.RETIRED_LOGS, b"", None, forward=True):
            log = RetiredLog.from_value(value)
            retired[log.table_id, log.partition_id] = log
        return cls(checkpoints, retired)

    def consumers(self, ref: PartitionRef) -> Mapping[str, int]:
        return self.checkpoints.get(ref, {})


class FeedEdits:
    """The changes to consumers and retired logs that an applied effect's writes make, read
    back from those writes (at a member that did not plan them, or at the leader once its entry
    has committed), in order; `applied_to` gives the next `FeedState`."""

    def __init__(self) -> None:
        # (partition, consumer, seq): a checkpoint (seq None: the consumer is gone; consumer
        # None: every consumer of the partition is gone).
        self._checkpoints: list[tuple[PartitionRef, str | None, int | None]] = []
        self._retired: dict[PartitionRef, RetiredLog | None] = {}

    def note(self, kind: str, family: Family, key: bytes, value: bytes | None) -> PartitionRef:
        """One write of `checkpoints` or `retired_logs`; returns the partition it is about."""
        ref, rest = split_log_key(key)
        if family is Family.RETIRED_LOGS:
            self._retired[ref] = RetiredLog.from_value(value) if kind == PUT and value else None
        elif kind == PUT and value is not None:
            entry = orjson.loads(value)
            self._checkpoints.append((ref, entry["consumer"], entry["seq"]))
        elif kind == DELETE:
            self._checkpoints.append((ref, rest.decode(), None))
        else:
            assert not rest, "a range of checkpoints is a partition's whole"
            self._checkpoints.append((ref, None, None))
        return ref

    def applied_to(self, state: FeedState) -> FeedState:
        if not self._checkpoints and not self._retired:
            return state
        checkpoints = dict(state.checkpoints)
        for ref, consumer, seq in self._checkpoints:
            consumers = dict(checkpoints.get(ref, {}))
            if consumer is None:
                consumers = {}
            elif seq is None:
                consumers.pop(consumer, None)
            else:
                consumers[consumer] = seq
            if consumers:
                checkpoints[ref] = consumers
            else:
                checkpoints.pop(ref, None)
        retired = dict(state.retired)
        for ref, log in self._retired.items():
            if log is None:
                retired.pop(ref, None)
            else:
                retired[ref] = log
        return FeedState(checkpoints, retired)


class FeedChanges:
    """One group commit's changes to consumers and retired logs, staged in its write batch.

    Every change is written to the batch at once and kept in private copies that `install` turns
    into the next `FeedState` once the batch has committed; a failed commit leaves the node's state
    untouched.
    """

    def __init__(self, state: FeedState, batch: WriteBatchView) -> None:
        self.state = state
        self.batch = batch
        self._checkpoints: dict[PartitionRef, dict[str, int]] = {}
        self._retired: dict[PartitionRef, RetiredLog | None] = {}
        self._dropped_tables: set[str] = set()

    @property
    def touched(self) -> set[PartitionRef]:
        """The partitions whose feed this group changed (their followers should look again)."""
        return set(self._checkpoints) | set(self._retired)

    def consumers(self, ref: PartitionRef) -> Mapping[str, int]:
        if ref in self._checkpoints:
            return self._checkpoints[ref]
        if ref[0] in self._dropped_tables:
            return {}
        return self.state.consumers(ref)

    def retired(self, ref: PartitionRef) -> RetiredLog | None:
        if ref in self._retired:
            return self._retired[ref]
        if ref[0] in self._dropped_tables:
            return None
        return self.state.retired.get(ref)

    # The operations, each against `bounds` of the partition's log as this group sees it.

    def register(self, ref: PartitionRef, consumer: str, seq: int | None, bounds: LogBounds) -> int:
        """Register `consumer` at `seq` (None: the last seq); return its checkpoint.

        Registering again changes nothing and returns the checkpoint it has, so a retried
        registration never moves a consumer back.
        """
        consumers = self.consumers(ref)
        if consumer in consumers:
            return consumers[consumer]
        if len(consumers) >= limits.CHANGE_FEED_CONSUMERS_PER_PARTITION_MAX:
            raise LimitExceeded(
                f"Partition {ref[1]} has {len(consumers)} registered change-feed consumers, "
                f"the most it allows"
            )
        start = bounds.last_seq if seq is None else seq
        if start > bounds.last_seq or start < 0:
            raise ValidationError(
                f"A consumer of partition {ref[1]} can start at seq 0 to {bounds.last_seq}, "
                f"not {start}"
            )
        if start + 1 < bounds.first_seq:
            raise _trimmed(ref[1], start, bounds.first_seq)
        self._put(ref, consumer, start)
        return start

    def checkpoint(self, ref: PartitionRef, consumer: str, seq: int, bounds: LogBounds) -> int:
        """Record that `consumer` has passed every record up to `seq`; return its checkpoint."""
        consumers = self.consumers(ref)
        if consumer not in consumers:
            raise ResourceNotFound(
                f"Consumer {consumer!r} is not registered on the change feed of partition {ref[1]}"
            )
        if seq > bounds.last_seq:
            raise ValidationError(
                f"Partition {ref[1]}'s change log ends at seq {bounds.last_seq}; a consumer "
                f"cannot have passed seq {seq}"
            )
        if seq <= consumers[consumer]:
            return consumers[consumer]
        self._put(ref, consumer, seq)
        return seq

    def unregister(self, ref: PartitionRef, consumer: str) -> bool:
        """Forget `consumer`; whether it was registered."""
        consumers = self.consumers(ref)
        if consumer not in consumers:
            return False
        staged = dict(consumers)
        del staged[consumer]
        self._checkpoints[ref] = staged
        self.batch.delete(Family.CHECKPOINTS, checkpoint_key(*ref, consumer))
        return True

    def retire(self, log: RetiredLog) -> None:
        """Keep a retired partition's log for its consumers."""
        ref = (log.table_id, log.partition_id)
        self._retired[ref] = log
        self.batch.put(Family.RETIRED_LOGS, change_log_prefix(*ref), log.to_value())

    def trim_retired(self, ref: PartitionRef, records_max: int) -> None:
        """Trim a retired log as retention allows; remove it once every consumer has read END."""
        log = self.retired(ref)
        if log is None:
            return
        consumers = self.consumers(ref)
        if all(seq >= log.end_seq for seq in consumers.values()):
            self.forget(ref)
            return
        keep = first_retained_seq(log.first_seq, log.end_seq, records_max, consumers.values())
        if keep > log.first_seq:
            prefix = change_log_prefix(*ref)
            self.batch.delete_range(
                Family.CHANGE_LOG, prefix + seq_bytes(log.first_seq), prefix + seq_bytes(keep)
            )
            self.retire(RetiredLog(log.table_id, log.partition_id, keep, log.end_seq, log.children))

    def forget(self, ref: PartitionRef) -> None:
        """Remove a partition's whole feed: its log, its consumers and its retired record."""
        prefix = change_log_prefix(*ref)
        end = successor(prefix)
        assert end is not None
        self.batch.delete_range(Family.CHANGE_LOG, prefix, end)
        self.batch.delete_range(Family.CHECKPOINTS, prefix, end)
        self.batch.delete(Family.RETIRED_LOGS, prefix)
        self._checkpoints[ref] = {}
        self._retired[ref] = None

    def forget_table(self, table_id: str) -> None:
        """Remove every consumer and retired log of a table (its logs go with its items)."""
        prefix = table_prefix(table_id)
        end = successor(prefix)
        assert end is not None
        self.batch.delete_range(Family.CHECKPOINTS, prefix, end)
        self.batch.delete_range(Family.RETIRED_LOGS, prefix, end)
        for ref in [ref for ref in (*self._checkpoints, *self._retired) if ref[0] == table_id]:
            self._checkpoints.pop(ref, None)
            self._retired.pop(ref, None)
        self._dropped_tables.add(table_id)

    def _put(self, ref: PartitionRef, consumer: str, seq: int) -> None:
        entry = {"table_id": ref[0], "partition_id": ref[1], "consumer": consumer, "seq": seq}
        self.batch.put(Family.CHECKPOINTS, checkpoint_key(*ref, consumer), orjson.dumps(entry))
        self._checkpoints[ref] = {**self.consumers(ref), consumer: seq}

    def install(self) -> FeedState:
        """The state once this group's batch has committed."""
        if not self._checkpoints and not self._retired and not self._dropped_tables:
            return self.state
        checkpoints = {
            ref: consumers
            for ref, consumers in self.state.checkpoints.items()
            if ref[0] not in self._dropped_tables
        }
        retired = {
            ref: log
            for ref, log in self.state.retired.items()
            if ref[0] not in self._dropped_tables
        }
        for ref, staged in self._checkpoints.items():
            if staged:
                checkpoints[ref] = staged
            else:
                checkpoints.pop(ref, None)
        for ref, log in self._retired.items():
            if log is None:
                retired.pop(ref, None)
            else:
                retired[ref] = log
        return FeedState(checkpoints, retired)
