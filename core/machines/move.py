"""The move of a partition to another node as a machine: its record, its states and its table.

The source drives the move (`storagenode/move.py` carries out the effects through the driver,
`rpc/machines.py`); the record lives in the source partition's metadata, so it is persisted in
the source's store and goes when the partition is dropped. Each state is what is durably true
once it is recorded, with the one effect that takes the move on from there:

| state (what is true) | its effect | success | failure | restart |
| --- | --- | --- | --- | --- |
| PLANNED (nothing a client sees) | target: create the INCOMING copy | INCOMING | back | back |
| INCOMING (an empty copy) | source: register (index), or pin | REGISTERED, PINNED | back | back |
| REGISTERED (the log is held) | source: pin the log and items | PINNED | back | back |
| PINNED | target: the log, the items, catch-up | COPIED | back | back |
| COPIED (few records behind) | source: fence (tried again) | FENCED | back | back |
| FENCED (clients refused) | target: catch up to the fence, drain | DRAINED | back | back |
| DRAINED (the copy is whole) | catalog: compare-and-set | SWITCHED | SWITCHING | SWITCHING |
| SWITCHING (outcome unknown) | catalog: read back | SWITCHED, back | SWITCHING | SWITCHING |
| SWITCHED (the decision) | target: activate (best effort) | ACTIVE | - | SWITCHED |
| ACTIVE (the target serves) | source: drop its copy | DONE | - | ACTIVE |
| ROLLING_BACK ("back") | source: unfence, drop the consumer | UNFENCED | - | ROLLING_BACK |
| UNFENCED (the source serves) | target: drop its copy (best effort) | ROLLED_BACK | - | UNFENCED |

A read back that fails MOVE_SWITCH_READS_MAX times ends the call (MoveUndecided) with the record
kept at SWITCHING; the source's periodic check steps it again.

The catalog row is the decision (`core.moves`): before it nothing a client can see has changed
and a move rolls back; once it names the target only going forward is left. A move is tried again
from the start, never resumed half-way before the switch: a copy made from an older pin could
hold items deleted since, and the pin's iterators do not survive the process.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from typing import Any

from core import limits, retry
from core.machines import (
    FAILED,
    RESTARTED,
    STARTED,
    Effect,
    EffectKind,
    Event,
    next_state,
)
from core.moves import MoveRefused

NAME = "move"


class MoveState(enum.StrEnum):
    PLANNED = "PLANNED"
    INCOMING = "INCOMING"
    REGISTERED = "REGISTERED"
    PINNED = "PINNED"
    COPIED = "COPIED"
    FENCED = "FENCED"
    DRAINED = "DRAINED"
    SWITCHING = "SWITCHING"
    SWITCHED = "SWITCHED"
    ACTIVE = "ACTIVE"
    DONE = "DONE"
    ROLLING_BACK = "ROLLING_BACK"
    UNFENCED = "UNFENCED"
    ROLLED_BACK = "ROLLED_BACK"


# The events: each effect's success, and FAILED and RESTARTED.
CREATED = "created"
REGISTERED = "registered"
PINNED = "pinned"
COPIED = "copied"
FENCED = "fenced"
DRAINED = "drained"
SWITCHED = "switched"
NOT_SWITCHED = "not_switched"
ACTIVATED = "activated"
DROPPED = "dropped"
UNFENCED = "unfenced"
ABORTED = "aborted"

_BEFORE_SWITCH = (
    MoveState.PLANNED,
    MoveState.INCOMING,
    MoveState.REGISTERED,
    MoveState.PINNED,
    MoveState.COPIED,
    MoveState.FENCED,
)

# Every transition a move takes, and nothing else: the step function consults this table.
MOVE_TRANSITIONS: Mapping[tuple[MoveState, str], MoveState] = {
    (MoveState.PLANNED, STARTED): MoveState.PLANNED,
    (MoveState.PLANNED, CREATED): MoveState.INCOMING,
    (MoveState.INCOMING, REGISTERED): MoveState.REGISTERED,
    (MoveState.INCOMING, PINNED): MoveState.PINNED,
    (MoveState.REGISTERED, PINNED): MoveState.PINNED,
    (MoveState.PINNED, COPIED): MoveState.COPIED,
    (MoveState.COPIED, FENCED): MoveState.FENCED,
    (MoveState.FENCED, DRAINED): MoveState.DRAINED,
    **{(state, FAILED): MoveState.ROLLING_BACK for state in _BEFORE_SWITCH},
    **{(state, RESTARTED): MoveState.ROLLING_BACK for state in _BEFORE_SWITCH},
    (MoveState.DRAINED, SWITCHED): MoveState.SWITCHED,
    # A refused or lost compare-and-set may still have been applied: the catalog says.
    (MoveState.DRAINED, FAILED): MoveState.SWITCHING,
    (MoveState.DRAINED, RESTARTED): MoveState.SWITCHING,
    (MoveState.SWITCHING, SWITCHED): MoveState.SWITCHED,
    (MoveState.SWITCHING, NOT_SWITCHED): MoveState.ROLLING_BACK,
    (MoveState.SWITCHING, FAILED): MoveState.SWITCHING,
    (MoveState.SWITCHING, RESTARTED): MoveState.SWITCHING,
    (MoveState.SWITCHED, ACTIVATED): MoveState.ACTIVE,
    (MoveState.SWITCHED, RESTARTED): MoveState.SWITCHED,
    (MoveState.ACTIVE, DROPPED): MoveState.DONE,
    (MoveState.ACTIVE, RESTARTED): MoveState.ACTIVE,
    (MoveState.ROLLING_BACK, UNFENCED): MoveState.UNFENCED,
    (MoveState.ROLLING_BACK, RESTARTED): MoveState.ROLLING_BACK,
    (MoveState.UNFENCED, ABORTED): MoveState.ROLLED_BACK,
    (MoveState.UNFENCED, RESTARTED): MoveState.UNFENCED,
}

FINAL = frozenset({MoveState.DONE, MoveState.ROLLED_BACK})


@dataclasses.dataclass(frozen=True, slots=True)
class MoveRecord:
    """One move as its source records it. `source` is the partition as the catalog recorded it
    when the move began (`PartitionDef.to_json`); `index` says it holds a global index's
    entries (its move registers its consumer before the pin). `applied` is the seq the copy
    holds so far, `final_seq` the fence's; `items` and `records` count what was sent;
    `settings` are those of the catalog row that switched it (the target takes them) and
    `moved` the partition as that row records it;
    `switch_tries` counts reads back of an unknown switch; `error` is the first failure."""

    table_id: str
    partition_id: str
    table_name: str
    epoch: int
    source: Mapping[str, Any]
    target_node: str
    target_address: str
    index: bool
    started: float
    state: MoveState = MoveState.PLANNED
    fenced_at: float | None = None
    applied: int = 0
    final_seq: int | None = None
    items: int = 0
    records: int = 0
    settings: Mapping[str, Any] | None = None
    moved: Mapping[str, Any] | None = None
    switch_tries: int = 0
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        document = dataclasses.asdict(self)
        document["source"] = dict(self.source)
        document["settings"] = None if self.settings is None else dict(self.settings)
        document["moved"] = None if self.moved is None else dict(self.moved)
        document["state"] = self.state.value
        return document

    @classmethod
    def from_json(cls, document: Mapping[str, Any]) -> MoveRecord:
        fields = dict(document)
        fields["state"] = MoveState(fields["state"])
        return cls(**fields)


def _effect(record: MoveRecord, after: str) -> tuple[Effect, ...]:
    """The one effect that takes a move on from its recorded state (none once it has ended),
    reached on an event of kind `after`."""
    target = record.target_node
    match record.state:
        case MoveState.PLANNED:
            return (Effect(EffectKind.NODE_CALL, "create", CREATED, target),)
        case MoveState.INCOMING:
            return (
                Effect(
                    EffectKind.INTERNAL_WRITE,
                    *(("register", REGISTERED) if record.index else ("pin", PINNED)),
                ),
            )
        case MoveState.REGISTERED:
            return (Effect(EffectKind.INTERNAL_WRITE, "pin", PINNED),)
        case MoveState.PINNED:
            return (Effect(EffectKind.NODE_CALL, "copy", COPIED, target),)
        case MoveState.COPIED:
            # A fence waits while transactions are in flight on the node: refused, tried again.
            return (
                Effect(
                    EffectKind.INTERNAL_WRITE,
                    "fence",
                    FENCED,
                    retry=retry.MOVE_FENCE,
                    retry_on=(MoveRefused,),
                ),
            )
        case MoveState.FENCED:
            return (Effect(EffectKind.NODE_CALL, "drain", DRAINED, target),)
        case MoveState.DRAINED:
            return (Effect(EffectKind.CATALOG_CHANGE, "switch", SWITCHED, record.table_name),)
        case MoveState.SWITCHING:
            # Once no call of the switch can still be applied, the catalog says what happened
            # (after a restart, the calls died with the process that made them).
            wait = 0.0
            if after == FAILED:
                wait = limits.NODE_CALL_SECONDS_MAX + limits.RPC_DEADLINE_GRACE_SECONDS
            return (
                Effect(
                    EffectKind.CATALOG_READ,
                    "settle",
                    SWITCHED,
                    record.table_name,
                    wait_seconds=wait,
                ),
            )
        case MoveState.SWITCHED:
            # The target also activates by itself once the catalog names it.
            return (Effect(EffectKind.NODE_CALL, "activate", ACTIVATED, target, best_effort=True),)
        case MoveState.ACTIVE:
            return (Effect(EffectKind.INTERNAL_WRITE, "drop", DROPPED),)
        case MoveState.ROLLING_BACK:
            return (Effect(EffectKind.INTERNAL_WRITE, "unfence", UNFENCED),)
        case MoveState.UNFENCED:
            # A copy left behind is dropped by its node once abandoned.
            return (Effect(EffectKind.NODE_CALL, "abort", ABORTED, target, best_effort=True),)
    return ()


def _taken(record: MoveRecord, state: MoveState, event: Event, now: float) -> MoveRecord:
    """`record` in `state`, with what `event` brings."""
    data = event.data
    changes: dict[str, Any] = {"state": state}
    if event.error is not None and record.error is None:
        changes["error"] = event.error
    if event.kind == FENCED:
        changes["fenced_at"] = now
        changes["final_seq"] = int(data["seq"])
    if event.kind in (COPIED, DRAINED):
        changes["applied"] = int(data["applied"])
        changes["records"] = record.records + int(data.get("records", 0))
        changes["items"] = record.items + int(data.get("items", 0))
    if event.kind == SWITCHED:
        changes["settings"] = dict(data["settings"])
        changes["moved"] = dict(data["moved"])
    if state is MoveState.SWITCHING and event.kind == FAILED and record.state is state:
        changes["switch_tries"] = record.switch_tries + 1
    return dataclasses.replace(record, **changes)


class MoveMachine:
    """The move's machine for the driver (`core.machines.Machine`)."""

    name = NAME

    def step(
        self, record: MoveRecord, event: Event, now: float
    ) -> tuple[MoveRecord, tuple[Effect, ...]]:
        if (
            record.state is MoveState.SWITCHING
            and event.kind == FAILED
            and record.switch_tries + 1 >= limits.MOVE_SWITCH_READS_MAX
        ):
            # The catalog cannot be read: stop here with the record kept, so the node's periodic
            # check steps it again (RESTARTED) rather than this call waiting without bound.
            raise MoveUndecided(
                f"Partition {record.partition_id}'s move: the catalog could not be read to "
                f"decide it ({event.error})"
            )
        state = next_state(MOVE_TRANSITIONS, NAME, record.state, event)
        after = _taken(record, state, event, now)
        return after, _effect(after, event.kind)

    def finished(self, record: MoveRecord) -> bool:
        return record.state in FINAL

    def label(self, record: MoveRecord) -> str:
        return record.state.value.lower()


class MoveUndecided(MoveRefused):
    """A move whose switch could not be decided yet: its record stays, and the source's
    periodic check (`Mover.settle`) takes it on."""


MACHINE = MoveMachine()
