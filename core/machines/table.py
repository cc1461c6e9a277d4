"""A table's lifecycle as a machine: CreateTable, DeleteTable and UpdateTable's index and stream
changes, their states and their one transition table.

The router carries out the effects through the driver (`rpc/machines.py`, handlers in
`router/table_lifecycle.py`). The record's durable part is the table's catalog row: its status,
its indexes' statuses and its stream, which only the catalog compare-and-sets among the effects
change. The driver's `persist` therefore stores nothing of its own: a state reached by a catalog
change is durable because that change is; a state reached by node calls is held in memory only,
and a restart finds the row as the last catalog change left it, whose state's effect is
idempotent to repeat (creating a partition that exists with the same definition, or dropping one
that is gone, does nothing). Recovery (`recovered`, run by every router's `TableReconciler` on a
row left unfinished) is "load the record from the row, step RESTARTED".

Each state is what is durably true once it is reached, with the one effect that takes the flow
on from there ("-": the flow ends; "left": the flow ends with the row as it is, the error is the
caller's and recovery finishes the rest; restart "-": no row names it, nothing to recover):

| state (what is true) | its effect | success | failure | restart |
| --- | --- | --- | --- | --- |
| RECORDING (nothing yet) | catalog: add the row CREATING | CREATING | - | - |
| CREATING (the row CREATING) | nodes: create the partitions | CREATED | ABANDONING | CREATING |
| CREATED (and the partitions) | catalog: make the row ACTIVE | ACTIVE | left | CREATING |
| ABANDONING (one failed) | catalog: remove the row | ABANDONED, ENDED | left | CREATING |
| ABANDONED (no row) | nodes: drop the partitions (best effort) | ENDED | - | - |
| MARKING (the table as it was) | catalog: mark the row DELETING | DELETING | - | - |
| DELETING (the row DELETING) | nodes: drop the partitions | DROPPED | left | DELETING |
| DROPPED (no partition left) | catalog: remove the row | GONE | left | DELETING |
| INDEX_ADDING (nothing yet) | catalog: add the index CREATING | INDEX_CREATING | - | - |
| INDEX_CREATING (it is CREATING) | nodes: create its partitions | INDEX_PLACED | (1) | (2) |
| INDEX_ABANDONING (one failed) | catalog: remove the index | INDEX_ABANDONED | left | (2) |
| INDEX_ABANDONED (no index) | nodes: drop its partitions (best effort) | ENDED | - | - |
| INDEX_MARKING (nothing yet) | catalog: mark the index DELETING | INDEX_DELETING | - | - |
| INDEX_DELETING (it is DELETING) | nodes: drop it, its consumer | INDEX_DROPPED | left | (3) |
| INDEX_DROPPED (nothing stored) | catalog: remove the index | INDEX_GONE | left | (3) |
| REGISTERING (nothing yet) | nodes: register the stream's consumer | REGISTERED | (4) | - |
| REGISTERED (logs held for it) | catalog: record the stream enabled | STREAM_ENABLED | (4) | - |
| UNREGISTERING (not enabled) | nodes: let the consumer go (best effort) | ENDED | - | - |
| DISABLING (the stream enabled) | catalog: close the shards (5) | STREAM_DISABLED | - | - |

(1) INDEX_ABANDONING. (2) INDEX_CREATING. (3) INDEX_DELETING. (4) UNREGISTERING. (5) Each
shard's end read from its node first (a no-op registration), the compare-and-set tried again if a
split changed the partitions meanwhile. "The partitions" are the table's and its global indexes'.

ACTIVE, GONE, INDEX_PLACED (the GSI replicator backfills the index and makes it ACTIVE),
INDEX_GONE, STREAM_ENABLED, STREAM_DISABLED, ENDED and LEFT end a flow.

Which way a restart goes: a CREATING row goes forward (its router died; its partitions are
created again and it is made ACTIVE, or abandoned as its router would have), a DELETING row
forward (a deletion is never undone), an index CREATING before its backfill began forward, an
index DELETING forward. A stream's enabling leaves nothing in the row until it is recorded: a
consumer registered by a router that died before recording the stream holds the logs only up to
their hard bounds (`storagenode/feeds.py`); a disabling is one compare-and-set.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from typing import Any

from core.catalog import IndexStatus, TableDef, TableStatus
from core.machines import FAILED, RESTARTED, STARTED, Effect, EffectKind, Event, next_state

NAME = "table"


class Flow(enum.StrEnum):
    CREATE = "create"
    DELETE = "delete"
    CREATE_INDEX = "create_index"
    DELETE_INDEX = "delete_index"
    ENABLE_STREAM = "enable_stream"
    DISABLE_STREAM = "disable_stream"


class TableState(enum.StrEnum):
    RECORDING = "RECORDING"
    CREATING = "CREATING"
    CREATED = "CREATED"
    ACTIVE = "ACTIVE"
    ABANDONING = "ABANDONING"
    ABANDONED = "ABANDONED"
    MARKING = "MARKING"
    DELETING = "DELETING"
    DROPPED = "DROPPED"
    GONE = "GONE"
    INDEX_ADDING = "INDEX_ADDING"
    INDEX_CREATING = "INDEX_CREATING"
    INDEX_PLACED = "INDEX_PLACED"
    INDEX_ABANDONING = "INDEX_ABANDONING"
    INDEX_ABANDONED = "INDEX_ABANDONED"
    INDEX_MARKING = "INDEX_MARKING"
    INDEX_DELETING = "INDEX_DELETING"
    INDEX_DROPPED = "INDEX_DROPPED"
    INDEX_GONE = "INDEX_GONE"
    REGISTERING = "REGISTERING"
    REGISTERED = "REGISTERED"
    UNREGISTERING = "UNREGISTERING"
    STREAM_ENABLED = "STREAM_ENABLED"
    DISABLING = "DISABLING"
    STREAM_DISABLED = "STREAM_DISABLED"
    ENDED = "ENDED"
    LEFT = "LEFT"


# The events: each effect's success (a catalog change's carries the row it wrote as "table"),
# and STARTED, FAILED and RESTARTED.
RECORDED = "recorded"
PARTITIONS_CREATED = "partitions_created"
ACTIVATED = "activated"
ROW_REMOVED = "row_removed"
ROW_KEPT = "row_kept"  # Another router made the table ACTIVE before this one abandoned it.
PARTITIONS_DROPPED = "partitions_dropped"
MARKED = "marked"
INDEX_ADDED = "index_added"
INDEX_PARTITIONS_CREATED = "index_partitions_created"
INDEX_REMOVED = "index_removed"
INDEX_MARKED = "index_marked"
INDEX_DROPPED = "index_dropped"
REGISTERED = "registered"
STREAM_RECORDED = "stream_recorded"
UNREGISTERED = "unregistered"
STREAM_CLOSED = "stream_closed"

# The state each flow starts in.
FIRST: Mapping[Flow, TableState] = {
    Flow.CREATE: TableState.RECORDING,
    Flow.DELETE: TableState.MARKING,
    Flow.CREATE_INDEX: TableState.INDEX_ADDING,
    Flow.DELETE_INDEX: TableState.INDEX_MARKING,
    Flow.ENABLE_STREAM: TableState.REGISTERING,
    Flow.DISABLE_STREAM: TableState.DISABLING,
}

_S = TableState

# Every transition a table's flow takes, and nothing else: the step function consults this table.
TABLE_TRANSITIONS: Mapping[tuple[TableState, str], TableState] = {
    **{(state, STARTED): state for state in FIRST.values()},
    # CreateTable.
    (_S.RECORDING, RECORDED): _S.CREATING,
    (_S.RECORDING, FAILED): _S.ENDED,
    (_S.CREATING, PARTITIONS_CREATED): _S.CREATED,
    (_S.CREATING, FAILED): _S.ABANDONING,
    (_S.CREATING, RESTARTED): _S.CREATING,
    (_S.CREATED, ACTIVATED): _S.ACTIVE,
    (_S.CREATED, FAILED): _S.LEFT,
    (_S.CREATED, RESTARTED): _S.CREATING,
    (_S.ABANDONING, ROW_REMOVED): _S.ABANDONED,
    (_S.ABANDONING, ROW_KEPT): _S.ENDED,
    (_S.ABANDONING, FAILED): _S.LEFT,
    (_S.ABANDONING, RESTARTED): _S.CREATING,
    (_S.ABANDONED, PARTITIONS_DROPPED): _S.ENDED,
    # DeleteTable.
    (_S.MARKING, MARKED): _S.DELETING,
    (_S.MARKING, FAILED): _S.ENDED,
    (_S.DELETING, PARTITIONS_DROPPED): _S.DROPPED,
    (_S.DELETING, FAILED): _S.LEFT,
    (_S.DELETING, RESTARTED): _S.DELETING,
    (_S.DROPPED, ROW_REMOVED): _S.GONE,
    (_S.DROPPED, FAILED): _S.LEFT,
    (_S.DROPPED, RESTARTED): _S.DELETING,
    # UpdateTable: a global index created.
    (_S.INDEX_ADDING, INDEX_ADDED): _S.INDEX_CREATING,
    (_S.INDEX_ADDING, FAILED): _S.ENDED,
    (_S.INDEX_CREATING, INDEX_PARTITIONS_CREATED): _S.INDEX_PLACED,
    (_S.INDEX_CREATING, FAILED): _S.INDEX_ABANDONING,
    (_S.INDEX_CREATING, RESTARTED): _S.INDEX_CREATING,
    (_S.INDEX_ABANDONING, INDEX_REMOVED): _S.INDEX_ABANDONED,
    (_S.INDEX_ABANDONING, FAILED): _S.LEFT,
    (_S.INDEX_ABANDONING, RESTARTED): _S.INDEX_CREATING,
    (_S.INDEX_ABANDONED, INDEX_DROPPED): _S.ENDED,
    # UpdateTable: a global index deleted.
    (_S.INDEX_MARKING, INDEX_MARKED): _S.INDEX_DELETING,
    (_S.INDEX_MARKING, FAILED): _S.ENDED,
    (_S.INDEX_DELETING, INDEX_DROPPED): _S.INDEX_DROPPED,
    (_S.INDEX_DELETING, FAILED): _S.LEFT,
    (_S.INDEX_DELETING, RESTARTED): _S.INDEX_DELETING,
    (_S.INDEX_DROPPED, INDEX_REMOVED): _S.INDEX_GONE,
    (_S.INDEX_DROPPED, FAILED): _S.LEFT,
    (_S.INDEX_DROPPED, RESTARTED): _S.INDEX_DELETING,
    # UpdateTable: a stream enabled, or disabled.
    (_S.REGISTERING, REGISTERED): _S.REGISTERED,
    (_S.REGISTERING, FAILED): _S.UNREGISTERING,
    (_S.REGISTERED, STREAM_RECORDED): _S.STREAM_ENABLED,
    (_S.REGISTERED, FAILED): _S.UNREGISTERING,
    (_S.UNREGISTERING, UNREGISTERED): _S.ENDED,
    (_S.DISABLING, STREAM_CLOSED): _S.STREAM_DISABLED,
    (_S.DISABLING, FAILED): _S.ENDED,
}

FINAL = frozenset(
    {
        _S.ACTIVE,
        _S.GONE,
        _S.INDEX_PLACED,
        _S.INDEX_GONE,
        _S.STREAM_ENABLED,
        _S.STREAM_DISABLED,
        _S.ENDED,
        _S.LEFT,
    }
)

# The effect of each state that has one: its kind, its step (the handler's name), its success,
# and whether its failure is its success too (what it leaves behind is harmless or let go
# otherwise).
_EFFECTS: Mapping[TableState, tuple[EffectKind, str, str, bool]] = {
    _S.RECORDING: (EffectKind.CATALOG_CHANGE, "record", RECORDED, False),
    _S.CREATING: (EffectKind.NODE_CALL, "create_partitions", PARTITIONS_CREATED, False),
    _S.CREATED: (EffectKind.CATALOG_CHANGE, "activate", ACTIVATED, False),
    _S.ABANDONING: (EffectKind.CATALOG_CHANGE, "remove", ROW_REMOVED, False),
    # A partition whose node could not be reached is left under an id no table uses.
    _S.ABANDONED: (EffectKind.NODE_CALL, "drop_partitions", PARTITIONS_DROPPED, True),
    _S.MARKING: (EffectKind.CATALOG_CHANGE, "mark_deleting", MARKED, False),
    _S.DELETING: (EffectKind.NODE_CALL, "drop_partitions", PARTITIONS_DROPPED, False),
    _S.DROPPED: (EffectKind.CATALOG_CHANGE, "remove", ROW_REMOVED, False),
    _S.INDEX_ADDING: (EffectKind.CATALOG_CHANGE, "add_index", INDEX_ADDED, False),
    _S.INDEX_CREATING: (
        EffectKind.NODE_CALL,
        "create_index_partitions",
        INDEX_PARTITIONS_CREATED,
        False,
    ),
    _S.INDEX_ABANDONING: (EffectKind.CATALOG_CHANGE, "remove_index", INDEX_REMOVED, False),
    _S.INDEX_ABANDONED: (EffectKind.NODE_CALL, "drop_index", INDEX_DROPPED, True),
    _S.INDEX_MARKING: (EffectKind.CATALOG_CHANGE, "mark_index_deleting", INDEX_MARKED, False),
    _S.INDEX_DELETING: (EffectKind.NODE_CALL, "drop_index", INDEX_DROPPED, False),
    _S.INDEX_DROPPED: (EffectKind.CATALOG_CHANGE, "remove_index", INDEX_REMOVED, False),
    _S.REGISTERING: (EffectKind.NODE_CALL, "register_stream", REGISTERED, False),
    _S.REGISTERED: (EffectKind.CATALOG_CHANGE, "enable_stream", STREAM_RECORDED, False),
    # A consumer left registered holds the logs only up to their hard bounds.
    _S.UNREGISTERING: (EffectKind.NODE_CALL, "unregister_stream", UNREGISTERED, True),
    _S.DISABLING: (EffectKind.CATALOG_CHANGE, "disable_stream", STREAM_CLOSED, False),
}


@dataclasses.dataclass(frozen=True, slots=True)
class TableRecord:
    """One flow of table `name`: `table` is its row as the flow last wrote or read it (as planned,
    for a CreateTable not yet recorded; as it was, for a DeleteTable not yet marked), the flow's
    input beside it: `index_name` (an index flow's index), `definition` (CreateTable's request, an
    index's), `view_type` (the stream to enable). `error` is the first failure met."""

    flow: Flow
    name: str
    state: TableState
    table: TableDef | None = None
    index_name: str | None = None
    definition: Mapping[str, Any] | None = None
    view_type: str | None = None
    error: str | None = None


def started(
    flow: Flow,
    name: str,
    *,
    table: TableDef | None = None,
    index_name: str | None = None,
    definition: Mapping[str, Any] | None = None,
    view_type: str | None = None,
) -> TableRecord:
    """The record of a new flow, to be driven with STARTED."""
    return TableRecord(
        flow,
        name,
        FIRST[flow],
        table=table,
        index_name=index_name,
        definition=definition,
        view_type=view_type,
    )


def recovered(table: TableDef) -> TableRecord | None:
    """The record of the flow `table`'s row shows unfinished, to be driven with RESTARTED; None if
    it shows none. An index CREATING is recovered only before its backfill began (BACKFILLING is
    the GSI replicator's); an UPDATING table's throughput is pushed by DescribeTable."""
    if table.status == TableStatus.CREATING:
        return TableRecord(Flow.CREATE, table.name, TableState.CREATING, table)
    if table.status == TableStatus.DELETING:
        return TableRecord(Flow.DELETE, table.name, TableState.DELETING, table)
    for index in table.indexes:
        if index.status == IndexStatus.CREATING and index.online:
            return TableRecord(
                Flow.CREATE_INDEX, table.name, TableState.INDEX_CREATING, table, index.name
            )
        if index.status == IndexStatus.DELETING:
            return TableRecord(
                Flow.DELETE_INDEX, table.name, TableState.INDEX_DELETING, table, index.name
            )
    return None


def _effect(record: TableRecord) -> tuple[Effect, ...]:
    """The one effect that takes a flow on from its state (none once it has ended)."""
    effect = _EFFECTS.get(record.state)
    if effect is None:
        return ()
    kind, step, done, best_effort = effect
    return (Effect(kind, step, done, record.name, best_effort=best_effort),)


class TableMachine:
    """The table's machine for the driver (`core.machines.Machine`)."""

    name = NAME

    def step(
        self, record: TableRecord, event: Event, now: float
    ) -> tuple[TableRecord, tuple[Effect, ...]]:
        state = next_state(TABLE_TRANSITIONS, NAME, record.state, event)
        changes: dict[str, Any] = {"state": state}
        if event.error is not None and record.error is None:
            changes["error"] = event.error
        table = event.data.get("table")
        if isinstance(table, TableDef):
            changes["table"] = table
        after = dataclasses.replace(record, **changes)
        return after, _effect(after)

    def finished(self, record: TableRecord) -> bool:
        return record.state in FINAL

    def label(self, record: TableRecord) -> str:
        return record.state.value.lower()


MACHINE = TableMachine()
