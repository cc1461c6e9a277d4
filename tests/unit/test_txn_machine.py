"""The transaction coordinator's machine (`core.machines.transaction`): its table, the effect
each state has, which way a restart goes, what a resolver rebuilds from the ledger, and the
client's cancellation reasons."""

from __future__ import annotations

from typing import Any

import pytest

from core import transactions as txn
from core.catalog import IllegalTransition
from core.machines import FAILED, RESTARTED, STARTED, Event
from core.machines import transaction as tm
from core.machines.transaction import MACHINE, TXN_TRANSITIONS, TxnRecord, TxnState

PARTICIPANTS = (txn.Participant("t" * 32, "p0", 1, "n1"), txn.Participant("t" * 32, "p1", 1, "n2"))
HOME = ("t" * 32, "p0")


def started() -> TxnRecord:
    return tm.new("r", HOME, "digest", False, PARTICIPANTS, 3)


def voted(*votes: txn.Vote | None, nodes: tuple[str, ...] = ("n1", "n2")) -> Event:
    return Event(
        tm.VOTED,
        {"votes": [None if v is None else v.to_json() for v in votes], "nodes": list(nodes)},
    )


def decided(state: txn.State | None) -> Event:
    return Event(tm.DECIDED, {"state": None if state is None else state.value})


def walk(record: TxnRecord, *events: Event) -> tuple[TxnRecord, list[str]]:
    """Step `record` through `events`; the record and the steps of the effects met."""
    steps: list[str] = []
    for event in events:
        record, effects = MACHINE.step(record, event, 0.0)
        assert len(effects) == (0 if MACHINE.finished(record) else 1)
        steps.extend(effect.step for effect in effects)
    return record, steps


def test_a_transaction_every_action_voted_for_commits_then_finishes() -> None:
    record, steps = walk(
        started(),
        Event(STARTED),
        Event(tm.BEGUN, {"attempt": 2}),
        voted(txn.YES, txn.YES, txn.YES, nodes=("n1", "n2", "n3")),
        decided(txn.State.COMMITTED),
        Event(tm.APPLIED),
        Event(tm.FINISHED),
    )
    assert steps == ["begin", "prepare", "decide", "apply", "finish"]
    assert record.state is TxnState.DONE and record.decision is txn.State.COMMITTED
    assert record.attempt_id == "r.2" and record.nodes == {"n1", "n2", "n3"}
    assert not record.replayed


def test_a_no_vote_or_a_missing_one_aborts() -> None:
    for votes in ((txn.YES, txn.condition_failed(None), txn.YES), (txn.YES, None, txn.YES)):
        record, steps = walk(
            started(), Event(STARTED), Event(tm.BEGUN, {"attempt": 1}), voted(*votes)
        )
        assert record.state is TxnState.ABORTING and steps[-1] == "decide"
        assert record.asked is txn.State.ABORTED
        record, _ = walk(record, decided(txn.State.ABORTED))
        assert record.state is TxnState.RELEASING and record.decision is txn.State.ABORTED


def test_a_decide_finds_the_decision_that_landed_first() -> None:
    prepared, _ = walk(
        started(),
        Event(STARTED),
        Event(tm.BEGUN, {"attempt": 1}),
        voted(txn.YES, txn.YES, txn.YES),
    )
    assert prepared.state is TxnState.PREPARED and prepared.asked is txn.State.COMMITTED
    # A resolver aborted it first: released, and the client told so.
    lost, _ = walk(prepared, decided(txn.State.ABORTED))
    assert (lost.state, lost.decision) == (TxnState.RELEASING, txn.State.ABORTED)
    # A resolver's abort found the coordinator's commit: the commit goes on.
    loaded = tm.from_ledger(ledger(txn.State.PENDING), "r", 1, HOME, {"n3"})
    aborting, steps = walk(loaded, Event(RESTARTED))
    assert steps == ["resolve"]
    won, _ = walk(aborting, decided(txn.State.COMMITTED))
    assert (won.state, won.decision) == (TxnState.COMMITTING, txn.State.COMMITTED)


def test_a_token_replayed_ends_at_once() -> None:
    record, steps = walk(started(), Event(STARTED), Event(tm.REPLAYED, {"attempt": 1}))
    assert steps == ["begin"] and record.state is TxnState.DONE
    assert record.replayed and record.decision is txn.State.COMMITTED


@pytest.mark.parametrize(
    ("state", "after"),
    [
        (TxnState.BEGINNING, TxnState.ABORTING),
        (TxnState.PREPARING, TxnState.ABORTING),
        (TxnState.PREPARED, TxnState.ABORTING),
        (TxnState.ABORTING, TxnState.ABORTING),
        (TxnState.COMMITTING, TxnState.COMMITTING),
        (TxnState.RELEASING, TxnState.RELEASING),
        (TxnState.FINISHING, TxnState.FINISHING),
    ],
)
def test_a_restart_aborts_before_the_decision_and_goes_on_after(
    state: TxnState, after: TxnState
) -> None:
    assert TXN_TRANSITIONS[state, RESTARTED] is after


def test_every_state_has_one_effect_until_it_ends() -> None:
    for state in TxnState:
        record = TxnRecord("r", HOME, "d", False, PARTICIPANTS, 1, state=state)
        effects = tm._effect(record)
        assert len(effects) == (0 if state in tm.FINAL else 1), state
        if state not in tm.FINAL:
            assert (state, RESTARTED) in TXN_TRANSITIONS, state
            assert (state, FAILED) in TXN_TRANSITIONS, state


def test_a_failure_before_the_decision_is_known_leaves_the_ledger_to_a_resolver() -> None:
    record, _ = walk(started(), Event(STARTED), Event(FAILED, error="TransactionInProgress: x"))
    assert (record.state, record.attempt, record.error) == (
        TxnState.LEFT,
        0,
        "TransactionInProgress: x",
    )
    record, _ = walk(
        started(),
        Event(STARTED),
        Event(tm.BEGUN, {"attempt": 1}),
        voted(txn.YES, txn.YES, txn.YES),
        Event(FAILED, error="OutcomeUnknown: lost"),
    )
    assert (record.state, record.decision) == (TxnState.LEFT, None)
    record, _ = walk(
        started(),
        Event(STARTED),
        Event(tm.BEGUN, {"attempt": 1}),
        voted(txn.YES, txn.YES, txn.YES),
        decided(txn.State.COMMITTED),
        Event(FAILED, error="ServiceUnavailable: n2"),
    )
    assert (record.state, record.decision) == (TxnState.LEFT, txn.State.COMMITTED)


def test_a_transition_the_table_lacks_is_a_bug() -> None:
    with pytest.raises(IllegalTransition):
        MACHINE.step(started(), Event(tm.APPLIED), 0.0)
    done, _ = walk(started(), Event(STARTED), Event(tm.REPLAYED, {"attempt": 1}))
    with pytest.raises(IllegalTransition):
        MACHINE.step(done, Event(RESTARTED), 0.0)


def ledger(state: txn.State, attempt: int = 1) -> txn.Record:
    return txn.Record("r", "d", state, PARTICIPANTS, 1.0, attempt=attempt)


def test_a_resolver_loads_the_ledger() -> None:
    pending = tm.from_ledger(ledger(txn.State.PENDING), "r", 1, HOME, {"n3"})
    assert pending.state is TxnState.PREPARING and pending.recovered
    assert pending.nodes == {"n1", "n2", "n3"} and pending.decision is None
    young, _ = walk(pending, Event(RESTARTED), decided(txn.State.PENDING))
    assert young.state is TxnState.LEFT  # Its coordinator still has time.
    committed = tm.from_ledger(ledger(txn.State.COMMITTED), "r", 1, HOME, ())
    record, steps = walk(committed, Event(RESTARTED), Event(tm.APPLIED), Event(tm.FINISHED))
    assert steps == ["apply", "finish"] and record.decision is txn.State.COMMITTED
    aborted = tm.from_ledger(ledger(txn.State.ABORTED), "r", 1, HOME, ())
    assert (aborted.state, aborted.decision) == (TxnState.RELEASING, txn.State.ABORTED)
    # No ledger of this attempt: it never committed; released on the nodes given.
    for gone in (None, ledger(txn.State.COMMITTED, attempt=2)):
        released = tm.from_ledger(gone, "r", 1, HOME, {"n1", "n4"})
        assert (released.state, released.decision) == (TxnState.RELEASING, txn.State.ABORTED)
        assert released.nodes == {"n1", "n4"} and released.attempt_id == "r.1"


def test_cancellation_reasons_in_request_order() -> None:
    record, _ = walk(
        started(),
        Event(STARTED),
        Event(tm.BEGUN, {"attempt": 1}),
        voted(txn.YES, txn.condition_failed({"pk": {"S": "a"}}), None),
    )
    error = tm.reasons(record)
    assert error.type_name == "TransactionCanceledException"
    assert error.message == (
        "Transaction cancelled, please refer cancellation reasons for specific reasons "
        "[None, ConditionalCheckFailed, TransactionConflict]"
    )
    expected: list[dict[str, Any]] = [
        {"Code": "None"},
        {
            "Code": "ConditionalCheckFailed",
            "Message": "The conditional request failed",
            "Item": {"pk": {"S": "a"}},
        },
        {"Code": "TransactionConflict", "Message": "Transaction is ongoing for the item"},
    ]
    assert error.extra_fields() == {"CancellationReasons": expected}
    # Every vote yes and still aborted (a resolver came first): every action a conflict.
    record, _ = walk(
        started(),
        Event(STARTED),
        Event(tm.BEGUN, {"attempt": 1}),
        voted(txn.YES, txn.YES, txn.YES),
        decided(txn.State.ABORTED),
    )
    assert [r["Code"] for r in tm.reasons(record).reasons] == ["TransactionConflict"] * 3
