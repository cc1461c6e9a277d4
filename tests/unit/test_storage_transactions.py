"""A node's side of transactions (`storagenode/transactions.py`) on a real RocksDB store: records,
prepares that lock or refuse, commits through the write hook, releases, restarts and the sweep."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from core import limits
from core import transactions as txn
from core.errors import IdempotentParameterMismatch, TransactionConflict
from rpc import ops
from rpc.transactions import TxnRecordPayload
from tests import envelope
from tests.unit.test_storage_node import TABLE, Harness, n, s

WHERE = {"table_id": TABLE["id"], "partition_id": "p0", "epoch": 1}


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def node(tmp_path: Path, clock: Clock) -> Harness:
    harness = Harness(tmp_path / "node", clock=clock)
    harness.create()
    return harness


def put_action(pk: str, sk: int, condition: str | None = None, **extra: Any) -> dict[str, Any]:
    item = {"pk": s(pk), "sk": n(sk), **extra}
    return {"op": ops.PUT, "body": ops.PutPayload(item, None, condition).to_json()}


def prepare(node: Harness, attempt: str, *actions: dict[str, Any]) -> list[txn.Vote]:
    body = {**WHERE, "attempt": attempt, "record": [TABLE["id"], "p0"], "actions": list(actions)}
    reply = node.write(ops.TXN_PREPARE, body)
    return [txn.Vote.from_json(vote) for vote in reply["votes"]]


def get(node: Harness, pk: str, sk: int) -> Any:
    body = {**WHERE, "key": {"pk": s(pk), "sk": n(sk)}}
    return envelope.read(node.node, ops.GET, body)["item"]


def test_prepare_locks_and_commit_applies(node: Harness) -> None:
    votes = prepare(node, "t1.1", put_action("a", 1, v=n(1)), put_action("a", 2, v=n(2)))
    assert all(vote.yes for vote in votes)
    # Prepared, not yet visible; single-item writes to a prepared item are refused.
    assert get(node, "a", 1) is None
    with pytest.raises(TransactionConflict, match="Transaction is ongoing for the item"):
        node.write(ops.PUT, {**WHERE, "item": {"pk": s("a"), "sk": n(1)}})
    # Another transaction meets the lock as a conflict.
    (vote,) = prepare(node, "t2.1", put_action("a", 1))
    assert vote.code is txn.Code.TRANSACTION_CONFLICT
    assert node.write(ops.TXN_APPLY, {"attempt": "t1.1", "commit": True}) == {"applied": 2}
    assert get(node, "a", 1) == {"pk": s("a"), "sk": n(1), "v": n(1)}
    assert get(node, "a", 2) == {"pk": s("a"), "sk": n(2), "v": n(2)}
    # Applied once: a second commit (a retry) applies nothing, and the items take writes again.
    assert node.write(ops.TXN_APPLY, {"attempt": "t1.1", "commit": True}) == {"applied": 0}
    node.write(ops.PUT, {**WHERE, "item": {"pk": s("a"), "sk": n(1)}})
    # The commit went through the write hook: the change log has both records.
    changes = node.node.changes(TABLE["id"], "p0", 0, 10)
    assert [change["kind"] for change in changes] == ["INSERT", "INSERT", "MODIFY"]


def test_a_failed_condition_locks_nothing(node: Harness) -> None:
    votes = prepare(
        node,
        "t1.1",
        put_action("a", 1),
        put_action("a", 2, "attribute_exists(pk)"),
    )
    assert [vote.code for vote in votes] == [txn.Code.NONE, txn.Code.CONDITIONAL_CHECK_FAILED]
    assert votes[1].message == "The conditional request failed"
    node.write(ops.PUT, {**WHERE, "item": {"pk": s("a"), "sk": n(1)}})  # Not locked.


def test_release_and_late_prepare(node: Harness) -> None:
    prepare(node, "t1.1", put_action("a", 1))
    assert node.write(ops.TXN_APPLY, {"attempt": "t1.1", "commit": False}) == {"applied": 1}
    assert get(node, "a", 1) is None
    # A release that arrives before its prepare makes the prepare refuse.
    node.write(ops.TXN_APPLY, {"attempt": "t3.1", "commit": False})
    (vote,) = prepare(node, "t3.1", put_action("b", 1))
    assert vote.code is txn.Code.TRANSACTION_CONFLICT
    node.write(ops.PUT, {**WHERE, "item": {"pk": s("b"), "sk": n(1)}})


def test_locks_survive_a_restart(node: Harness) -> None:
    prepare(node, "t1.1", put_action("a", 1, v=n(7)))
    node.reopen()
    with pytest.raises(TransactionConflict):
        node.write(ops.PUT, {**WHERE, "item": {"pk": s("a"), "sk": n(1)}})
    node.write(ops.TXN_APPLY, {"attempt": "t1.1", "commit": True})
    assert get(node, "a", 1)["v"] == n(7)


def record_call(node: Harness, **payload: Any) -> dict[str, Any] | None:
    body = {**WHERE, **TxnRecordPayload(**payload).to_json()}
    return node.write(ops.TXN_RECORD, body)["record"]


def new_record(record_id: str, digest: str = "d", token: bool = False) -> dict[str, Any]:
    participant = txn.Participant(TABLE["id"], "p0", 1, "n1")
    return txn.Record(
        record_id, digest, txn.State.PENDING, (participant,), 0.0, token=token
    ).to_json()


def test_record_lifecycle_and_tokens(node: Harness, clock: Clock) -> None:
    begun = record_call(node, action="begin", record_id="r1", record=new_record("r1", token=True))
    assert begun is not None and begun["state"] == "PENDING" and begun["began"] == clock.now
    with pytest.raises(IdempotentParameterMismatch):
        record_call(node, action="begin", record_id="r1", record=new_record("r1", "other"))
    decided = record_call(node, action="decide", record_id="r1", attempt=1, outcome="COMMITTED")
    assert decided is not None and decided["state"] == "COMMITTED"
    # Decided once: an abort asked later gets the commit.
    again = record_call(node, action="decide", record_id="r1", attempt=1, outcome="ABORTED")
    assert again is not None and again["state"] == "COMMITTED"
    record_call(node, action="finish", record_id="r1", attempt=1)
    replay = record_call(node, action="begin", record_id="r1", record=new_record("r1", token=True))
    assert replay is not None and replay["state"] == "COMMITTED"
    # Past the token's 10 minutes the sweep forgets the record.
    clock.now += limits.TRANSACTION_IDEMPOTENCY_SECONDS + 1
    node.write(ops.TXN_SWEEP, {})
    assert record_call(node, action="read", record_id="r1") is None


def test_resolver_aborts_an_abandoned_record(node: Harness, clock: Clock) -> None:
    record_call(node, action="begin", record_id="r2", record=new_record("r2"))
    prepare(node, "r2.1", put_action("a", 1))
    pending = record_call(node, action="resolve", record_id="r2", attempt=1)
    assert pending is not None and pending["state"] == "PENDING"  # Its coordinator has time.
    clock.now += limits.TRANSACTION_RESOLVE_SECONDS
    swept = node.write(ops.TXN_SWEEP, {})
    assert swept["locks"] == [["r2.1", TABLE["id"], "p0"]]
    assert swept["records"] == [["r2", 1]]
    resolved = record_call(node, action="resolve", record_id="r2", attempt=1)
    assert resolved is not None and resolved["state"] == "ABORTED"
    # The coordinator's late commit finds the abort.
    late = record_call(node, action="decide", record_id="r2", attempt=1, outcome="COMMITTED")
    assert late is not None and late["state"] == "ABORTED"
    node.write(ops.TXN_APPLY, {"attempt": "r2.1", "commit": False})
    assert node.write(ops.TXN_SWEEP, {})["locks"] == []


def test_txn_get_reports_locks_and_seq(node: Harness) -> None:
    node.write(ops.PUT, {**WHERE, "item": {"pk": s("a"), "sk": n(1), "v": n(1)}})
    prepare(node, "t1.1", put_action("a", 2))
    body = {**WHERE, "gets": [{"key": {"pk": s("a"), "sk": n(1)}}]}
    reply = envelope.read(node.node, ops.TXN_GET, body)
    assert reply["items"] == [{"pk": s("a"), "sk": n(1), "v": n(1)}]
    assert reply["locked"] is False and reply["last_seq"] == 1
    body["gets"].append({"key": {"pk": s("a"), "sk": n(2)}})
    assert envelope.read(node.node, ops.TXN_GET, body)["locked"] is True


def test_the_sweep_reports_a_lock_once_its_prepare_is_over(node: Harness, clock: Clock) -> None:
    prepare(node, "r3.1", put_action("a", 1))
    over = limits.TRANSACTION_PREPARE_SECONDS + limits.RPC_DEADLINE_GRACE_SECONDS
    clock.now += over - 0.1
    assert node.write(ops.TXN_SWEEP, {})["locks"] == []  # A prepare may still be on its way.
    clock.now += 0.1
    assert node.write(ops.TXN_SWEEP, {})["locks"] == [["r3.1", TABLE["id"], "p0"]]


def test_txn_get_says_whether_its_items_were_written_since_a_seq(node: Harness) -> None:
    node.write(ops.PUT, {**WHERE, "item": {"pk": s("a"), "sk": n(1), "v": n(1)}})
    body = {**WHERE, "gets": [{"key": {"pk": s("a"), "sk": n(1)}}]}
    first = envelope.read(node.node, ops.TXN_GET, body)
    assert "changed" not in first and first["locks"] == [False]
    # Writes to other items of the partition do not count.
    node.write(ops.PUT, {**WHERE, "item": {"pk": s("b"), "sk": n(1)}})
    node.write(ops.PUT, {**WHERE, "item": {"pk": s("a"), "sk": n(2)}})
    second = envelope.read(node.node, ops.TXN_GET, {**body, "since": first["last_seq"]})
    assert second["changed"] is False and second["last_seq"] == first["last_seq"] + 2
    # A write to the item does, even one that puts the same value back.
    node.write(ops.PUT, {**WHERE, "item": {"pk": s("a"), "sk": n(1), "v": n(2)}})
    node.write(ops.PUT, {**WHERE, "item": {"pk": s("a"), "sk": n(1), "v": n(1)}})
    third = envelope.read(node.node, ops.TXN_GET, {**body, "since": second["last_seq"]})
    assert third["changed"] is True and third["items"] == second["items"]
