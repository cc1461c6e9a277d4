"""Expressions nested as deep as DynamoDB allows, through boto3 on a real cluster (issue #14).

DynamoDB bounds an expression by its 4 KB and its 300 operators, not by its nesting. Each
operation that carries a condition (PutItem, UpdateItem and DeleteItem's ConditionExpression,
Query's and Scan's FilterExpression, TransactWriteItems' ConditionCheck) and UpdateItem's SET
values are sent the deepest nesting those bounds allow: the router checks the text, the node parses
it again and evaluates it. One operator more, doubled parentheses, or one byte past 4 KB are
refused with DynamoDB's words.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import pytest

from tests.integration.conftest import error_of

LOWER = {"pk": {"S": "k"}, "sk": {"N": "1"}, "a": {"N": "1"}, "b": {"N": "2"}}  # a < b
HIGHER = {"pk": {"S": "k"}, "sk": {"N": "2"}, "a": {"N": "3"}, "b": {"N": "2"}}  # not a < b
KEY_LOWER = {"pk": LOWER["pk"], "sk": LOWER["sk"]}
KEY_HIGHER = {"pk": HIGHER["pk"], "sk": HIGHER["sk"]}
EXPRESSION_BYTES_MAX = 4096
TOO_MANY = "The expression contains too many operators; operator count: 301"


def nots(levels: int) -> str:
    """``NOT (NOT (... a < b))``: ``levels + 1`` operators; true for HIGHER when odd."""
    return "NOT (" * levels + "a < b" + ")" * levels


def anded(comparisons: int) -> str:
    """``a < b AND (a < b AND (...))``: ``2 * comparisons - 1`` operators; true for LOWER only."""
    return "a < b AND (" * (comparisons - 1) + "a < b" + ")" * (comparisons - 1)


# 300 operators each, nested as deep as 300 operators allow.
NOT_LOWER = nots(298)  # 299 operators, an even number of NOTs: true where a < b
NOT_HIGHER = nots(299)  # 300 operators, an odd number of NOTs: true where not a < b
ANDED_HIGHER = f"NOT ({anded(150)})"  # 300 operators: true where not a < b


@pytest.fixture
def table(dynamodb: Any, create_table: Callable[..., str], table_name: Callable[[], str]) -> str:
    name = create_table(dynamodb, table_name(), hash_key=("pk", "S"), range_key=("sk", "N"))
    dynamodb.put_item(TableName=name, Item=LOWER)
    dynamodb.put_item(TableName=name, Item=HIGHER)
    return name


def refused(call: Callable[[], Any], kind: str, problem: str) -> None:
    assert error_of(call) == (400, "ValidationException", f"Invalid {kind}: {problem}")


def test_conditional_writes_at_300_operators(dynamodb: Any, table: str) -> None:
    for condition, holds in ((NOT_HIGHER, False), (NOT_LOWER, True), (ANDED_HIGHER, False)):
        item = {**LOWER, "c": {"S": condition[:20]}}
        if holds:
            dynamodb.put_item(TableName=table, Item=item, ConditionExpression=condition)
        else:
            put = partial(
                dynamodb.put_item, TableName=table, Item=item, ConditionExpression=condition
            )
            assert error_of(put) == (
                400,
                "ConditionalCheckFailedException",
                "The conditional request failed",
            )
    stored = dynamodb.get_item(TableName=table, Key=KEY_LOWER, ConsistentRead=True)["Item"]
    assert stored["c"] == {"S": NOT_LOWER[:20]}

    reply = dynamodb.update_item(
        TableName=table,
        Key=KEY_HIGHER,
        UpdateExpression="SET c = :c",
        ConditionExpression=ANDED_HIGHER,
        ExpressionAttributeValues={":c": {"S": "updated"}},
        ReturnValues="UPDATED_NEW",
    )
    assert reply["Attributes"] == {"c": {"S": "updated"}}
    assert (
        error_of(
            lambda: dynamodb.delete_item(
                TableName=table, Key=KEY_HIGHER, ConditionExpression=NOT_LOWER
            )
        )[1]
        == "ConditionalCheckFailedException"
    )
    dynamodb.delete_item(TableName=table, Key=KEY_HIGHER, ConditionExpression=NOT_HIGHER)
    assert "Item" not in dynamodb.get_item(TableName=table, Key=KEY_HIGHER, ConsistentRead=True)


def test_filters_at_300_operators(dynamodb: Any, table: str) -> None:
    for condition, expected in ((NOT_HIGHER, HIGHER), (ANDED_HIGHER, HIGHER), (NOT_LOWER, LOWER)):
        query = dynamodb.query(
            TableName=table,
            KeyConditionExpression="pk = :pk",
            FilterExpression=condition,
            ExpressionAttributeValues={":pk": {"S": "k"}},
            ConsistentRead=True,
        )
        assert (query["Items"], query["ScannedCount"]) == ([expected], 2)
        scan = dynamodb.scan(TableName=table, FilterExpression=condition, ConsistentRead=True)
        assert scan["Items"] == [expected]


def test_condition_check_in_a_transaction_at_300_operators(dynamodb: Any, table: str) -> None:
    def check(condition: str) -> Any:
        return dynamodb.transact_write_items(
            TransactItems=[
                {
                    "ConditionCheck": {
                        "TableName": table,
                        "Key": KEY_HIGHER,
                        "ConditionExpression": condition,
                    }
                },
                {
                    "Update": {
                        "TableName": table,
                        "Key": KEY_LOWER,
                        "UpdateExpression": "SET c = :c",
                        "ExpressionAttributeValues": {":c": {"S": condition[:20]}},
                    }
                },
            ]
        )

    status, code, _ = error_of(lambda: check(NOT_LOWER))
    assert (status, code) == (400, "TransactionCanceledException")
    check(ANDED_HIGHER)
    stored = dynamodb.get_item(TableName=table, Key=KEY_LOWER, ConsistentRead=True)["Item"]
    assert stored["c"] == {"S": ANDED_HIGHER[:20]}
    refused(lambda: check(nots(300)), "ConditionExpression", TOO_MANY)


def test_set_functions_nested_to_4_kb(dynamodb: Any, table: str) -> None:
    levels = 255  # the most that fit in 4 KB: 16 bytes a level
    update = "SET l = " + "list_append(" * levels + ":l" + ",:l)" * levels
    assert len(update) <= EXPRESSION_BYTES_MAX
    reply = dynamodb.update_item(
        TableName=table,
        Key=KEY_LOWER,
        UpdateExpression=update,
        ExpressionAttributeValues={":l": {"L": [{"N": "7"}]}},
        ReturnValues="UPDATED_NEW",
    )
    assert reply["Attributes"]["l"] == {"L": [{"N": "7"}] * (levels + 1)}


PADDED = NOT_HIGHER + " " * (EXPRESSION_BYTES_MAX + 1 - len(NOT_HIGHER))


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (nots(300), TOO_MANY),
        (
            "NOT " * 1000 + "a < b",
            "The expression contains too many operators; operator count: 1001",
        ),
        (f"NOT NOT ({anded(150)})", TOO_MANY),
        ("(" * 2000 + "a < b" + ")" * 2000, "The expression has redundant parentheses;"),
        (
            PADDED,
            "Expression size has exceeded the maximum allowed size; "
            f"expression size: {EXPRESSION_BYTES_MAX + 1}",
        ),
    ],
    ids=["301 operators", "1,001 operators", "301 operators anded", "doubled", "4 KB + 1"],
)
def test_past_the_bounds_is_refused_by_every_operation(
    dynamodb: Any, table: str, text: str, problem: str
) -> None:
    refused(
        lambda: dynamodb.put_item(TableName=table, Item=LOWER, ConditionExpression=text),
        "ConditionExpression",
        problem,
    )
    refused(
        lambda: dynamodb.delete_item(TableName=table, Key=KEY_LOWER, ConditionExpression=text),
        "ConditionExpression",
        problem,
    )
    refused(
        lambda: dynamodb.query(
            TableName=table,
            KeyConditionExpression="pk = :pk",
            FilterExpression=text,
            ExpressionAttributeValues={":pk": {"S": "k"}},
        ),
        "FilterExpression",
        problem,
    )
    refused(
        lambda: dynamodb.scan(TableName=table, FilterExpression=text),
        "FilterExpression",
        problem,
    )
    # Nothing was written or deleted by the refused requests.
    assert dynamodb.scan(TableName=table, ConsistentRead=True)["Count"] == 2
