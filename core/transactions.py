"""Transactions across partitions: the rules and the two state machines, with no IO.

dynalab follows the design of "Distributed Transactions at Scale in Amazon DynamoDB" (USENIX ATC
2023): the router that receives TransactWriteItems coordinates it, the partitions holding its
items are the participants, and a durable transaction record (the ledger) holds the decision, so
that any router can finish what another started. This module is what every side agrees on:

- **The record** (`Record`, `RECORD_TRANSITIONS`): PENDING (written before any participant is
  asked to prepare, naming every participant), then COMMITTED or ABORTED, decided exactly once by a
  compare-and-set on the node that stores it (`decide`). A router that finds a PENDING record older
  than `limits.TRANSACTION_RESOLVE_SECONDS` (its coordinator died or stalled) aborts it
  (`resolution`); a coordinator that then tries to commit finds it aborted and tells its client so.
  Every participant is committed or released only after the decision is durable.
- **The coordinator** is a machine of its own (`core.machines.transaction`): its states stand for
  the record's and the locks', and its votes become DynamoDB's CancellationReasons.
- **A participant's item** (`ItemLock`, `prepare_vote`): an item is free or prepared (locked) by one
  transaction; preparing a locked item for another transaction is a TransactionConflict vote, a
  failed condition a ConditionalCheckFailed vote. A prepared item refuses single-item writes with
  TransactionConflictException, as DynamoDB's do; it is committed (its planned write applied) or
  released only on the record's decision.

The wire rules of TransactWriteItems and TransactGetItems are here too (`check_distinct`,
`check_request_bytes`, `cancellation`, `request_digest`, `idempotency_expired`), with DynamoDB's
messages, so every router answers the same way.
"""

from __future__ import annotations

import enum
import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import orjson

from core import limits, planted
from core.capacity import TRANSACTIONAL_WRITE_FACTOR, item_write_units
from core.errors import (
    IdempotentParameterMismatch,
    ItemCollectionSizeLimitExceeded,
    TransactionCanceled,
    TransactionInProgress,
    ValidationError,
)
from core.indexes import EntryChange, check_collection_growth, collection_delta

# DynamoDB's messages (API Reference, TransactWriteItems and TransactGetItems; and what the service
# answers to each case).
MULTIPLE_OPERATIONS = "Transaction request cannot include multiple operations on one item"
ONE_ACTION = "TransactItems can only contain one of Check, Put, Update or Delete"
# AWS publishes no message for a TransactWriteItems past 4 MB (only the limit) and no capture of
# DynamoDB's was found: these words are dynalab's, in the family of the item size refusals.
TOO_LARGE = "Transaction request size has exceeded the maximum allowed size"
CONFLICT_MESSAGE = "Transaction is ongoing for the item"
CONDITION_FAILED_MESSAGE = "The conditional request failed"
PARAMETER_MISMATCH = (
    "The request uses the same client token as a previous, but non-identical request."
)
IN_PROGRESS = "The transaction with the given request token is already in progress."
# The API Reference's CancellationReasons (TransactionCanceledException): a participant whose
# partition has no capacity left votes ProvisionedThroughputExceeded on a provisioned table and
# ThrottlingError on an on-demand one; an item collection a transaction would take past its cap,
# ItemCollectionSizeLimitExceeded.
PROVISIONED_THROTTLED_MESSAGE = (
    "The level of configured provisioned throughput for the table was exceeded. "
    "Consider increasing your provisioning level with the UpdateTable API."
)
ON_DEMAND_THROTTLED_MESSAGE = (
    "Throughput exceeds the current capacity of your table or index. DynamoDB is automatically "
    "scaling your table or index so please try again shortly. If exceptions persist, check if "
    "you have a hot key: "
    "https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/bp-partition-key-design.html."
)
COLLECTION_EXCEEDED_MESSAGE = "Collection size exceeded."


class Code(enum.StrEnum):
    """A CancellationReason's Code, as DynamoDB names them."""

    NONE = "None"
    CONDITIONAL_CHECK_FAILED = "ConditionalCheckFailed"
    TRANSACTION_CONFLICT = "TransactionConflict"
    VALIDATION_ERROR = "ValidationError"
    THROTTLING_ERROR = "ThrottlingError"
    PROVISIONED_THROUGHPUT_EXCEEDED = "ProvisionedThroughputExceeded"
    ITEM_COLLECTION_SIZE_LIMIT_EXCEEDED = "ItemCollectionSizeLimitExceeded"


@dataclass(frozen=True, slots=True)
class Vote:
    """A participant's answer for one item: `code` NONE is yes; anything else refuses, with
    DynamoDB's message and, when ReturnValuesOnConditionCheckFailure asked, the item as it was."""

    code: Code = Code.NONE
    message: str | None = None
    item: dict[str, Any] | None = None

    @property
    def yes(self) -> bool:
        return self.code is Code.NONE

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {"code": self.code.value}
        if self.message is not None:
            body["message"] = self.message
        if self.item is not None:
            body["item"] = self.item
        return body

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> Vote:
        return cls(Code(body["code"]), body.get("message"), body.get("item"))

    def reason(self) -> dict[str, Any]:
        """This vote as one of TransactionCanceledException's CancellationReasons."""
        reason: dict[str, Any] = {"Code": self.code.value}
        if self.message is not None:
            reason["Message"] = self.message
        if self.item is not None:
            reason["Item"] = self.item
        return reason


YES = Vote()
CONFLICT = Vote(Code.TRANSACTION_CONFLICT, CONFLICT_MESSAGE)


COLLECTION_EXCEEDED = Vote(Code.ITEM_COLLECTION_SIZE_LIMIT_EXCEEDED, COLLECTION_EXCEEDED_MESSAGE)


def throttled(on_demand: bool) -> Vote:
    """The vote of a participant whose partition had not the capacity the transaction costs:
    ThrottlingError on an on-demand table, ProvisionedThroughputExceeded on a provisioned one."""
    if on_demand:
        return Vote(Code.THROTTLING_ERROR, ON_DEMAND_THROTTLED_MESSAGE)
    return Vote(Code.PROVISIONED_THROUGHPUT_EXCEEDED, PROVISIONED_THROTTLED_MESSAGE)


def condition_failed(item: dict[str, Any] | None) -> Vote:
    """The vote of a failed condition; `item` is the existing item when the client asked for it."""
    return Vote(Code.CONDITIONAL_CHECK_FAILED, CONDITION_FAILED_MESSAGE, item)


def cancellation(votes: Sequence[Vote]) -> TransactionCanceled:
    """TransactionCanceledException for `votes` in request order, worded as DynamoDB words it:
    "Transaction cancelled, please refer cancellation reasons for specific reasons [None,
    ConditionalCheckFailed]"."""
    assert any(not vote.yes for vote in votes), "a transaction all voted for is not cancelled"
    codes = ", ".join(vote.code.value for vote in votes)
    return TransactionCanceled(
        f"Transaction cancelled, please refer cancellation reasons for specific reasons [{codes}]",
        [vote.reason() for vote in votes],
    )


# Capacity ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Cost:
    """What one prepared action costs, as its participant measured it: two write units per KB of
    the larger of the item before and after (a ConditionCheck: the item as it is), as the
    Developer Guide prices transactional writes, and likewise for each index entry it writes
    (`index_units` for local indexes, charged to the table's partition as a single write's are;
    `global_index_units` for global ones, which their own throughput pays when the replicator
    writes them). `collection_bytes` is the size the action's item collection will have once
    the transaction's writes to it on this partition are applied (None: no local index)."""

    units: float
    index_units: dict[str, float] = field(default_factory=dict)
    global_index_units: dict[str, float] = field(default_factory=dict)
    collection_bytes: int | None = None

    @property
    def charged(self) -> float:
        """The units the participant's partition pays: the table's and its local indexes'."""
        return self.units + sum(self.index_units.values())

    def to_json(self) -> dict[str, Any]:
        return {
            "units": self.units,
            "index_units": self.index_units,
            "global_index_units": self.global_index_units,
            "collection_bytes": self.collection_bytes,
        }

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> Cost:
        return cls(
            float(body["units"]),
            dict(body.get("index_units") or {}),
            dict(body.get("global_index_units") or {}),
            body.get("collection_bytes"),
        )


def action_cost(
    old_bytes: int,
    new_bytes: int,
    local_changes: Sequence[EntryChange],
    global_changes: Sequence[EntryChange],
) -> Cost:
    """An action's Cost from its item's sizes and the index entries it changes (transactional:
    every write twice a single write's units)."""
    factor = TRANSACTIONAL_WRITE_FACTOR
    return Cost(
        item_write_units(old_bytes, new_bytes, transactional=True),
        {c.index.name: c.units * factor for c in local_changes if c.units},
        {c.index.name: c.units * factor for c in global_changes if c.units},
    )


def collection_vote(
    current_bytes: int,
    old_bytes: int,
    new_bytes: int,
    local_changes: Sequence[EntryChange],
    collection_bytes_max: int,
) -> tuple[Vote, int]:
    """The vote of an action on an item collection holding `current_bytes` (with the
    transaction's earlier actions on it already counted), and the collection's size after it.
    Checked at prepare, so a transaction that would take a collection past its cap is cancelled
    before anything commits (ItemCollectionSizeLimitExceeded); shrinking is always allowed."""
    delta = collection_delta(old_bytes, new_bytes, local_changes)
    try:
        check_collection_growth(current_bytes, delta, collection_bytes_max)
    except ItemCollectionSizeLimitExceeded:
        return COLLECTION_EXCEEDED, current_bytes
    return YES, current_bytes + delta


# Request rules -------------------------------------------------------------------------------


def check_distinct(item_ids: Iterable[tuple[str, bytes]]) -> None:
    """Refuse a transaction naming one item (table, storage key) twice."""
    seen: set[tuple[str, bytes]] = set()
    for item_id in item_ids:
        if item_id in seen:
            raise ValidationError(MULTIPLE_OPERATIONS)
        seen.add(item_id)


def check_request_bytes(request_bytes: int) -> None:
    """Refuse a TransactWriteItems whose items and expressions pass 4 MB in all."""
    if request_bytes > limits.TRANSACT_BYTES_MAX:
        raise ValidationError(TOO_LARGE)


def request_digest(body: Mapping[str, Any]) -> str:
    """What identifies a request for ClientRequestToken idempotency: every member but the token
    and ReturnConsumedCapacity (which changes what is returned, not what is written)."""
    kept = {
        name: value
        for name, value in body.items()
        if name not in ("ClientRequestToken", "ReturnConsumedCapacity")
    }
    return hashlib.sha256(orjson.dumps(kept, option=orjson.OPT_SORT_KEYS)).hexdigest()


def token_transaction_id(token: str) -> str:
    """The record id of a ClientRequestToken's transaction: every router derives the same one, so
    a retry through another router finds the first attempt's record."""
    return "t" + hashlib.sha256(token.encode()).hexdigest()[:31]


def transaction_id(first_storage_key: bytes, fresh: str) -> str:
    """The record id of a transaction without a token: its first item's key's 8 hash bytes, then
    15 digits of a fresh id, so that its key (`record_key`) falls where its first item's does."""
    return "t" + first_storage_key[:8].hex() + fresh[:15]


def record_key(record_id: str) -> bytes:
    """The storage key a transaction's record is kept by: the partition whose range holds it
    keeps the record (so after a split, the child holding it). The 8 bytes its id's first 16
    hex digits spell: a ClientRequestToken's hash, or the first item's key's hash bytes. An id
    not made so (by hand, in a test) is kept by the table's first key, alike everywhere, rather
    than stopping a resolver's round."""
    try:
        return bytes.fromhex(record_id[1:17])
    except ValueError:
        return b""


# The record (the ledger) ------------------------------------------------------------------------


class State(enum.StrEnum):
    PENDING = "PENDING"
    COMMITTED = "COMMITTED"
    ABORTED = "ABORTED"


RECORD_TRANSITIONS: dict[State, frozenset[State]] = {
    State.PENDING: frozenset({State.COMMITTED, State.ABORTED}),
    State.COMMITTED: frozenset(),
    State.ABORTED: frozenset(),
}


@dataclass(frozen=True, slots=True)
class Participant:
    """A partition a transaction writes, as the record names it: the table's and partition's ids,
    and the partition's epoch and node when the coordinator began. A `replicated` partition (a
    Raft group of several members) keeps its part of the transaction in its group, so its
    decision is applied at the partition's leader, addressed to it, rather than on a node."""

    table_id: str
    partition_id: str
    epoch: int
    node: str
    replicated: bool = False

    @property
    def ref(self) -> tuple[str, str]:
        return (self.table_id, self.partition_id)

    def to_json(self) -> list[Any]:
        body: list[Any] = [self.table_id, self.partition_id, self.epoch, self.node]
        return [*body, True] if self.replicated else body

    @classmethod
    def from_json(cls, body: Sequence[Any]) -> Participant:
        replicated = len(body) > 4 and body[4] is True
        return cls(str(body[0]), str(body[1]), int(body[2]), str(body[3]), replicated)


@dataclass(frozen=True, slots=True)
class Record:
    """A transaction's durable record. `attempt` counts the runs under one ClientRequestToken (a
    cancelled transaction may be sent again with its token); the participants' locks name
    `attempt_id`, so a lock of an earlier, aborted attempt is never committed by a later one.
    `finished` is set once every participant has been committed or released. A record with a
    `token` is kept 10 minutes after it finished, for the token's retries; one without is
    forgotten then."""

    id: str
    digest: str
    state: State
    participants: tuple[Participant, ...]
    began: float
    attempt: int = 1
    decided: float | None = None
    finished: float | None = None
    token: bool = False

    @property
    def attempt_id(self) -> str:
        return f"{self.id}.{self.attempt}"

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "digest": self.digest,
            "state": self.state.value,
            "participants": [p.to_json() for p in self.participants],
            "began": self.began,
            "attempt": self.attempt,
            "decided": self.decided,
            "finished": self.finished,
            "token": self.token,
        }

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> Record:
        return cls(
            body["id"],
            body["digest"],
            State(body["state"]),
            tuple(Participant.from_json(p) for p in body["participants"]),
            float(body["began"]),
            int(body.get("attempt", 1)),
            body.get("decided"),
            body.get("finished"),
            body.get("token") is True,
        )


def attempt_of(attempt_id: str) -> tuple[str, int]:
    """(record id, attempt) of a lock's `attempt_id`."""
    record_id, _, attempt = attempt_id.rpartition(".")
    return record_id, int(attempt)


def idempotency_expired(record: Record, now: float) -> bool:
    """Whether a finished record is past ClientRequestToken's 10 minutes: its token then starts a
    new transaction, and the node may forget it."""
    return (
        record.finished is not None
        and now - record.finished > limits.TRANSACTION_IDEMPOTENCY_SECONDS
    )


def begin(
    existing: Record | None,
    record_id: str,
    digest: str,
    participants: Sequence[Participant],
    now: float,
    *,
    token: bool = False,
) -> Record:
    """The record a coordinator starts from, given what the record's node holds under its id.

    New, or a token's earlier run forgotten after its 10 minutes: a PENDING record. The same token
    with another request: IdempotentParameterMismatchException. The same request still running:
    TransactionInProgressException. Committed: that record, whose transaction the coordinator
    answers as done without writing anything. Aborted (it was cancelled, or its coordinator died):
    the next attempt, PENDING.
    """
    if existing is None or idempotency_expired(existing, now):
        return Record(record_id, digest, State.PENDING, tuple(participants), now, token=token)
    if existing.digest != digest:
        raise IdempotentParameterMismatch(PARAMETER_MISMATCH)
    if existing.state is State.PENDING or (
        existing.state is State.COMMITTED and existing.finished is None
    ):
        raise TransactionInProgress(IN_PROGRESS)
    if existing.state is State.COMMITTED:
        return existing
    return Record(
        record_id,
        digest,
        State.PENDING,
        tuple(participants),
        now,
        attempt=existing.attempt + 1,
        token=token,
    )


def decide(record: Record, attempt: int, outcome: State, now: float) -> Record:
    """The record after a coordinator (or a resolver) asks for `outcome` for `attempt`.

    Decided once: asking again, for either outcome, returns the decision already made, so a
    coordinator and a resolver racing agree on whichever landed first. A request for another
    attempt than the record's changes nothing (that attempt is over).
    """
    assert outcome in RECORD_TRANSITIONS[State.PENDING]
    if record.attempt != attempt or record.state is not State.PENDING:
        return record
    return replace(record, state=outcome, decided=now)


def finish(record: Record, attempt: int, now: float) -> Record:
    """The record once every participant of `attempt` applied its decision."""
    if record.attempt != attempt or record.state is State.PENDING or record.finished is not None:
        return record
    return replace(record, finished=now)


def resolution(record: Record | None, attempt: int, now: float) -> State | None:
    """What a resolver (a router that found a lock or record left behind) may decide for `attempt`:
    ABORTED for a PENDING record whose coordinator has had `TRANSACTION_RESOLVE_SECONDS` and an
    attempt the record no longer runs; None to leave it to a coordinator still within its time.
    A record that is gone (never written because the coordinator died before it, or forgotten)
    means the attempt never committed: ABORTED. A decided record's decision stands."""
    if record is None or record.attempt != attempt:
        return State.ABORTED
    if record.state is not State.PENDING:
        return record.state
    if now - record.began >= limits.TRANSACTION_RESOLVE_SECONDS:
        return State.ABORTED
    return None


# A participant's item ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ItemLock:
    """An item prepared by a transaction attempt: the attempt, the item's partition, where the
    attempt's record is (table and partition ids), when it was prepared and the write it will
    apply on commit (`op` put, update or delete with its JSON body; check: nothing to apply)."""

    attempt_id: str
    table_id: str
    partition_id: str
    record_table_id: str
    record_partition_id: str
    prepared: float
    op: str
    body: dict[str, Any] | None

    def to_json(self) -> dict[str, Any]:
        return {
            "attempt": self.attempt_id,
            "partition": [self.table_id, self.partition_id],
            "record": [self.record_table_id, self.record_partition_id],
            "prepared": self.prepared,
            "op": self.op,
            "body": self.body,
        }

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> ItemLock:
        table_id, partition_id = body["partition"]
        record_table_id, record_partition_id = body["record"]
        return cls(
            body["attempt"],
            table_id,
            partition_id,
            record_table_id,
            record_partition_id,
            float(body["prepared"]),
            body["op"],
            body["body"],
        )


def prepare_vote(lock: ItemLock | None, attempt_id: str) -> Vote | None:
    """The vote an item's lock decides before its condition is looked at: a conflict when another
    attempt holds it; None when it is free or already held by this attempt (a prepare sent twice),
    and the condition decides."""
    if lock is None or lock.attempt_id == attempt_id or planted.on("unbalanced-books"):
        return None
    return CONFLICT


def prepare_over(deadline: float, now: float) -> bool:
    """Whether a prepare with this deadline can no longer lock anything (its deadline and the
    grace a node allows past it have passed): a resolver may then look at its locks' record."""
    return now >= deadline + limits.RPC_DEADLINE_GRACE_SECONDS
