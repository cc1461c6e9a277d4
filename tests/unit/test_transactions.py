"""The pure rules of transactions (`core/transactions.py`): the record's transitions, a
participant's votes and DynamoDB's messages (the coordinator's machine: test_txn_machine.py)."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core import limits
from core import transactions as txn
from core.errors import (
    IdempotentParameterMismatch,
    TransactionInProgress,
    ValidationError,
)

PARTICIPANTS = (txn.Participant("t" * 32, "p0", 1, "n1"), txn.Participant("t" * 32, "p1", 1, "n2"))


def pending(began: float = 100.0, token: bool = False) -> txn.Record:
    return txn.begin(None, "r", "d", PARTICIPANTS, began, token=token)


def test_begin_new_and_token_rules() -> None:
    record = pending()
    assert record.state is txn.State.PENDING and record.attempt_id == "r.1"
    with pytest.raises(IdempotentParameterMismatch, match="non-identical request"):
        txn.begin(record, "r", "other", PARTICIPANTS, 101.0)
    with pytest.raises(TransactionInProgress):
        txn.begin(record, "r", "d", PARTICIPANTS, 101.0)
    committed = txn.decide(record, 1, txn.State.COMMITTED, 102.0)
    with pytest.raises(TransactionInProgress):  # Decided, not yet applied everywhere.
        txn.begin(committed, "r", "d", PARTICIPANTS, 103.0)
    finished = txn.finish(committed, 1, 104.0)
    assert txn.begin(finished, "r", "d", PARTICIPANTS, 105.0) is finished
    later = 104.0 + limits.TRANSACTION_IDEMPOTENCY_SECONDS + 1
    fresh = txn.begin(finished, "r", "other", PARTICIPANTS, later)
    assert fresh.state is txn.State.PENDING and fresh.began == later


def test_an_aborted_token_runs_again_as_the_next_attempt() -> None:
    aborted = txn.finish(txn.decide(pending(), 1, txn.State.ABORTED, 101.0), 1, 102.0)
    again = txn.begin(aborted, "r", "d", PARTICIPANTS, 103.0, token=True)
    assert (again.state, again.attempt, again.attempt_id) == (txn.State.PENDING, 2, "r.2")
    # The first attempt's late decision changes nothing of the second.
    assert txn.decide(again, 1, txn.State.COMMITTED, 104.0) is again


@given(st.lists(st.sampled_from([txn.State.COMMITTED, txn.State.ABORTED]), min_size=1))
def test_a_record_is_decided_once(asks: list[txn.State]) -> None:
    record = pending()
    for number, outcome in enumerate(asks):
        record = txn.decide(record, 1, outcome, 200.0 + number)
    assert record.state is asks[0] and record.decided == 200.0
    assert record.state in txn.RECORD_TRANSITIONS[txn.State.PENDING]


def test_resolution_waits_for_the_coordinator_then_aborts() -> None:
    record = pending(began=100.0)
    assert txn.resolution(record, 1, 100.0 + limits.TRANSACTION_RESOLVE_SECONDS - 1) is None
    assert txn.resolution(record, 1, 100.0 + limits.TRANSACTION_RESOLVE_SECONDS) is (
        txn.State.ABORTED
    )
    committed = txn.decide(record, 1, txn.State.COMMITTED, 101.0)
    assert txn.resolution(committed, 1, 10_000.0) is txn.State.COMMITTED
    assert txn.resolution(None, 1, 0.0) is txn.State.ABORTED
    assert txn.resolution(committed, 2, 0.0) is txn.State.ABORTED


def test_prepare_vote_and_lock_age() -> None:
    lock = txn.ItemLock("r.1", "t" * 32, "p0", "t" * 32, "p0", 50.0, "put", {"item": {}})
    assert txn.ItemLock.from_json(lock.to_json()) == lock
    assert txn.prepare_vote(None, "r.1") is None
    assert txn.prepare_vote(lock, "r.1") is None  # The same attempt, prepared twice.
    assert txn.prepare_vote(lock, "q.1") == txn.CONFLICT
    # A prepare is over once its deadline and the nodes' grace past it have passed.
    assert not txn.prepare_over(52.0, 52.0 + limits.RPC_DEADLINE_GRACE_SECONDS - 0.01)
    assert txn.prepare_over(52.0, 52.0 + limits.RPC_DEADLINE_GRACE_SECONDS)


def test_request_rules() -> None:
    txn.check_distinct([("a", b"1"), ("a", b"2"), ("b", b"1")])
    with pytest.raises(ValidationError, match="multiple operations on one item"):
        txn.check_distinct([("a", b"1"), ("a", b"1")])
    txn.check_request_bytes(limits.TRANSACT_BYTES_MAX)
    with pytest.raises(ValidationError):
        txn.check_request_bytes(limits.TRANSACT_BYTES_MAX + 1)
    body = {"TransactItems": [1], "ClientRequestToken": "x", "ReturnConsumedCapacity": "TOTAL"}
    assert txn.request_digest(body) == txn.request_digest({"TransactItems": [1]})
    assert txn.request_digest(body) != txn.request_digest({"TransactItems": [2]})
    assert txn.token_transaction_id("x") == txn.token_transaction_id("x")
    assert txn.attempt_of("r.12") == ("r", 12)


def test_record_round_trips() -> None:
    record = txn.finish(txn.decide(pending(token=True), 1, txn.State.COMMITTED, 1.0), 1, 2.0)
    assert txn.Record.from_json(record.to_json()) == record


def test_a_records_key_is_spelt_by_its_id() -> None:
    """A record is kept by the partition holding its key: a token's hash, or its first item's
    hash bytes; an id made otherwise maps to the first key, the same wherever it is read."""
    key = bytes.fromhex("0123456789abcdef") + b"rest"
    assert txn.record_key(txn.transaction_id(key, "f" * 31)) == key[:8]
    token_id = txn.token_transaction_id("a token")
    assert txn.record_key(token_id) == hashlib.sha256(b"a token").digest()[:8]
    assert txn.record_key("tsplit") == b""
