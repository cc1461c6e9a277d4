"""The indexed workload: a table with a global secondary index, kept by the GSI replicator, and
how its final state is recorded (the checks are `checkers.check_index_reads_real` and
`checkers.check_index_converged`).

Table `lab-indexed` (key `k`) has the GSI `by-group` on attribute `g` (projection ALL). A write
puts an item with a unique `v` and either a group `g` drawn from a few, or no `g` at all, which
takes the item out of the index (a sparse index: the replicator must delete its entry). A read
queries the index for one group. The index is eventually consistent, so a read may be stale, but
never wrong:

- `index-reads-real`: every entry a read returns is an item some write put with that key, group
  and value, invoked before the read returned and not refused (no phantom, no refused write);
- `index-converged`: after the faults are healed, the index holds exactly the projection of the
  table. The final step scans both until they agree (or time is up) and records the last pair of
  scans as one `final` operation, so the check is a pure function of the history like every
  other, and `dynalab lab check` can judge it again.

With an `IndexPlan` whose `online_at_s` is set, the table is created without the index, filled
with `preload` items (in groups of their own, which the clients never query, so their reads stay
small), and the index is added by UpdateTable at that time of the run, while the clients write:
the replicator then backfills it (index CREATING, Backfilling true) and follows the writes made
meanwhile. Index queries are refused until it is ACTIVE; the final scans check the backfilled
items and the followed writes alike.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dynalab.bench import DynamoDBClient, DynamoDBError
from dynalab.lab.history import INDEX_CREATE, INDEX_SCAN, Operation, Outcome

if TYPE_CHECKING:
    from dynalab.lab.workloads import Recorder

TABLE = "lab-indexed"
INDEX = "by-group"
GROUPS = ("g0", "g1", "g2")
UNGROUPED_SHARE = 0.2  # Writes that leave the item out of the index.
CONVERGE_TIMEOUT_S = 60.0
CONVERGE_PAUSE_S = 0.2

CREATE_PAUSE_S = 0.5  # Between attempts of the online UpdateTable.
BATCH_ITEMS = 25  # BatchWriteItem's limit, for the preload.
ATTRIBUTES = [
    {"AttributeName": "k", "AttributeType": "S"},
    {"AttributeName": "g", "AttributeType": "S"},
]
INDEX_DEFINITION = {
    "IndexName": INDEX,
    "KeySchema": [{"AttributeName": "g", "KeyType": "HASH"}],
    "Projection": {"ProjectionType": "ALL"},
}


@dataclass(frozen=True)
class IndexPlan:
    online_at_s: float | None = None  # None: the index comes with the table.
    preload: int = 0  # Items put before the run, for a backfill to copy.


def create_table_request(plan: IndexPlan) -> dict[str, Any]:
    # DynamoDB refuses an attribute definition that no key uses: `g` comes with the index.
    request: dict[str, Any] = {
        "TableName": TABLE,
        "AttributeDefinitions": ATTRIBUTES[:1],
        "KeySchema": [{"AttributeName": "k", "KeyType": "HASH"}],
        "BillingMode": "PAY_PER_REQUEST",
    }
    if plan.online_at_s is None:
        request["AttributeDefinitions"] = ATTRIBUTES
        request["GlobalSecondaryIndexes"] = [INDEX_DEFINITION]
    return request


async def preload(api: DynamoDBClient, plan: IndexPlan) -> None:
    """Put the plan's preloaded items, in groups the clients never query."""
    items = [
        {"k": {"S": f"pre{n}"}, "g": {"S": f"pre-g{n % 3}"}, "v": {"S": f"pre-{n}"}}
        for n in range(plan.preload)
    ]
    for start in range(0, len(items), BATCH_ITEMS):
        pending = [{"PutRequest": {"Item": item}} for item in items[start : start + BATCH_ITEMS]]
        while pending:
            reply = await api.request("BatchWriteItem", {"RequestItems": {TABLE: pending}})
            pending = reply.get("UnprocessedItems", {}).get(TABLE, [])


async def create_online(api: DynamoDBClient, recorder: Recorder, plan: IndexPlan) -> None:
    """At `plan.online_at_s`, add the index by UpdateTable, again until it is accepted (or the
    run ends); each attempt is an operation of the history."""
    if plan.online_at_s is None:
        return
    await asyncio.sleep(max(0.0, plan.online_at_s - recorder.now()))
    request = {
        "TableName": TABLE,
        "AttributeDefinitions": ATTRIBUTES,
        "GlobalSecondaryIndexUpdates": [{"Create": INDEX_DEFINITION}],
    }
    while True:
        invoke = recorder.now()
        status, error = Outcome.OK, None
        try:
            await api.request("UpdateTable", request)
        except DynamoDBError as exc:
            status, error = Outcome.FAILED, exc.type_name
        except (TimeoutError, OSError) as exc:
            status, error = Outcome.UNKNOWN, type(exc).__name__
        recorder.history.append(
            Operation(0, INDEX_CREATE, TABLE, INDEX, invoke, recorder.now(), status, error)
        )
        # An UpdateTable whose answer was lost may have been applied: then the index exists.
        if status is Outcome.OK or error == "ValidationException":
            return
        await asyncio.sleep(CREATE_PAUSE_S)


def write_request(key: str, group: str | None, value: str) -> dict[str, Any]:
    item = {"k": {"S": key}, "v": {"S": value}}
    if group is not None:
        item["g"] = {"S": group}
    return {"TableName": TABLE, "Item": item}


def read_request(group: str) -> dict[str, Any]:
    return {
        "TableName": TABLE,
        "IndexName": INDEX,
        "KeyConditionExpression": "g = :g",
        "ExpressionAttributeValues": {":g": {"S": group}},
    }


def entries_of(reply: dict[str, Any]) -> list[list[str]]:
    """[key, value] of every item a Query of the index returned."""
    return sorted([item["k"]["S"], item["v"]["S"]] for item in reply.get("Items", []))


def _rows(items: list[dict[str, Any]]) -> list[list[str | None]]:
    """[key, group, value] of each item (group None: not in the index)."""
    return sorted(
        [item["k"]["S"], item["g"]["S"] if "g" in item else None, item["v"]["S"]] for item in items
    )


async def _scan(api: DynamoDBClient, request: dict[str, Any]) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    while True:
        reply = await api.request("Scan", request)
        items.extend(reply.get("Items", []))
        last = reply.get("LastEvaluatedKey")
        if last is None:
            return items
        request = {**request, "ExclusiveStartKey": last}


async def final_scan(api: DynamoDBClient, recorder: Recorder) -> Operation:
    """Scan the table (strongly) and the index until the index is the table's projection, or until
    CONVERGE_TIMEOUT_S; the last pair of scans as one final operation."""
    invoke = recorder.now()
    deadline = invoke + CONVERGE_TIMEOUT_S
    scanned: dict[str, Any] = {}
    while True:
        try:
            table = _rows(await _scan(api, {"TableName": TABLE, "ConsistentRead": True}))
            index = _rows(await _scan(api, {"TableName": TABLE, "IndexName": INDEX}))
            scanned = {"items": table, "entries": index}
            if index == [row for row in table if row[1] is not None]:
                break
        except (DynamoDBError, TimeoutError, OSError):
            pass  # A cluster still recovering; scan again.
        if recorder.now() > deadline:
            break
        await asyncio.sleep(CONVERGE_PAUSE_S)
    outcome = Outcome.OK if scanned else Outcome.FAILED
    complete = recorder.now()
    return Operation(0, INDEX_SCAN, TABLE, scanned or None, invoke, complete, outcome, None, True)
