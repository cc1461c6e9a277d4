"""`dynalab gsi violations TABLE INDEX`: the items a global secondary index leaves out because
an index key attribute violates its key schema (seed 004 O-22 to O-24), as DynamoDB's Violation
Detector reports them.

It reads the index's key schema with DescribeTable, scans the table (strongly consistent, page
after page) and checks every item's index key attributes (`core.gsi.violations`): one CSV row per
violating item on standard output, with the columns of the Violation Detector's report (the
table's hash and range key, then for the index's hash and range key the value, the violation
type and its description, with DynamoDB's message for a write that would set the value so);
keys and values as DynamoDB JSON. A summary goes to standard error. Works through any endpoint.
"""

from __future__ import annotations

import csv
import json
import sys
from collections.abc import Iterator
from typing import Any, TextIO

from core import gsi
from core.values import Item
from dynalab import convergence

HEADER = (
    "Table Hash Key",
    "Table Range Key",
    "GSI Hash Key Value",
    "GSI Hash Key Violation Type",
    "GSI Hash Key Violation Description",
    "GSI Range Key Value",
    "GSI Range Key Violation Type",
    "GSI Range Key Violation Description",
)


def detect(client: Any, table_name: str, index_name: str) -> Iterator[list[gsi.Violation]]:
    """The violations of each violating item of the table, item by item, as the scan finds
    them."""
    index, table_shape = convergence.describe_index(client, table_name, index_name)
    request: dict[str, Any] = {"TableName": table_name, "ConsistentRead": True}
    while True:
        page = client.scan(**request)
        for item in page.get("Items", []):
            found = gsi.violations(item, index, table_shape)
            if found:
                yield found
        last = page.get("LastEvaluatedKey")
        if last is None:
            return
        request["ExclusiveStartKey"] = last


def _json(value: Any) -> str:
    return "" if value is None else json.dumps(value, sort_keys=True)


def row(
    found: list[gsi.Violation], table_key: Item, hash_key: str, range_key: str | None
) -> list[str]:
    """One CSV row of the report for an item's violations."""
    by_role = {violation.role: violation for violation in found}
    cells = [
        _json(table_key.get(hash_key)),
        _json(None if range_key is None else table_key.get(range_key)),
    ]
    for role in ("partition", "sort"):
        violation = by_role.get(role)
        if violation is None:
            cells.extend(["", "", ""])
        else:
            cells.extend([_json(violation.value), violation.kind, violation.description])
    return cells


def run(
    endpoint: str, table_name: str, index_name: str, region: str, out: TextIO = sys.stdout
) -> int:
    """Print the report for one index; 0 whether or not there are violations."""
    try:
        import boto3  # The `client` extra: `pip install '.[client]'`.
    except ImportError:
        print("dynalab gsi violations needs boto3: pip install '.[client]'", file=sys.stderr)
        return 2
    client = boto3.client(
        "dynamodb",
        endpoint_url=endpoint,
        region_name=region,
        aws_access_key_id="dynalab",
        aws_secret_access_key="dynalab",
    )
    try:
        table = client.describe_table(TableName=table_name)["Table"]
    except client.exceptions.ResourceNotFoundException:
        print(f"dynalab gsi violations: no table named {table_name}", file=sys.stderr)
        return 2
    if not any(i["IndexName"] == index_name for i in table.get("GlobalSecondaryIndexes", ())):
        print(
            f"dynalab gsi violations: table {table_name} has no global index {index_name}",
            file=sys.stderr,
        )
        return 2
    described = table["KeySchema"]
    hash_key = next(e["AttributeName"] for e in described if e["KeyType"] == "HASH")
    range_key = next((e["AttributeName"] for e in described if e["KeyType"] == "RANGE"), None)
    writer = csv.writer(out)
    writer.writerow(HEADER)
    items = 0
    for found in detect(client, table_name, index_name):
        writer.writerow(row(found, found[0].key, hash_key, range_key))
        items += 1
    print(f"{items} items of {table_name} violate index {index_name}", file=sys.stderr)
    return 0
