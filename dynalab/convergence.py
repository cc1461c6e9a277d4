"""The GSI convergence checker: does a global secondary index hold exactly the projection of its
table? For tests and the fault lab, through any DynamoDB endpoint with boto3.

`check` reads the table (a strongly consistent Scan) and the index (a Scan of the index, which
returns its entries as stored) and compares them (`core.gsi.compare`). `wait_converged` is the
standard test for eventual consistency: it retries while the index is a subset of what may be
there (the expected entries, plus the `allowed` projections of earlier versions of items, which
may linger until the replicator catches up), and fails at once on an entry that should never be
there: a phantom, which no delay explains.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from typing import Any

from core import gsi
from core.catalog import IndexDef, IndexStatus
from core.keys import KeyAttribute, KeyShape
from core.values import Item

CONVERGENCE_POLL_SECONDS = 0.05


class IndexDiverged(AssertionError):
    """An index holds an entry no version of its table ever projected, or did not converge in
    time."""


def _pages(client: Any, **request: Any) -> Iterator[Item]:
    while True:
        page = client.scan(**request)
        yield from page.get("Items", [])
        last = page.get("LastEvaluatedKey")
        if last is None:
            return
        request["ExclusiveStartKey"] = last


def describe_index(client: Any, table_name: str, index_name: str) -> tuple[IndexDef, KeyShape]:
    """The index's definition and its table's key shape, as DescribeTable tells them."""
    table = client.describe_table(TableName=table_name)["Table"]
    types = {d["AttributeName"]: d["AttributeType"] for d in table["AttributeDefinitions"]}

    def shape(key_schema: list[dict[str, str]]) -> KeyShape:
        # A global index's key may have several HASH elements (multi-attribute keys), all first.
        return KeyShape(
            tuple(
                KeyAttribute(
                    e["AttributeName"],
                    types[e["AttributeName"]],
                    "partition" if e["KeyType"] == "HASH" else "sort",
                )
                for e in key_schema
            ),
            sum(e["KeyType"] == "HASH" for e in key_schema),
        )

    described = next(
        i for i in table.get("GlobalSecondaryIndexes", []) if i["IndexName"] == index_name
    )
    projection = described["Projection"]
    index = IndexDef(
        name=index_name,
        key_shape=shape(described["KeySchema"]),
        projection=projection["ProjectionType"],
        status=IndexStatus(described["IndexStatus"]),
        non_key_attributes=tuple(projection.get("NonKeyAttributes", ())),
    )
    return index, shape(table["KeySchema"])


def check(
    client: Any, table_name: str, index_name: str, allowed: Iterable[Item] = ()
) -> gsi.Convergence:
    """The index compared with the projection of the table as it is now."""
    index, table_shape = describe_index(client, table_name, index_name)
    items = list(_pages(client, TableName=table_name, ConsistentRead=True))
    entries = list(_pages(client, TableName=table_name, IndexName=index_name))
    expected = gsi.expected_entries(items, index, table_shape)
    return gsi.compare(entries, expected, gsi.expected_entries(allowed, index, table_shape))


def wait_converged(
    client: Any,
    table_name: str,
    index_name: str,
    timeout: float,
    allowed: Iterable[Item] = (),
) -> gsi.Convergence:
    """Wait until the index holds exactly the projection of its table; raise IndexDiverged at
    once on an entry outside the expected and `allowed` ones (earlier versions of the items,
    whose projections may linger), or when `timeout` seconds pass first."""
    allowed = list(allowed)
    deadline = time.monotonic() + timeout
    while True:
        result = check(client, table_name, index_name, allowed)
        if result.violations:
            raise IndexDiverged(
                f"index {index_name} of {table_name} holds entries no version of the table "
                f"projected: {list(result.violations)[:5]}"
            )
        if result.converged:
            return result
        if time.monotonic() >= deadline:
            raise IndexDiverged(
                f"index {index_name} of {table_name} did not converge in {timeout} s: "
                f"{len(result.missing)} missing (e.g. {list(result.missing)[:3]}), "
                f"{len(result.extra)} extra (e.g. {list(result.extra)[:3]})"
            )
        time.sleep(CONVERGENCE_POLL_SECONDS)
