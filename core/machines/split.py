"""The split of a partition in place as a machine: its record, its states and its table.

The owner of the partition drives the split (`storagenode/split.py` carries out the effects
through the driver, `rpc/machines.py`); the record lives in the parent partition's metadata, so
it is persisted in the owner's store and goes with the parent when the install retires it. A
table's partitions and a global index's partitions split on the same machine (`index`: the
install counts the low child by a walk, as an index partition keeps no change log). Each state
is what is durably true once it is recorded, with the one effect that takes the split on:

| state (what is true) | its effect | success | failure | restart |
| --- | --- | --- | --- | --- |
| PLANNED (nothing a client sees) | node: pin the partition | PINNED | ABANDONED | ABANDONED |
| PINNED (iterators, this process only) | node: plan the key | CHOSEN | ABANDONED | ABANDONED |
| CHOSEN (a key, the low counts at S) | catalog: compare-and-set | RECORDED | DECIDING | DECIDING |
| DECIDING (outcome unknown) | catalog: read back | RECORDED, ABANDONED | (kept) | DECIDING |
| RECORDED (the decision) | node: carry the counts on | COUNTED | COUNTED | RECORDED |
| COUNTED (counts to S') | node: install (tried again) | INSTALLED | (kept) | COUNTED |

A refused record (the catalog no longer has the parent as planned) is ABANDONED at once. "(kept)":
the run ends with the record kept as it is, and the owner's periodic check steps it again with
RESTARTED (the catalog cannot be read, or the install keeps being refused), rather than the
call waiting without bound. INSTALLED and ABANDONED end the split; an ended record is cleared
(an installed one went with the parent's metadata, in the install's own batch).

The catalog row is the decision (`core.splits`): before it names the children nothing a client
can see has changed, and a split is forgotten (asked again, it is planned afresh: the pin's
iterators do not survive the process); once it names them, only the install is left. When the
record's own outcome is unknown, the owner reads the row once no call of it can still be
applied (its deadline and the grace; after a restart at once: the calls died with the process).
Carrying the low child's counts on is a node read: over the records the plan followed while it
walked, or (after a restart, the follower gone) over the committed log since S; when some were
trimmed, the install counts by a walk. Every effect is idempotent: a record finds its own
children, an install finds its children and does nothing.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from typing import Any

from core import limits, retry
from core.errors import ServiceUnavailable
from core.machines import (
    FAILED,
    RESTARTED,
    STARTED,
    Effect,
    EffectKind,
    Event,
    next_state,
)

NAME = "split"


class SplitState(enum.StrEnum):
    PLANNED = "PLANNED"
    PINNED = "PINNED"
    CHOSEN = "CHOSEN"
    DECIDING = "DECIDING"
    RECORDED = "RECORDED"
    COUNTED = "COUNTED"
    INSTALLED = "INSTALLED"
    ABANDONED = "ABANDONED"


# The events: each effect's success, and FAILED and RESTARTED.
PINNED = "pinned"
CHOSEN = "chosen"
RECORDED = "recorded"
REFUSED = "refused"  # The catalog refused the record: nothing was recorded.
NOT_RECORDED = "not_recorded"  # Read back: the catalog names no children.
COUNTED = "counted"
INSTALLED = "installed"

_BEFORE_RECORD = (SplitState.PLANNED, SplitState.PINNED)

# Every transition a split takes, and nothing else: the step function consults this table.
SPLIT_TRANSITIONS: Mapping[tuple[SplitState, str], SplitState] = {
    (SplitState.PLANNED, STARTED): SplitState.PLANNED,
    (SplitState.PLANNED, PINNED): SplitState.PINNED,
    (SplitState.PINNED, CHOSEN): SplitState.CHOSEN,
    **{(state, FAILED): SplitState.ABANDONED for state in _BEFORE_RECORD},
    **{(state, RESTARTED): SplitState.ABANDONED for state in _BEFORE_RECORD},
    (SplitState.CHOSEN, RECORDED): SplitState.RECORDED,
    (SplitState.CHOSEN, REFUSED): SplitState.ABANDONED,
    # A failed or lost compare-and-set may still have been applied: the catalog says.
    (SplitState.CHOSEN, FAILED): SplitState.DECIDING,
    (SplitState.CHOSEN, RESTARTED): SplitState.DECIDING,
    (SplitState.DECIDING, RECORDED): SplitState.RECORDED,
    (SplitState.DECIDING, NOT_RECORDED): SplitState.ABANDONED,
    (SplitState.DECIDING, FAILED): SplitState.DECIDING,
    (SplitState.DECIDING, RESTARTED): SplitState.DECIDING,
    (SplitState.RECORDED, COUNTED): SplitState.COUNTED,
    # Counts that could not be carried on: the install counts by a walk.
    (SplitState.RECORDED, FAILED): SplitState.COUNTED,
    (SplitState.RECORDED, RESTARTED): SplitState.RECORDED,
    (SplitState.COUNTED, INSTALLED): SplitState.INSTALLED,
    (SplitState.COUNTED, FAILED): SplitState.COUNTED,
    (SplitState.COUNTED, RESTARTED): SplitState.COUNTED,
}

FINAL = frozenset({SplitState.INSTALLED, SplitState.ABANDONED})


@dataclasses.dataclass(frozen=True, slots=True)
class SplitRecord:
    """One split as its owner records it. `table_id` is the id the partition is stored under
    (the table's, or a global index's), `table_name` the table's; `index` says it holds a
    global index's entries. `asked` is the split key asked for (hex; None: where it halves),
    `key` the one chosen, `low` the low child's counts (`core.splits.RangeCounts` as JSON) as
    of the pin, then carried on (None: the install walks); `parent` and `children` are the
    partitions as the catalog recorded them; `install_seconds` is how long the install took;
    `error` is the first failure."""

    table_id: str
    partition_id: str
    table_name: str
    epoch: int
    index: bool
    started: float
    asked: str | None = None
    state: SplitState = SplitState.PLANNED
    key: str | None = None
    low: Mapping[str, Any] | None = None
    parent: Mapping[str, Any] | None = None
    children: tuple[Mapping[str, Any], ...] | None = None
    install_seconds: float | None = None
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            **{field.name: getattr(self, field.name) for field in dataclasses.fields(self)},
            "state": self.state.value,
            "low": None if self.low is None else dict(self.low),
            "parent": None if self.parent is None else dict(self.parent),
            "children": None if self.children is None else [dict(c) for c in self.children],
        }

    @classmethod
    def from_json(cls, document: Mapping[str, Any]) -> SplitRecord:
        fields = dict(document)
        fields["state"] = SplitState(fields["state"])
        children = fields.get("children")
        fields["children"] = None if children is None else tuple(children)
        return cls(**fields)


def _effect(record: SplitRecord, before: SplitState, after: str) -> tuple[Effect, ...]:
    """The one effect that takes a split on from its recorded state, reached from `before` on an
    event of kind `after`; none once it has ended, or where the run stops with the record kept
    for the owner's periodic check."""
    match record.state:
        case SplitState.PLANNED:
            return (Effect(EffectKind.INTERNAL_WRITE, "pin", PINNED),)
        case SplitState.PINNED:
            return (Effect(EffectKind.NODE_READ, "plan", CHOSEN),)
        case SplitState.CHOSEN:
            return (Effect(EffectKind.CATALOG_CHANGE, "record", RECORDED, record.table_name),)
        case SplitState.DECIDING:
            if before is SplitState.DECIDING and after == FAILED:
                return ()  # The catalog could not be read: kept.
            # Once no call of the record can still be applied, the catalog says what happened
            # (after a restart, the calls died with the process that made them).
            wait = 0.0
            if after == FAILED:
                wait = limits.NODE_CALL_SECONDS_MAX + limits.RPC_DEADLINE_GRACE_SECONDS
            return (
                Effect(
                    EffectKind.CATALOG_READ,
                    "decide",
                    RECORDED,
                    record.table_name,
                    wait_seconds=wait,
                ),
            )
        case SplitState.RECORDED:
            return (Effect(EffectKind.NODE_READ, "count", COUNTED),)
        case SplitState.COUNTED:
            if before is SplitState.COUNTED and after == FAILED:
                return ()  # The install kept being refused: kept.
            # An install meeting its parent written earlier in the same group is refused.
            return (
                Effect(
                    EffectKind.INTERNAL_WRITE,
                    "install",
                    INSTALLED,
                    retry=retry.SPLIT_INSTALL,
                    retry_on=(ServiceUnavailable,),
                ),
            )
    return ()


def _taken(record: SplitRecord, state: SplitState, event: Event) -> SplitRecord:
    """`record` in `state`, with what `event` brings."""
    data = event.data
    changes: dict[str, Any] = {"state": state}
    if event.error is not None and record.error is None:
        changes["error"] = event.error
    if event.kind == CHOSEN:
        changes["key"] = str(data["key"])
        changes["low"] = dict(data["low"])
    if event.kind == RECORDED:
        changes["parent"] = dict(data["parent"])
        changes["children"] = tuple(dict(child) for child in data["children"])
    if event.kind == COUNTED:
        low = data["low"]
        changes["low"] = None if low is None else dict(low)
    if state is SplitState.COUNTED and event.kind == FAILED and record.state is not state:
        changes["low"] = None  # Not carried on: the install walks.
    if event.kind == INSTALLED:
        changes["install_seconds"] = float(data["seconds"])
    return dataclasses.replace(record, **changes)


class SplitMachine:
    """The split's machine for the driver (`core.machines.Machine`)."""

    name = NAME

    def step(
        self, record: SplitRecord, event: Event, now: float
    ) -> tuple[SplitRecord, tuple[Effect, ...]]:
        state = next_state(SPLIT_TRANSITIONS, NAME, record.state, event)
        after = _taken(record, state, event)
        return after, _effect(after, record.state, event.kind)

    def finished(self, record: SplitRecord) -> bool:
        return record.state in FINAL

    def label(self, record: SplitRecord) -> str:
        return record.state.value.lower()


MACHINE = SplitMachine()
