"""DynamoDB behaviours at the edges of the expression language, through boto3 on a real cluster.

Each test is one behaviour issue #14 found missing: an update that only removes leaves a missing
item missing; comparing with a constant that has no order is a ValidationException, not a failed
condition; functions of the other expression kind are "not allowed"; an unknown function in an
update expression is a syntax error; AttributeUpdates' type mismatches say "mismatch"; SET's
functions nest as the API Reference's grammar says; document paths deeper than 32 levels, list
indexes past a 32-bit integer, `#name` keys over 255 bytes and empty attribute names are refused.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.integration.conftest import error_of

KEY = {"pk": {"S": "k"}}


@pytest.fixture
def table(dynamodb: Any, create_table: Callable[..., str], table_name: Callable[[], str]) -> str:
    return create_table(dynamodb, table_name())


@pytest.mark.parametrize(
    ("arguments"),
    [
        {"UpdateExpression": "REMOVE a"},
        {"UpdateExpression": "REMOVE a.b[2].c"},  # A nested path of a missing item: no error.
        {
            "UpdateExpression": "DELETE s :v",
            "ExpressionAttributeValues": {":v": {"SS": ["x"]}},
        },
        {"AttributeUpdates": {"a": {"Action": "DELETE"}}},
    ],
)
def test_an_update_that_only_removes_does_not_create_a_missing_item(
    dynamodb: Any, table: str, arguments: dict[str, Any]
) -> None:
    reply = dynamodb.update_item(TableName=table, Key=KEY, ReturnValues="ALL_NEW", **arguments)
    assert "Attributes" not in reply
    assert "Item" not in dynamodb.get_item(TableName=table, Key=KEY, ConsistentRead=True)
    # With a SET beside the REMOVE the item is created, as before.
    reply = dynamodb.update_item(
        TableName=table,
        Key=KEY,
        UpdateExpression="SET b = :b REMOVE a",
        ExpressionAttributeValues={":b": {"N": "1"}},
        ReturnValues="ALL_NEW",
    )
    assert reply["Attributes"] == {**KEY, "b": {"N": "1"}}


@pytest.mark.parametrize(
    ("expression", "values", "operator", "operand_type"),
    [
        ("a < :v", {":v": {"L": []}}, "<", "L"),
        ("a <= :v", {":v": {"M": {}}}, "<=", "M"),
        ("a > :v", {":v": {"SS": ["x"]}}, ">", "SS"),
        ("a >= :v", {":v": {"BOOL": True}}, ">=", "BOOL"),
        (":v < a", {":v": {"NULL": True}}, "<", "NULL"),
        ("a BETWEEN :v AND :w", {":v": {"L": []}, ":w": {"L": []}}, "BETWEEN", "L"),
        ("a BETWEEN :v AND :w", {":v": {"N": "1"}, ":w": {"BOOL": True}}, "BETWEEN", "BOOL"),
    ],
)
def test_ordering_a_constant_without_an_order_is_a_validation_error(
    dynamodb: Any,
    table: str,
    expression: str,
    values: dict[str, Any],
    operator: str,
    operand_type: str,
) -> None:
    problem = (
        "Incorrect operand type for operator or function; "
        f"operator or function: {operator}, operand type: {operand_type}"
    )
    dynamodb.put_item(TableName=table, Item={**KEY, "a": {"N": "1"}})
    assert error_of(
        lambda: dynamodb.put_item(
            TableName=table,
            Item=KEY,
            ConditionExpression=expression,
            ExpressionAttributeValues=values,
        )
    ) == (400, "ValidationException", f"Invalid ConditionExpression: {problem}")
    assert error_of(
        lambda: dynamodb.scan(
            TableName=table, FilterExpression=expression, ExpressionAttributeValues=values
        )
    ) == (400, "ValidationException", f"Invalid FilterExpression: {problem}")
    # The item was not changed by the refused put.
    item = dynamodb.get_item(TableName=table, Key=KEY, ConsistentRead=True)["Item"]
    assert item == {**KEY, "a": {"N": "1"}}


@pytest.mark.parametrize("operand", ["Value", "AttributeValueList"])
def test_expected_ordering_a_value_without_an_order_is_a_validation_error(
    dynamodb: Any, table: str, operand: str
) -> None:
    # The legacy Expected parameter words it as QueryFilter and ScanFilter do, naming the
    # ComparisonOperator (it was "Invalid ConditionExpression", a parameter the request lacks).
    value = {"L": []}
    expected = {
        "a": {"ComparisonOperator": "LT", operand: value if operand == "Value" else [value]}
    }
    dynamodb.put_item(TableName=table, Item={**KEY, "a": {"N": "1"}})
    assert error_of(lambda: dynamodb.put_item(TableName=table, Item=KEY, Expected=expected)) == (
        400,
        "ValidationException",
        "One or more parameter values were invalid: ComparisonOperator LT is not valid for L "
        "AttributeValue type",
    )
    item = dynamodb.get_item(TableName=table, Key=KEY, ConsistentRead=True)["Item"]
    assert item == {**KEY, "a": {"N": "1"}}


@pytest.mark.parametrize(
    ("expression", "function"),
    [
        ("list_append(a, b) = c", "list_append"),
        ("if_not_exists(a, b)", "if_not_exists"),
    ],
)
def test_update_functions_are_not_allowed_in_a_condition(
    dynamodb: Any, table: str, expression: str, function: str
) -> None:
    assert error_of(
        lambda: dynamodb.put_item(TableName=table, Item=KEY, ConditionExpression=expression)
    ) == (
        400,
        "ValidationException",
        "Invalid ConditionExpression: The function is not allowed in a condition expression; "
        f"function: {function}",
    )


@pytest.mark.parametrize("function", ["attribute_exists", "size", "contains"])
def test_condition_functions_are_not_allowed_in_an_update(
    dynamodb: Any, table: str, function: str
) -> None:
    arguments = "b" if function != "contains" else "b, c"
    assert error_of(
        lambda: dynamodb.update_item(
            TableName=table, Key=KEY, UpdateExpression=f"SET a = {function}({arguments})"
        )
    ) == (
        400,
        "ValidationException",
        "Invalid UpdateExpression: The function is not allowed in an update expression; "
        f"function: {function}",
    )


@pytest.mark.parametrize(
    ("expression", "token", "near"),
    [
        ("SET a = foo(b)", "(", "foo(b"),
        ("SET a = List_Append(b, c)", "(", "List_Append(b"),  # Function names are case-sensitive.
        ("SET a-b = c", "-", "a-b"),
        ("SET a = b$c", "$", "b$c"),
    ],
)
def test_unknown_functions_and_bad_names_in_an_update_are_syntax_errors(
    dynamodb: Any, table: str, expression: str, token: str, near: str
) -> None:
    assert error_of(
        lambda: dynamodb.update_item(TableName=table, Key=KEY, UpdateExpression=expression)
    ) == (
        400,
        "ValidationException",
        f'Invalid UpdateExpression: Syntax error; token: "{token}", near: "{near}"',
    )
    assert "Item" not in dynamodb.get_item(TableName=table, Key=KEY, ConsistentRead=True)


@pytest.mark.parametrize(
    ("action", "value"),
    [("ADD", {"NS": ["1"]}), ("DELETE", {"NS": ["1"]}), ("ADD", {"N": "1"})],
)
def test_legacy_add_and_delete_of_another_type_is_a_type_mismatch(
    dynamodb: Any, table: str, action: str, value: dict[str, Any]
) -> None:
    dynamodb.put_item(TableName=table, Item={**KEY, "s": {"SS": ["a"]}})
    assert error_of(
        lambda: dynamodb.update_item(
            TableName=table, Key=KEY, AttributeUpdates={"s": {"Action": action, "Value": value}}
        )
    ) == (400, "ValidationException", "Type mismatch for attribute to update")
    # The expression form of the same mistake keeps its own words.
    assert error_of(
        lambda: dynamodb.update_item(
            TableName=table,
            Key=KEY,
            UpdateExpression=f"{action} s :v",
            ExpressionAttributeValues={":v": value},
        )
    ) == (
        400,
        "ValidationException",
        "An operand in the update expression has an incorrect data type",
    )


def test_set_functions_nest_as_the_api_reference_grammar_says(dynamodb: Any, table: str) -> None:
    """SET's functions take operands (`if_not_exists (path, operand)`, `list_append (operand,
    operand)`), and an operand is a path or a function: functions nest, an addition inside one is
    a syntax error."""
    values = {":a": {"L": [{"S": "a"}]}, ":b": {"L": [{"S": "b"}]}}
    reply = dynamodb.update_item(
        TableName=table,
        Key=KEY,
        UpdateExpression="SET l = if_not_exists(l, list_append(:a, :b)), "
        "m = list_append(list_append(:a, :b), if_not_exists(m, :a))",
        ExpressionAttributeValues=values,
        ReturnValues="ALL_NEW",
    )
    assert reply["Attributes"]["l"] == {"L": [{"S": "a"}, {"S": "b"}]}
    assert reply["Attributes"]["m"] == {"L": [{"S": "a"}, {"S": "b"}, {"S": "a"}]}
    assert error_of(
        lambda: dynamodb.update_item(
            TableName=table,
            Key=KEY,
            UpdateExpression="SET l = list_append(:a + :b, l)",
            ExpressionAttributeValues=values,
        )
    ) == (
        400,
        "ValidationException",
        'Invalid UpdateExpression: Syntax error; token: "+", near: ":a + :b"',
    )


def test_paths_too_deep_huge_list_indexes_and_long_name_keys_are_refused(
    dynamodb: Any, table: str
) -> None:
    deep = "a" + ".b" * 32
    for call, message in (
        (
            lambda: dynamodb.get_item(TableName=table, Key=KEY, ProjectionExpression=deep),
            "Invalid ProjectionExpression: The document path has too many nesting levels; "
            "nesting levels: 33",
        ),
        (
            lambda: dynamodb.get_item(
                TableName=table, Key=KEY, ProjectionExpression="a[2147483648]"
            ),
            "Invalid ProjectionExpression: List index is not within the allowable range; "
            "index: [2147483648]",
        ),
        (
            lambda: dynamodb.get_item(
                TableName=table,
                Key=KEY,
                ProjectionExpression="#" + "n" * 255,
                ExpressionAttributeNames={"#" + "n" * 255: "a"},
            ),
            "ExpressionAttributeNames contains invalid key: The expression attribute map "
            "contains a key that is too long; size of key: 256",
        ),
    ):
        assert error_of(call) == (400, "ValidationException", message)
    # The Developer Guide's naming rule, in its words (DynamoDB's message is not published).
    name_rule = (
        "One or more parameter values were invalid: Attribute names must be at least one "
        "character long and less than 64 KB in size"
    )
    assert error_of(lambda: dynamodb.put_item(TableName=table, Item={**KEY, "": {"S": "x"}})) == (
        400,
        "ValidationException",
        name_rule,
    )
    assert error_of(
        lambda: dynamodb.get_item(TableName=table, Key=KEY, AttributesToGet=["a", ""])
    ) == (400, "ValidationException", name_rule)
    # At the bounds themselves the reads succeed.
    dynamodb.get_item(TableName=table, Key=KEY, ProjectionExpression="a" + ".b" * 31)
    dynamodb.get_item(TableName=table, Key=KEY, ProjectionExpression="a[2147483647]")


@pytest.mark.parametrize("update", ["ADD n :v", "SET n = n + :v", "SET n = :v - n"])
def test_arithmetic_past_38_digits_of_magnitude_says_number_overflow(
    dynamodb: Any, table: str, update: str
) -> None:
    # The largest magnitude DynamoDB stores is 9.9999999999999999999999999999999999999E+125.
    largest = "9.9999999999999999999999999999999999999E+125"
    dynamodb.put_item(TableName=table, Item={**KEY, "n": {"N": largest}})
    operand = largest if update != "SET n = :v - n" else f"-{largest}"
    assert error_of(
        lambda: dynamodb.update_item(
            TableName=table,
            Key=KEY,
            UpdateExpression=update,
            ExpressionAttributeValues={":v": {"N": operand}},
        )
    ) == (
        400,
        "ValidationException",
        "Number overflow. Attempting to store a number with magnitude larger than supported range",
    )
    # Unchanged, and returned as DynamoDB returns numbers: without an exponent.
    item = dynamodb.get_item(TableName=table, Key=KEY, ConsistentRead=True)["Item"]
    assert item["n"] == {"N": "9" * 38 + "0" * 88}


def test_a_scan_filter_compares_booleans_lists_and_maps_for_equality(
    dynamodb: Any, table: str
) -> None:
    # DynamoDB filters with EQ and NE on every type (the API Reference's list for EQ is narrower).
    kinds = {"b": {"BOOL": True}, "l": {"L": [{"N": "1"}]}, "m": {"M": {"x": {"S": "y"}}}}
    dynamodb.put_item(TableName=table, Item={**KEY, **kinds})
    dynamodb.put_item(TableName=table, Item={"pk": {"S": "other"}, "b": {"BOOL": False}})
    for attribute, value in kinds.items():
        for operator, expected in (("EQ", ["k"]), ("NE", ["other"])):
            condition = {"ComparisonOperator": operator, "AttributeValueList": [value]}
            items = dynamodb.scan(TableName=table, ScanFilter={attribute: condition})["Items"]
            assert sorted(item["pk"]["S"] for item in items) == expected, (attribute, operator)
