"""The transaction operations of the node contract (`rpc.ops` names them): one payload each.

A router coordinating a TransactWriteItems (`router/transactions.py`) sends:

- `txn_record` to the partition that keeps the transaction's record (the ledger entry,
  `core.transactions.Record`): `begin` writes it PENDING with every participant (or answers the
  record a ClientRequestToken already has), `decide` sets COMMITTED or ABORTED once, `finish`
  marks every participant done, `resolve` is a resolver's decide (ABORTED only for a record past
  its time) and `read` reads it. Reply: {"record": RECORD | null}.
- `txn_prepare` to each partition holding items of the transaction: check each action's
  condition and lock its item for the attempt, all or none of them. Reply: {"votes": [VOTE, ...]
  (`core.transactions.Vote.to_json`, in the payload's order), "sizes": [[old_bytes, new_bytes],
  ...], "costs": [COST, ...] (`core.transactions.Cost.to_json`)}; nothing is locked unless every
  vote is yes, and the partition is charged the costs (its write capacity) only then.
- `txn_apply` (unary, to a node) once the record is decided: commit (apply each locked item's
  write through `replica.apply`) or release every lock of the attempt on that node. Idempotent:
  an attempt already applied there applies nothing. Reply: {"applied": int}.
- `txn_sweep` (unary, to a node), every few seconds from each router: the locks and records left
  behind (older than `limits.TRANSACTION_RESOLVE_SECONDS`), for the router to resolve, and the
  forgetting of records past ClientRequestToken's 10 minutes. Reply: {"locks": [[attempt, record
  table id, record partition id], ...], "records": [[record id, table id, partition id], ...]}.

And for TransactGetItems, `txn_get`: a read of several items of one partition that also reports
which are prepared by a transaction and the partition's last change seq, and, given an earlier
round's seq, whether any of these items was written since, so the router can check that they
held still between two rounds. Reply: {"items": [ITEM | null, ...], "read_bytes": [int, ...],
"locked": bool, "locks": [bool, ...], "last_seq": int, "changed": bool (with `since`)}, or
{"throttled": VOTE} when it was asked to charge the partition's read capacity and the partition
had none left.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Self


@dataclasses.dataclass(slots=True)
class TxnRecordPayload:
    """txn_record: `action` is begin, decide, finish, resolve or read.

    begin: `record` (the PENDING record's JSON) and `now`-independent fields; decide: `attempt`
    and `outcome`; finish and resolve: `attempt`.
    """

    action: str
    record_id: str
    record: dict[str, Any] | None = None
    attempt: int = 0
    outcome: str | None = None

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> Self:
        return cls(
            body["action"],
            body["record_id"],
            body.get("record"),
            int(body.get("attempt") or 0),
            body.get("outcome"),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "action": self.action,
            "record_id": self.record_id,
            "record": self.record,
            "attempt": self.attempt,
            "outcome": self.outcome,
        }


@dataclasses.dataclass(slots=True)
class TxnPreparePayload:
    """txn_prepare: `actions` are [{"op": "put"|"update"|"delete"|"check", "body": the put,
    update or delete payload's JSON (`rpc.ops`), or for a check {"key", "condition", "names",
    "values", "return_on_failure"}}], all on the addressed partition. `record` is [table id,
    partition id] of the record's partition, kept in each lock so a resolver finds it."""

    attempt: str
    record: list[str]
    actions: list[dict[str, Any]]

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> Self:
        return cls(body["attempt"], list(body["record"]), list(body["actions"]))

    def to_json(self) -> dict[str, Any]:
        return {"attempt": self.attempt, "record": self.record, "actions": self.actions}


@dataclasses.dataclass(slots=True)
class TxnApplyPayload:
    """txn_apply: commit (`commit` true) or release every lock of `attempt` on the node."""

    attempt: str
    commit: bool

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> Self:
        return cls(body["attempt"], body["commit"] is True)

    def to_json(self) -> dict[str, Any]:
        return {"attempt": self.attempt, "commit": self.commit}


@dataclasses.dataclass(slots=True)
class TxnSweepPayload:
    """txn_sweep: no fields; the node's own clock decides what is old."""

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> Self:
        return cls()

    def to_json(self) -> dict[str, Any]:
        return {}


@dataclasses.dataclass(slots=True)
class TxnGetPayload:
    """txn_get: `gets` are [{"key": KEY, "projection": str | null, "names": NAMES | null}] of the
    addressed partition; `charge` asks the node to charge the partition's read capacity for
    them (a TransactGetItems pays for its first round only); `since` (an earlier round's
    `last_seq`) asks whether any of the items was written after it."""

    gets: list[dict[str, Any]]
    charge: bool = False
    since: int | None = None

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> Self:
        since = body.get("since")
        return cls(
            list(body["gets"]), body.get("charge") is True, None if since is None else int(since)
        )

    def to_json(self) -> dict[str, Any]:
        return {"gets": self.gets, "charge": self.charge, "since": self.since}
