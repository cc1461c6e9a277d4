"""The copy of one base partition into an online index as a machine: its record, its states and
its table.

When UpdateTable adds a global index to a live table, the GSI replicator that holds the lease of
a base partition copies it into the index before following its change feed
(`gsi_replicator/replicator.py` carries out the effects through the driver, `rpc/machines.py`).
One record per (index, base partition). Its durable part lives in the table's catalog row, in
the index's definition beside `backfilled` (`core.catalog.BackfillProgress`: the partition's
cursor, the key of the last item copied, and the items copied), where the lease's next holder
finds it whoever that is, and where DescribeTable's router reads the progress it reports. As
for the table machine, the driver's `persist` writes nothing of its own: a state reached by a
catalog compare-and-set is durable because that change is, a state reached by a node call is
held in memory, and a restart loads the record from the row (`recovered`) and steps RESTARTED.

The cursor is written after every page: a page is at most `GSI_BACKFILL_PAGE_BYTES` (1 MB) of
the partition, so a crash copies at most the one page in flight again, and the catalog takes one
compare-and-set per megabyte copied, which is small beside the page's own reads and index
writes (about 5 per second per partition at the 20,000 items/s the issue asks for).

Each state is what is durably true once it is reached, with the one effect that takes the copy
on ("kept": the run ends with the record as it is and the follower, which retries from its
checkpoint after a pause, steps it again with RESTARTED; "gone": the table or the index is no
longer there, or a split retired the partition):

| state (what is true) | its effect | success | failure | restart |
| --- | --- | --- | --- | --- |
| REGISTERING (nothing yet) | node: register the consumer at S (5) | MARKING | kept | REGISTERING |
| MARKING (the log kept from S) | catalog: BACKFILLING, the copy begun | COPYING (1) | kept | (2) |
| COPYING (the cursor recorded) | node: read the page after the cursor | READ | kept | COPYING |
| READ (a page, in memory) | nodes: put its entries into the index | APPLIED | (4) | COPYING |
| APPLIED (the page in the index) | catalog: record the cursor (3) | COPYING | (4) | COPYING |

(1) RECORDED if the row shows the partition copied already, ABANDONED if gone. (2) REGISTERING:
registering again changes nothing. (3) The page's last key and the items copied; after the last
page, the partition copied (the index ACTIVE once every serving partition is), then RECORDED;
ABANDONED if gone. (4) COPYING, kept: the page in hand is read again from the recorded cursor.
(5) Then one item is read there: a partition fenced for a move takes the registration but may
have handed its consumers to the target already; the read, refused there, fails the step, so no
copy begins on a registration the move loses (issue 31).

RECORDED and ABANDONED end the copy. A copy abandoned for a split leaves the index right: its
consumer's log runs from S to the parent's END, and the follower applies it over what the copy
wrote; the children, each with the consumer registered at its first seq, are copied whole.

Why resuming is right: the consumer was registered at the log's last seq S before the first page
was read, and stays there until the partition is recorded copied, so every page, read before a
crash or after it, holds each item as it is at S or later, and the follower then applies every
change after S in order, which ends at each item's latest version. The cursor only moves
forward and only once its page is in the index; a replicator that lost its lease cannot move it
back (its index writes are fenced, its catalog writes carry its older lease epoch).
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from typing import Any

from core.catalog import IndexDef, IndexStatus, TableDef
from core.machines import FAILED, RESTARTED, STARTED, Effect, EffectKind, Event, next_state

NAME = "backfill"


class BackfillState(enum.StrEnum):
    REGISTERING = "REGISTERING"
    MARKING = "MARKING"
    COPYING = "COPYING"
    READ = "READ"
    APPLIED = "APPLIED"
    RECORDED = "RECORDED"
    ABANDONED = "ABANDONED"


# The events: each effect's success, and FAILED and RESTARTED.
REGISTERED = "registered"
MARKED = "marked"  # The copy has begun; `data`: the cursor and items the row records.
READ = "read"  # `data`: the page's items and its last key (None: the partition's end).
APPLIED = "applied"
CHECKPOINTED = "checkpointed"  # The cursor recorded; `data`: the items the row records.
RECORDED = "recorded"  # The partition recorded copied (found so, or recorded now).
GONE = "gone"  # The table or index is gone, or a split retired the partition.

# Every transition a copy takes, and nothing else: the step function consults this table.
BACKFILL_TRANSITIONS: Mapping[tuple[BackfillState, str], BackfillState] = {
    (BackfillState.REGISTERING, STARTED): BackfillState.REGISTERING,
    (BackfillState.REGISTERING, REGISTERED): BackfillState.MARKING,
    (BackfillState.REGISTERING, FAILED): BackfillState.REGISTERING,
    (BackfillState.REGISTERING, RESTARTED): BackfillState.REGISTERING,
    (BackfillState.MARKING, MARKED): BackfillState.COPYING,
    (BackfillState.MARKING, RECORDED): BackfillState.RECORDED,
    (BackfillState.MARKING, GONE): BackfillState.ABANDONED,
    (BackfillState.MARKING, FAILED): BackfillState.MARKING,
    # Nothing in the row says the copy began: it begins again, with a registration that
    # changes nothing.
    (BackfillState.MARKING, RESTARTED): BackfillState.REGISTERING,
    (BackfillState.COPYING, READ): BackfillState.READ,
    (BackfillState.COPYING, FAILED): BackfillState.COPYING,
    (BackfillState.COPYING, RESTARTED): BackfillState.COPYING,
    (BackfillState.READ, APPLIED): BackfillState.APPLIED,
    # The page is in memory only: it is read again from the cursor the row records.
    (BackfillState.READ, FAILED): BackfillState.COPYING,
    (BackfillState.READ, RESTARTED): BackfillState.COPYING,
    (BackfillState.APPLIED, CHECKPOINTED): BackfillState.COPYING,
    (BackfillState.APPLIED, RECORDED): BackfillState.RECORDED,
    (BackfillState.APPLIED, GONE): BackfillState.ABANDONED,
    # The cursor may or may not have been recorded: the page (idempotent puts) is copied again.
    (BackfillState.APPLIED, FAILED): BackfillState.COPYING,
    (BackfillState.APPLIED, RESTARTED): BackfillState.COPYING,
}

FINAL = frozenset({BackfillState.RECORDED, BackfillState.ABANDONED})


@dataclasses.dataclass(frozen=True, slots=True)
class BackfillRecord:
    """One partition's copy into an online index. `table_id` and `table_name` are the base
    table's, `index_id` the index's storage id, `consumer` the change-feed consumer the index
    is followed under, `epoch` the lease epoch the copy runs under. `cursor` is the key of the
    last item copied (None: none yet), `items` the items copied; `page` and `last_key` are the
    page read and not yet recorded (memory only); `pages` counts the pages this run read;
    `error` is the first failure."""

    table_id: str
    table_name: str
    index_id: str
    partition_id: str
    consumer: str
    epoch: int
    state: BackfillState = BackfillState.REGISTERING
    cursor: Mapping[str, Any] | None = None
    items: int = 0
    page: tuple[Mapping[str, Any], ...] = ()
    last_key: Mapping[str, Any] | None = None
    pages: int = 0
    error: str | None = None


def recovered(
    table: TableDef, index: IndexDef, partition_id: str, consumer: str, epoch: int
) -> BackfillRecord | None:
    """The record of the copy of partition `partition_id` into `index` as `table`'s row keeps
    it, to be stepped RESTARTED under lease `epoch`: COPYING from its cursor once the row shows it
    begun, REGISTERING before; None when there is nothing to copy (the index is not an online
    one being created, or the partition is copied, or not serving)."""
    if (
        not index.online
        or index.table_id is None
        or index.status not in (IndexStatus.CREATING, IndexStatus.BACKFILLING)
        or partition_id in index.backfilled
        or all(partition.id != partition_id for partition in table.partitions)
    ):
        return None
    record = BackfillRecord(table.id, table.name, index.table_id, partition_id, consumer, epoch)
    entry = index.backfill_of(partition_id)
    if entry is None:
        return record
    return dataclasses.replace(
        record, state=BackfillState.COPYING, cursor=entry.cursor, items=entry.items
    )


def observed(table: TableDef | None, record: BackfillRecord, done: str) -> Event:
    """The event a catalog compare-and-set of `record`'s copy comes to, from the row it left
    (`table`; None: the table is not in the catalog), `done` the event a recorded cursor is:
    RECORDED when the row shows the partition copied (or the index ACTIVE), GONE when the table
    or index is gone or a split retired the partition, else `done` with the cursor and items
    the row records (which a copy resumed by a later lease may have moved past `record`'s)."""
    index = None
    if table is not None and table.id == record.table_id:
        index = next((i for i in table.indexes if i.online and i.table_id == record.index_id), None)
    if index is None or table is None:
        return Event(GONE)
    if index.status == IndexStatus.ACTIVE or record.partition_id in index.backfilled:
        return Event(RECORDED, {"items": copied(record)})
    entry = index.backfill_of(record.partition_id)
    serving = any(partition.id == record.partition_id for partition in table.partitions)
    if index.status != IndexStatus.BACKFILLING or entry is None or not serving:
        return Event(GONE)
    return Event(done, {"cursor": entry.cursor, "items": entry.items, "epoch": entry.epoch})


def _effect(record: BackfillRecord, after: str) -> tuple[Effect, ...]:
    """The one effect that takes the copy on from its recorded state, reached on an event of
    kind `after`; none once it has ended, or where the run stops with the record kept for the
    follower's next attempt."""
    if after == FAILED:
        # Kept: the follower, which handles the failure (a lost lease, a split, a node that
        # does not answer), tries again from its checkpoint after a pause.
        return ()
    match record.state:
        case BackfillState.REGISTERING:
            return (Effect(EffectKind.NODE_CALL, "register", REGISTERED),)
        case BackfillState.MARKING:
            return (Effect(EffectKind.CATALOG_CHANGE, "mark", MARKED, record.table_name),)
        case BackfillState.COPYING:
            return (Effect(EffectKind.NODE_CALL, "read", READ),)
        case BackfillState.READ:
            return (Effect(EffectKind.NODE_CALL, "apply", APPLIED),)
        case BackfillState.APPLIED:
            return (
                Effect(EffectKind.CATALOG_CHANGE, "checkpoint", CHECKPOINTED, record.table_name),
            )
    return ()


def _taken(record: BackfillRecord, state: BackfillState, event: Event) -> BackfillRecord:
    """`record` in `state`, with what `event` brings."""
    data = event.data
    changes: dict[str, Any] = {"state": state}
    if event.error is not None and record.error is None:
        changes["error"] = event.error
    if event.kind == MARKED:
        changes["cursor"] = data["cursor"]
        changes["items"] = int(data["items"])
    if event.kind == READ:
        changes["page"] = tuple(data["items"])
        changes["last_key"] = data["last_key"]
        changes["pages"] = record.pages + 1
    if event.kind == CHECKPOINTED:
        changes["cursor"] = record.last_key
        changes["items"] = int(data["items"])
    if event.kind == RECORDED:
        changes["cursor"] = None
        changes["items"] = int(data.get("items", record.items))
    if state is not BackfillState.READ and state is not BackfillState.APPLIED:
        changes["page"] = ()  # Only a page on its way into the index is held.
        changes["last_key"] = None
    return dataclasses.replace(record, **changes)


def copied(record: BackfillRecord) -> int:
    """The items copied once the page in hand is recorded: what a checkpoint writes."""
    return record.items + len(record.page)


class BackfillMachine:
    """The backfill's machine for the driver (`core.machines.Machine`)."""

    name = NAME

    def step(
        self, record: BackfillRecord, event: Event, now: float
    ) -> tuple[BackfillRecord, tuple[Effect, ...]]:
        state = next_state(BACKFILL_TRANSITIONS, NAME, record.state, event)
        after = _taken(record, state, event)
        return after, _effect(after, event.kind)

    def finished(self, record: BackfillRecord) -> bool:
        return record.state in FINAL

    def label(self, record: BackfillRecord) -> str:
        return record.state.value.lower()


MACHINE = BackfillMachine()
