"""router.shapes: request deserialisation against the service model, with DynamoDB's messages."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from core.errors import SerializationError
from router import shapes

ATTRIBUTE_VALUE = "com.amazonaws.dynamodb.v20120810.AttributeValue"


def test_committed_shapes_are_fresh() -> None:
    generate = pytest.importorskip("router.generate_shapes", reason="botocore is a dev dependency")
    committed = Path(generate.OUTPUT).read_text()
    expected = generate.render(generate.service_model(), generate.streams_service_model())
    assert committed == expected, (
        "router/dynamodb_shapes.json is stale: run `make shapes` and commit the result"
    )


def message(operation: str, body: Any) -> str | None:
    try:
        shapes.deserialize(operation, body)
    except SerializationError as error:
        return error.message
    return None


@pytest.mark.parametrize(
    ("operation", "body", "expected"),
    [
        # String members.
        ("DescribeTable", {"TableName": True}, "TRUE_VALUE cannot be converted to String"),
        ("DescribeTable", {"TableName": False}, "FALSE_VALUE cannot be converted to String"),
        ("DescribeTable", {"TableName": 23}, "NUMBER_VALUE cannot be converted to String"),
        ("DescribeTable", {"TableName": 3.5}, "DECIMAL_VALUE cannot be converted to String"),
        (
            "DescribeTable",
            {"TableName": []},
            "Unrecognized collection type class java.lang.String",
        ),
        (
            "DescribeTable",
            {"TableName": {}},
            "Start of structure or map found where not expected",
        ),
        # Integer members.
        ("ListTables", {"Limit": "23"}, "STRING_VALUE cannot be converted to Integer"),
        ("ListTables", {"Limit": True}, "TRUE_VALUE cannot be converted to Integer"),
        ("ListTables", {"Limit": []}, "Unrecognized collection type class java.lang.Integer"),
        ("ListTables", {"Limit": 2**31}, "NUMBER_VALUE cannot be converted to Integer"),
        ("ListTables", {"Limit": 5.7}, None),
        # Boolean members.
        ("GetItem", {"ConsistentRead": "true"}, "Unexpected token received from parser"),
        ("GetItem", {"ConsistentRead": 1}, "NUMBER_VALUE cannot be converted to Boolean"),
        ("GetItem", {"ConsistentRead": 0.5}, "DECIMAL_VALUE cannot be converted to Boolean"),
        (
            "GetItem",
            {"ConsistentRead": []},
            "Unrecognized collection type class java.lang.Boolean",
        ),
        # Lists.
        ("GetItem", {"AttributesToGet": "a"}, "Unexpected field type"),
        ("GetItem", {"AttributesToGet": 1}, "Unexpected field type"),
        (
            "GetItem",
            {"AttributesToGet": {}},
            "Start of structure or map found where not expected",
        ),
        ("GetItem", {"AttributesToGet": ["a", 1]}, "NUMBER_VALUE cannot be converted to String"),
        # Maps.
        ("GetItem", {"Key": "a"}, "Unexpected field type"),
        (
            "GetItem",
            {"Key": []},
            f"Unrecognized collection type java.util.Map<java.lang.String, {ATTRIBUTE_VALUE}>",
        ),
        (
            "GetItem",
            {"ExpressionAttributeNames": []},
            "Unrecognized collection type java.util.Map<java.lang.String, java.lang.String>",
        ),
        # Structures inside collections, and the AttributeValue's own members.
        ("GetItem", {"Key": {"a": "x"}}, "Unexpected value type in payload"),
        ("GetItem", {"Key": {"a": []}}, f"Unrecognized collection type class {ATTRIBUTE_VALUE}"),
        ("GetItem", {"Key": {"a": {"S": 1}}}, "NUMBER_VALUE cannot be converted to String"),
        (
            "PutItem",
            {"Item": {"a": {"B": 1}}},
            "only base-64-encoded strings are convertible to bytes",
        ),
        # A binary's length is read with it (the alphabet is the attribute value's check).
        (
            "PutItem",
            {"Item": {"a": {"B": "abc"}}},
            "Base64 encoded length is expected a multiple of 4 bytes but found: 3",
        ),
        (
            "Query",
            {"ExclusiveStartKey": {"a": {"BS": ["AAAA", "AAAAA"]}}},
            "Base64 encoded length is expected a multiple of 4 bytes but found: 5",
        ),
        ("PutItem", {"TableName": "t", "Item": {"a": {"B": "AAA="}}}, None),
        ("PutItem", {"Item": {"a": {"SS": "x"}}}, "Unexpected field type"),
        ("PutItem", {"Item": {"a": {"L": ["x"]}}}, "Unexpected value type in payload"),
        (
            "PutItem",
            {"Item": {"a": {"M": {"b": {"BOOL": "no"}}}}},
            "Unexpected token received from parser",
        ),
        (
            "PutItem",
            {"ExpressionAttributeValues": {":v": {"BOOL": "true"}}},
            "Unexpected token received from parser",
        ),
        # Structures as fields.
        ("CreateTable", {"ProvisionedThroughput": 5}, "Unexpected field type"),
        (
            "CreateTable",
            {"ProvisionedThroughput": []},
            "Unrecognized collection type class "
            "com.amazonaws.dynamodb.v20120810.ProvisionedThroughput",
        ),
        (
            "BatchWriteItem",
            {"RequestItems": {"t": [{"PutRequest": {"Item": {"a": {"N": 1}}}}]}},
            "NUMBER_VALUE cannot be converted to String",
        ),
        # A null inside a list or map is refused.
        ("CreateTable", {"AttributeDefinitions": [None]}, "Unexpected value type in payload"),
        ("PutItem", {"Item": {"a": None}}, "Unexpected value type in payload"),
        ("GetItem", {"AttributesToGet": [None]}, "Unexpected value type in payload"),
        # Unknown members are ignored and null is absent.
        ("DescribeTable", {"TableName": None, "Unknown": [1, {"x": 2}]}, None),
        ("PutItem", {"TableName": "t", "Item": {"a": {"S": "x", "N": None}}}, None),
    ],
)
def test_deserialisation_messages(operation: str, body: Any, expected: str | None) -> None:
    assert message(operation, body) == expected


def test_the_first_error_in_document_order_wins() -> None:
    body = {"Limit": "x", "ExclusiveStartTableName": 5}
    assert message("ListTables", body) == "STRING_VALUE cannot be converted to Integer"
    body = {"ExclusiveStartTableName": 5, "Limit": "x"}
    assert message("ListTables", body) == "NUMBER_VALUE cannot be converted to String"


def test_every_operation_has_an_input_shape() -> None:
    for operation, input_shape in shapes.OPERATION_INPUTS.items():
        assert shapes.SHAPES[input_shape]["type"] == "structure", operation
