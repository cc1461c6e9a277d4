"""Lifecycles as durable state machines: the shape every machine has, pure, no IO.

A lifecycle (a move, a split, ...) is a machine `step(record, event, now) -> (record', effects)`,
the way etcd's raft keeps `Step` apart from `Ready`. The record is a frozen, serialisable value
that the driver (`rpc/machines.py`) persists before it carries out the effects the step returned;
effects are node calls, catalog compare-and-sets and internal writes, described as data; the
result of each comes back as the next event. A machine's states and transitions are one table,
`(state, event kind) -> state`, that its step function consults: a transition the table lacks is
a bug (IllegalTransition), never a guess. Recovery after a crash is "load the record, step
RESTARTED": the table says, for every state, whether the lifecycle goes forward or back.

Each state names what is durably true once it is recorded, and has the one effect that moves the
lifecycle on from there, so a process can die between any two effects (the driver's crash points)
and the record says exactly which effect comes next. A step that returns no effect for a record
that has not ended stops the run with that record kept: the machine waits for its process's
periodic check to step it again with RESTARTED (a catalog that cannot be read, an install that
keeps being refused), rather than a call waiting without bound.

One machine has no record of its own: a replicated partition's replica move
(`core.machines.replica_move`), whose state is what two durable things already say together
(the partition's catalog row and its Raft group's committed membership), each combination with
one next step. Its steps are idempotent, so its driver reads both again after each, and a
process that dies anywhere leaves nothing to recover but the move still recorded in the catalog.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from typing import Any, Protocol, TypeVar

from core.catalog import IllegalTransition
from core.retry import RetryPolicy

STARTED = "started"  # The event a new record is stepped with: its first state's effect.
RESTARTED = "restarted"  # The event a record is stepped with when its process starts again.
FAILED = "failed"  # An effect failed; its error is the event's `error`.


class EffectKind(enum.StrEnum):
    NODE_CALL = "node_call"  # A call to another node (the target of a move).
    INTERNAL_WRITE = "internal_write"  # A write through this node's own write group.
    CATALOG_CHANGE = "catalog_change"  # A compare-and-set of a table's catalog row.
    CATALOG_READ = "catalog_read"  # A read of a table's catalog row (an outcome read back).
    NODE_READ = "node_read"  # A read of this node's own store (a split's plan), off the loop.


@dataclasses.dataclass(frozen=True, slots=True)
class Effect:
    """One thing the driver does for a machine: its kind, the step of the lifecycle it carries
    out (the handler's name), the event its success is, and whom it addresses (a node, a
    table's name; "" for this node). `retry`: how often the driver tries it again, and after
    what pauses, when it fails with one of `retry_on` (refusals that pass: a fence waiting for
    transactions to end). `best_effort`: its failure is the event `done` too (what it leaves
    behind is cleaned up otherwise). `wait_seconds`: how long the driver waits before it (an
    unknown outcome is read back once no call of it can still be applied)."""

    kind: EffectKind
    step: str
    done: str
    to: str = ""
    retry: RetryPolicy | None = None
    retry_on: tuple[type[Exception], ...] = ()
    best_effort: bool = False
    wait_seconds: float = 0.0

    def __post_init__(self) -> None:
        assert (self.retry is None) == (not self.retry_on), "a retry names what it retries"


@dataclasses.dataclass(frozen=True, slots=True)
class Event:
    """What happened: an effect's result (`kind` names it, `data` carries what the machine
    records from it), a failure (`error`), or RESTARTED."""

    kind: str
    data: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    error: str | None = None


S = TypeVar("S", bound=enum.Enum)
R = TypeVar("R")


def next_state(table: Mapping[tuple[S, str], S], machine: str, state: S, event: Event) -> S:
    """The state `table` takes a machine in `state` to on `event`; IllegalTransition (a bug) if
    the table has no such transition."""
    to = table.get((state, event.kind))
    if to is None:
        raise IllegalTransition(f"A {machine} in {state.name} cannot take event {event.kind}")
    return to


class Machine(Protocol[R]):
    """A lifecycle's pure machine, as the driver sees it."""

    name: str

    def step(self, record: R, event: Event, now: float) -> tuple[R, tuple[Effect, ...]]:
        """The record after `event`, and the effects to carry out once it is persisted."""
        ...

    def finished(self, record: R) -> bool:
        """Whether the lifecycle has ended (its record is cleared once persisted)."""
        ...

    def label(self, record: R) -> str:
        """The name of the record's state, for crash points and logs."""
        ...
