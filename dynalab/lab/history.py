"""A history: every operation a lab workload issued, with when it was invoked and completed and
what came of it.

This is the checkers' one input, kept pure (no IO beyond turning records to and from JSON lines).
An operation's outcome is one of three, and the difference between the last two is the heart of
the lab: `ok` (the server acknowledged it), `failed` (the server said it did not happen: any 4xx,
or a 503 ServiceUnavailable, which dynalab answers only for a request it did not apply), and
`unknown` (it may or may not have happened: a 500 InternalServerError, which dynalab answers when a
write was sent to its node and no answer came back, "may or may not have been applied"; or the
client's own timeout or a connection broken after the request was sent). See
docs/architecture/failures.md, "Deadlines, and when the outcome of a write is unknown".
"""

from __future__ import annotations

import enum
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

# The register, counter and list workloads' operations.
WRITE = "write"  # PutItem (or one put of a BatchWriteItem) of a unique value.
READ = "read"  # GetItem with ConsistentRead; value is what it read (None: no item).
CAS = "cas"  # PutItem conditional on the current value; value is [expected, new].
ADD = "add"  # UpdateItem ADD of a positive number; value is the number.
APPEND = "append"  # UpdateItem SET list_append; value is the unique element appended.
# The indexed workload's (`indexed`): a table with a global secondary index.
INDEX_WRITE = "index-write"  # PutItem of a unique value; value is [group or None, value].
INDEX_READ = "index-read"  # Query of the index; key is the group, value its [key, value] pairs.
INDEX_SCAN = "index-scan"  # The final scans; value is {"items", "entries"}: [key, group, value].
INDEX_CREATE = "index-create"  # UpdateTable adding the index while the clients run.
# The bank workload's operations (key "bank").
TRANSFER = "transfer"  # TransactWriteItems moving an amount; value is [source, target, amount].
BALANCES = "balances"  # TransactGetItems of every account; value is {account: balance}.
OPENING_BALANCE = 100  # Each bank account's balance when a run starts.
OPERATIONS = frozenset(
    {
        WRITE,
        READ,
        CAS,
        ADD,
        APPEND,
        INDEX_WRITE,
        INDEX_READ,
        INDEX_SCAN,
        INDEX_CREATE,
        TRANSFER,
        BALANCES,
    }
)

CONDITION_FAILED = "ConditionalCheckFailedException"
UNKNOWN_OUTCOME_TEXT = "may or may not have been applied"


class Outcome(enum.StrEnum):
    OK = "ok"
    FAILED = "failed"
    UNKNOWN = "unknown"


def classify(status: int) -> Outcome:
    """The outcome of a DynamoDB reply: 200 is ok; a 4xx or a 503 is failed (nothing was applied);
    any 500 is unknown. dynalab answers a 500 for a write whose answer never came ("may or may not
    have been applied"); a 500 for a bug also leaves the outcome open, so it counts as unknown
    too, never as failed."""
    if status == 200:
        return Outcome.OK
    if 400 <= status < 500 or status == 503:
        return Outcome.FAILED
    return Outcome.UNKNOWN


@dataclass(frozen=True)
class Operation:
    """One operation of a history. Times are seconds since the run began, on one monotonic clock.

    `process` is the client that issued it (a client issues one operation at a time), `value` what
    it wrote or read (see the operation names above), `error` the DynamoDB error type or the
    client's exception when it was not ok, and `final` marks the reads taken after the faults were
    healed, which the counter and list checkers compare against."""

    process: int
    op: str
    key: str
    value: Any
    invoke_s: float
    complete_s: float
    outcome: Outcome
    error: str | None = None
    final: bool = False

    def __post_init__(self) -> None:
        if self.op not in OPERATIONS:
            raise ValueError(f"unknown operation {self.op!r}")
        if self.complete_s < self.invoke_s:
            raise ValueError(f"operation completes before it is invoked: {self}")

    @property
    def ok(self) -> bool:
        return self.outcome is Outcome.OK

    @property
    def condition_failed(self) -> bool:
        """A conditional write the server definitely refused because its condition was false."""
        return self.outcome is Outcome.FAILED and self.error == CONDITION_FAILED

    def to_json(self) -> dict[str, Any]:
        record: dict[str, Any] = {
            "process": self.process,
            "op": self.op,
            "key": self.key,
            "value": self.value,
            "invoke_s": round(self.invoke_s, 6),
            "complete_s": round(self.complete_s, 6),
            "outcome": self.outcome.value,
        }
        if self.error is not None:
            record["error"] = self.error
        if self.final:
            record["final"] = True
        return record

    @classmethod
    def from_json(cls, record: dict[str, Any]) -> Operation:
        return cls(
            process=int(record["process"]),
            op=str(record["op"]),
            key=str(record["key"]),
            value=record.get("value"),
            invoke_s=float(record["invoke_s"]),
            complete_s=float(record["complete_s"]),
            outcome=Outcome(record["outcome"]),
            error=record.get("error"),
            final=bool(record.get("final", False)),
        )


def by_key(history: Iterable[Operation]) -> dict[str, list[Operation]]:
    """The history split by key, each part in invocation order."""
    keys: dict[str, list[Operation]] = {}
    for operation in history:
        keys.setdefault(operation.key, []).append(operation)
    for operations in keys.values():
        operations.sort(key=lambda o: o.invoke_s)
    return keys


def final_reads(history: Iterable[Operation]) -> dict[str, Operation]:
    """The last successful final read of each key."""
    reads: dict[str, Operation] = {}
    for operation in history:
        if operation.final and operation.op == READ and operation.ok:
            previous = reads.get(operation.key)
            if previous is None or operation.complete_s >= previous.complete_s:
                reads[operation.key] = operation
    return reads


def parse_lines(lines: Iterable[str]) -> Iterator[Operation]:
    """Operations from JSON lines (blank lines skipped)."""
    for line in lines:
        if line.strip():
            yield Operation.from_json(json.loads(line))
