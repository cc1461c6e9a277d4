"""The coordination of one TransactWriteItems as a machine: its record, its states and its table.

A router coordinates each transaction it receives (`router/transactions.py` carries out the
effects through the driver, `rpc/machines.py`). What survives the router is the ledger: the
transaction's durable record (`core.transactions.Record`) on the node of the partition chosen
for it (`home`), which the effects begin, decide and finish. The coordinator's own record
(`TxnRecord`, below) lives in the router's memory, and each of its states stands for one state of
the ledger (and of the participants' locks), so a router that dies anywhere leaves a ledger from
which any router rebuilds the coordinator's record (`recovered`) and steps it RESTARTED. The
participants' locks are durable too (`storagenode/transactions.py`).

| state (what is durably true) | its effect | success | failure | restart |
| --- | --- | --- | --- | --- |
| BEGINNING (nothing) | home: begin | PREPARING, DONE (replay) | LEFT | ABORTING |
| PREPARING (ledger PENDING) | participants: prepare | PREPARED, ABORTING | ABORTING | ABORTING |
| PREPARED (all locked) | home: decide COMMITTED | COMMITTING, RELEASING | LEFT | ABORTING |
| ABORTING (locks maybe) | home: decide ABORTED | RELEASING, COMMITTING, LEFT | LEFT | ABORTING |
| COMMITTING (ledger COMMITTED) | places: commit | FINISHING | LEFT | COMMITTING |
| RELEASING (ledger ABORTED) | places: release | FINISHING | LEFT | RELEASING |
| FINISHING (all applied) | home: finish | DONE | LEFT | FINISHING |

BEGINNING's begin may land unanswered: a PENDING ledger without locks. PREPARING's ledger is
PENDING and names every participant; PREPARED means every action voted yes and its item is
locked. A resolver's ABORTING asks the ledger to abort only once it is old enough (the ledger's
node judges, `core.transactions.resolution`), and ends LEFT otherwise: its coordinator still has
time. RELEASING also stands for "no ledger of this attempt" (never begun, forgotten, or a later
attempt of its token): it never committed. The "places" a decision is applied at are every node
a prepare was sent to, and every replicated partition one was sent to: such a partition keeps its
part in its own Raft group, so its decision is applied at its leader, addressed to it.

So a restart goes back before the decision is durable (ABORTING: abort the ledger, then release)
and forward after it (apply the decision again, which each node does once). A decide asks the
ledger's compare-and-set, which answers the decision that landed first: a coordinator's commit
may find a resolver's abort (RELEASING), a resolver's abort the coordinator's commit
(COMMITTING). DONE and LEFT end a run: DONE with the ledger finished; LEFT with the ledger not
finished (its decision unknown to this run, or known and not applied everywhere), for a resolver
to end from the ledger, as it ends one whose router died (`from_ledger`).
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from core import transactions as txn
from core.errors import TransactionCanceled
from core.machines import FAILED, RESTARTED, STARTED, Effect, EffectKind, Event, next_state

NAME = "transaction"


class TxnState(enum.StrEnum):
    BEGINNING = "BEGINNING"
    PREPARING = "PREPARING"
    PREPARED = "PREPARED"
    ABORTING = "ABORTING"
    COMMITTING = "COMMITTING"
    RELEASING = "RELEASING"
    FINISHING = "FINISHING"
    DONE = "DONE"
    LEFT = "LEFT"


# The events: each effect's result, and STARTED, FAILED and RESTARTED.
BEGUN = "begun"  # The ledger is PENDING for this attempt (`data`: attempt).
REPLAYED = "replayed"  # A ClientRequestToken's transaction committed before (`data`: attempt).
VOTED = "voted"  # The participants answered (`data`: votes in request order, nodes, partitions).
DECIDED = "decided"  # The ledger answered a decide (`data`: its state for this attempt, or None).
APPLIED = "applied"  # Every place that was sent a prepare applied the decision.
FINISHED = "finished"  # The ledger is finished (forgotten, without a token).
# What the machine makes of VOTED and DECIDED (`_classified`): the table's events.
VOTED_YES = "voted_yes"  # Every action voted yes.
VOTED_NO = "voted_no"  # An action voted no, or its participant did not answer.
COMMITTED = "committed"
ABORTED = "aborted"  # Or no ledger of this attempt: it can no longer commit.
UNDECIDED = "undecided"  # A resolver's abort refused: the ledger's coordinator still has time.

# Every transition a coordination takes, and nothing else: the step function consults this table.
TXN_TRANSITIONS: Mapping[tuple[TxnState, str], TxnState] = {
    (TxnState.BEGINNING, STARTED): TxnState.BEGINNING,
    (TxnState.BEGINNING, BEGUN): TxnState.PREPARING,
    (TxnState.BEGINNING, REPLAYED): TxnState.DONE,
    # Refused (a token's rules) or unanswered: a PENDING ledger it may have written holds no lock
    # and is aborted by a resolver once old enough.
    (TxnState.BEGINNING, FAILED): TxnState.LEFT,
    (TxnState.BEGINNING, RESTARTED): TxnState.ABORTING,
    (TxnState.PREPARING, VOTED_YES): TxnState.PREPARED,
    (TxnState.PREPARING, VOTED_NO): TxnState.ABORTING,
    (TxnState.PREPARING, FAILED): TxnState.ABORTING,
    (TxnState.PREPARING, RESTARTED): TxnState.ABORTING,
    (TxnState.PREPARED, COMMITTED): TxnState.COMMITTING,
    (TxnState.PREPARED, ABORTED): TxnState.RELEASING,
    # The decide's outcome is unknown: the ledger says, to a resolver.
    (TxnState.PREPARED, FAILED): TxnState.LEFT,
    (TxnState.PREPARED, RESTARTED): TxnState.ABORTING,
    (TxnState.ABORTING, ABORTED): TxnState.RELEASING,
    (TxnState.ABORTING, COMMITTED): TxnState.COMMITTING,
    (TxnState.ABORTING, UNDECIDED): TxnState.LEFT,
    (TxnState.ABORTING, FAILED): TxnState.LEFT,
    (TxnState.ABORTING, RESTARTED): TxnState.ABORTING,
    (TxnState.COMMITTING, APPLIED): TxnState.FINISHING,
    (TxnState.COMMITTING, FAILED): TxnState.LEFT,
    (TxnState.COMMITTING, RESTARTED): TxnState.COMMITTING,
    (TxnState.RELEASING, APPLIED): TxnState.FINISHING,
    (TxnState.RELEASING, FAILED): TxnState.LEFT,
    (TxnState.RELEASING, RESTARTED): TxnState.RELEASING,
    (TxnState.FINISHING, FINISHED): TxnState.DONE,
    (TxnState.FINISHING, FAILED): TxnState.LEFT,
    (TxnState.FINISHING, RESTARTED): TxnState.FINISHING,
}

FINAL = frozenset({TxnState.DONE, TxnState.LEFT})

# The decision each event brings to the record.
_DECISIONS = {
    COMMITTED: txn.State.COMMITTED,
    REPLAYED: txn.State.COMMITTED,
    ABORTED: txn.State.ABORTED,
}


@dataclasses.dataclass(frozen=True, slots=True)
class TxnRecord:
    """One transaction as its coordinator (or a resolver) holds it. `id` is the ledger's record
    id and `home` its partition (table id, partition id); `digest` and `token` are what the
    ledger is begun with (`core.transactions.begin`); `attempt` is the ledger's attempt once
    begun (0 before). `participants` are the partitions the actions were placed on, `actions`
    their number, `votes` each action's vote in request order (None: no answer), `nodes` every
    node a prepare was sent to (or, for a resolver, that may hold the attempt's locks) and
    `partitions` every replicated partition one was sent to (or that reported its locks): the
    decision is applied on each node, and at each partition's leader. `decision` is the
    ledger's, once this run learnt it;
    `recovered` says a resolver rebuilt the record from the ledger; `error` is the first
    failure met."""

    id: str
    home: tuple[str, str]
    digest: str
    token: bool
    participants: tuple[txn.Participant, ...]
    actions: int
    state: TxnState = TxnState.BEGINNING
    attempt: int = 0
    votes: tuple[txn.Vote | None, ...] = ()
    nodes: frozenset[str] = frozenset()
    partitions: frozenset[tuple[str, str]] = frozenset()
    decision: txn.State | None = None
    replayed: bool = False
    recovered: bool = False
    error: str | None = None

    @property
    def attempt_id(self) -> str:
        """The name the participants' locks give this attempt."""
        return f"{self.id}.{self.attempt}"

    @property
    def asked(self) -> txn.State:
        """The decision this record's decide asks the ledger for."""
        return txn.State.COMMITTED if self.state is TxnState.PREPARED else txn.State.ABORTED

    def ledger(self) -> txn.Record:
        """The PENDING ledger record its begin asks for (the node stamps the time)."""
        return txn.Record(
            self.id, self.digest, txn.State.PENDING, self.participants, 0.0, token=self.token
        )


def new(
    record_id: str,
    home: tuple[str, str],
    digest: str,
    token: bool,
    participants: Sequence[txn.Participant],
    actions: int,
) -> TxnRecord:
    """The record of a transaction a router starts coordinating: its ledger not yet begun."""
    assert participants and actions > 0
    return TxnRecord(
        record_id,
        home,
        digest,
        token,
        tuple(participants),
        actions,
        votes=(None,) * actions,
        nodes=frozenset(p.node for p in participants if not p.replicated),
        partitions=frozenset(p.ref for p in participants if p.replicated),
    )


def from_ledger(
    ledger: txn.Record | None,
    record_id: str,
    attempt: int,
    home: tuple[str, str],
    holders: Iterable[str],
    held: Iterable[tuple[str, str]] = (),
) -> TxnRecord:
    """The coordinator's record as the ledger leaves it, for a resolver to step RESTARTED: the
    attempt `attempt` of record `record_id` on `home`, whose locks the nodes `holders` and the
    replicated partitions `held` reported.

    No ledger of that attempt (never begun, forgotten once finished, or superseded by a later
    attempt of its token) means it never committed: RELEASING, on `holders` and `held` (a
    caller that cannot tell which nodes hold its locks passes them all). PENDING: PREPARING,
    which a restart aborts; decided: the decision to apply again on every participant's node or
    partition."""
    nodes = frozenset(holders)
    partitions = frozenset(held)
    if ledger is None or ledger.attempt != attempt:
        return TxnRecord(
            record_id,
            home,
            "",
            False,
            (),
            0,
            state=TxnState.RELEASING,
            attempt=attempt,
            nodes=nodes,
            partitions=partitions,
            decision=txn.State.ABORTED,
            recovered=True,
        )
    state = {
        txn.State.PENDING: TxnState.PREPARING,
        txn.State.COMMITTED: TxnState.COMMITTING,
        txn.State.ABORTED: TxnState.RELEASING,
    }[ledger.state]
    return TxnRecord(
        record_id,
        home,
        ledger.digest,
        ledger.token,
        ledger.participants,
        0,
        state=state,
        attempt=attempt,
        nodes=nodes | {p.node for p in ledger.participants if not p.replicated},
        partitions=partitions | {p.ref for p in ledger.participants if p.replicated},
        decision=None if ledger.state is txn.State.PENDING else ledger.state,
        recovered=True,
    )


def reasons(record: TxnRecord) -> TransactionCanceled:
    """The client's answer to an aborted transaction: each action's vote, in request order; an
    action nobody refused is "None", and one whose participant did not answer, or which a
    resolver aborted, a TransactionConflict (DynamoDB's answer to a transaction that could not
    complete because of another)."""
    votes = [vote if vote is not None else txn.CONFLICT for vote in record.votes]
    if all(vote.yes for vote in votes):
        votes = [txn.CONFLICT] * len(votes)
    return txn.cancellation(votes)


def _effect(record: TxnRecord) -> tuple[Effect, ...]:
    """The one effect that takes a coordination on from its state (none once it has ended). The
    ledger's effects address its partition; prepare and apply address every place the record
    names (a fan-out is one effect: its calls go together, and each is idempotent)."""
    home = record.home[1]
    match record.state:
        case TxnState.BEGINNING:
            return (Effect(EffectKind.NODE_CALL, "begin", BEGUN, home),)
        case TxnState.PREPARING:
            return (Effect(EffectKind.NODE_CALL, "prepare", VOTED),)
        case TxnState.PREPARED:
            return (Effect(EffectKind.NODE_CALL, "decide", DECIDED, home),)
        case TxnState.ABORTING:
            # A coordinator aborts its own transaction at once; a resolver only a ledger whose
            # coordinator has had its time (the ledger's node judges, on its clock).
            step = "resolve" if record.recovered else "decide"
            return (Effect(EffectKind.NODE_CALL, step, DECIDED, home),)
        case TxnState.COMMITTING | TxnState.RELEASING:
            return (Effect(EffectKind.NODE_CALL, "apply", APPLIED),)
        case TxnState.FINISHING:
            return (Effect(EffectKind.NODE_CALL, "finish", FINISHED, home),)
    return ()


def _classified(event: Event) -> str:
    """The table's event for `event`: a vote every action won or not, a ledger's answer as the
    decision it holds."""
    if event.kind == VOTED:
        votes = event.data["votes"]
        return (
            VOTED_YES
            if all(v is not None and txn.Vote.from_json(v).yes for v in votes)
            else VOTED_NO
        )
    if event.kind == DECIDED:
        state = event.data["state"]
        if state == txn.State.PENDING.value:
            return UNDECIDED
        return COMMITTED if state == txn.State.COMMITTED.value else ABORTED
    return event.kind


def _taken(record: TxnRecord, state: TxnState, event: Event, kind: str) -> TxnRecord:
    """`record` in `state`, with what `event` (the table's `kind`) brings."""
    data = event.data
    changes: dict[str, Any] = {"state": state}
    if event.error is not None and record.error is None:
        changes["error"] = event.error
    if event.kind in (BEGUN, REPLAYED):
        changes["attempt"] = int(data["attempt"])
        changes["replayed"] = event.kind == REPLAYED
    if event.kind == VOTED:
        votes = tuple(None if v is None else txn.Vote.from_json(v) for v in data["votes"])
        assert len(votes) == record.actions
        changes["votes"] = votes
        changes["nodes"] = record.nodes | frozenset(data["nodes"])
        changes["partitions"] = record.partitions | frozenset(
            (table_id, partition_id) for table_id, partition_id in data.get("partitions", ())
        )
    decision = _DECISIONS.get(kind)
    if decision is not None:
        changes["decision"] = decision
    return dataclasses.replace(record, **changes)


class TxnMachine:
    """The coordinator's machine for the driver (`core.machines.Machine`)."""

    name = NAME

    def step(
        self, record: TxnRecord, event: Event, now: float
    ) -> tuple[TxnRecord, tuple[Effect, ...]]:
        kind = _classified(event)
        state = next_state(
            TXN_TRANSITIONS, NAME, record.state, dataclasses.replace(event, kind=kind)
        )
        after = _taken(record, state, event, kind)
        return after, _effect(after)

    def finished(self, record: TxnRecord) -> bool:
        return record.state in FINAL

    def label(self, record: TxnRecord) -> str:
        return record.state.value.lower()


MACHINE = TxnMachine()
